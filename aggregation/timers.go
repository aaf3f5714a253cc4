package aggregation

// Timer flow: what the engine does for a message whose result does not
// come (docs/protocol.md "Loss recovery").
//
//  1. post starts the message's timer (startTimer): its timeout is the
//     round-trip estimate's (rto), the deadline one timeout away.
//  2. Every result that surely answers a known transmission feeds the
//     estimates (sampleResult): RFC 6298's smoothed time and variation,
//     the windowed minimum, and RACK's latest delivered transmission.
//  3. Every pass of the loop runs timers: for each message in flight,
//     a. after Config.PeerTimeout without a result, the call fails with a
//        *PeerTimeoutError (deadPeer);
//     b. with evidence of loss — a message sent after it has its result
//        back (RACK, RFC 8985), or some of its own packets' results came
//        and the rest did not follow — it is resent once the reordering
//        window has passed (fastRetransmit);
//     c. otherwise, once its timer expires — past its deadline and, until
//        it is resent, a timeout after the latest result of any QP
//        (expiry) — expire resends it (retransmit; its timeout backs off
//        unless the path shows it works), or puts it off once: while
//        another message is out as the probe of a silence, or to poll
//        again after a late pass.
//  4. resend re-stages the message as it was (send.go, transmit), or with
//     per-packet recovery only the packets whose results are missing, and
//     restarts the timer.
//
// timers returns the earliest time at which one of these can happen, and
// the loop sleeps until then at most.

import (
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
)

// rackState is RACK's (RFC 8985) view of the session's QPs taken together:
// the latest transmission time among messages whose result arrived, and
// that message's time to result. A message still waiting that was
// transmitted before it, by more than the reordering window, has been
// lost (its request or its result): every QP's messages take the same
// path through the same switch, so a result that overtook it is
// evidence, the way a later acknowledgement is for TCP. Loss is then
// repaired in about one round trip instead of a retransmission timeout.
type rackState struct {
	xmit time.Time
	rtt  time.Duration
	// min is the smallest time to result of this call and the one
	// before: minRTT follows the host's load within a call or two instead
	// of keeping an idle moment's minimum forever.
	min timing.WindowMin
	// reoMult scales the reordering window (RFC 8985 section 6.2.4): each
	// spurious resend widens it by min_RTT/4, up to the smoothed round
	// trip; reoCalls counts the calls since the last widening, and after
	// reoResetCalls of them it narrows again.
	reoMult, reoCalls int
}

// reoResetCalls is how many calls without a spurious resend narrow the
// reordering window back (RFC 8985: 16 loss recoveries).
const reoResetCalls = 16

// spurious widens the reordering window after a spurious resend.
func (r *rackState) spurious() {
	r.reoMult++
	r.reoCalls = 0
}

// minRTT is the smallest time to result of this call and the last; 0
// before any.
func (r *rackState) minRTT() time.Duration { return r.min.Get() }

// newCall starts the next window of the minimum.
func (r *rackState) newCall() {
	r.min.Next()
	if r.reoCalls++; r.reoCalls >= reoResetCalls {
		r.reoMult, r.reoCalls = 0, 0
	}
}

// reoWnd is how much later than its successor a result may come before
// the message is taken for lost (RFC 8985: min_RTT / 4 × reoMult, at most
// srtt). Results of different QPs are reordered when workers send them in
// different orders, and more so behind a queue; a spurious resend costs a
// message of bandwidth and widens the window.
func (r *rackState) reoWnd(srtt time.Duration) time.Duration {
	w := r.minRTT() / 4 * time.Duration(1+r.reoMult)
	if srtt > 0 {
		w = min(w, srtt)
	}
	return w
}

// startTimer starts the timer of st's new message, sent now.
func (s *Session) startTimer(st *qpState, now time.Time) {
	t := &st.timer
	t.sent, t.xmit, t.delivered = now, now, s.eng.delivery.Delivered()
	t.rto = s.rto(st)
	t.deadline = now.Add(t.rto)
	t.timeouts, t.resends, t.silent, t.deferred = 0, 0, 0, false
}

