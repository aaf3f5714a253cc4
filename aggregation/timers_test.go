package aggregation

import (
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
)

// timerSession is a session of q QPs on fake verbs (postCounter, fakeMR),
// message writes of ppm packets of 1 KiB, for the timer tests: nothing is
// sent anywhere; each test plays the results itself, on its own clock.
func timerSession(q, ppm int) *lane {
	s := &Session{cfg: Config{PacketSize: 1024, PacketsPerMessage: ppm, RetransmitTimeout: time.Millisecond,
		MaxRetransmitTimeout: time.Second, BackoffAfter: 1, QPs: q, PeerTimeout: 10 * time.Second},
		msgBytes: ppm * 1024, mr: &fakeMR{buf: make([]byte, 3*q*ppm*1024)}}
	for i := range q {
		st := &qpState{index: i, qp: &postCounter{}, sendOff: uint64(2 * q * ppm * 1024)}
		st.msg.joining = true
		s.qps = append(s.qps, st)
	}
	return oneLane(s)
}

// oneLane gives s the one lane of Threads 1, driving all of s.qps.
func oneLane(s *Session) *lane {
	l := &lane{Session: s, qps: s.qps, wake: timing.NewWaker()}
	s.lanes = []*lane{l}
	return l
}

// result plays the arrival of st's result at now as complete does (the
// receive path's bookkeeping without a CQ), and posts its next message.
func (s *lane) playResult(t *testing.T, st *qpState, now time.Time) {
	t.Helper()
	s.eng.clock.lastResult, s.eng.clock.progress = now, now
	s.delivered(st, resultWhole, now)
	s.sampleResult(st, resultWhole, now)
	st.msg.busy, st.msg.joining = false, false
	st.queued = 0
	if err := s.post(st, 0, now); err != nil {
		t.Fatal(err)
	}
	st.queued = 0
}

// TestTimersBehindAQueue: one worker's messages cross a 200 Mbit/s link
// with a queue (a FIFO at the link's rate, packets of 1 KiB + 42 B of
// headers) to a switch that answers each 100 µs after its last packet
// arrived. Every QP keeps one message in flight, so each new message
// waits behind the others: its time to result is about QPs × a message's
// time on the wire, and the first message of each QP waits behind all the
// first ones. No timer may fire, from the first result on: not before
// the estimate has samples (the floor alone fired at every QP's second
// message), and not while results keep coming (each later message waits
// longer than the one before it did; RFC 6298 5.3 restarts the timers on
// progress).
func TestTimersBehindAQueue(t *testing.T) {
	const q, ppm, rounds = 8, 16, 40
	s := timerSession(q, ppm)
	base := time.Unix(1000, 0)
	s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = base, base, base // as start does
	wire := time.Duration(float64((1024+42)*8) / 200e6 * float64(time.Second))              // one packet
	const answer = 100 * time.Microsecond
	var busy time.Duration // when the link is free, after base
	due := make([]time.Duration, q)
	send := func(st *qpState, at time.Duration) {
		busy = max(busy, at) + ppm*wire
		due[st.index] = busy + answer
	}
	for _, st := range s.qps {
		if err := s.post(st, 0, base); err != nil {
			t.Fatal(err)
		}
		send(st, 0)
	}
	const step = 50 * time.Microsecond
	results := 0
	for now := time.Duration(0); results < rounds*q; now += step {
		for _, st := range s.qps {
			if due[st.index] <= now {
				s.playResult(t, st, base.Add(due[st.index]))
				send(st, due[st.index])
				results++
			}
		}
		if _, err := s.timers(base.Add(now)); err != nil {
			t.Fatal(err)
		}
		if n := s.stats.retransmissions.Load(); n != 0 {
			t.Fatalf("at %v, after %d results (time to result %v, estimate %v ± %v): %d resends behind a queue that loses nothing",
				now, results, q*ppm*wire, s.eng.est.rtt.SRTT(), s.eng.est.rtt.RTTVar(), n)
		}
	}
	// The delivery rate is the link's: each result's round trip carried
	// the window (results come one message at a time, 16 packets at once,
	// as a link lets them through in a burst).
	if got, want := s.eng.est.delivery.Drain(q*ppm), q*ppm*wire; got < want*9/10 || got > want*11/10 {
		t.Fatalf("drain of %d packets %v, want the link's %v ± 10 %%", q*ppm, got, want)
	}
}

