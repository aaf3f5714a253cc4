package aggregation

// The retransmission timer (RFC 6298): for what evidence cannot show — the
// last messages of a call, a lost resend with nothing sent after it, a
// path gone silent. A timer is a loss detector, not a clock: the time to
// result includes queueing and the wait for the slowest worker, and a
// timer that fires while a message waits adds a copy of it to the queue it
// waits in (docs/protocol.md "Loss recovery, step by step", mechanism 3).

import "time"

// startTimer starts the timer of st's new message, sent now (RFC 6298
// section 5.1): the timeout is rto's, the deadline one timeout away.
func (s *lane) startTimer(st *qpState, now time.Time) {
	t := &st.timer
	t.sent, t.xmit, t.delivered = now, now, s.eng.est.delivery.Delivered()
	t.rto = s.rto(st)
	t.deadline = now.Add(t.rto)
	t.timeouts, t.resends, t.silent, t.deferred, t.polled = 0, 0, 0, false, false
}

// rto is the first timeout of st's new message: RFC 6298 section 2 over
// the measured times to result (queueing included: every message sent once
// is sampled), never below Config.RetransmitTimeout, and bounded by the
// standing time to result (below). A QP's first message of a call has its
// own estimate: its result also waits for the last worker to join the
// call, which is not loss and which resending does not shorten
// (docs/protocol.md "Loss recovery, step by step", mechanism 3: Estimate,
// Bound, and the QP's first message).
func (s *lane) rto(st *qpState) time.Duration {
	e := &s.eng
	floor, ceil := s.cfg.RetransmitTimeout, s.cfg.MaxRetransmitTimeout
	est := &e.est.rtt
	if st.msg.joining || est.Samples() == 0 {
		// Before any time to result of a message in the middle of a
		// call, the joining estimate is the best there is: it includes
		// a queue's wait, where the floor alone fires at every QP's
		// second message behind a queue. Before any sample at all the
		// timeout is the floor, not RFC 6298's initial 1 s (section
		// 2.1): under heavy loss hardly a message is sampled, and each
		// loss would cost the initial timeout; the backoff and the one
		// probe per silence (expire) keep a long join wait to a few
		// resends.
		est = &e.est.joinRTT
	}
	if e.est.rtt.Samples() == 0 && e.est.backedOff > 0 && !st.msg.joining {
		// Karn's algorithm (RFC 6298 sections 3 and 5.5–5.7): until a
		// round trip is measured, a timeout backed off is kept for new
		// messages. Otherwise, on a path slower than the floor (a link
		// behind a queue, rxe under emulation), every new message times
		// out before its first result, is resent, and so never gives
		// the unambiguous sample that would set the timeout — neither
		// does the joining estimate, whose round-0 messages of one
		// packet are measured: on a 20 Mbit/s link it kept every
		// message's timeout at a third of its time to result, and
		// no message ever came back unresent (docs/benchmarks.md
		// "Linked bench: the default", slow links). Once there are
		// samples the estimate leads: carried over, the backoff of a
		// QP whose every first transmission is lost would grow from
		// message to message up to the peer timeout.
		floor = min(max(floor, e.est.backedOff), s.cfg.MaxRetransmitTimeout)
		ceil = max(ceil, floor)
	}
	if m := e.est.standing.Get(); m > 0 && s.pktWrites && s.adapt.lossy() && est.Samples() > 0 {
		// Floor under loss (docs/protocol.md "Loss recovery, step by
		// step", mechanism 3): on a packet-write call while this call or
		// the one before saw loss (adaptState.lossy), the floor is the
		// path's bound (pathBound) where that is shorter than
		// RetransmitTimeout. A fixed floor is for waits the estimate
		// cannot see (a loaded host's stalls; the quiet floor keeps
		// those); under loss a lost resend of a message's last packet
		// has no evidence behind it, and on a fast path (100 Gbit/s, a
		// round trip of microseconds) each one cost the whole 1 ms
		// floor while every other worker waited on the slot
		// (docs/benchmarks.md "Loss at 64 workers"). RFC 6298 section
		// 2.4's minimum guards against a delayed-ACK peer's spurious
		// timeouts, which this path has not; a spurious resend here
		// costs a packet the switch drops or answers once. Not on
		// message writes: at scale nearly every message there waits on
		// other workers' losses with nothing back, and timers at the
		// path's pace resent millions of times in one call.
		floor = min(floor, s.pathBound(m))
	}
	if st.msg.joining {
		if est.Samples() == 0 && s.callQPs() > 1 {
			// A session's first call, before any join was measured: the
			// only timer that fires before a result is back is the join
			// probe's (expire), and with two QPs or more in the call it
			// is a backstop for the loss of every round 0 — one lost
			// round 0 is found by its own timer once another QP's result
			// is back. Its wait is for the last worker process to start,
			// tens of milliseconds or seconds, which from the floor cost
			// a probe per doubling (docs/protocol.md "Loss recovery, step
			// by step", the join).
			floor = min(max(floor, joinBackstopFloors*s.cfg.RetransmitTimeout), ceil)
		}
		return est.RTO(floor, ceil)
	}
	ceil0 := ceil
	if m := e.est.standing.Get(); m > 0 {
		// The bound (docs/protocol.md "Loss recovery, step by step",
		// mechanism 3, Bound): the larger of k × the standing time to
		// result — the smallest of the last round trip or two — and
		// that standing time plus the time the packets in flight take
		// to come back at the path's delivery rate (estimates.delivery).
		//
		// Under loss, a message sent once can still wait for another
		// worker's resend before its slot completes; that wait feeds the
		// estimate, which lengthens every timer, which lengthens the
		// waits. A queue raises the standing time for every message and
		// one message's wait does not, so a multiple of it breaks that
		// loop without firing under queueing, where a multiple of the
		// all-time minimum would.
		//
		// The drain term covers a new message's wait in a queue far
		// deeper than the standing minimum: a worker that comes last to
		// slots the others filled long before (under loss, one whose
		// previous message on the QP needed a resend, its own link
		// drained meanwhile) is answered in two packet times, while the
		// messages behind its link's queue take as long as that queue
		// takes to drain. Loss slows the delivery of packet results and
		// never speeds it up, so this term does not feed the loop.
		//
		// The larger of the two, not their sum: the delivery rate is
		// measured over each transmission's round trip, so the drain
		// term needs no margin, and a sum would only lengthen the
		// timeouts under loss.
		ceil = min(ceil, max(floor, s.pathBound(m)))
	}
	// The quiet floor lies above the bound: it is what the path was seen
	// to take without loss, and only a resend that was needed lowers it
	// (quietFloor).
	return max(est.RTO(floor, ceil), min(e.est.quiet.get(), ceil0))
}