// timers runs step 3 of the timer flow for every message in flight and
// returns when the loop must look again at the latest.
func (s *Session) timers(now time.Time) (time.Time, error) {
	e := &s.eng
	if gap := now.Sub(e.lastPass); gap > s.cfg.PeerTimeout/2 {
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
	due := e.lastPass
	if e.due.After(due) {
		due = e.due
	}
	late := now.Sub(due)
	e.lastPass, e.due = now, time.Time{}
	// Wake at least four times per PeerTimeout, so that a longer gap
	// between passes can only mean this process was not running.
	wakeAt := now.Add(s.cfg.PeerTimeout / 4)
	if t, ok := s.switchGoneAt(); ok {
		wakeAt = minTime(wakeAt, t)
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
			wakeAt = minTime(wakeAt, lostAt)
		}
		wakeAt = minTime(wakeAt, minTime(s.expiry(st), t.sent.Add(s.cfg.PeerTimeout)))
	}
	return wakeAt, nil
}

// expire handles the expiry of st's timer, found by a pass that came late
// by late. An expiry is put off once per transmission, for a timeout at
// most, in two cases:
//   - the pass came late by more than an eighth of the timeout (this
//     process was descheduled, or slept past its timer): results that
//     arrived meanwhile may still wait in the NIC's socket, unread; poll
//     once more, as late again;
//   - the path has been silent for a timeout, and another message was
//     already resent as a probe in this silence (RFC 6298 5.4 resends the
//     earliest segment, not the window). A stall (a descheduled peer, host
//     or switch) then costs one resend instead of one per QP; a burst
//     that lost them all is repaired by RACK once the probe's answer is
//     back, since they were sent before it. Only once: a message's result
//     also waits for the other workers' contributions, which their own
//     probes may be holding back.
//
// Before any result of the call is back, a QP's first message is resent
// only on the call's lowest busy QP — QP 0 on every worker, so their
// probes meet in one slot — and the others' expiries are put off by a
// timeout each time: every one of them waits for the same thing (the last
// worker to join the call: at a session's first call, the last worker
// process to start), and resending them all at each expiry only counted as
// spurious resends (96 of 98 timer resends of a loss-free lab run were
// these, session 9). Once the probe's answer is back the usual rules apply.
//
// With some of the message's packet results back, the rest were lost:
// they are resent at once (retransmit).
func (s *Session) expire(st *qpState, now time.Time, late time.Duration) error {
	t := &st.timer
	e := &s.eng
	if st.msg.joining && !e.progress.After(e.callStart) && st != s.joinProbe() {
		t.deadline = now.Add(t.rto)
		return nil
	}
	if !t.deferred && st.pkts.n == 0 {
		switch {
		case late > t.rto/8:
			t.deferred = true
			t.deadline = now.Add(min(late, t.rto))
			return nil
		case e.probe.After(e.progress):
			t.deferred = true
			t.deadline = now.Add(t.rto)
			return nil
		}
	}
	if err := s.retransmit(st, now); err != nil {
		return err
	}
	if t.xmit.Equal(now) && st.pkts.n == 0 {
		e.probe = now
	}
	return nil
}

// joinProbe is the QP whose first message probes the call's silence
// before any result is back (expire): the lowest one in flight.
func (s *Session) joinProbe() *qpState {
	for _, st := range s.qps {
		if st.msg.busy {
			return st
		}
	}
	return nil
}