// TestTimersSlowerThanTheFloor: the same link at 50 Mbit/s, where a
// message's time to result is longer than the timeout's floor from the
// first message on, so no estimate exists until some message is answered
// before its timer fires. Resends cross the link too (they queue behind
// what is there and delay what follows). Karn's algorithm keeps the
// backed-off timeout for new messages until a round trip is measured:
// the resends stop within the first rounds. Without it every new message
// started at the floor, fired before its result, was resent, and left
// the estimate without a sample for good — resends in every round, a
// storm on a real link (packet writes on a shaped veth).
//
// With round 0 as one packet (a call's first message per QP, as the
// engine sends it), its quick result is the only time to result measured
// at first; it is the joining estimate's, and it must not end the
// backoff for the full messages that follow: it did, and on a 20 Mbit/s
// link every message timed out at a third of its time to result for good.
func TestTimersSlowerThanTheFloor(t *testing.T) {
	t.Run("full first messages", func(t *testing.T) { timersSlowerThanTheFloor(t, false) })
	t.Run("round 0 of one packet", func(t *testing.T) { timersSlowerThanTheFloor(t, true) })
}

func timersSlowerThanTheFloor(t *testing.T, roundZero bool) {
	const q, ppm, rounds = 8, 16, 40
	s := timerSession(q, ppm)
	base := time.Unix(1000, 0)
	s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = base, base, base // as start does
	wire := time.Duration(float64((1024+42)*8) / 50e6 * float64(time.Second))
	const answer = 100 * time.Microsecond
	var busy time.Duration
	due := make([]time.Duration, q)
	posts := make([]int, q)
	transmit := func(st *qpState, at time.Duration, first bool) {
		if roundZero && st.msg.joining {
			busy = max(busy, at) + wire
		} else {
			busy = max(busy, at) + ppm*wire
		}
		if first {
			due[st.index] = busy + answer // resends answer no sooner
		}
		posts[st.index] = len(st.qp.(*postCounter).posted)
	}
	for _, st := range s.qps {
		if err := s.post(st, 0, base); err != nil {
			t.Fatal(err)
		}
		transmit(st, 0, true)
	}
	if d := due[q-1]; d <= s.qps[q-1].timer.rto {
		t.Fatalf("time to result %v within the first timeout %v: not the case under test", d, s.qps[q-1].timer.rto)
	}
	const step = 50 * time.Microsecond
	results := 0
	late := uint64(0) // resends after the first quarter of the rounds
	for now := time.Duration(0); results < rounds*q; now += step {
		for _, st := range s.qps {
			if due[st.index] <= now {
				s.playResult(t, st, base.Add(due[st.index]))
				transmit(st, due[st.index], true)
				results++
			}
		}
		before := s.stats.retransmissions.Load()
		if _, err := s.timers(base.Add(now)); err != nil {
			t.Fatal(err)
		}
		for _, st := range s.qps {
			st.queued = 0
			if n := len(st.qp.(*postCounter).posted); n > posts[st.index] {
				transmit(st, now, false)
			}
		}
		if results > rounds*q/4 {
			late += s.stats.retransmissions.Load() - before
		}
	}
	if late != 0 || s.eng.est.rtt.Samples() == 0 {
		t.Fatalf("%d resends after round %d of %d (%d in all), %d samples: the timeout never caught up with the path (estimate %v)",
			late, rounds/4, rounds, s.stats.retransmissions.Load(), s.eng.est.rtt.Samples(), s.eng.est.rtt.SRTT())
	}
	t.Logf("%d resends in all, all in the first rounds; estimate %v ± %v", s.stats.retransmissions.Load(), s.eng.est.rtt.SRTT(), s.eng.est.rtt.RTTVar())
}

