package aggregation

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// TestPacketWrites: with Writes PacketWrites every request the switch sees
// is a one-packet WRITE (so every result is one too), a lost packet is
// repaired by resending that packet alone, and results are bit-identical to
// a loss-free run. Every 16th request of rank 0 on QP 0 is lost, and every
// 16th result packet to rank 1.
func TestPacketWrites(t *testing.T) {
	t.Parallel()
	b := newLossBench(t, 40, 11, 256*16*5)
	c, cfg := b.c, b.cfg

	var multi, lostIn, lostOut atomic.Int64
	c.setLoss(
		func(rank, qp, k, pkts int) bool {
			if pkts > 1 {
				multi.Add(1)
			}
			// Every one-packet request has k == 0: count them instead.
			return rank == 0 && qp == 0 && lostIn.Add(1)%16 == 4
		},
		func(rank, qp, k, pkts int) bool { return rank == 1 && lostOut.Add(1)%16 == 6 },
	)
	defer c.setLoss(nil, nil)

	cfg.SessionID = 41
	cfg.Writes = PacketWrites
	lossy := openJob(t, c.ctlAddr, lossBenchWorkers, cfg, c.device(10))
	b.check(t, lossy, 2, "packet writes under loss")
	if m := multi.Load(); m != 0 {
		t.Errorf("the switch saw %d multi-packet requests from workers sending packet writes", m)
	}
	for r, w := range lossy.workers {
		st := w.sess.Stats()
		if st.PacketWriteCalls != 2 {
			t.Errorf("rank %d: %d calls sent packet writes, want 2", r, st.PacketWriteCalls)
		}
		if (r == 0 || r == 1) && st.Retransmissions == 0 {
			t.Errorf("rank %d resent nothing: %+v", r, st)
		}
		// Only rank 0 loses requests: the switch's gap notices name
		// them to it, and to nobody else.
		if r == 0 && (st.GapNotices == 0 || st.NoticeResends == 0) {
			t.Errorf("rank 0 lost requests but got %d gap notices and resent %d packets on them", st.GapNotices, st.NoticeResends)
		}
		if r != 0 && st.GapNotices != 0 {
			t.Errorf("rank %d lost no request but got %d gap notices", r, st.GapNotices)
		}
	}
	lossy.close(t)

	// A worker that takes no notices: the job gets none, and recovers
	// by its own evidence alone.
	cfg.SessionID = 42
	quiet := openJobWith(t, c.ctlAddr, lossBenchWorkers, func(r int) Config {
		c := cfg
		c.NoGapNotices = r == 2
		return c
	}, c.device(10))
	b.check(t, quiet, 1, "packet writes under loss, no gap notices")
	for r, w := range quiet.workers {
		if st := w.sess.Stats(); st.GapNotices != 0 {
			t.Errorf("rank %d of a job with a worker that takes no notices got %d", r, st.GapNotices)
		}
	}
}

// TestMixedWrites: workers that chose differently (Config.Writes, or
// AdaptiveWrites deciding alone) still get bit-identical results under
// loss: a result mirrors the request that completed its slot, so a worker
// can get one-packet results for a message it sent whole and the other
// way round; the switch's per-destination ordering rule and per-packet
// recovery sort it out.
func TestMixedWrites(t *testing.T) {
	t.Parallel()
	b := newLossBench(t, 42, 12, 256*16*5)
	c, cfg := b.c, b.cfg

	var seen atomic.Int64
	c.setLoss(
		func(rank, qp, k, pkts int) bool { return seen.Add(1)%97 == 0 },
		func(rank, qp, k, pkts int) bool { return seen.Add(1)%89 == 0 },
	)
	defer c.setLoss(nil, nil)

	cfg.SessionID = 43
	writes := []Writes{PacketWrites, MessageWrites, AdaptiveWrites, PacketWrites}
	j := openJobWith(t, c.ctlAddr, lossBenchWorkers, func(rank int) Config {
		cfg := cfg
		cfg.Writes = writes[rank]
		return cfg
	}, c.device(10))
	b.check(t, j, 3, fmt.Sprintf("mixed job (%v writes)", writes))
}