// expiry is when st's retransmission timer fires: its deadline, but for
// a message not resent yet never sooner than a timeout after the latest
// progress of any QP (RFC 6298 5.3: the timer restarts when new data is
// acknowledged). Behind a link's queue each worker's messages come back
// one after another, later ones after longer waits; while results keep
// coming the path works, and a message that was lost is found by RACK as
// soon as one sent after it is back. The timer is left for what RACK
// cannot see: the last messages of a call, and a path gone silent. Once
// resent, a message keeps its own timer: under heavy loss the progress
// of packet results answering other QPs' resends, which RACK does not
// see, would otherwise put it off for good. For the same reason only
// results RACK can use count as progress here (engine.rackProgress): a
// result whose transmission is ambiguous tells RACK nothing, and under
// heavy loss hardly any result is unambiguous (most messages are resent),
// so a first transmission lost whole was found by neither RACK nor the
// timer while other QPs' results trickled in — at 20 % loss on loopback
// a call waited out the peer timeout on a message never resent (session 8).
func (s *Session) expiry(st *qpState) time.Time {
	t := &st.timer
	if t.resends > 0 {
		return t.deadline
	}
	if p := s.eng.rackProgress.Add(t.rto); p.After(t.deadline) {
		return p
	}
	return t.deadline
}

// sampleResult feeds the estimates with the time to st's result r, which
// came back now, when that time is unambiguous, and tells a spurious
// resend (the result answered an earlier transmission) to RACK.
func (s *Session) sampleResult(st *qpState, r resultKind, now time.Time) {
	t := &st.timer
	if s.spurious(st, r, now) {
		// The result answers the first transmission: its time is a sample
		// after all (RFC 4015's response to a spurious timeout), and the
		// one the estimate needs most, since it outlasted a timeout.
		s.stats.spurious.Add(1)
		s.eng.rack.spurious()
		s.sampleRTT(st, now.Sub(t.sent), t.sent)
		return
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
	case t.resends == 0 || (r == resultWhole && s.eng.pktBits > 0):
		// Karn's rule: only a result that surely answers the first
		// transmission gives an unambiguous time: the message was sent
		// once, or (per-packet recovery) it was resent packet by packet,
		// whose answers carry packet ids, and this whole-message result
		// answers the first transmission. Without the second case, the
		// late results that fired a timer would never be sampled, and
		// the estimate would keep too short a timeout on a loaded host.
		s.sampleRTT(st, now.Sub(t.sent), t.xmit)
	default:
		rack := &s.eng.rack
		if m := rack.minRTT(); m > 0 && now.Sub(t.xmit) >= m && t.xmit.After(rack.xmit) {
			// A resent message: the result can be taken for the answer to
			// its latest transmission only if it took at least the
			// smallest time to result since (RFC 8985, section 6.2), so
			// not before one is measured: a resend into a slot already
			// complete is answered in a fraction of a fresh message's
			// time to result, and taken for RACK's reference it made
			// every message in flight look lost (packet writes on a
			// shaped link, docs/benchmarks.md session 8).
			rack.xmit, rack.rtt = t.xmit, now.Sub(t.xmit)
			s.eng.rackProgress = now
		}
	}
}

// spurious reports whether st's message, resent, got the result of an
// earlier transmission: with per-packet recovery a whole-message result
// can only answer the first transmission (resends go packet by packet);
// otherwise a result faster than the smallest time to result since the
// latest resend answers an earlier one.
func (s *Session) spurious(st *qpState, r resultKind, now time.Time) bool {
	t := &st.timer
	if t.resends == 0 || r != resultWhole {
		return false
	}
	if s.eng.pktBits > 0 {
		return true
	}
	return now.Sub(t.xmit) < s.eng.rack.minRTT()
}

// sampleRTT folds a time to result r of a transmission of st's message at
// xmit into the estimates: the timer's (the joining one for a QP's first
// message of the call), the windowed minimum, and RACK's latest delivered
// transmission.
func (s *Session) sampleRTT(st *qpState, r time.Duration, xmit time.Time) {
	e := &s.eng
	e.backedOff = 0
	e.rackProgress = maxTime(e.rackProgress, xmit.Add(r))
	if st.msg.joining {
		// A QP's first message of a call is round 0, one packet: on an
		// idle link its result is back in a fraction of a full message's
		// time (150 µs against 7-16 ms at 200 Mbit/s behind the queue of
		// 8 QPs). Taken for the minimum, it made the reordering window
		// and the standing bound (rto: 8 × 150 µs) far too short for the
		// messages that followed, and every call of a shaped link under
		// loss started a storm of timer resends (session 8).
		e.joinRTT.Sample(r)
	} else {
		e.rtt.Sample(r)
		e.rack.min.Sample(r)
		e.standing.Sample(xmit.Add(r), r, e.rtt.SRTT())
	}
	if xmit.After(e.rack.xmit) {
		e.rack.xmit, e.rack.rtt = xmit, r
	}
}