// TestSilenceProbe: when every message's timer expires because the path
// went silent (a stall: nothing lost), one message is resent as a probe
// and the others' timers restart while it is out; a result (progress)
// then lets RACK find the ones sent before the probe, and a pass that
// came late first polls once more.
func TestSilenceProbe(t *testing.T) {
	const q = 4
	s := timerSession(q, 2)
	now := time.Unix(1000, 0)
	s.eng.est.joinRTT.Sample(2 * time.Millisecond)
	s.eng.est.rtt.Sample(2 * time.Millisecond)
	s.eng.est.rack.min.Sample(2 * time.Millisecond)
	s.eng.clock.progress, s.eng.clock.rackProgress, s.eng.clock.lastPass = now, now, now
	for _, st := range s.qps {
		st.msg.joining = false
		if err := s.post(st, 0, now); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
	}
	rto := s.qps[0].timer.rto
	if rto != 6*time.Millisecond { // 2 ms + 4 × 1 ms
		t.Fatalf("timeout %v, want 6ms", rto)
	}
	pass := func(at time.Time) uint64 {
		t.Helper()
		s.eng.clock.due = time.Time{}
		s.eng.clock.lastPass = at
		if _, err := s.timers(at); err != nil {
			t.Fatal(err)
		}
		for _, st := range s.qps {
			st.queued = 0
		}
		return s.stats.retransmissions.Load()
	}
	// Results of other messages kept coming until 5 ms: nothing expires
	// before 5 ms + the timeout, although every deadline has passed.
	s.eng.clock.progress, s.eng.clock.rackProgress = now.Add(5*time.Millisecond), now.Add(5*time.Millisecond)
	if n := pass(now.Add(10 * time.Millisecond)); n != 0 {
		t.Fatalf("%d resends while results came within a timeout", n)
	}
	// Silent for a timeout: one probe, the others wait.
	if n := pass(now.Add(11 * time.Millisecond)); n != 1 {
		t.Fatalf("%d resends after a silence, want 1 probe", n)
	}
	if n := pass(now.Add(16 * time.Millisecond)); n != 1 {
		t.Fatalf("%d resends while the probe is out, want 1", n)
	}
	// The probe's answer: progress. The others were sent before it: RACK.
	probe := s.qps[0]
	if probe.timer.resends != 1 {
		t.Fatalf("the probe is not QP 0's message, the first to expire: %+v", probe.timer)
	}
	s.playResult(t, probe, now.Add(17*time.Millisecond))
	if n := pass(now.Add(22 * time.Millisecond)); n != q {
		t.Fatalf("%d resends after the probe's answer, want %d (RACK for the rest)", n, q)
	}
	if f := s.stats.fastRetransmissions.Load(); f != q-1 {
		t.Fatalf("%d fast retransmissions, want %d", f, q-1)
	}

	// A pass that comes late polls once more before a timer fires.
	st := s.qps[1]
	at := st.timer.deadline.Add(10 * time.Millisecond)
	s.eng.clock.progress, s.eng.clock.rackProgress = st.timer.xmit, st.timer.xmit
	s.eng.clock.lastPass, s.eng.clock.due = at.Add(-20*time.Millisecond), at.Add(-10*time.Millisecond)
	before := s.stats.retransmissions.Load()
	if _, err := s.timers(at); err != nil {
		t.Fatal(err)
	}
	if n := s.stats.retransmissions.Load() - before; n != 0 {
		t.Fatalf("a pass 10 ms late resent %d messages at once", n)
	}
	if !st.timer.deadline.Equal(at.Add(st.timer.rto)) { // as late again, at most a timeout
		t.Fatalf("deadline %v after the late pass, want %v", st.timer.deadline.Sub(at), st.timer.rto)
	}
}

// TestInitialTimeout: before any time to result the timeout is the floor
// (the join probe's, with two QPs or more in the call, a few floors);
// the messages after the first of a call take the joining estimate until
// their own has samples, not the floor (behind a queue the floor fired at
// every QP's second message).
func TestInitialTimeout(t *testing.T) {
	s := timerSession(1, 2)
	st := s.qps[0]
	if got := s.rto(st); got != s.cfg.RetransmitTimeout {
		t.Fatalf("joining, no sample: %v, want the floor", got)
	}
	// A session's first call with two QPs or more: the join probe is a
	// backstop (a lost round 0 is found once another QP's result is
	// back), so it starts at joinBackstopFloors floors.
	s2 := timerSession(2, 2)
	s2.call.msgs = 2
	if got := s2.rto(s2.qps[0]); got != joinBackstopFloors*s2.cfg.RetransmitTimeout {
		t.Fatalf("joining, no sample, two QPs in the call: %v, want %d floors", got, joinBackstopFloors)
	}
	s2.call.msgs = 1
	if got := s2.rto(s2.qps[0]); got != s2.cfg.RetransmitTimeout {
		t.Fatalf("joining, no sample, one QP in the call: %v, want the floor", got)
	}
	st.msg.joining = false
	if got := s.rto(st); got != s.cfg.RetransmitTimeout {
		t.Fatalf("no sample: %v, want the floor", got)
	}
	s.eng.est.joinRTT.Sample(8 * time.Millisecond)
	if got := s.rto(st); got != 24*time.Millisecond { // 8 + 4 × 4
		t.Fatalf("after a joining sample of 8 ms: %v, want 24ms", got)
	}
	s.eng.est.rtt.Sample(2 * time.Millisecond)
	if got := s.rto(st); got != 6*time.Millisecond {
		t.Fatalf("after a sample of 2 ms: %v, want 6ms", got)
	}
}

