package aggregation

// The engine: the goroutines that run AllReduce drive the session's QPs
// through one tensor. The QPs are split into lanes (Config.Threads): each
// lane owns a block of neighbouring QPs, its own completion queue, its own
// estimators and window, and is driven by one goroutine — the caller's for
// lane 0 — with no goroutine per QP or packet and nothing shared on the
// hot path but the tensor, in which each message owns its span (lane.go). Follow one message through a lane in four files:
//
//	engine.go   the state (qpState, engine) and the loop (drive):
//	            poll → complete → timers → doorbell → wait
//	send.go     a message's way out: quantize, stage, ring the doorbell
//	receive.go  a completion's way in: match the result, sample its time,
//	            dequantize, hand the QP its next message
//	timers.go   a result that does not come: sample the estimates, run
//	            the rules below each pass, resend
//
// and the rules those flows apply, one file each:
//
//	rack.go     loss by evidence (RACK, RFC 8985): the reordering window,
//	            lostAt, fastRetransmit
//	rto.go      the retransmission timer (RFC 6298): its timeout and
//	            bound, expiry, backoff, the join probe, the dead peer
//	window.go   how many messages may be in flight; the parked queue
//	writes.go   message writes or packet writes (Config.Writes): the
//	            adaptive choice and its loss signal
//
// docs/protocol.md is the protocol these files implement.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// qpState is the engine's view of one UC QP to the switch. The first
// fields live as long as the session; msg, timer and pkts describe the
// message in flight. Only the goroutine running AllReduce touches it.
type qpState struct {
	qp      verbs.QP
	index   int
	group   int            // the QP's ordering group (rackState.groups)
	pool    wire.PoolIndex // pool index of the QP's first packet, set 0
	sendOff uint64         // the QP's send staging region in the MR
	next    int            // the next tensor message this QP sends
	// queued counts signaled send WRs posted on the QP whose completion
	// has not come back: transmissions the NIC has not sent yet (a batch
	// of packet writes signals its last WR only).
	queued int
	// recvs counts the receives posted on the QP whose completion has not
	// been polled (receive.go, postRecvs).
	recvs int

	// overwritten is dropOverwritten's scratch: the packets of the
	// message in flight that a later result in the polled batch
	// overwrites (all ones: a whole message).
	overwritten uint64

	// msg is the message in flight (or the last one sent). set and id
	// advance once per new message and never on a retransmission, so a
	// resend is identical. Every worker sends the same sequence of
	// messages on QP i, so they agree on both without talking.
	msg struct {
		busy    bool            // sent, no result yet
		cur     int             // tensor message; -1 for round 0 (length, exponents)
		set     uint8           // which of the slot's two sets
		id      uint16          // wire message id
		e0      int8            // the look-ahead exponent it carries
		e1      int8            // the loss signal it carries (adaptState)
		scale   quant.Scale     // what cur was quantized with
		joining bool            // the QP's first message of the call
		wr      [1]verbs.SendWR // the whole message, reposted as is
	}

	// timer is the message's retransmission timer (timers.go).
	timer struct {
		sent time.Time // first transmission
		xmit time.Time // latest transmission (RACK)
		// delivered is the delivery-rate count at xmit (timing.DeliveryRate).
		delivered int64
		deadline  time.Time
		rto       time.Duration
		timeouts  int  // expiries
		resends   int  // transmissions after the first (timer or RACK)
		silent    int  // consecutive expiries that saw no sign of loss
		deferred  bool // its expiry was put off once behind a probe (rto.go, expire)
		polled    bool // its expiry was put off once after a late pass (rto.go, expire)
	}

	// parked is the QP's next message while it waits for room in the
	// window (send.go, launch): round 0, or the next tensor message with
	// the maximum exponent maxE.
	parked struct {
		round0 bool
		maxE   int8
	}

	// pkts are the message's packet results, with per-packet recovery
	// (Session.pktBits > 0): each packet resent on its own is answered on
	// its own (receive.go).
	pkts pktResults

	// done is the QP's last message completed after one resend of some
	// of its packets (per-packet recovery), while a duplicate of one of
	// their results would still show that resend spurious (timers.go,
	// dupResult).
	done struct {
		armed  bool
		timer  bool // the resend was a timer's
		id     uint16
		resent uint64
		wait   time.Duration // from its first transmission to its result
	}

	// The QPs of different lanes are written by different cores: no two
	// qpStates share a cache line (lane.go).
	_ [cacheLine]byte
}