// lostAt is when st's message is taken for lost without a timeout, if
// there is evidence: a result of a message sent after it is back (RACK),
// or, with packet writes, a packet's result came back after the message's
// latest transmission while a packet sent before it in that transmission
// is still missing (packet-level RACK: every worker sends a message's
// packets in order and the switch completes their slots in that order, so
// their results come back in order).
//
// With packet writes a message is judged only by its own packets: its
// last results follow its first by the time the path takes to carry the
// message (16 packets at 200 Mbit/s: 0.7 ms; far more on rxe under
// emulation), which neither the reordering window nor another message's
// time to its first result covers (session 7: any gap longer than the
// window, or another QP's result, resent most of every message on shaped
// links under loss and on rxe). And a message none of whose results is
// back has lost no packet — a lost packet costs it one result, not all —
// but waits: for a worker that sent it later (workers send their QPs'
// messages in different orders), or behind a queue. RACK across QPs took
// that wait for loss and resent every packet into a queue that was
// already full (session 8: 3.5 k of 6 k resends per rank on a shaped link
// at 1 % loss); the timer covers a message lost whole.
func (s *Session) lostAt(st *qpState) (time.Time, bool) {
	rack := &s.eng.rack
	xmit := st.timer.xmit
	reo := rack.reoWnd(s.eng.rtt.SRTT())
	p := &st.pkts
	if s.eng.pktWrites {
		if !p.above.IsZero() && p.firstMissing() < p.hi {
			return p.above.Add(reo), true
		}
		if p.n > 0 && p.cnt > 0 && rack.minRTT() > 0 {
			// No gap: the rest are overdue once the results stop
			// coming at their pace. Not before a time to result is
			// measured (RFC 8985 needs one): with no reordering window
			// and no path pace yet, a session's first messages had
			// their tails resent microseconds after a batch of their
			// first results (session 10).
			return p.tailDue(s.cfg.PacketsPerMessage-p.n, reo, s.eng.delivery.PerPacket()), true
		}
		return time.Time{}, false
	}
	if xmit.Before(rack.xmit) {
		return xmit.Add(rack.rtt + reo), true
	}
	return time.Time{}, false
}

// evidenceUpTo is how many of st's packets a resend on evidence covers:
// with a gap among the packet results (lostAt), the missing ones below the
// highest result back, the others may still be on their way; otherwise
// every missing one.
func (s *Session) evidenceUpTo(st *qpState) int {
	p := &st.pkts
	if s.eng.pktWrites && p.n > 0 && p.hi >= 0 && !p.above.IsZero() && p.firstMissing() < p.hi {
		return p.hi
	}
	return s.cfg.PacketsPerMessage
}

