package aggregation

// RACK (RFC 8985): loss found by evidence, not by a timeout. A worker's
// QPs share one path through one switch, so a result that overtook a
// message shows that the message or its result was lost, the way a later
// acknowledgement does for TCP; the loss is then repaired about one round
// trip after it happened instead of a retransmission timeout later
// (docs/protocol.md "Loss recovery, step by step", mechanism 1).

import (
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
)

// rackState is RACK's view of the session's QPs (RFC 8985 section 6.2,
// step 2): per ordering group, the latest transmission time among messages
// whose result arrived, and that message's time to result. A message still
// waiting that was transmitted before it, by more than the reordering
// window, has been lost (its request or its result). Evidence stays within
// a group: the QPs a switch completes in one order (one software-switch
// core; one Tofino pipe), whose results come back in that order; results
// of different groups overtake each other without any loss
// (control.Assignment.OrderGroups).
type rackState struct {
	latest []rackLatest
	// min is the smallest time to result of this call and the one
	// before (RFC 8985's min_RTT, windowed): it follows the host's load
	// within a call or two instead of keeping an idle moment's minimum
	// forever.
	min timing.WindowMin
	// reoMult scales the reordering window (RFC 8985 section 6.2, step
	// 4): each spurious resend widens it by min_RTT/4, up to the smoothed
	// round trip; reoCalls counts the calls since the last widening, and
	// after reoResetCalls of them it narrows again.
	reoMult, reoCalls int
}

// rackLatest is one ordering group's RACK.xmit_ts and RACK.rtt.
type rackLatest struct {
	xmit time.Time
	rtt  time.Duration
}

// groups sets the ordering group of each of a lane's QPs from the
// controller's answer, of[QP index] (nil: one group), numbering the lane's
// distinct groups densely.
func (r *rackState) groups(qps []*qpState, of []uint32) {
	dense := map[uint32]int{}
	for _, st := range qps {
		g := uint32(0)
		if of != nil {
			g = of[st.index]
		}
		d, ok := dense[g]
		if !ok {
			d = len(dense)
			dense[g] = d
		}
		st.group = d
	}
	r.latest = make([]rackLatest, max(1, len(dense)))
}

// at is group g's latest delivery (a session that never learnt its groups
// has one).
func (r *rackState) at(g int) *rackLatest {
	if g >= len(r.latest) {
		r.latest = append(r.latest, make([]rackLatest, g+1-len(r.latest))...)
	}
	return &r.latest[g]
}

// reoResetCalls is how many calls without a spurious resend narrow the
// reordering window back: RFC 8985 section 6.2, step 4, resets it after
// 16 loss recoveries, and a call is this engine's unit of recovery.
const reoResetCalls = 16

// spurious widens the reordering window after a spurious resend (RFC 8985
// section 6.2, step 4): the result it took for overdue was only late.
func (r *rackState) spurious() {
	r.reoMult++
	r.reoCalls = 0
}

// minRTT is the smallest time to result of this call and the last; 0
// before any.
func (r *rackState) minRTT() time.Duration { return r.min.Get() }

// newCall starts the next window of the minimum, and narrows the
// reordering window back after reoResetCalls calls without a spurious
// resend.
func (r *rackState) newCall() {
	r.min.Next()
	if r.reoCalls++; r.reoCalls >= reoResetCalls {
		r.reoMult, r.reoCalls = 0, 0
	}
}

// reoWnd is how much later than its successor a result may come before
// the message is taken for lost: min_RTT / 4 × (1 + reoMult), at most
// srtt (RFC 8985 section 6.2, step 4). Results of different QPs are reordered when
// workers send them in different orders, and more so behind a queue; a
// spurious resend costs a message of bandwidth and widens the window
// (docs/protocol.md "Loss recovery, step by step", "Spurious resends").
func (r *rackState) reoWnd(srtt time.Duration) time.Duration {
	w := r.minRTT() / 4 * time.Duration(1+r.reoMult)
	if srtt > 0 {
		w = min(w, srtt)
	}
	return w
}