// cacheLine is the size of a cache line, for the padding that keeps state
// written by different lanes' cores on lines of its own.
const cacheLine = 64

// pktResults are a message's packet results so far.
type pktResults struct {
	got   []uint64 // bitmap of the packets whose result is back
	n     int      // how many
	resE0 int8     // the result exponent of its last packet
	resE1 int8     // and its loss signal (adaptState)
	// sent is the bitmap of the packets the latest transmission sent
	// (all of them, or a resend's missing ones), in packet order: a
	// result is evidence only against packets sent before it.
	sent []uint64
	ppm  int // the message's packets
	// evFrom is when results of the latest transmission start to be
	// evidence: a resent packet's result back sooner than the minimum
	// time to result answers an earlier transmission (RFC 8985 section
	// 6.2, step 2).
	evFrom time.Time
	// noticeFrom is when gap notices start to answer the latest
	// transmission: one back sooner than half a minimum time to result
	// after a resend answers an earlier transmission (notice.go).
	noticeFrom time.Time
	// first is when the first one came back, if that was before any
	// resend (so it answers the first transmission); zero otherwise.
	first time.Time
	last  time.Time // when the latest one of the latest transmission came back
	// hi is the highest packet index of the latest transmission whose
	// result came back as its answer (-1: none), above when the first
	// such result came back with a packet sent before it still missing:
	// the in-message evidence of loss (lostAt).
	hi    int
	above time.Time
	// since is when the first result of the latest transmission came
	// back after it, cnt how many have since: their pace.
	since time.Time
	cnt   int
	// resent are the packets (below 64) that the message's first resend
	// sent, while it has had only one; dup is set when one of them
	// came back twice (timers.go, dupResult).
	resent uint64
	dup    bool
}

// alloc gives p its bitmaps for ppm packets, from words (n words each), as
// a message's first transmission leaves them: nothing back, every packet
// sent.
func (p *pktResults) alloc(ppm int, words func(n int) []uint64) {
	n := (ppm + 63) / 64
	p.got, p.sent, p.ppm = words(n), words(n), ppm
	p.sendAll()
}

// retransmit makes a resend the latest transmission: the packets sent
// before packet upto of the one before whose result is missing
// (missedBefore; upto = the packet count: every missing one). Its results
// are evidence of loss from evFrom on.
func (p *pktResults) retransmit(upto int, xmit time.Time, minRTT time.Duration) {
	for i := range p.sent {
		p.sent[i] = p.missedBefore(i, upto)
	}
	p.resendAt(xmit, minRTT)
}

// resendAt starts the evidence of a resend sent at xmit: its results from a
// minimum time to result on, its gap notices from half of one (notice.go).
func (p *pktResults) resendAt(xmit time.Time, minRTT time.Duration) {
	p.evFrom, p.noticeFrom = xmit.Add(minRTT), xmit.Add(minRTT/2)
	p.transmitted()
}

// sendAll marks every packet sent by the latest transmission.
func (p *pktResults) sendAll() {
	for i := range p.sent {
		p.sent[i] = p.mask(i)
	}
}

// gap reports the in-message evidence of loss: a result of the latest
// transmission came back while a packet sent before it is still missing.
func (p *pktResults) gap() bool { return !p.above.IsZero() && p.missingBefore(p.hi) }

// missingBefore reports whether a packet sent before packet k of the
// latest transmission has no result (missedBefore).
func (p *pktResults) missingBefore(k int) bool {
	for i := range p.got {
		if p.missedBefore(i, k) != 0 {
			return true
		}
	}
	return false
}

// missedBefore is word i of the bitmap of the packets sent before packet k
// of the latest transmission whose result is missing: those of the
// transmission below k, and those it did not send (an earlier one did, so
// they left before all of its packets).
func (p *pktResults) missedBefore(i, k int) uint64 {
	below := ^uint64(0)
	if k < (i+1)*64 {
		below = 0
		if k > i*64 {
			below = 1<<(k-i*64) - 1
		}
	}
	return ^p.got[i] & p.mask(i) & (below | ^p.sent[i])
}

// mask is word i of the bitmap of all the message's packets.
func (p *pktResults) mask(i int) uint64 {
	if n := p.ppm - i*64; n < 64 {
		return 1<<n - 1
	}
	return ^uint64(0)
}

// inSent reports whether the latest transmission sent packet k.
func (p *pktResults) inSent(k int) bool { return p.sent[k>>6]&(1<<(k&63)) != 0 }