// pathBound is the bound of rto over the standing time to result m: the
// larger of k × m and m plus the time the packets in flight take to come
// back at the path's delivery rate.
func (s *lane) pathBound(m time.Duration) time.Duration {
	k := time.Duration(rtoStandingRTTs)
	if s.pktWrites {
		k = rtoStandingRTTsPacketWrites
	}
	return max(k*m, m+s.eng.est.delivery.Drain(s.inFlight()))
}

// quietFloor is the longest time to result that the timer has been shown
// to be no loss: a timer that fired on a message whose result then
// answered its first transmission (a spurious timeout) measured a wait —
// a descheduled switch or peer, a collector's pause, a host's other work —
// that a timeout must outlast on this path. On a loaded host such waits
// come back every few calls, far above the standing time to result that
// bounds the timeout (rto), so without a memory of them each one fires
// the lane's timers again. RFC 4015 answers a spurious timeout by
// adapting the timer to the sample, so that it does not fire again; here
// the sample feeds the estimate (sampleResult), but the bound would clip
// it, so the floor keeps twice the longest such wait, above the bound,
// until a resend
// is needed (the path loses: the tight timeout repairs tail losses
// promptly, and the bound's reason, the loop under loss, applies again)
// or quietDecayCalls calls in a row show none, which halve it
// (docs/protocol.md "Loss recovery, step by step", Spurious resends).
//
// A QP's first message of a call is left out: its wait is for the last
// worker to join the call, which its own estimate and the join probe cover
// (rto, expire). With packet writes a result answers one packet and
// cannot tell which transmission it answers; there a second result of a
// packet of a timer's only resend shows the timeout spurious
// (timers.go, dupResult), and every other resend counts as needed.
type quietFloor struct {
	floor time.Duration
	calls int // calls since the latest spurious timeout
}

// quietDecayCalls is how many calls without a spurious timeout halve the
// quiet floor: as RACK's reordering window (reoResetCalls), a call is the
// engine's unit of recovery.
const quietDecayCalls = 16

// get is the floor; 0 when none was shown or a resend was needed since.
func (q *quietFloor) get() time.Duration { return q.floor }

// spurious notes a spurious timeout of a message whose first transmission
// was answered after wait.
func (q *quietFloor) spurious(wait time.Duration) {
	q.floor = max(q.floor, 2*wait)
	q.calls = 0
}

// needed notes a resend that was needed: the path loses.
func (q *quietFloor) needed() { q.floor, q.calls = 0, 0 }

// newCall halves the floor after quietDecayCalls calls without a spurious
// timeout.
func (q *quietFloor) newCall() {
	if q.calls++; q.calls >= quietDecayCalls {
		q.floor, q.calls = q.floor/2, 0
	}
}

