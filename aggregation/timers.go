package aggregation

// Timer flow: what the engine does for a message whose result does not
// come (docs/protocol.md "Loss recovery, step by step"). The rules live in
// rack.go (evidence of loss, RFC 8985) and rto.go (the retransmission
// timer, RFC 6298); this file feeds them and runs them.
//
//  1. post starts the message's timer (rto.go, startTimer): its timeout is
//     the round-trip estimate's (rto), the deadline one timeout away.
//  2. Every result that surely answers a known transmission feeds the
//     estimates (sampleResult): RFC 6298's smoothed time and variation,
//     the windowed minimum, and RACK's latest delivered transmission.
//  3. Every pass of the loop runs timers: for each message in flight,
//     a. after Config.PeerTimeout without a result, the call fails with a
//        *PeerTimeoutError (rto.go, deadPeer);
//     b. with evidence of loss — a message sent after it has its result
//        back, or some of its own packets' results came and the rest did
//        not follow (rack.go, lostAt) — it is resent once the reordering
//        window has passed (fastRetransmit);
//     c. otherwise, once its timer expires — past its deadline and, until
//        it is resent, a timeout after the latest result of any QP
//        (rto.go, expiry) — expire resends it (retransmit; its timeout
//        backs off unless the path shows it works), or puts it off once:
//        while another message is out as the probe of a silence, or to
//        poll again after a late pass.
//  4. resend re-stages the message as it was (send.go, transmit), or with
//     per-packet recovery only the packets whose results are missing, and
//     restarts the timer.
//
// timers returns the earliest time at which one of these can happen, and
// the loop sleeps until then at most.