// rto is the first timeout of st's new message: RFC 6298 over the measured
// times to result (queueing included: every message sent once is
// sampled), never below Config.RetransmitTimeout. A QP's first message of
// a call has its own estimate: its result waits for the last worker to
// join the call, which on a busy host can take longer than a round trip
// (that wait is not loss, and resending does not shorten it).
func (s *Session) rto(st *qpState) time.Duration {
	e := &s.eng
	floor, ceil := s.cfg.RetransmitTimeout, s.cfg.MaxRetransmitTimeout
	est := &e.rtt
	if st.msg.joining || est.Samples() == 0 {
		// Before any time to result of a message in the middle of a
		// call, the joining ones are the best estimate there is (they
		// include a queue's wait, and more): the floor alone fired at
		// the second message of every QP behind a queue. Before any
		// sample at all the timeout is the floor, not RFC 6298's
		// initial 1 s: under heavy loss hardly a message is sampled, and
		// an initial 200 ms made a 3-worker call at 5 % loss take
		// seconds per message (TestSoftNoRecvWRDrops); the backoff and
		// the one probe per silence (expire) keep a long join wait to a
		// few resends.
		est = &e.joinRTT
	}
	if est.Samples() == 0 && e.backedOff > 0 {
		// Karn's algorithm, second part (RFC 6298 5.5–5.7): before the
		// first round trip is measured, a timeout backed off is kept for
		// new messages. Without it, a path slower than the floor — a
		// link behind a queue, rxe under emulation — timed out every new
		// message before its first result, resent it, and so never got
		// the unambiguous sample that would have set the timeout (packet
		// writes on a shaped link: not one sample in a whole run, and a
		// storm of resends). Once there are samples the estimate leads:
		// carried over, the backoff of a QP whose every first
		// transmission is lost grew from message to message until the
		// peer timeout (TestToyStarvation).
		floor = min(max(floor, e.backedOff), s.cfg.MaxRetransmitTimeout)
		ceil = max(ceil, floor)
	}
	if st.msg.joining {
		return est.RTO(floor, ceil)
	}
	if m := e.standing.Get(); m > 0 {
		// Under loss, a message sent once can still wait for another
		// worker's resend before its slot completes, and that wait feeds
		// the RTT estimate, which lengthens every timer, which lengthens
		// the waits. Bounding the timeout by a multiple of the standing
		// time to result — the smallest of the last round trip or two,
		// which a queue raises for every message and one message's wait
		// does not — breaks that loop without firing under queueing (a
		// bound by the all-time minimum did: docs/benchmarks.md "On a
		// link with a queue").
		//
		// Or, when longer, that standing time plus the time the packets
		// in flight take to come back at the path's delivery rate
		// (engine.delivery): the standing minimum can be far below the
		// queue a new message waits in. A worker that comes last to
		// slots the others filled long before — under loss, one whose
		// previous message on the QP needed a resend, its own link
		// drained meanwhile — is answered in two packet times (200 µs
		// at 200 Mbit/s) while the messages behind the link's queue
		// take 7-16 ms; a bound of 8 × that minimum fired every timer
		// of a shaped link at 1 % loss into a storm (session 8). Loss
		// slows the delivery of packet results and never speeds it up,
		// so this term does not feed the loop the bound breaks.
		//
		// The larger of the two, not their sum (session 9's form): the
		// sum was there because session 9's rate filter, timing results
		// as they were read, took batches for a link up to 50x faster
		// than it is, and the multiple was the margin; with the rate
		// measured over each message's round trip (session 10) the drain
		// is within 10 % of the link's, and the sum only made 20 % loss
		// on loopback 1.2-1.4x slower (docs/benchmarks.md, session 10).
		k := time.Duration(rtoStandingRTTs)
		if e.pktWrites {
			k = rtoStandingRTTsPacketWrites
		}
		ceil = min(ceil, max(floor, k*m, m+e.delivery.Drain(s.inFlight())))
	}
	return est.RTO(floor, ceil)
}