// TestChooseWrites walks AdaptiveWrites' decisions: packet writes in the
// session's first call, then message writes while no result of the last
// call carried the loss signal (a lossy first call: below), packet writes after a
// call one of whose results did, a probe with message writes after 16
// packet-write calls, back to packet writes if the probe heard loss, with
// twice as many calls before the next probe (up to 1024), and the next
// run of packet writes after a clean probe probing after 16 again. A
// worker signals loss (e1) once RACK found one in 64 of the call's
// messages lost.
func TestChooseWrites(t *testing.T) {
	s := oneLane(&Session{})
	s.pktBits = 4
	// call starts a call of 640 messages after one whose results carried
	// the loss signal if heard.
	call := func(heard bool) bool {
		if heard {
			s.hearLoss(e1Loss)
		}
		s.hearLoss(0)
		s.pktWrites = s.chooseWrites(640)
		return s.pktWrites
	}
	if !call(false) {
		t.Fatal("the session's first call sends message writes")
	}
	if call(false) {
		t.Fatal("packet writes after a first call whose results carried no loss signal")
	}
	for i := range 9 {
		s.eng.lossFound++ // a fast retransmission on evidence of loss (fastRetransmit)
		if e1 := s.lossSignal(); e1 != 0 {
			t.Fatalf("loss signal e1 = %d after %d fast retransmissions in a call of 640 messages", e1, i+1)
		}
	}
	s.eng.lossFound++
	if e1 := s.lossSignal(); e1 != e1Loss {
		t.Fatalf("loss signal e1 = %d after 10 fast retransmissions in a call of 640 messages, want %d", e1, e1Loss)
	}
	if call(false) {
		t.Fatal("packet writes after a call whose results carried no loss signal (this worker's own loss is not the job's)")
	}
	if s.lossSignal() != 0 {
		t.Fatal("the loss signal outlived its call")
	}
	if !call(true) {
		t.Fatal("message writes after a call whose results carried the loss signal")
	}
	for i := 1; i < probeMessageWrites; i++ {
		if !call(false) {
			t.Fatalf("packet-write call %d: message writes before the probe", i)
		}
	}
	if call(false) {
		t.Fatalf("no probe with message writes after %d packet-write calls", probeMessageWrites)
	}
	if !call(true) { // the probe heard loss
		t.Fatal("message writes after a probe that heard loss")
	}
	// Each probe that hears loss doubles the run before the next, up to
	// maxProbeInterval.
	for every := 2 * probeMessageWrites; ; every = min(2*every, maxProbeInterval) {
		for i := 1; i < every; i++ {
			if !call(false) {
				t.Fatalf("packet-write call %d of a run of %d: message writes before the probe", i, every)
			}
		}
		if call(false) {
			t.Fatalf("no probe with message writes after %d packet-write calls", every)
		}
		if every == maxProbeInterval {
			break
		}
		if !call(true) {
			t.Fatal("message writes after a probe that heard loss")
		}
	}
	// That probe was clean: message writes from here on, and the next
	// run of packet writes probes after probeMessageWrites calls again.
	for i := range 2 {
		if call(false) {
			t.Fatalf("call %d after a clean probe sends packet writes", i)
		}
	}
	if !call(true) {
		t.Fatal("message writes after a call whose results carried the loss signal")
	}
	for i := 1; i < probeMessageWrites; i++ {
		call(false)
	}
	if call(false) {
		t.Fatalf("after a clean probe, no probe after %d packet-write calls", probeMessageWrites)
	}
	if !call(true) {
		t.Fatal("message writes after a probe that heard loss")
	}
	for i := 1; i < 2*probeMessageWrites; i++ {
		call(false)
	}
	for i := range 2 {
		if call(false) {
			t.Fatalf("call %d after a clean probe sends packet writes", i)
		}
	}

	// A first call that heard loss goes on with packet writes, and its
	// run probes after 16 of them, as after any lossy call.
	s = oneLane(&Session{})
	s.pktBits = 4
	s.pktWrites = s.chooseWrites(640)
	for i := 1; i < probeMessageWrites; i++ {
		if !call(i == 1) {
			t.Fatalf("call %d after a first call that heard loss: message writes", i)
		}
	}
	if call(false) {
		t.Fatalf("no probe after a lossy first call and %d packet-write calls", probeMessageWrites-1)
	}

	for _, tc := range []struct {
		w       Writes
		pktBits uint
		want    bool
	}{{PacketWrites, 4, true}, {MessageWrites, 4, false}, {PacketWrites, 0, false}, {AdaptiveWrites, 0, false}} {
		s := &Session{cfg: Config{Writes: tc.w}}
		s.pktBits = tc.pktBits
		s.hearLoss(e1Loss)
		s.chooseWrites(64)
		s.hearLoss(e1Loss)
		if got := s.chooseWrites(64); got != tc.want {
			t.Errorf("%v writes, %d packet id bits, lossy calls: packet writes %v, want %v", tc.w, tc.pktBits, got, tc.want)
		}
	}
}

