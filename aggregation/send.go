package aggregation

// Outbound flow: how one message leaves a worker.
//
//  1. A QP is handed its next tensor message: at the start of a call
//     (drive's start: round 0 first, sendExponents, carrying the call's
//     length and the first look-ahead exponent) or
//     when its previous message's result came back (receive.go,
//     complete → launch). launch parks it while the worker's window is
//     full; parked messages leave in the call's order as results free
//     room (releaseParked).
//  2. sendNext quantizes the message's elements into the QP's staging
//     region of the registered buffer, with the scale the switch's
//     maximum exponent for it gives (the look-ahead of the previous
//     message on this QP), and notes the look-ahead exponent of the QP's
//     next message.
//  3. post gives it the QP's next set and message id and builds its work
//     request: one RDMA WRITE WITH IMMEDIATE of the whole message to the
//     switch (message writes), or one per packet (packet writes,
//     chooseWrites). It starts the message's timer (timers.go).
//  4. transmit stages the work requests on the QP (verbs.StagedSender):
//     the NIC builds the packets but does not send them yet.
//  5. At the end of the engine's pass, ringDoorbell sends everything
//     staged by every QP in one system call (drive, step 4).
//
// A resend (timers.go) re-enters at step 4 with the same work request, so
// the switch sees an identical message.

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// sendExponents starts a call on st with round 0: a message of zeros but
// for the call's length (calltensor.go, every type) and, for a float call,
// the look-ahead exponent of the QP's first tensor message.
func (s *Session) sendExponents(c *call, st *qpState, now time.Time) error {
	buf := s.mr.Bytes()[st.sendOff : st.sendOff+uint64(s.msgBytes)]
	clear(buf)
	putLengthHeader(buf, c.n)
	e0, err := s.exponent(c, st.next)
	if err != nil {
		return err
	}
	st.msg.cur = -1
	return s.post(st, e0, now)
}

// exponent is the block exponent of tensor message j, or MinExponent (the
// identity of the switch's max) if there is no such message.
func (s *Session) exponent(c *call, j int) (int8, error) {
	if j >= c.msgs {
		return quant.MinExponent, nil
	}
	lo, hi := c.span(j)
	e, err := c.blockExponent(lo, hi, s.cfg.PropagateNonFinite)
	if err != nil {
		return 0, fmt.Errorf("aggregation: AllReduce: tensor changed during the call: %w", err)
	}
	return e, nil
}