import (
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// timers runs step 3 of the timer flow for every message in flight and
// returns when the loop must look again at the latest. A gap between
// passes longer than half a PeerTimeout means this process was not
// running: its own silence restarts the waits instead of blaming the peers
// (docs/protocol.md "Loss recovery, step by step", the peer timeout).
func (s *lane) timers(now time.Time) (time.Time, error) {
	e := &s.eng
	if gap := now.Sub(e.clock.lastPass); gap > s.cfg.PeerTimeout/2 {
		// This process was not running (stopped, or starved of CPU): the
		// silence is ours, not the peers'. Restart the waits; if the job
		// ended meanwhile, the controller's event says so.
		for _, st := range s.qps {
			if st.msg.busy {
				st.timer.sent, st.timer.deadline = st.timer.sent.Add(gap), now
			}
		}
	}
	// late: how much later than planned this pass came (the loop sleeps
	// until its next timer, or passes again at once when it had work).
	due := e.clock.lastPass
	if e.clock.due.After(due) {
		due = e.clock.due
	}
	late := now.Sub(due)
	e.clock.lastPass, e.clock.due = now, time.Time{}
	// Wake at least four times per PeerTimeout, so that a longer gap
	// between passes can only mean this process was not running.
	wakeAt := now.Add(s.cfg.PeerTimeout / 4)
	if t, ok := s.switchGoneAt(); ok {
		wakeAt = timing.Earlier(wakeAt, t)
	}
	for _, st := range s.qps {
		if !st.msg.busy {
			continue
		}
		t := &st.timer
		if now.Sub(t.sent) >= s.cfg.PeerTimeout {
			return wakeAt, s.deadPeer(st, now)
		}
		// Evidence of loss first: a message RACK finds lost is resent
		// as such, not held back as one more of a silence's expiries.
		lostAt, lost := s.lostAt(st)
		switch {
		case lost && !now.Before(lostAt):
			if err := s.fastRetransmit(st, now); err != nil {
				return wakeAt, err
			}
		case !now.Before(s.expiry(st)):
			if err := s.expire(st, now, late); err != nil {
				return wakeAt, err
			}
		case lost:
			wakeAt = timing.Earlier(wakeAt, lostAt)
		}
		wakeAt = timing.Earlier(wakeAt, timing.Earlier(s.expiry(st), t.sent.Add(s.cfg.PeerTimeout)))
	}
	return wakeAt, nil
}

// sampleResult feeds the estimates with the time to st's result r, which
// came back now, when that time is unambiguous (Karn's algorithm, RFC 6298
// section 3), and tells a spurious resend (the result answered an earlier
// transmission) to RACK (docs/protocol.md "Loss recovery, step by step",
// Estimate and "Spurious resends").
func (s *lane) sampleResult(st *qpState, r resultKind, now time.Time) {
	t := &st.timer
	if s.spurious(st, r, now) {
		// The result answers the first transmission: its time is a sample
		// after all (RFC 4015's response to a spurious timeout), and the
		// one the estimate needs most, since it outlasted a timeout.
		s.stats.spurious.Add(1)
		s.eng.est.rack.spurious()
		if s.adapt.lossy() {
			// Under loss the wait is not the path's: the first
			// transmission got through, and its slot waited for another
			// worker's lost contribution and its recovery. RFC 4015
			// adapts the timer to a delay of the path; taken as a
			// sample here, each such wait — at scale, nearly every
			// message of a lossy call on message writes — lengthened
			// the timeouts that set the next waits (docs/protocol.md
			// "Loss recovery, step by step", Spurious resends).
			return
		}
		if t.timeouts > 0 && !st.msg.joining {
			s.eng.est.quiet.spurious(now.Sub(t.sent))
		}
		s.sampleRTT(st, now.Sub(t.sent), t.sent)
		return
	}
	if t.resends > 0 {
		if s.dupResult(st, r, now) {
			return
		}
		// A resend was needed: the path loses (quietFloor).
		s.eng.est.quiet.needed()
	}
	switch {
	case r == resultPackets && !st.pkts.first.IsZero():
		// Packet results: the first one came back before any resend, so
		// it answers the first transmission, and unlike the last one it
		// does not wait for another worker's resend of a lost packet.
		// Under heavy loss hardly any message gets all its packets back
		// at the first try: without this the estimate would have no
		// samples, and with the last result's time every loss would
		// lengthen the next timeouts.
		s.sampleRTT(st, st.pkts.first.Sub(t.sent), t.sent)
	case t.resends == 0 || (r == resultWhole && s.pktBits > 0):
		// Karn's rule: only a result that surely answers the first
		// transmission gives an unambiguous time: the message was sent
		// once, or (per-packet recovery) it was resent packet by packet,
		// whose answers carry packet ids, and this whole-message result
		// answers the first transmission. Without the second case, the
		// late results that fired a timer would never be sampled, and
		// the estimate would keep too short a timeout on a loaded host.
		s.sampleRTT(st, now.Sub(t.sent), t.xmit)
	default:
		rack := &s.eng.est.rack
		if m, l := rack.minRTT(), rack.at(st.group); m > 0 && now.Sub(t.xmit) >= m && t.xmit.After(l.xmit) {
			// A resent message: the result can be taken for the answer to
			// its latest transmission only if it took at least the
			// smallest time to result since (RFC 8985 section 6.2, step
			// 2), so not before one is measured: a resend into a slot
			// already complete is answered in a fraction of a fresh
			// message's time to result, and taken for RACK's reference it
			// would make every message in flight look lost.
			l.xmit, l.rtt = t.xmit, now.Sub(t.xmit)
			s.eng.clock.rackProgress = now
		}
	}
}

// dupResult handles st's message completed by packet results r after a
// resend. The switch answers a packet resent into a slot that its first
// transmission completed with a second result of the same packet, and
// nothing else brings one: a resend into an incomplete slot is dropped,
// and one whose first transmission or result was lost is answered once.
// So when a packet of the message's only resend comes back twice, that
// resend was spurious (a stalled switch, NIC or peer: rxe under
// emulation), as a whole-message result shows one with message writes
// (docs/protocol.md "Spurious resends"): RACK's window widens, and a
// timer's resend sets the quiet floor. A duplicate seen before the
// message completed is handled here (true); otherwise the message is
// kept in st.done for spuriousDup, and the resend counts as needed
// (false) unless its duplicate then comes. Under loss the duplicate may
// answer a slot that waited for another worker's resend: nothing then,
// as for every spurious resend.
func (s *lane) dupResult(st *qpState, r resultKind, now time.Time) bool {
	t, p := &st.timer, &st.pkts
	st.done.armed = false
	if r != resultPackets || t.resends != 1 || st.msg.joining || s.adapt.lossy() || p.resent == 0 {
		return false
	}
	wait, timer := now.Sub(t.sent), t.timeouts > 0
	if p.dup {
		s.spuriousPackets(timer, wait)
		return true
	}
	st.done.armed, st.done.id, st.done.resent, st.done.timer, st.done.wait = true, st.msg.id, p.resent, timer, wait
	return false
}

// spuriousDup handles a result of packet k with packet message id id,
// not the message in flight on st: a duplicate of a packet of st.done's
// only resend shows that resend spurious (dupResult).
func (s *lane) spuriousDup(st *qpState, id uint16, k int) {
	d := &st.done
	if !d.armed || k >= 64 || d.resent&(1<<k) == 0 || id != wire.PacketMsgID(d.id, k, s.pktBits) || s.adapt.lossy() {
		return
	}
	d.armed = false
	s.spuriousPackets(d.timer, d.wait)
}

// spuriousPackets notes a spurious resend found by a duplicate packet
// result, as sampleResult notes one found by a whole-message result:
// RACK's window widens, and a timer's resend (timer) sets the quiet floor
// to outlast the message's time to result, wait.
func (s *lane) spuriousPackets(timer bool, wait time.Duration) {
	s.stats.spurious.Add(1)
	s.eng.est.rack.spurious()
	if timer {
		s.eng.est.quiet.spurious(wait)
	}
}

// spurious reports whether st's message, resent, got the result of an
// earlier transmission: with per-packet recovery a whole-message result
// can only answer the first transmission (resends go packet by packet);
// otherwise a result faster than the smallest time to result since the
// latest resend answers an earlier one.
func (s *lane) spurious(st *qpState, r resultKind, now time.Time) bool {
	t := &st.timer
	if t.resends == 0 || r != resultWhole {
		return false
	}
	if s.pktBits > 0 {
		return true
	}
	return now.Sub(t.xmit) < s.eng.est.rack.minRTT()
}

// sampleRTT folds a time to result r of a transmission of st's message at
// xmit into the estimates: the timer's (the joining one for a QP's first
// message of the call), the windowed minimum, and RACK's latest delivered
// transmission.
func (s *lane) sampleRTT(st *qpState, r time.Duration, xmit time.Time) {
	e := &s.eng
	e.clock.rackProgress = timing.Later(e.clock.rackProgress, xmit.Add(r))
	if st.msg.joining {
		// A QP's first message of a call is round 0, one packet: on an
		// idle link its result is back in a fraction of a full message's
		// time. Taken for the minimum, it would make the reordering
		// window and the standing bound (rto) far too short for the
		// messages that follow, and fire their timers into a storm of
		// resends behind a queue (docs/protocol.md "Loss recovery, step
		// by step", the QP's first message of a call).
		e.est.joinRTT.Sample(r)
	} else {
		// Only a whole message's time to result ends Karn's backoff
		// (rto): a round 0's, one packet, says nothing of a message
		// behind a queue.
		e.est.backedOff = 0
		e.est.rtt.Sample(r)
		e.est.rack.min.Sample(r)
		e.est.standing.Sample(xmit.Add(r), r, e.est.rtt.SRTT())
	}
	if l := e.est.rack.at(st.group); xmit.After(l.xmit) {
		l.xmit, l.rtt = xmit, r
	}
}

// restartTimer makes now st's latest transmission, a resend or result
// probes, and restarts its timer with the message's current timeout (RFC
// 6298 section 5.6).
func (s *lane) restartTimer(st *qpState, now time.Time) {
	t := &st.timer
	t.resends++
	t.xmit, t.deferred, t.polled, t.delivered = now, false, false, s.eng.est.delivery.Delivered()
	t.deadline = now.Add(t.rto)
}

// resend resends st's message after a timeout (retransmit): all of it, or
// with per-packet recovery every packet whose result is missing.
func (s *lane) resend(st *qpState, now time.Time) error {
	return s.resendUpTo(st, now, s.cfg.PacketsPerMessage)
}

// resendUpTo resends st's message: with per-packet recovery the packets
// whose result is not back that left before packet upto of its latest
// transmission (pktResults.retransmit), otherwise all of it, unchanged so
// that the switch sees an identical message (docs/protocol.md "Loss
// recovery, step by step", mechanism 2). The timer restarts with the
// message's current timeout (RFC 6298 section 5.6).
func (s *lane) resendUpTo(st *qpState, now time.Time, upto int) error {
	s.restartTimer(st, now)
	s.stats.retransmissions.Add(1)
	if s.pktBits == 0 {
		st.pkts.transmitted()
		return s.transmit(st, st.msg.wr[:], s.cfg.PacketsPerMessage, s.msgBytes)
	}
	st.pkts.retransmit(upto, now, s.eng.est.rack.minRTT())
	// Per-packet recovery: resend each packet whose result is not back as
	// a message of its own (WRITE ONLY WITH IMMEDIATE, to the packet's own
	// slot and buffer offset). With UC, one lost packet loses its whole
	// message, so resending whole messages needs every packet of a resend
	// and of its answer to get through at once, which under loss few
	// tries of a 16-packet message do; packet by packet, each try repairs
	// most of what is missing. The switch treats each as a one-packet
	// message.
	return s.transmitResend(st)
}

// transmitResend sends the packets of st's resend (pktResults.sent, its
// latest transmission) and, when it is the message's first resend, keeps
// them for dupResult.
func (s *lane) transmitResend(st *qpState) error {
	if err := s.transmitPackets(st, false); err != nil {
		return err
	}
	st.pkts.resent = 0
	if st.timer.resends == 1 && len(st.pkts.got) == 1 {
		st.pkts.resent = st.pkts.sent[0]
	}
	return nil
}