// joinBackstopFloors is the join probe's first timeout, in floors, in a
// session's first call with two QPs or more (rto).
const joinBackstopFloors = 8

// callQPs is how many of the lane's QPs have a message in the running
// call: each QP with a tensor message sends round 0 (start).
func (s *lane) callQPs() int {
	n := 0
	for _, st := range s.qps {
		if st.index < s.call.msgs {
			n++
		}
	}
	return n
}

// inFlight is how many packets of the session's messages in flight have
// no result back: what must drain ahead of a new message (rto).
func (s *lane) inFlight() int {
	n := 0
	for _, st := range s.qps {
		if st.msg.busy {
			n += s.cfg.PacketsPerMessage - st.pkts.n
		}
	}
	return n
}

// rtoStandingRTTs bounds the retransmission timeout, in standing times to
// result (see rto).
const rtoStandingRTTs = 4

// rtoStandingRTTsPacketWrites is rtoStandingRTTs for packet writes: their
// samples are times to the first packet result, which do not wait for
// another worker's resend, so the loop the bound breaks is weaker, while a
// tight bound fires for slow peers (docs/protocol.md "Loss recovery, step
// by step", mechanism 3, Bound; measured in docs/benchmarks.md "A/B runs
// behind the loss design").
const rtoStandingRTTsPacketWrites = 8

// expiry is when st's retransmission timer fires: its deadline, but for
// a message not resent yet never sooner than a timeout after the latest
// progress of any QP (RFC 6298 section 5.3: the timer restarts when new
// data is acknowledged; docs/protocol.md "Loss recovery, step by step",
// Restart on progress). Behind a link's queue each worker's messages come
// back one after another, later ones after longer waits; while results
// keep coming the path works, and a message that was lost is found by RACK
// as soon as one sent after it is back. The timer is left for what RACK
// cannot see: the last messages of a call, and a path gone silent.
//
// Once resent, a message keeps its own timer: under heavy loss the packet
// results answering other QPs' resends, which RACK does not see, would
// otherwise put it off for good. For the same reason only results RACK can
// use count as progress here (callClock.rackProgress): under heavy loss
// hardly any result is unambiguous, and a first transmission lost whole
// must not wait, found by neither RACK nor the timer, while other QPs'
// ambiguous results trickle in.
func (s *lane) expiry(st *qpState) time.Time {
	t := &st.timer
	if t.resends > 0 {
		return t.deadline
	}
	if p := s.eng.clock.rackProgress.Add(t.rto); p.After(t.deadline) {
		return p
	}
	return t.deadline
}

// expire handles the expiry of st's timer, found by a pass that came late
// by late. An expiry is put off, for a timeout at most, in two cases, each
// once per transmission:
//   - the pass came late by more than an eighth of the timeout (this
//     process was descheduled, or slept past its timer): results that
//     arrived meanwhile may still wait in the NIC's socket, unread; poll
//     once more, as late again (docs/protocol.md "Loss recovery, step by
//     step", A late pass looks again);
//   - the path has been silent for a timeout, and another message was
//     already resent as a probe in this silence (RFC 6298 section 5.4
//     resends the earliest segment, not the window; docs/protocol.md, One
//     probe per silence). A stall (a descheduled peer, host or switch)
//     then costs one resend instead of one per QP; a burst that lost them
//     all is repaired by RACK once the probe's answer is back, since they
//     were sent before it. Only once: a message's result also waits for
//     the other workers' contributions, which their own probes may be
//     holding back.
//
// The two are counted apart: a late pass that put a message off must not
// spend its put-off as a probe's, or the next expiry of a silence after a
// late pass resends every QP's message at once.
//
// Before any result of the call is back, a QP's first message is resent
// only on the call's lowest busy QP (joinProbe), and the others' expiries
// are put off by a timeout each time: every one of them waits for the
// same thing, the last worker to join the call (at a session's first
// call, the last worker process to start), and resending them all at each
// expiry only adds spurious resends. Once the probe's answer is back the
// usual rules apply.
//
// With some of the message's packet results back, the rest were lost:
// they are resent at once (retransmit).
func (s *lane) expire(st *qpState, now time.Time, late time.Duration) error {
	t := &st.timer
	e := &s.eng
	if st.msg.joining && !e.clock.progress.After(e.clock.start) && st != s.joinProbe() {
		t.deadline = now.Add(t.rto)
		return nil
	}
	if st.pkts.n == 0 {
		switch {
		case !t.polled && late > t.rto/8:
			t.polled = true
			t.deadline = now.Add(min(late, t.rto))
			return nil
		case !t.deferred && e.clock.probe.After(e.clock.progress):
			t.deferred = true
			t.deadline = now.Add(t.rto)
			return nil
		}
	}
	if err := s.retransmit(st, now); err != nil {
		return err
	}
	if t.xmit.Equal(now) && st.pkts.n == 0 {
		e.clock.probe = now
	}
	return nil
}