// record notes packet k's result, back at now; xmit is the message's
// latest transmission. Only a result of a packet that transmission sent,
// back after it, counts toward the pace; and as evidence against the
// packets sent before it only from evFrom on.
func (p *pktResults) record(k int, now, xmit time.Time) {
	p.got[k>>6] |= 1 << (k & 63)
	p.n++
	if !now.After(xmit) || !p.inSent(k) {
		return
	}
	p.last = now
	if p.cnt++; p.cnt == 1 {
		p.since = now
	}
	if k > p.hi && !now.Before(p.evFrom) {
		p.hi = k
		if p.above.IsZero() && p.missingBefore(k) {
			p.above = now
		}
	}
}

// tailDue is when the results still missing above the highest one back
// are overdue: the pace of those back since the latest transmission, kept
// up for each missing one, twice over, plus the reordering window — and
// at least the path's time per packet result (pathPace, the delivery
// rate's) for each missing one, plus the window. On loopback they come
// back at once (the window alone); on a slow path (a shaped link, rxe
// under emulation) they are spread, and the wait follows the spread.
// Results read in one batch have no pace of their own: the path's keeps
// their tail from being overdue a window after them. The path's pace
// counts once, not twice: where it is slow (rxe under emulation, a
// millisecond per packet) twice made real tail losses wait for the timer.
func (p *pktResults) tailDue(missing int, reo, pathPace time.Duration) time.Time {
	var pace time.Duration
	if p.cnt > 1 {
		pace = p.last.Sub(p.since) / time.Duration(p.cnt-1)
	}
	wait := max(2*pace, pathPace) * time.Duration(missing)
	return p.last.Add(wait + reo)
}

// forget takes packet k's result back (its bytes were overwritten): it is
// missing again, and a resend fetches it.
func (p *pktResults) forget(k int) {
	if p.got[k>>6]&(1<<(k&63)) != 0 {
		p.got[k>>6] &^= 1 << (k & 63)
		p.n--
	}
}

// transmitted restarts the in-message evidence for a new transmission.
func (p *pktResults) transmitted() {
	p.hi, p.above, p.since, p.cnt = -1, time.Time{}, time.Time{}, 0
}

// engine is the state of a lane's engine that outlives a call (guarded by
// Session.mu: only the goroutine driving the lane touches it), grouped by
// the concern that owns it, as gVisor's tcp sender groups its state: each
// group is a value in the engine, so a field is one offset away, and each
// type says the rule its fields follow.
type engine struct {
	scratch scratch   // buffers a pass reuses
	est     estimates // what the lane has measured of its path
	clock   callClock // when things last happened in the call
	// parked are the QPs whose next message waits for room in the
	// window, in the call's order (window.go, launch).
	parked []*qpState
	// doorbell is set when messages are staged on a QP and not yet sent
	// (send.go: transmit, ringDoorbell).
	doorbell verbs.StagedSender
	// lossFound counts the call's fast retransmissions on evidence that
	// only loss makes (rack.go, fastRetransmit; writes.go, lossSignal).
	lossFound uint64
}

// scratch is the memory a lane's passes fill and reuse: sized once at
// Open (Session.open), so that a pass allocates nothing, with room beyond
// what a pass uses so that no other lane's is on its last cache line.
type scratch struct {
	wcs     []verbs.Completion // drive's poll
	recvWRs []verbs.RecvWR     // postRecvs'
	pktWRs  []verbs.SendWR     // transmitPackets' (per-packet recovery, Session.pktBits)
}

// estimates are what a lane has measured of its path, kept from call to
// call: fed by the results (receive.go, delivered; timers.go,
// sampleResult, which takes a time to result only when it surely answers
// a known transmission: Karn's rule, RFC 6298 section 3) and by the
// timer's backoff (rto.go, retransmit), and read by the rules that decide
// when a message is lost (rack.go, rto.go) and how many may be in flight
// (window.go).
type estimates struct {
	// Times to result: of messages in the middle of a call, and of each
	// QP's first message of a call (timers.go, sampleRTT).
	rtt, joinRTT timing.RTT
	// standing bounds the timeout (rto.go, rto): the smallest time to
	// result over the last round trip or two, queueing included.
	standing timing.StandingRTT
	// delivery is the fastest recent rate at which packet results come
	// back: with the packets in flight, the queueing a timeout must cover
	// (rto.go, pathBound).
	delivery timing.DeliveryRate
	// rack is RACK's evidence of loss (rack.go).
	rack rackState
	// quiet is the longest wait without loss the timer was shown
	// (rto.go, quietFloor): a floor of the timeout until a resend is
	// needed.
	quiet quietFloor
	// backedOff is the largest timeout backed off since the latest round
	// trip measured: before any round trip is measured, new messages
	// start no shorter (rto.go, rto).
	backedOff time.Duration
}

