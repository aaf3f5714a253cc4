package aggregation

// The window: how many messages a worker keeps in flight, and the parked
// queue of messages that wait for room. UC has no flow control, so the
// engine is the only place where a worker can match the bottleneck; the
// window keeps what the path needs in flight and no more, so that a link's
// queue stays short (docs/protocol.md "Congestion").

import "time"

// launch hands st its next message — round 0 if round0, else its next
// tensor message, to be quantized with the maximum exponent maxE: it
// joins the parked messages in the call's order (orderKey), and those
// that fit in the window leave (releaseParked). false: the QP has no
// message left in this call.
func (s *lane) launch(c *call, st *qpState, round0 bool, maxE int8, now time.Time) (bool, error) {
	if st.next >= c.msgs {
		// Done, but its message freed room for the parked ones.
		return false, s.releaseParked(c, now)
	}
	e := &s.eng
	st.parked.round0, st.parked.maxE = round0, maxE
	key := s.parkedKey(st)
	i := len(e.parked)
	for i > 0 && s.parkedKey(e.parked[i-1]) > key {
		i--
	}
	e.parked = append(e.parked, nil)
	copy(e.parked[i+1:], e.parked[i:])
	e.parked[i] = st
	return true, s.releaseParked(c, now)
}

// releaseParked sends parked messages, oldest first, while the window has
// room. A parked message older than every message in flight goes whatever
// the window: every worker sends the call's messages in the same order, so
// the oldest message the job waits for is always on its way from every
// worker, and workers whose windows differ cannot wait on each other
// (docs/protocol.md "Congestion").
func (s *lane) releaseParked(c *call, now time.Time) error {
	e := &s.eng
	for len(e.parked) > 0 {
		st := e.parked[0]
		key := s.parkedKey(st)
		busy, oldest := 0, true
		for _, q := range s.qps {
			if q.msg.busy {
				busy++
				oldest = oldest && s.orderKey(q, q.msg.cur < 0, q.msg.cur) > key
			}
		}
		if busy >= s.window() && !oldest {
			return nil
		}
		e.parked = e.parked[:copy(e.parked, e.parked[1:])]
		var err error
		if st.parked.round0 {
			err = s.sendExponents(c, st, now)
		} else {
			_, err = s.sendNext(c, st, st.parked.maxE, now)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// orderKey is the place in the call's order, the same on every worker, of
// st's round 0 or of its tensor message j: round 0 of every QP first (by
// QP), then the tensor messages by index (docs/protocol.md "Congestion").
func (s *lane) orderKey(st *qpState, round0 bool, j int) int {
	if round0 {
		return st.index - s.cfg.QPs
	}
	return j
}

// parkedKey is the order key of st's parked message.
func (s *lane) parkedKey(st *qpState) int { return s.orderKey(st, st.parked.round0, st.next) }

// window is how many messages the worker keeps in flight
// (Config.QueueDelay): two, plus what the path delivers in QueueDelay at
// its measured rate, at most one per QP. Two messages are the bottleneck
// link's round trip (a message up, its result down); QueueDelay is the
// queue that rides out the hosts' scheduling delays; more only lengthens
// the link's queue (docs/protocol.md "Congestion").
//
// Every QP until the rate is measured, where results come back faster than
// QueueDelay covers the QPs' messages (loopback, fast links), when the
// window is off (QueueDelay < 0), and under loss.
//
// It is a lane's (lane.go): its own QPs, and the rate at which its own
// results come back, so the lanes of a worker share the path's rate and
// keep about one window in flight together, plus two messages each.
func (s *lane) window() int {
	q := len(s.qps)
	per := s.eng.est.delivery.PerPacket()
	if per <= 0 || s.cfg.QueueDelay < 0 || s.adapt.lossy() {
		// Under loss (this call or the one before: adaptState.lossy),
		// results come back at the pace of the loss recovery, not of
		// the path: a window sized by that pace would shrink just when
		// more messages in flight hide the waits for resends.
		return q
	}
	msg := per * time.Duration(s.cfg.PacketsPerMessage)
	w := 2 + int((s.cfg.QueueDelay+msg-1)/msg)
	return min(w, q)
}