// joinProbe is the QP whose first message probes the call's silence
// before any result is back (expire): the lowest one in flight. That is
// QP 0 on every worker, since all send round 0 on the same QPs, so the
// workers' probes meet in one slot and cannot hold each other back
// (docs/protocol.md "Loss recovery, step by step", One probe per silence).
func (s *lane) joinProbe() *qpState {
	for _, st := range s.qps {
		if st.msg.busy {
			return st
		}
	}
	return nil
}

// retransmit resends st's message unchanged after a timeout. The switch's
// bitmaps make that idempotent: a contribution already counted is not
// added again, and a resend into a completed slot gets the result back
// (docs/protocol.md "Sets and bitmaps (switch side)").
func (s *lane) retransmit(st *qpState, now time.Time) error {
	t := &st.timer
	if st.queued > 0 {
		// The NIC has not yet sent what was posted before: another copy
		// would only queue behind it, and a slow NIC (rxe under
		// emulation) would send stale resends long after the worker
		// moved on, with the resends of the message that matters behind
		// them. Look again a timeout later.
		t.deadline = now.Add(t.rto)
		return nil
	}
	t.timeouts++
	s.stats.timeouts.Add(1)
	if st.pkts.n > 0 {
		// Some of the message's own packet results are back (every
		// worker sends a message's packets together, so their results
		// come back together): the missing ones were lost, and only they
		// are resent, one packet each, which adds next to no load. So
		// resend at the pace of the estimate, undoing any backoff: a
		// backoff would only lengthen the wait when the resend of the
		// last packet is lost again, which heavy loss makes common
		// (docs/protocol.md "Loss recovery, step by step", Backoff).
		t.silent = 0
		t.rto = s.rto(st)
	} else if t.silent++; t.silent%s.cfg.BackoffAfter == 0 && !s.pathAlive(t.xmit) {
		// Nothing of it came back: it was lost, or it waits in a queue
		// or for a slow peer, or the switch is gone. Back off (RFC 6298
		// section 5.5) whatever other QPs get, so that a timer that
		// fired early does not fire at the same pace again, adding a
		// copy of the whole message to the queue it waits in each time.
		t.rto = min(2*t.rto, s.cfg.MaxRetransmitTimeout)
		s.eng.est.backedOff = max(s.eng.est.backedOff, t.rto)
	}
	return s.resend(st, now)
}

// pathAlive reports whether, in a call that sees loss, another message
// was completed after a message's latest transmission at xmit: the switch and the path
// work, and a message none of whose results came back was lost, not held
// in a queue. Its timeout then keeps its pace instead of doubling (RFC
// 6298 section 5.5 backs off the timer of a segment that saw no
// acknowledgement at all; here the results of other messages are that
// acknowledgement of the path). Without loss the backoff stays: behind a
// queue other QPs' results always come back while a message waits
// (docs/protocol.md "Loss recovery, step by step", Backoff). At 64
// workers and 1 % loss a message write reaches the switch whole from all
// workers with probability 0.99^1024: nearly every message of the first
// lossy call (still message writes) timed out with nothing back, and the
// backoff took each to the 1 s cap.
func (s *lane) pathAlive(xmit time.Time) bool {
	return s.adapt.lossy() && s.eng.clock.progress.After(xmit)
}

// deadPeer is the error of a message that had no result for
// Config.PeerTimeout: what was seen, typed, so that the caller can tell
// heavy loss from a peer or switch that is gone (docs/protocol.md "Loss
// recovery, step by step"; docs/operations.md "Errors you may meet" says
// what to do about each case).
func (s *lane) deadPeer(st *qpState, now time.Time) error {
	e := &s.eng
	t := &st.timer
	err := &PeerTimeoutError{
		Job: s.assign.JobID, Rank: s.cfg.Rank, QP: st.index, Message: st.msg.cur,
		Waited: now.Sub(t.sent), Resends: t.resends, Timeouts: t.timeouts,
		Switch: s.assign.SwitchAddr, KeepAliveBroken: s.ctlLost.Load() != 0,
	}
	st0 := s.Session.Stats()
	err.Messages, err.Retransmissions = st0.Messages, st0.Retransmissions
	if s.pktBits > 0 {
		err.PacketsBack, err.Packets = st.pkts.n, s.cfg.PacketsPerMessage
	}
	if e.clock.lastResult.After(e.clock.start) {
		err.LastResult = now.Sub(e.clock.lastResult)
	}
	// Other QPs got results within half a PeerTimeout: the switch and the
	// workers are there, the network drops too much.
	err.HeavyLoss = !e.clock.lastResult.IsZero() && now.Sub(e.clock.lastResult) < s.cfg.PeerTimeout/2
	return err
}