// callClock is when things last happened to the lane: a call's start
// (drive's start) sets start, lastPass, progress and rackProgress to its
// own time and clears due, passes and results move them forward, and the
// timers measure their waits from them (rto.go, expiry: a timer restarts
// on progress, RFC 6298 section 5.3; deadPeer: a silence is measured from
// the latest result).
type callClock struct {
	start      time.Time // when the running call started
	lastPass   time.Time // the loop's last pass
	lastResult time.Time // when any result last arrived, in any call
	// progress is when a result last completed a message or a packet of
	// one (not a duplicate answer): RFC 6298 5.3's "new data
	// acknowledged", which restarts the retransmission timers (rto.go,
	// expiry).
	progress time.Time
	// rackProgress is when a result RACK could use last came back: one
	// sampled, or a resent message's accepted as the answer to its latest
	// transmission (rto.go, expiry).
	rackProgress time.Time
	// probe is when the latest probe was sent: the one message resent
	// when the path went silent (rto.go, expire).
	probe time.Time
	// due is when the loop planned its current pass: the wake-up time of
	// its sleep (zero when it passed again at once).
	due time.Time
}

// Work-request ids: the QP index in the high half, the kind in the low.
const (
	wrSend = 1
	wrRecv = 2
)

func wrID(qp int, kind uint64) uint64 { return uint64(qp)<<32 | kind }

// recvRegions is how many receive regions each QP turns through, one per
// message (docs/protocol.md "Buffer layout"): a late copy of a result —
// an answer to a resend, or the original overtaken by that answer — lands
// where its message's request pointed, and may only overwrite a message
// in flight if it is this many messages of its QP late. A power of two
// that divides the message id space (wire.MsgIDMask + 1).
const recvRegions = 8

// recvRegion is the receive region of the message with id msgID (its
// low bits; a packet id's message bits serve as well).
func recvRegion(msgID uint16) int { return int(msgID) & (recvRegions - 1) }

// recvOff is where the switch writes the result of QP qp's message msgID:
// the RETH va the worker sends and the switch echoes. Each QP's regions
// are one block, its receive regions then its send staging region
// (sendOff; docs/protocol.md "Buffer layout"), so a lane's QPs, a block
// of neighbours (laneOf), own one stretch of the MR that no other core
// writes.
func (s *Session) recvOff(msgID uint16, qp int) uint64 {
	return uint64((qp*(recvRegions+1) + recvRegion(msgID)) * s.msgBytes)
}

// sendOff is QP qp's send staging region (recvOff).
func (s *Session) sendOff(qp int) uint64 {
	return uint64((qp*(recvRegions+1) + recvRegions) * s.msgBytes)
}

// AllReduce replaces x, on every worker of the job, by the element-wise sum
// of the workers' x, computed by the switch in block floating point (see
// docs/protocol.md for the error bound). Every worker must call it with a
// tensor of the same length, in the same order relative to its other calls.
// x must not be touched until AllReduce returns. A NaN or ±Inf in x is an
// error before anything is sent (the other workers then wait for this one
// until their PeerTimeout).
//
// The session must have been opened with DType wire.Float32. An error other
// than bad input breaks the session (ErrBroken): close it.
func (s *Session) AllReduce(ctx context.Context, x []float32) error {
	if s.cfg.DType != wire.Float32 {
		return fmt.Errorf("aggregation: AllReduce on an %v session: %w", s.cfg.DType, ErrDType)
	}
	if len(x) == 0 {
		return fmt.Errorf("aggregation: AllReduce: %w", ErrEmpty)
	}
	return s.runCall(ctx, call{f: x, n: len(x), codec: s.codec(elemFloat32)})
}