// TestTimersJoinAndQueueBound: two ways a short time to result set every
// timeout of a shaped link under loss far below its time to result (a
// storm of timer resends):
//   - a QP's first message of a call (round 0, one packet, on an idle
//     link) is answered in a fraction of a full message's time; it feeds
//     the joining estimate only, not the minimum (RACK's reordering
//     window) nor the standing time to result (the timeout's bound);
//   - a worker that comes last to slots the others filled long before is
//     answered in two packet times while the messages behind the link's
//     queue take the time its packets in flight take to drain: the bound
//     (a multiple of the standing time to result) covers that drain at
//     the path's delivery rate too, with either writes. It still breaks
//     the loop it is for: a wait for another worker's resend does not
//     lengthen the timeout.
func TestTimersJoinAndQueueBound(t *testing.T) {
	const q, ppm = 8, 16
	s := timerSession(q, ppm)
	now := time.Unix(1000, 0)
	s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = now, now, now
	for _, st := range s.qps {
		if err := s.post(st, 0, now); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
	}
	st := s.qps[0]
	now = now.Add(150 * time.Microsecond)
	s.playResult(t, st, now) // the joining message; posts the next one
	if m, g := s.eng.est.rack.minRTT(), s.eng.est.standing.Get(); m != 0 || g != 0 || s.eng.est.joinRTT.Samples() != 1 {
		t.Fatalf("after the joining result: minimum %v, standing %v, %d joining samples; want 0, 0, 1", m, g, s.eng.est.joinRTT.Samples())
	}
	// A 200 Mbit/s link: packet results every 42.6 µs; 8 messages of 16
	// packets in flight take 5.45 ms to drain, and each is answered after
	// those ahead of it.
	wire := 42600 * time.Nanosecond
	for range 32 {
		at, xmit := s.eng.est.delivery.Delivered(), now
		now = now.Add(q * ppm * wire)
		s.eng.est.delivery.Deliver(q * ppm)
		s.eng.est.delivery.Sample(now, xmit, at)
	}
	queued := q*ppm*wire + 100*time.Microsecond
	for range 8 {
		now = now.Add(queued)
		s.playResult(t, st, now)
	}
	if m := s.eng.est.rack.minRTT(); m != queued {
		t.Fatalf("minimum %v, want the queue's %v", m, queued)
	}
	if w := s.eng.est.rack.reoWnd(s.eng.est.rtt.SRTT()); w != queued/4 {
		t.Fatalf("reordering window %v, want %v", w, queued/4)
	}
	// One message answered at once (its slots were complete when it came).
	now = now.Add(200 * time.Microsecond)
	s.playResult(t, st, now)
	for _, pw := range []bool{false, true} {
		s.pktWrites = pw
		if got := s.rto(st); got < queued {
			t.Fatalf("packet writes %v: timeout %v below the time to result behind the queue %v (standing %v)", pw, got, queued, s.eng.est.standing.Get())
		}
	}
	s.pktWrites = false
	// A wait for another worker's resend: 100 ms, sampled.
	now = now.Add(100 * time.Millisecond)
	s.playResult(t, st, now)
	for _, pw := range []bool{false, true} {
		s.pktWrites = pw
		if got, bound := s.rto(st), rtoStandingRTTsPacketWrites*200*time.Microsecond+q*ppm*wire; got > bound {
			t.Fatalf("packet writes %v: timeout %v after a 100 ms wait, want the bound %v at most", pw, got, bound)
		}
	}
}