// launch hands st its next message — round 0 if round0, else its next
// tensor message, to be quantized with the maximum exponent maxE: it
// joins the parked messages in the call's order (orderKey), and those
// that fit in the window leave (releaseParked). false: the QP has no
// message left in this call.
func (s *Session) launch(c *call, st *qpState, round0 bool, maxE int8, now time.Time) (bool, error) {
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
// worker, and workers whose windows differ cannot wait on each other.
func (s *Session) releaseParked(c *call, now time.Time) error {
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
// QP), then the tensor messages by index.
func (s *Session) orderKey(st *qpState, round0 bool, j int) int {
	if round0 {
		return st.index - len(s.qps)
	}
	return j
}

// parkedKey is the order key of st's parked message.
func (s *Session) parkedKey(st *qpState) int { return s.orderKey(st, st.parked.round0, st.next) }

// window is how many messages the worker keeps in flight
// (Config.QueueDelay): two, plus what the path delivers in QueueDelay at
// its measured rate, at most one per QP. Every QP until the rate is
// measured, where results come back faster than QueueDelay covers the
// QPs' messages (loopback, fast links), and under loss.
func (s *Session) window() int {
	q := len(s.qps)
	per := s.eng.delivery.PerPacket()
	if per <= 0 || s.cfg.QueueDelay < 0 || s.eng.adapt.lossy() {
		// Under loss, results come back at the pace of the loss
		// recovery, not of the path: the measured rate would shrink
		// the window just when more messages in flight hide the waits
		// for resends (20 % loss on loopback: 182 against 150 ms per
		// 4 MiB call, session 10).
		return q
	}
	msg := per * time.Duration(s.cfg.PacketsPerMessage)
	w := 2 + int((s.cfg.QueueDelay+msg-1)/msg)
	return min(w, q)
}

// sendNext sends the QP's next tensor message, quantized with the maximum
// exponent maxE the switch returned for it; false if the QP is done.
func (s *Session) sendNext(c *call, st *qpState, maxE int8, now time.Time) (bool, error) {
	j := st.next
	if j >= c.msgs {
		return false, nil
	}
	lo, hi := c.span(j)
	buf := s.mr.Bytes()[st.sendOff : st.sendOff+uint64(s.msgBytes)]
	var e0 int8
	if c.float() {
		sc, err := quant.NewScale(s.cfg.Workers, maxE)
		if err != nil {
			return false, fmt.Errorf("aggregation: %v: %w", s.who(), err)
		}
		if err := c.quantize(buf, lo, hi, sc); err != nil {
			return false, fmt.Errorf("aggregation: AllReduce: tensor changed during the call: %w", err)
		}
		st.msg.scale = sc
		if e0, err = s.exponent(c, j+len(s.qps)); err != nil {
			return false, err
		}
	} else {
		quant.EncodeInt32(buf, c.i[lo:hi])
	}
	// The last message of a tensor is padded with zeros: the switch adds
	// whole packets, and zeros change no sum.
	clear(buf[4*(hi-lo):])
	st.msg.cur = j
	st.next = j + len(s.qps)
	return true, s.post(st, e0, now)
}

// post sends a new message from st's staging region: next set, next
// message id, look-ahead exponent e0, and the loss signal e1.
func (s *Session) post(st *qpState, e0 int8, now time.Time) error {
	m := &st.msg
	m.set ^= 1
	m.id = (m.id + 1) & wire.MsgIDMask
	m.e0, m.e1 = e0, s.lossSignal()
	m.busy = true
	m.wr[0] = verbs.SendWR{
		ID:         wrID(st.index, wrSend),
		Opcode:     verbs.WRRDMAWriteWithImm,
		Local:      verbs.SGE{Addr: st.sendOff, Length: uint32(s.msgBytes), LKey: s.mr.LKey()},
		RemoteAddr: s.recvOff(m.set, st.index),
		RKey:       uint32(st.pool | wire.PoolIndex(m.set)),
		Imm:        uint32(wire.MakeImm(m.id, e0, m.e1)),
		Signaled:   true,
	}
	if st.pkts.n > 0 {
		clear(st.pkts.got)
		st.pkts.n = 0
	}
	st.pkts.first = time.Time{}
	st.pkts.transmitted()
	s.startTimer(st, now)
	s.stats.messages.Add(1)
	if s.eng.pktWrites {
		return s.transmitPackets(st, s.cfg.PacketsPerMessage)
	}
	return s.transmit(st, m.wr[:], s.cfg.PacketsPerMessage)
}

// transmit posts wrs (packets packets in all) on st's QP: staged, if the
// QP can (verbs.StagedSender), for the pass's doorbell. The receives for
// the answers it can bring are posted first.
func (s *Session) transmit(st *qpState, wrs []verbs.SendWR, packets int) error {
	answers := len(wrs)
	if s.eng.pktBits > 0 {
		// With per-packet recovery every packet's slot can complete on
		// its own (by another worker's packet resend) and answer alone.
		answers = packets
	}
	if err := s.postRecvs(st, answers); err != nil {
		return err
	}
	var err error
	if ss, ok := st.qp.(verbs.StagedSender); ok {
		_, err = ss.PostSendStaged(wrs)
		s.eng.doorbell = ss
	} else {
		_, err = st.qp.PostSend(wrs)
	}
	if err != nil {
		return fmt.Errorf("aggregation: %v: send on QP %d: %w", s.who(), st.index, err)
	}
	for i := range wrs {
		if wrs[i].Signaled {
			st.queued++
		}
	}
	s.stats.packets.Add(uint64(packets))
	s.stats.bytesSent.Add(uint64(packets * s.cfg.PacketSize))
	return nil
}

// transmitPackets sends each packet below upto of st's message whose
// result is not back as a one-packet WRITE ONLY WITH IMMEDIATE: packet k goes to pool
// index pool+2k with the packet message id of k, lands at its own offset of
// the receive region, and is answered by a one-packet result. Only the
// last work request is signaled: its completion stands for all of them
// (st.queued counts one).
func (s *Session) transmitPackets(st *qpState, upto int) error {
	ps := s.cfg.PacketSize
	m := &st.msg
	recv := s.recvOff(m.set, st.index)
	wrs := s.eng.pktWRs[:0]
	for k := range min(upto, s.cfg.PacketsPerMessage) {
		if st.pkts.got[k>>6]&(1<<(k&63)) != 0 {
			continue
		}
		off := uint64(k * ps)
		wrs = append(wrs, verbs.SendWR{
			ID:         wrID(st.index, wrSend),
			Opcode:     verbs.WRRDMAWriteWithImm,
			Local:      verbs.SGE{Addr: st.sendOff + off, Length: uint32(ps), LKey: s.mr.LKey()},
			RemoteAddr: recv + off,
			RKey:       uint32(st.pool.Add(k) | wire.PoolIndex(m.set)),
			Imm:        uint32(wire.MakeImm(wire.PacketMsgID(m.id, k, s.eng.pktBits), m.e0, m.e1)),
		})
	}
	s.eng.pktWRs = wrs
	if len(wrs) == 0 {
		return nil
	}
	wrs[len(wrs)-1].Signaled = true
	return s.transmit(st, wrs, len(wrs))
}

// ringDoorbell sends the messages staged since the last call.
func (s *Session) ringDoorbell() error {
	d := s.eng.doorbell
	if d == nil {
		return nil
	}
	s.eng.doorbell = nil
	if err := d.Doorbell(); err != nil {
		return fmt.Errorf("aggregation: %v: send: %w", s.who(), err)
	}
	return nil
}

// adaptState is AdaptiveWrites' memory: what the running call has seen of
// loss, and how many calls in a row have sent packet writes.
//
// Every worker of a job must decide alike, or a call mixes message writes
// and packet writes, and a slot completed by a one-packet write is then
// broadcast as a WRITE ONLY into the other workers' open multi-packet
// result messages, which a UC receiver that follows the IBA drops (rxe
// wedges the QP). Each worker's own view of loss differs, so they agree
// through the switch, without a message of their own: a worker that has
// seen loss in a call sets e1 = 1 in the immediates of the messages it
// sends afterwards (lossSignal), the switch returns max(e1) over the
// contributions of each slot, and every worker receives the same results,
// so the OR of e1 over a call's results (heard) is the same on every
// worker, and so is the next call's choice (chooseWrites).
type adaptState struct {
	fast    uint64 // the session's fast retransmissions when the call started
	msgs    int    // the call's messages
	signal  bool   // this worker has seen loss in the call: e1 = 1 from now on
	heard   bool   // a result of the call carried e1 ≠ 0
	pktRuns int    // calls in a row that sent packet writes
	// lastHeard: a result of the call before carried e1 ≠ 0.
	lastHeard bool
}

// lossy says whether this call or the one before saw loss (adaptState).
func (a *adaptState) lossy() bool { return a.signal || a.heard || a.lastHeard }

const (
	// lossyFastRetransmits: a worker has seen loss in a call once RACK
	// found one message in this many of the call's messages lost (not
	// reordering: without loss RACK fires for a few messages in 10⁴ here,
	// see docs/benchmarks.md).
	lossyFastRetransmits = 64
	// probeMessageWrites: in a run of packet-write calls, every this many
	// calls goes back to message writes to see whether the loss is over.
	probeMessageWrites = 16
	// e1Loss is the immediate's e1 of a message sent after its worker saw
	// loss in the call (0 otherwise, as p4app-switchML's workers send).
	e1Loss int8 = 1
)

// chooseWrites decides whether the call starting now sends packet writes
// (Config.Writes) and starts the call's loss signal (adaptState).
// AdaptiveWrites: message writes cost the least CPU and are the right
// choice without loss; after a call whose results said some worker saw
// loss, the next ones send packet writes, and every probeMessageWrites-th
// of them tries message writes again. Every worker of the job hears the
// same results and counts the same calls, so all decide alike.
func (s *Session) chooseWrites(msgs int) bool {
	e := &s.eng
	a := &e.adapt
	lossy := a.heard
	*a = adaptState{fast: s.stats.fastRetransmissions.Load(), msgs: msgs, pktRuns: a.pktRuns, lastHeard: lossy}
	if e.pktBits == 0 {
		return false
	}
	switch s.cfg.Writes {
	case PacketWrites:
		return true
	case MessageWrites:
		return false
	}
	if !e.pktWrites {
		a.pktRuns = 0
		return lossy
	}
	// Packet writes lose little to loss, and RACK's count under them
	// says little about it: probe with message writes now and then.
	a.pktRuns++
	return a.pktRuns%probeMessageWrites != 0
}

// lossSignal is the e1 of a message sent now (adaptState): e1Loss once
// RACK found one in lossyFastRetransmits of the call's messages lost.
func (s *Session) lossSignal() int8 {
	a := &s.eng.adapt
	if !a.signal && (s.stats.fastRetransmissions.Load()-a.fast)*lossyFastRetransmits >= uint64(max(a.msgs, 1)) {
		a.signal = true
	}
	if a.signal {
		return e1Loss
	}
	return 0
}

// hearLoss notes the e1 of a result the engine used (adaptState).
func (s *Session) hearLoss(e1 int8) {
	if e1 > 0 {
		s.eng.adapt.heard = true
	}
}