// AllReduceInt32 replaces x, on every worker, by the element-wise sum of the
// workers' x, exactly (wrapping on int32 overflow). The session must have
// been opened with DType wire.Int32. Otherwise as AllReduce.
func (s *Session) AllReduceInt32(ctx context.Context, x []int32) error {
	if s.cfg.DType != wire.Int32 {
		if s.cfg.Wire == 16 {
			return fmt.Errorf("aggregation: AllReduceInt32 on a 16-bit-wire session: int32 needs the 32-bit wire: %w", ErrDType)
		}
		return fmt.Errorf("aggregation: AllReduceInt32 on a %v session: %w", s.cfg.DType, ErrDType)
	}
	if len(x) == 0 {
		return fmt.Errorf("aggregation: AllReduceInt32: %w", ErrEmpty)
	}
	return s.runCall(ctx, call{i: x, n: len(x), codec: s.codec(elemInt32)})
}

// call is the tensor of one AllReduce: one of f, i and h, and the codec
// of its element type (calltensor.go).
type call struct {
	f     []float32
	i     []int32
	h     []uint16 // 16-bit floats, in codec's format
	codec *codec
	n     int    // elements
	vals  int    // elements per message
	msgs  int    // messages
	exps  []int8 // each message's block exponent (float calls)
}

func (c *call) span(j int) (lo, hi int) {
	lo = j * c.vals
	return lo, min(lo+c.vals, c.n)
}

func (s *Session) runCall(ctx context.Context, arg call) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("aggregation: AllReduce not started: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	if s.broken != nil {
		if s.broken == ErrClosed {
			return ErrClosed
		}
		return fmt.Errorf("aggregation: %w: %w", ErrBroken, s.broken)
	}
	// The call lives in the session (the lanes share it), not on the
	// heap per call; it lets go of the caller's tensor when done.
	s.call = arg
	defer s.endCall()
	c := &s.call
	c.vals = s.msgBytes / s.cfg.elementBytes()
	c.msgs = (c.n + c.vals - 1) / c.vals
	if c.codec.float {
		if cap(s.exps) < c.msgs {
			s.exps = make([]int8, c.msgs)
		}
		c.exps = s.exps[:c.msgs]
	}
	for _, l := range s.lanes {
		l.wake.Reset()
	}
	if ctx.Done() != nil {
		// A context that cannot be cancelled needs no watcher (and a
		// call then allocates nothing).
		stop := context.AfterFunc(ctx, s.fireAll)
		defer stop()
	}
	if err := s.driveLanes(ctx, c); err != nil {
		if bad, ok := err.(badInput); ok {
			return bad.error // nothing was sent: the session goes on
		}
		err = s.askWaitingFor(err)
		s.broken = err
		return err
	}
	s.stats.allReduces.Add(1)
	s.stats.callTimes.observe(time.Since(start))
	return nil
}

// endCall drops the finished call's tensor.
func (s *Session) endCall() { s.call = call{} }

// drive runs the worker protocol of docs/protocol.md for one tensor: it
// sends each QP's first message, then loops
//
//  1. poll the CQ (completions first: a result that is already here must
//     not be retransmitted because this goroutine was late to look — on a
//     loaded host it can be descheduled for longer than a timeout);
//  2. complete each completion (receive.go): a result hands its QP the
//     next message, which is staged;
//  3. run the timers (timers.go): resends are staged too — unless the
//     poll filled its batch: more completions may be waiting, and a
//     result still in the CQ must not be judged lost;
//  4. ring the doorbell once: every message staged in this pass, of every
//     QP, leaves in one system call (send.go);
//  5. wait for a completion, the next timer or an event from outside
//     (Close, a cancelled context, the controller), unless this pass had
//     work: then the next pass polls again at once. The wait is
//     verbs.Await, every engine's: on a CQ that asks for it
//     (verbs.BusyPoller: libibverbs) it first polls for a few
//     microseconds, as RDMA libraries poll before they sleep; the
//     completions it finds are the next pass's.
func (s *lane) drive(ctx context.Context, c *call) error {
	active, err := s.start(c)
	if err != nil {
		return err
	}
	// On every way out: nothing staged stays behind. The call's result is
	// decided by then; a failed send shows up as the next call's error.
	defer func() { _ = s.ringDoorbell() }()
	e := &s.eng
	waited := 0 // completions the wait step polled, in e.scratch.wcs
	for active > 0 {
		if err := s.interrupted(ctx); err != nil {
			return err
		}
		k := waited
		if k == 0 {
			if k, err = s.cq.Poll(e.scratch.wcs); err != nil { // 1
				return s.cqFailed(ctx, err)
			}
		}
		now := time.Now()
		done, err := s.completeAll(c, e.scratch.wcs[:k], now) // 2
		if err != nil {
			return err
		}
		active -= done
		if k > 0 {
			now = time.Now() // dequantizing them took time
		}
		var wakeAt time.Time
		if k < len(e.scratch.wcs) { // 3: only once the CQ is drained
			if wakeAt, err = s.timers(now); err != nil {
				return err
			}
		}
		if err := s.ringDoorbell(); err != nil { // 4
			return err
		}
		if waited = 0; k > 0 || active == 0 {
			continue
		}
		// 5: the waker is set at the next timer or by an event from
		// outside, and verbs.Await polls (busy-polls a verbs.BusyPoller
		// for up to its spin), arms, polls once more and blocks on the
		// CQ's notification and the waker.
		e.clock.due = wakeAt
		s.wake.Arm(wakeAt.Sub(now))
		if waited, err = verbs.Await(s.cq, e.scratch.wcs, s.wake.C()); err != nil {
			return s.cqFailed(ctx, err)
		}
	}
	return nil
}