// inFlight is how many packets of the session's messages in flight have
// no result back.
func (s *Session) inFlight() int {
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
// tight bound fires for slow peers (docs/benchmarks.md "A/B runs behind
// the loss design": at 32 workers, 8 instead of 4 sent 29–33 k instead of
// 52 k spurious resends without loss).
const rtoStandingRTTsPacketWrites = 8

// retransmit resends st's message unchanged after a timeout. The switch's
// bitmaps make that idempotent: a contribution already counted is not
// added again, and a resend into a completed slot gets the result back.
func (s *Session) retransmit(st *qpState, now time.Time) error {
	t := &st.timer
	if st.queued > 0 {
		// The NIC has not yet sent what was posted before: another copy
		// would only queue behind it (a slow NIC, rxe under emulation,
		// then sends stale resends long after the worker moved on, and
		// the resends of the message that matters wait behind them).
		t.deadline = now.Add(t.rto)
		return nil
	}
	t.timeouts++
	s.stats.timeouts.Add(1)
	if st.pkts.n > 0 {
		// Some of the message's own packet results are back (every
		// worker sends a message's packets together, so their results
		// come back together): the missing ones were lost, and only they
		// are resent, one packet each, which adds next to no load. Resend
		// at the pace of the estimate, undoing any backoff: it would
		// only make the wait for a lost resend longer (at 20 % loss the
		// resend of the last packet is lost again a third of the time;
		// backing off when nothing came back since the latest resend, as
		// tried in session 7, made 20 % loss on loopback 3-6x slower).
		t.silent = 0
		t.rto = s.rto(st)
	} else if t.silent++; t.silent%s.cfg.BackoffAfter == 0 {
		// Nothing of it came back: it was lost, or it waits in a queue
		// or for a slow peer, or the switch is gone. Back off (RFC 6298
		// 5.5) whatever other QPs get, so that a timer that fired early
		// does not fire at the same pace again, adding a copy of the
		// whole message to the queue it waits in each time.
		t.rto = min(2*t.rto, s.cfg.MaxRetransmitTimeout)
		s.eng.backedOff = max(s.eng.backedOff, t.rto)
	}
	return s.resend(st, now)
}

// fastRetransmit resends st's message because RACK found it lost (a
// result of a message sent after it is back); the timer restarts.
func (s *Session) fastRetransmit(st *qpState, now time.Time) error {
	if st.queued > 0 {
		return nil // as retransmit; its send completion wakes the engine
	}
	s.stats.fastRetransmissions.Add(1)
	return s.resendUpTo(st, now, s.evidenceUpTo(st))
}

func (s *Session) resend(st *qpState, now time.Time) error {
	return s.resendUpTo(st, now, s.cfg.PacketsPerMessage)
}

// resendUpTo resends st's message: with per-packet recovery the packets
// below upto whose result is not back, otherwise all of it.
func (s *Session) resendUpTo(st *qpState, now time.Time, upto int) error {
	t := &st.timer
	t.resends++
	t.xmit, t.deferred, t.delivered = now, false, s.eng.delivery.Delivered()
	t.deadline = now.Add(t.rto)
	st.pkts.transmitted()
	s.stats.retransmissions.Add(1)
	if s.eng.pktBits == 0 {
		return s.transmit(st, st.msg.wr[:], s.cfg.PacketsPerMessage)
	}
	// Per-packet recovery: resend each packet whose result is not back as
	// a message of its own (WRITE ONLY WITH IMMEDIATE, to the packet's own
	// slot and buffer offset). With UC, one lost packet loses its whole
	// message, so resending whole messages needs every packet of a resend
	// and of its answer to get through at once: at 5 % loss, 19 % of the
	// tries with 16 packets. Packet by packet, each try repairs 90 % of
	// what is missing. The switch treats each as a one-packet message.
	return s.transmitPackets(st, upto)
}

// deadPeer is the error of a message that had no result for
// Config.PeerTimeout: what was seen, typed (docs/operations.md says what
// to do about each case).
func (s *Session) deadPeer(st *qpState, now time.Time) error {
	e := &s.eng
	t := &st.timer
	err := &PeerTimeoutError{
		Job: s.assign.JobID, Rank: s.cfg.Rank, QP: st.index, Message: st.msg.cur,
		Waited: now.Sub(t.sent), Resends: t.resends, Timeouts: t.timeouts,
		Switch: s.assign.SwitchAddr, KeepAliveBroken: s.ctlLost.Load() != 0,
		Messages: s.stats.messages.Load(), Retransmissions: s.stats.retransmissions.Load(),
	}
	if e.pktBits > 0 {
		err.PacketsBack, err.Packets = st.pkts.n, s.cfg.PacketsPerMessage
	}
	if e.lastResult.After(e.callStart) {
		err.LastResult = now.Sub(e.lastResult)
	}
	// Other QPs got results within half a PeerTimeout: the switch and the
	// workers are there, the network drops too much.
	err.HeavyLoss = !e.lastResult.IsZero() && now.Sub(e.lastResult) < s.cfg.PeerTimeout/2
	return err
}