// TestJoinProbe: before any result of a call is back, every QP's first
// message waits for the same thing (the last worker to join the call), so
// only the lowest busy QP's — the same on every worker — is resent as the
// call's probe, however many expiries pass; once a result is back, the
// others expire as usual.
func TestJoinProbe(t *testing.T) {
	const q = 4
	s := timerSession(q, 2)
	s.call.msgs = q
	now := time.Unix(1000, 0)
	s.eng.clock.start, s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = now, now, now, now
	for _, st := range s.qps {
		if err := s.post(st, 0, now); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
	}
	pass := func(at time.Time) {
		t.Helper()
		s.eng.clock.due, s.eng.clock.lastPass = time.Time{}, at
		if _, err := s.timers(at); err != nil {
			t.Fatal(err)
		}
		for _, st := range s.qps {
			st.queued = 0
		}
	}
	for i := 1; i <= 200; i++ {
		pass(now.Add(time.Duration(i) * 500 * time.Microsecond)) // 100 ms of silence
	}
	for _, st := range s.qps[1:] {
		if st.timer.resends != 0 {
			t.Fatalf("QP %d's joining message resent %d times before any result: only QP 0 probes", st.index, st.timer.resends)
		}
	}
	if r := s.qps[0].timer.resends; r < 2 {
		t.Fatalf("the probe (QP 0) resent %d times in 100 ms of silence from an 8 ms timeout, want its backoff's share", r)
	}
	// The probe's answer: the call has progress; the others' timers run.
	at := now.Add(101 * time.Millisecond)
	s.playResult(t, s.qps[0], at)
	for i := 1; i <= 40; i++ {
		pass(at.Add(time.Duration(i) * 500 * time.Microsecond))
	}
	for _, st := range s.qps[1:] {
		if st.timer.resends == 0 {
			t.Fatalf("QP %d not resent in the 20 ms after the probe's answer (timeout %v)", st.index, st.timer.rto)
		}
	}
}

// TestTimerUnderLoss: on a fast path (every time to result 10 µs), the
// timeout stays at Config.RetransmitTimeout while no loss is seen or the
// call sends message writes, and drops to the path's bound (pathBound) on
// a packet-write call after loss: there the
// fixed floor cost hundreds of round trips per lost resend
// (docs/protocol.md "Loss recovery, step by step", Floor under loss). A
// message none of whose results came back keeps its timeout while other
// messages complete in a lossy call, and backs off when nothing completes
// or no loss was seen (Backoff).
func TestTimerUnderLoss(t *testing.T) {
	const q, ppm = 8, 16
	s := timerSession(q, ppm)
	base := time.Unix(1000, 0)
	s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = base, base, base // as start does
	for _, st := range s.qps {
		if err := s.post(st, 0, base); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
	}
	const rtt = 10 * time.Microsecond
	now := base
	for range 20 {
		now = now.Add(rtt)
		for _, st := range s.qps {
			s.playResult(t, st, now)
		}
	}
	st := s.qps[0]
	floor := s.cfg.RetransmitTimeout
	if got := s.rto(st); got < floor {
		t.Fatalf("without loss: timeout %v below the floor %v", got, floor)
	}
	s.adapt.heard.Store(true)
	if got := s.rto(st); got < floor {
		t.Fatalf("under loss, message writes: timeout %v below the floor %v", got, floor)
	}
	s.pktWrites = true
	bound := s.pathBound(s.eng.est.standing.Get())
	if got := s.rto(st); got >= floor || got > bound || got < rtt {
		t.Fatalf("under loss: timeout %v, want the path's bound %v (standing %v), below the floor %v", got, bound, s.eng.est.standing.Get(), floor)
	}

	backoff := func(lossy, progress bool) time.Duration {
		s.adapt.heard.Store(lossy)
		tm := &st.timer
		tm.rto, tm.xmit, tm.silent = floor, now, 0
		st.pkts.n = 0
		s.eng.clock.progress = now.Add(-rtt)
		if progress {
			s.eng.clock.progress = now.Add(rtt)
		}
		if err := s.retransmit(st, now.Add(2*rtt)); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
		return tm.rto
	}
	if got := backoff(true, true); got != floor {
		t.Fatalf("lossy call, other messages completing: timeout %v after an expiry, want it kept at %v", got, floor)
	}
	if got := backoff(true, false); got != 2*floor {
		t.Fatalf("lossy call, nothing completing: timeout %v after an expiry, want %v", got, 2*floor)
	}
	if got := backoff(false, true); got != 2*floor {
		t.Fatalf("no loss seen, other messages completing: timeout %v after an expiry, want %v", got, 2*floor)
	}
}