// beginCall decides how the call sends, once its input is known good
// (driveLanes): packet or message writes (writes.go).
func (s *Session) beginCall(c *call) {
	s.pktWrites = s.chooseWrites(c.msgs)
	if s.pktWrites {
		s.stats.packetWriteCalls.Add(1)
	}
}

// start sends the first message of every QP that has a tensor message in
// this call (every worker leaves the same QPs idle) and returns how many
// QPs take part.
func (s *lane) start(c *call) (int, error) {
	now := time.Now()
	e := &s.eng
	e.clock.start, e.clock.lastPass, e.clock.progress, e.clock.rackProgress, e.clock.due = now, now, now, now, time.Time{}
	e.est.rack.newCall()
	e.est.quiet.newCall()
	e.est.delivery.NewEpoch()
	e.parked = e.parked[:0]
	active := 0
	for _, st := range s.qps {
		st.next, st.msg.busy, st.msg.cur, st.msg.joining = st.index, false, -1, true
		if st.next >= c.msgs {
			continue
		}
		// Round 0 on every QP: the look-ahead exponent (float) and the
		// call's length (every type), calltensor.go; in the window's
		// order, like every message (send.go, launch).
		if _, err := s.launch(c, st, true, 0, now); err != nil {
			return 0, err
		}
		active++
	}
	return active, nil
}

// cqFailed is the error of a failed CQ operation: the interruption that
// caused it (a closed session closes the CQ), or the CQ's own.
func (s *lane) cqFailed(ctx context.Context, err error) error {
	if ierr := s.interrupted(ctx); ierr != nil {
		return ierr
	}
	return fmt.Errorf("aggregation: %v: completion queue: %w", s.who(), err)
}

// interrupted says why the engine must stop, if it must.
func (s *lane) interrupted(ctx context.Context) error {
	if s.closing.Load() {
		return ErrClosed
	}
	if s.laneStop.Load() {
		return errLaneStopped
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("aggregation: %v: AllReduce interrupted: %w", s.who(), err)
	}
	select {
	case <-s.assign.Done():
		if err := s.assign.Err(); errors.Is(err, control.ErrJobEnded) {
			return fmt.Errorf("aggregation: %v: the controller ended the job: %w", s.who(), err)
		}
	default:
	}
	if t, ok := s.switchGoneAt(); ok && !time.Now().Before(t) {
		lost := time.Unix(0, s.ctlLost.Load())
		return fmt.Errorf("aggregation: %v: %w: the keep-alive stream to the controller broke %v ago, no result since",
			s.who(), ErrSwitchGone, time.Since(lost).Round(time.Millisecond))
	}
	return nil
}

// switchGoneAfter is how long a call waits for a result after the
// keep-alive stream broke before it takes the switch for gone. A
// controller apart from the switch (a Tofino's) can fail while the switch
// keeps aggregating: results then keep coming and the call goes on.
const switchGoneAfter = 500 * time.Millisecond

// switchGoneAt is when the running call fails for a broken keep-alive
// stream unless a result arrives first; false if the stream is fine.
func (s *lane) switchGoneAt() (time.Time, bool) {
	n := s.ctlLost.Load()
	if n == 0 {
		return time.Time{}, false
	}
	t := time.Unix(0, n)
	if s.eng.clock.lastResult.After(t) {
		t = s.eng.clock.lastResult
	}
	if s.eng.clock.start.After(t) {
		t = s.eng.clock.start
	}
	return t.Add(switchGoneAfter), true
}