// lostAt is when st's message is taken for lost without a timeout, if
// there is evidence (RFC 8985 section 6.2, step 5):
//   - message writes: the result of a message sent after it is back; it
//     is lost at its own transmission time plus that message's time to
//     result plus the reordering window (RACK.xmit_ts + RACK.rtt +
//     RACK.reo_wnd);
//   - packet writes: a packet's result came back after the message's
//     latest transmission while a packet sent before it in that
//     transmission is still missing (lost a reordering window after that
//     result), or, with no gap, the results stopped coming at their pace
//     (pktResults.tailDue). Every worker sends a
//     message's packets in order and the switch completes their slots in
//     that order, so their results come back in order.
//
// With packet writes a message is judged only by its own packets. Its
// last results follow its first by the time the path takes to carry the
// message, which on a slow path (a shaped link, rxe under emulation)
// neither the reordering window nor another message's time to result
// covers. And a message none of whose results is back has lost no packet
// — a lost packet costs it one result, not all — but waits: for a worker
// that sent it later, or behind a queue; resending it would add a whole
// message to that queue. The timer covers a message lost whole
// (docs/protocol.md "Loss recovery, step by step", mechanism 1).
func (s *lane) lostAt(st *qpState) (time.Time, bool) {
	rack := &s.eng.est.rack
	xmit := st.timer.xmit
	reo := rack.reoWnd(s.eng.est.rtt.SRTT())
	p := &st.pkts
	if s.pktWrites {
		if p.gap() {
			return p.above.Add(reo), true
		}
		if p.n == 0 || rack.minRTT() <= 0 {
			// Not before a time to result is measured (RFC 8985 needs
			// one): with neither a reordering window nor a path pace,
			// a tail would be overdue as soon as a batch of first
			// results was read.
			return time.Time{}, false
		}
		var due time.Time
		if st.timer.resends > 0 {
			// A resend's packets are not overdue before a time to
			// result has passed since it left: until then the results
			// of the earlier transmissions that are still coming are
			// no sign that its own were lost.
			due = xmit.Add(max(s.eng.est.rtt.SRTT(), rack.minRTT()) + reo)
		} else if p.cnt == 0 {
			return time.Time{}, false
		}
		if p.cnt > 0 {
			// No gap: the rest are overdue once the results stop
			// coming at their pace.
			due = later(due, p.tailDue(s.cfg.PacketsPerMessage-p.n, reo, s.eng.est.delivery.PerPacket()))
		}
		return due, true
	}
	if l := rack.at(st.group); xmit.Before(l.xmit) {
		return xmit.Add(l.rtt + reo), true
	}
	return time.Time{}, false
}

// evidenceUpTo is how many of st's packets a resend on evidence covers:
// with a gap among the packet results (lostAt), the missing ones below the
// highest result back, since the others may still be on their way;
// otherwise every missing one.
func (s *lane) evidenceUpTo(st *qpState) int {
	p := &st.pkts
	if s.pktWrites && p.gap() {
		return p.hi
	}
	return s.cfg.PacketsPerMessage
}

// fastRetransmit resends st's message because RACK found it lost
// (lostAt): the missing packets evidenceUpTo names; its timer restarts
// (resendUpTo). Not while the QP's earlier sends are still in the NIC
// (st.queued): another copy would only queue behind them, and its send
// completion wakes the engine to look again (docs/protocol.md "Loss
// recovery, step by step").
//
// Evidence that only loss makes counts toward the call's loss signal
// (lossSignal): a later message's result back first, with message
// writes, or a gap among a message's packet results. A tail late by the
// pace of its message's first results does not: a busy host delivers a
// message's results in bursts, and a tail that comes a burst later is
// late without any loss — a session's first call, with every QP in flight
// behind a shaped link's queue and three workers and a switch on two
// CPUs, made 10 to 17 such resends in 96 messages
// (TestWindowKeepsTheQueueShort; the switch had sent the tails a fraction
// of a millisecond after the first results, and nothing else to that
// worker in between).
func (s *lane) fastRetransmit(st *qpState, now time.Time) error {
	if st.queued > 0 {
		return nil // as retransmit; its send completion wakes the engine
	}
	upto := s.evidenceUpTo(st)
	if !s.pktWrites || st.pkts.gap() {
		s.eng.lossFound++
	}
	if s.resultProbes && s.pktWrites {
		return s.probeUpTo(st, now, upto)
	}
	s.stats.fastRetransmissions.Add(1)
	return s.resendUpTo(st, now, upto)
}

// probeUpTo sends a result probe (wire.ResultProbe) for each packet that
// resendUpTo would resend, instead of the packet: the switch answers it
// with the slot's result when the slot is complete (the result was lost
// on the way down), with a gap notice when this worker's contribution is
// missing (the packet and its notice were lost), and with nothing while
// the slot waits for another worker, which in a large job is what a late
// result mostly means (docs/protocol.md "Result probes"). A probe is a
// transmission of the packets for the timer and RACK (restartTimer), not
// a resend (Stats.ResultProbes).
func (s *lane) probeUpTo(st *qpState, now time.Time, upto int) error {
	s.restartTimer(st, now)
	st.pkts.retransmit(upto, now, s.eng.est.rack.minRTT())
	st.pkts.resent = 0 // a probe's answer is no second result (dupResult)
	return s.transmitPackets(st, true)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