func TestParseWrites(t *testing.T) {
	for _, w := range []Writes{AdaptiveWrites, MessageWrites, PacketWrites} {
		got, err := ParseWrites(w.String())
		if err != nil || got != w {
			t.Errorf("ParseWrites(%q) = %v, %v", w.String(), got, err)
		}
	}
	if _, err := ParseWrites("whole"); err == nil {
		t.Error(`ParseWrites("whole") accepted`)
	}
	for _, cfg := range []Config{
		{Workers: 1, Writes: PacketWrites, WholeMessageResend: true},
		{Workers: 1, Writes: PacketWrites, PacketsPerMessage: 128},
		{Workers: 1, Writes: 7},
	} {
		if _, err := cfg.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}

// postCounter is a QP that records what is posted on it.
type postCounter struct {
	verbs.QP
	posted [][]verbs.SendWR
}

func (q *postCounter) PostSend(wrs []verbs.SendWR) (int, error) {
	q.posted = append(q.posted, slices.Clone(wrs))
	return len(wrs), nil
}

// TestPacketWriteTimer: with packet writes, an expiry backs off while none
// of the message's results is back (it is lost, queued, or its slots wait
// for a slow peer: resending the whole message again would add its copy to
// the queue); once some are, the missing ones were lost, and each expiry
// resends just them, one packet each, at the pace of the estimate, however
// often a resend is lost again (at 20 % loss a third of the time) and
// whatever backoff came before.
func TestPacketWriteTimer(t *testing.T) {
	const ppm = 16
	qp := &postCounter{}
	mr := &fakeMR{buf: make([]byte, 3*ppm*256)}
	s := oneLane(&Session{cfg: Config{PacketSize: 256, PacketsPerMessage: ppm, RetransmitTimeout: time.Millisecond,
		MaxRetransmitTimeout: time.Second, BackoffAfter: 1, QPs: 1}, msgBytes: ppm * 256, mr: mr,
		qps: []*qpState{{index: 0}}})
	s.pktBits, s.pktWrites = 4, true
	s.eng.est.rtt.Sample(200 * time.Microsecond) // timeout: the 1 ms floor
	st := s.qps[0]
	st.qp = qp
	st.pkts.alloc(ppm, testWords)
	now := time.Now()
	if err := s.post(st, 0, now); err != nil {
		t.Fatal(err)
	}
	if len(qp.posted) != 1 || len(qp.posted[0]) != ppm {
		t.Fatalf("a packet-write message posted %d batches, first of %d WRs; want 1 of %d", len(qp.posted), len(qp.posted[0]), ppm)
	}
	for k, wr := range qp.posted[0] {
		if wr.Local.Length != 256 || wr.Signaled != (k == ppm-1) || wire.Imm(wr.Imm).MsgID() != wire.PacketMsgID(st.msg.id, k, 4) {
			t.Fatalf("packet %d: %+v", k, wr)
		}
	}
	base := st.timer.rto
	expire := func() []verbs.SendWR {
		t.Helper()
		st.queued = 0
		now = now.Add(st.timer.rto + time.Microsecond)
		if err := s.retransmit(st, now); err != nil {
			t.Fatal(err)
		}
		return qp.posted[len(qp.posted)-1]
	}
	// Nothing back: each expiry doubles the timeout.
	for i := 1; i <= 3; i++ {
		expire()
		if want := base << i; st.timer.rto != want {
			t.Fatalf("expiry %d with nothing back: timeout %v, want %v", i, st.timer.rto, want)
		}
	}
	if s.stats.retransmissions.Load() != 3 {
		t.Fatalf("%d resends, want 3", s.stats.retransmissions.Load())
	}
	// 15 of 16 back: each expiry resends packet 15 alone, at the base pace.
	st.pkts.got[0], st.pkts.n = 1<<15-1, 15
	for i := range 5 {
		want := base
		last := expire()
		if st.timer.rto != want || len(last) != 1 || wire.Imm(last[0].Imm).MsgID() != wire.PacketMsgID(st.msg.id, 15, 4) || !last[0].Signaled {
			t.Fatalf("expiry %d with 15 of 16 back: timeout %v (want %v), resent %+v", i, st.timer.rto, want, last)
		}
	}
}

// fakeMR is registered memory that only exists in this process.
type fakeMR struct {
	verbs.MR
	buf []byte
}

func (m *fakeMR) Bytes() []byte { return m.buf }
func (m *fakeMR) LKey() uint32  { return 1 }

// TestPacketWriteLossEvidence: with packet writes a message whose packet
// results came back with a gap (a packet missing below one whose result is
// back, after the latest transmission) is taken for lost a reordering
// window after the first such result: packet-level RACK. Results that
// stopped without a gap make the rest overdue only once they are late at
// the pace the others came back at (a slow path spreads a message's
// results); another QP's result is no evidence once some of the message's
// own are back; with none back there is no evidence (with message writes,
// RACK across QPs).
func TestPacketWriteLossEvidence(t *testing.T) {
	now := time.Now()
	s := oneLane(&Session{cfg: Config{PacketsPerMessage: 16}})
	s.pktWrites = true
	st := &qpState{}
	st.pkts.alloc(16, testWords)
	st.timer.xmit = now
	st.pkts.transmitted()
	// Before any time to result is measured, a tail is no evidence: no
	// reordering window, no pace to be late by.
	for k := range 4 {
		st.pkts.record(k, now.Add(time.Millisecond), now)
	}
	if at, ok := s.lostAt(st); ok {
		t.Fatalf("4 of 16 back before any time to result was measured: lost at %v, want no evidence", at.Sub(now))
	}
	st.pkts.got[0], st.pkts.n = 0, 0
	st.pkts.transmitted()
	s.eng.est.rack.min.Sample(4 * time.Millisecond) // reordering window 1 ms
	if _, ok := s.lostAt(st); ok {
		t.Fatal("evidence of loss before any result")
	}
	back := func(k int, at time.Duration) { st.pkts.record(k, now.Add(at), st.timer.xmit) }
	for k := range 14 {
		back(k, time.Duration(k)*100*time.Microsecond)
	}
	// 1 to 13 came back 100 µs apart after the transmission: the last two
	// are overdue two paces each after 13, plus the window.
	tail := now.Add(1300*time.Microsecond + 2*2*100*time.Microsecond + time.Millisecond)
	if at, ok := s.lostAt(st); !ok || !at.Equal(tail) {
		t.Fatalf("14 of 16 back in order: lost at %v (%v), want %v", at.Sub(now), ok, tail.Sub(now))
	}
	if got := s.evidenceUpTo(st); got != 16 {
		t.Fatalf("resend of an overdue tail covers %d packets, want all 16", got)
	}
	// Another QP's later result: no evidence for a message with results back.
	*s.eng.est.rack.at(st.group) = rackLatest{xmit: now.Add(time.Millisecond), rtt: time.Millisecond}
	if at, _ := s.lostAt(st); !at.Equal(tail) {
		t.Fatalf("RACK across QPs for a message whose own results are coming back: lost at %v", at.Sub(now))
	}
	back(15, 3*time.Millisecond) // packet 14 missing below it
	if at, ok := s.lostAt(st); !ok || !at.Equal(now.Add(4*time.Millisecond)) {
		t.Fatalf("packet 14 missing below 15: lost at %v (%v), want +4ms", at.Sub(now), ok)
	}
	if got := s.evidenceUpTo(st); got != 15 {
		t.Fatalf("resend on evidence covers %d packets, want 15", got)
	}
	s.pktWrites = false
	if at, ok := s.lostAt(st); !ok || !at.Equal(now.Add(2*time.Millisecond)) {
		t.Fatalf("message writes: lost at %v (%v), want RACK's +2ms", at.Sub(now), ok)
	}
	s.pktWrites = true
	st.timer.xmit = now.Add(5 * time.Millisecond) // resent after the last result
	st.pkts.transmitted()
	if _, ok := s.lostAt(st); ok {
		t.Fatal("evidence from results that came back before the latest resend")
	}
	// Three results read in one batch, then a pause: their own pace is
	// nothing, but the rest come no faster than the path delivers packet
	// results (44 µs each at 200 Mbit/s: estimates.delivery). Paced by the
	// batch alone, the tail would be overdue a reordering window after
	// it, and a loss-free shaped link would resend many of its messages.
	st3 := &qpState{}
	st3.pkts.alloc(16, testWords)
	st3.timer.xmit = now
	st3.pkts.transmitted()
	for k := range 3 {
		st3.pkts.record(k, now.Add(2*time.Millisecond), now)
	}
	per := 44 * time.Microsecond
	for range 32 {
		at := s.eng.est.delivery.Delivered()
		s.eng.est.delivery.Deliver(128)
		s.eng.est.delivery.Sample(now.Add(128*per), now, at)
	}
	if at, ok := s.lostAt(st3); !ok || !at.Equal(now.Add(2*time.Millisecond+13*per+time.Millisecond)) {
		t.Fatalf("3 of 16 back in one batch: lost at %v (%v), want the path's time per packet for each missing one after them, plus the window (%v)",
			at.Sub(now), ok, 2*time.Millisecond+13*per+time.Millisecond)
	}
	// Nothing of a message back: no evidence, whatever other QPs get (a
	// packet loss costs a message one packet result, not all of them;
	// all missing means its slots wait for another worker, or a queue).
	st2 := &qpState{}
	st2.pkts.alloc(16, testWords)
	st2.timer.xmit = now
	st2.pkts.transmitted()
	if at, ok := s.lostAt(st2); ok {
		t.Fatalf("nothing back, a later message's result back: lost at %v; want no evidence with packet writes", at.Sub(now))
	}
	s.pktWrites = false
	if at, ok := s.lostAt(st2); !ok || !at.Equal(now.Add(2*time.Millisecond)) {
		t.Fatalf("message writes, nothing back, a later message's result back: lost at %v (%v), want RACK's +2ms", at.Sub(now), ok)
	}
}

// TestAgreedWrites (adaptState): AdaptiveWrites workers choose the same
// writes in every call, though only one of them sees loss, and the
// switch's result streams never break while the mode changes. In the
// first call with message writes (the second: the session's first sends
// packet writes) every multi-packet result to rank 1 on QP 0 loses a packet
// (RACK finds it, rank 1 signals loss in e1); the other ranks see no loss
// of their own, yet every rank sends packet writes from the next call
// on, message writes again at the probe, and stays with them once the
// probe is clean. Deciding alone, rank 1 would send packet writes into
// TestResendEvidence: with packet writes, a resend's packets are judged by
// the results of what was sent after them (RFC 8985 section 6.2). At 64
// workers and 1 % loss nearly every message misses results of slots that
// wait for another worker's resend, and the results of the first
// transmission still coming after this worker's resend were taken as
// evidence against it: each worker resent such a packet 2–3 times (the
// sim: 2.3× the packets on every uplink, 920 µs per call against 388 µs
// loss-free). Results of packets the resend did not send, and resent
// packets' results back sooner than the minimum time to result (answers
// to the earlier transmission), are no evidence; and a resend's missing
// packets are not overdue before a time to result has passed since it
// left.
func TestResendEvidence(t *testing.T) {
	now := time.Now()
	ms := time.Millisecond
	s := oneLane(&Session{cfg: Config{PacketsPerMessage: 16}})
	s.pktWrites = true
	s.eng.est.rack.min.Sample(4 * ms) // reordering window 1 ms
	st := &qpState{}
	st.pkts.alloc(16, testWords)
	st.timer.xmit = now
	st.pkts.transmitted()
	back := func(k int, at time.Duration) { st.pkts.record(k, now.Add(at), st.timer.xmit) }
	for k := range 10 {
		if k != 3 && k != 7 && k != 8 {
			back(k, 4*ms)
		}
	}
	if !st.pkts.gap() || s.evidenceUpTo(st) != 9 {
		t.Fatalf("3, 7, 8 missing below 9: gap %v, resend up to %d, want a gap and 9", st.pkts.gap(), s.evidenceUpTo(st))
	}
	resend := func(at time.Duration, upto int) {
		st.timer.xmit = now.Add(at)
		st.timer.resends++
		st.pkts.retransmit(upto, st.timer.xmit, s.eng.est.rack.minRTT())
	}
	resend(5*ms, 9)
	if want := uint64(1<<3 | 1<<7 | 1<<8); st.pkts.sent[0] != want {
		t.Fatalf("resend sent %016b, want %016b (10–15 may still be on their way)", st.pkts.sent[0], want)
	}
	// 7 back 1 ms after the resend, sooner than any time to result: it
	// answers the first transmission, no evidence against 3. The resent
	// packets are overdue a time to result after the resend, plus the
	// window.
	back(7, 6*ms)
	floor := now.Add(5*ms + 4*ms + ms)
	if at, ok := s.lostAt(st); st.pkts.gap() || !ok || !at.Equal(floor) {
		t.Fatalf("a resent packet back before a time to result: gap %v, lost at %v (%v), want no gap and %v", st.pkts.gap(), at.Sub(now), ok, floor.Sub(now))
	}
	// The first transmission's tail comes back a time to result after
	// the resend, but for 12: no evidence against 3 and 8, which the
	// resend sent after them.
	for _, k := range []int{10, 11, 13, 14, 15} {
		back(k, 9*ms+ms/4)
	}
	if at, ok := s.lostAt(st); st.pkts.gap() || !ok || !at.Equal(floor) {
		t.Fatalf("first transmission's results after the resend: gap %v, lost at %v (%v), want no gap and %v", st.pkts.gap(), at.Sub(now), ok, floor.Sub(now))
	}
	// 8 back a time to result after the resend: 3, sent before it, is
	// missing, and so is 12, which the resend left out.
	back(8, 9*ms+ms/2)
	if at, ok := s.lostAt(st); !st.pkts.gap() || !ok || !at.Equal(now.Add(10*ms+ms/2)) {
		t.Fatalf("8 back after the resend's time to result, 3 missing: gap %v, lost at %v (%v), want +10.5ms", st.pkts.gap(), at.Sub(now), ok)
	}
	resend(11*ms, s.evidenceUpTo(st))
	if want := uint64(1<<3 | 1<<12); st.pkts.sent[0] != want {
		t.Fatalf("second resend sent %016b, want %016b", st.pkts.sent[0], want)
	}
}

// the others' message writes.
func TestAgreedWrites(t *testing.T) {
	t.Parallel()
	b := newLossBench(t, 44, 13, 256*16*64)
	c, cfg := b.c, b.cfg
	var lossy atomic.Bool
	var lost atomic.Int64
	lossy.Store(true)
	c.setLoss(nil, func(rank, qp, k, pkts int) bool {
		return lossy.Load() && rank == 1 && qp == 0 && pkts > 1 && k == 5 && lost.Add(1) <= 8
	})
	defer c.setLoss(nil, nil)

	cfg.SessionID = 45
	cfg.Writes = AdaptiveWrites
	j := openJob(t, c.ctlAddr, lossBenchWorkers, cfg, c.device(10))
	calls := probeMessageWrites + 4
	wantRuns := 0 // packet-write calls so far, on every rank
	for call := range calls {
		b.check(t, j, 1, fmt.Sprintf("call %d", call))
		if call == 1 {
			lossy.Store(false)
		}
		if call == 0 || call >= 2 && call <= probeMessageWrites+1 {
			// The session's first call (one-packet messages: nothing
			// lost), then the lossy second call's packet writes, up
			// to the probe.
			wantRuns++
		}
		for r, w := range j.workers {
			st := w.sess.Stats()
			if st.PacketWriteCalls != uint64(wantRuns) {
				t.Fatalf("after call %d rank %d sent packet writes in %d calls, want %d (every rank alike): %+v", call, r, st.PacketWriteCalls, wantRuns, st)
			}
			if call == 1 {
				t.Logf("rank %d after the lossy call: %+v", r, st)
			}
		}
	}
	if lost := j.workers[1].sess.Stats().FastRetransmissions; lost == 0 {
		t.Fatal("rank 1 found no loss: the test checks nothing")
	}
	pkts, breaks := c.streamBreaks()
	t.Logf("%d result packets", pkts)
	if len(breaks) > 0 {
		t.Fatalf("%d breaks in the switch's result streams, first: %s", len(breaks), breaks[0])
	}
}
