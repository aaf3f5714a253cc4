package aggregation

import (
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// perPacketTimerSession is timerSession with per-packet recovery, as Open
// sets it up for ppm packets per message (message writes).
func perPacketTimerSession(q, ppm int) *lane {
	s := timerSession(q, ppm)
	s.pktBits = 4
	for _, st := range s.qps {
		st.pkts.alloc(ppm, testWords)
		st.msg.joining = false
	}
	return s
}

// TestQuietFloorStalls: a worker on a path that loses nothing, whose
// switch stops answering for 5 ms every 20 rounds (a descheduled switch
// process on a loaded host, a collector's pause), while a time to result
// is 500 µs. The first stall fires the timers (nothing told them a stall
// is no loss); their resends turn out spurious, and from then on the
// timeout outlasts such a stall: no later stall resends anything. A resend
// that was needed (its message completed through the answers to it) puts
// the tight timeout back, for the tail losses of a path that loses.
func TestQuietFloorStalls(t *testing.T) {
	const q, ppm, rounds, stallEvery = 8, 16, 200, 20
	const rtt, stall, step = 500 * time.Microsecond, 5 * time.Millisecond, 50 * time.Microsecond
	s := perPacketTimerSession(q, ppm)
	base := time.Unix(1000, 0)
	s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = base, base, base
	due := make([]time.Duration, q)
	var stallFrom, stallTo time.Duration
	answer := func(sent time.Duration) time.Duration {
		d := sent + rtt
		if d >= stallFrom && d < stallTo {
			d = stallTo + rtt*time.Duration(1+d%3)/4 // answered in a burst after it
		}
		return d
	}
	for _, st := range s.qps {
		if err := s.post(st, 0, base); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
		due[st.index] = answer(0)
	}
	var resends []uint64 // per stall: resends from its start until the next one
	results := 0
	for now := time.Duration(0); results < rounds*q; now += step {
		if now%(stallEvery*rtt) == 0 && now > 0 {
			stallFrom, stallTo = now, now+stall
			resends = append(resends, s.stats.retransmissions.Load())
		}
		for _, st := range s.qps {
			if due[st.index] <= now {
				s.playResult(t, st, base.Add(due[st.index]))
				due[st.index] = answer(due[st.index])
				results++
			}
		}
		s.eng.clock.due, s.eng.clock.lastPass = time.Time{}, base.Add(now)
		if _, err := s.timers(base.Add(now)); err != nil {
			t.Fatal(err)
		}
		for _, st := range s.qps {
			st.queued = 0
		}
	}
	resends = append(resends, s.stats.retransmissions.Load())
	if len(resends) < 4 {
		t.Fatalf("only %d stalls in the run", len(resends)-1)
	}
	if first := resends[1] - resends[0]; first == 0 {
		t.Fatalf("the first stall of %v (time to result %v) fired no timer: the test shows nothing", stall, rtt)
	}
	for i := 2; i < len(resends); i++ {
		if n := resends[i] - resends[i-1]; n != 0 {
			t.Fatalf("stall %d of the same %v resent %d messages (timeout %v, quiet floor %v): nothing was lost",
				i, stall, n, s.qps[0].timer.rto, s.eng.est.quiet.get())
		}
	}
	if s.stats.spurious.Load() == 0 || s.eng.est.quiet.get() < stall {
		t.Fatalf("%d spurious resends, quiet floor %v: want the stall's wait covered", s.stats.spurious.Load(), s.eng.est.quiet.get())
	}
	t.Logf("the first stall resent %d messages, the %d later ones none; quiet floor %v", resends[1]-resends[0], len(resends)-2, s.eng.est.quiet.get())

	// A resend that was needed: the message completes through the packet
	// results that answer it.
	st := s.qps[0]
	now := base.Add(time.Hour)
	if err := s.resend(st, now); err != nil {
		t.Fatal(err)
	}
	st.pkts.n = ppm
	s.sampleResult(st, resultPackets, now.Add(rtt))
	if f := s.eng.est.quiet.get(); f != 0 {
		t.Fatalf("quiet floor %v after a needed resend, want none", f)
	}
}

// TestQuietFloorDecay: the floor is twice the longest spurious wait, and
// halves after quietDecayCalls calls without a spurious timeout.
func TestQuietFloorDecay(t *testing.T) {
	var q quietFloor
	q.spurious(3 * time.Millisecond)
	q.spurious(time.Millisecond)
	if got := q.get(); got != 6*time.Millisecond {
		t.Fatalf("floor %v after waits of 3 ms and 1 ms, want 6ms", got)
	}
	for range quietDecayCalls - 1 {
		q.newCall()
	}
	if got := q.get(); got != 6*time.Millisecond {
		t.Fatalf("floor %v after %d calls, want it kept", got, quietDecayCalls-1)
	}
	q.newCall()
	if got := q.get(); got != 3*time.Millisecond {
		t.Fatalf("floor %v after %d calls without a spurious timeout, want it halved", got, quietDecayCalls)
	}
}

// TestSilenceAfterLatePass: a pass that came late puts every expired
// message off once, to poll again; if the silence goes on, one message is
// resent as its probe and the others wait a timeout for it, as in any
// silence (TestSilenceProbe). The late pass's put-off is not the probe's: spent
// on both, every QP's message was resent at the next expiry.
func TestSilenceAfterLatePass(t *testing.T) {
	const q = 8
	s := perPacketTimerSession(q, 2)
	now := time.Unix(1000, 0)
	s.eng.est.rtt.Sample(500 * time.Microsecond)
	s.eng.est.rack.min.Sample(500 * time.Microsecond)
	s.eng.clock.progress, s.eng.clock.rackProgress, s.eng.clock.lastPass = now, now, now
	for _, st := range s.qps {
		if err := s.post(st, 0, now); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
	}
	rto := s.qps[0].timer.rto
	// The loop slept past its timer by half a timeout.
	at := now.Add(rto + rto/2)
	s.eng.clock.lastPass, s.eng.clock.due = now, now.Add(rto)
	if _, err := s.timers(at); err != nil {
		t.Fatal(err)
	}
	if n := s.stats.retransmissions.Load(); n != 0 {
		t.Fatalf("a late pass resent %d messages, want a poll first", n)
	}
	// Still silent, passes on time from now on, for a timeout after the
	// polls' deadline (the late pass put them off by as late again).
	for i := 1; i <= 5; i++ {
		at = at.Add(rto / 4)
		s.eng.clock.lastPass, s.eng.clock.due = at, time.Time{}
		if _, err := s.timers(at); err != nil {
			t.Fatal(err)
		}
		for _, st := range s.qps {
			st.queued = 0
		}
	}
	if n := s.stats.retransmissions.Load(); n != 1 {
		t.Fatalf("%d resends in the silence after a late pass, want 1 probe", n)
	}
}

// TestQuietFloorPacketDuplicates: with packet writes a result answers one
// packet, so a spurious resend shows only as a second result of a packet
// of the resend (the switch answering a resend into a slot that the first
// transmission completed). A stalled path (rxe under emulation): the
// timer resends the whole message, then the first transmission's results
// come, then the answers to the resend — before or after the message
// completed — and the quiet floor takes the wait. A packet whose result
// was lost is answered once: the resend was needed, and the floor goes.
// A fast retransmission shown spurious widens RACK's window but sets no
// floor. Under loss a duplicate proves nothing (another worker's resend
// may have completed the slot) and sets no floor.
func TestQuietFloorPacketDuplicates(t *testing.T) {
	const ppm = 16
	const stall = 5 * time.Millisecond
	base := time.Unix(1000, 0)
	setup := func() (*lane, *qpState) {
		s := perPacketTimerSession(1, ppm)
		s.pktWrites = true
		s.eng.clock.lastPass, s.eng.clock.progress, s.eng.clock.rackProgress = base, base, base
		st := s.qps[0]
		if err := s.post(st, 0, base); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
		return s, st
	}
	// result plays packet k's result of message id at now; done: the
	// message completed.
	result := func(s *lane, st *qpState, id uint16, k int, now time.Time) (stale, done bool) {
		wc := verbs.Completion{WRID: wrID(st.index, wrRecv), Opcode: verbs.WCRecvRDMAWithImm, HasImm: true,
			Imm: uint32(wire.MakeImm(wire.PacketMsgID(id, k, s.pktBits), 0, 0))}
		r := s.match(st, &wc, now)
		switch r {
		case resultStale:
			return true, false
		case resultPacket:
			return false, false
		}
		s.sampleResult(st, r, now)
		st.msg.busy = false
		return false, true
	}
	timeout := func(s *lane, st *qpState, at time.Time) {
		st.timer.timeouts++
		if err := s.resend(st, at); err != nil {
			t.Fatal(err)
		}
		st.queued = 0
	}
	all := func(s *lane, st *qpState, id uint16, from, to int, at time.Time) (done bool) {
		for k := from; k < to; k++ {
			if stale, d := result(s, st, id, k, at); stale {
				t.Fatalf("packet %d's first result taken for stale", k)
			} else {
				done = d
			}
		}
		return done
	}

	t.Run("duplicates after the result", func(t *testing.T) {
		s, st := setup()
		id := st.msg.id
		timeout(s, st, base.Add(time.Millisecond))
		if !all(s, st, id, 0, ppm, base.Add(stall)) {
			t.Fatal("the message did not complete")
		}
		if err := s.post(st, 0, base.Add(stall)); err != nil { // the QP's next message
			t.Fatal(err)
		}
		if f := s.eng.est.quiet.get(); f != 0 {
			t.Fatalf("quiet floor %v before any duplicate", f)
		}
		if stale, _ := result(s, st, id, 3, base.Add(stall+time.Millisecond)); !stale {
			t.Fatal("a duplicate of the last message's packet was not stale")
		}
		if f := s.eng.est.quiet.get(); f != 2*stall {
			t.Fatalf("quiet floor %v after the resend's duplicate, want twice the wait, %v", f, 2*stall)
		}
		if n := s.stats.spurious.Load(); n != 1 {
			t.Fatalf("%d spurious resends, want 1", n)
		}
		result(s, st, id, 4, base.Add(stall+time.Millisecond)) // the resend's other answers count once
		if n := s.stats.spurious.Load(); n != 1 {
			t.Fatalf("%d spurious resends after a second duplicate, want 1", n)
		}
	})
	t.Run("a duplicate before the result", func(t *testing.T) {
		s, st := setup()
		id := st.msg.id
		timeout(s, st, base.Add(time.Millisecond))
		all(s, st, id, 0, ppm-1, base.Add(stall))
		if stale, _ := result(s, st, id, 0, base.Add(stall)); !stale {
			t.Fatal("a second result of packet 0 was not stale")
		}
		if !all(s, st, id, ppm-1, ppm, base.Add(stall)) {
			t.Fatal("the message did not complete")
		}
		if f := s.eng.est.quiet.get(); f != 2*stall || s.stats.spurious.Load() != 1 {
			t.Fatalf("quiet floor %v, %d spurious resends: want %v, 1", f, s.stats.spurious.Load(), 2*stall)
		}
	})
	t.Run("a needed resend", func(t *testing.T) {
		s, st := setup()
		s.eng.est.quiet.spurious(stall) // a floor from earlier stalls
		id := st.msg.id
		all(s, st, id, 0, ppm-1, base.Add(time.Millisecond)) // packet 15's result is lost
		timeout(s, st, base.Add(3*time.Millisecond))
		if st.pkts.resent != 1<<(ppm-1) {
			t.Fatalf("resent packets %#x, want only the missing one, %#x", st.pkts.resent, 1<<(ppm-1))
		}
		if !all(s, st, id, ppm-1, ppm, base.Add(4*time.Millisecond)) {
			t.Fatal("the message did not complete")
		}
		if f := s.eng.est.quiet.get(); f != 0 {
			t.Fatalf("quiet floor %v after a needed resend, want none", f)
		}
		if err := s.post(st, 0, base.Add(4*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if stale, _ := result(s, st, id, 0, base.Add(5*time.Millisecond)); !stale || s.stats.spurious.Load() != 0 {
			t.Fatalf("a duplicate of a packet not resent: stale %v, %d spurious resends", stale, s.stats.spurious.Load())
		}
	})
	t.Run("under loss", func(t *testing.T) {
		s, st := setup()
		s.adapt.signal.Store(true)
		id := st.msg.id
		timeout(s, st, base.Add(time.Millisecond))
		all(s, st, id, 0, ppm, base.Add(stall))
		result(s, st, id, 3, base.Add(stall+time.Millisecond))
		if f := s.eng.est.quiet.get(); f != 0 || s.stats.spurious.Load() != 0 {
			t.Fatalf("under loss: quiet floor %v, %d spurious resends, want none", f, s.stats.spurious.Load())
		}
	})
	t.Run("a fast retransmission", func(t *testing.T) {
		s, st := setup()
		id := st.msg.id
		reo := s.eng.est.rack.reoMult
		all(s, st, id, 0, 2, base.Add(time.Millisecond))
		if err := s.resend(st, base.Add(2*time.Millisecond)); err != nil { // evidence, not a timer
			t.Fatal(err)
		}
		all(s, st, id, 2, ppm, base.Add(3*time.Millisecond))
		result(s, st, id, 5, base.Add(4*time.Millisecond))
		if n := s.stats.spurious.Load(); n != 1 || s.eng.est.rack.reoMult != reo+1 {
			t.Fatalf("%d spurious resends, reordering window ×%d (×%d before): want 1, one step wider", n, s.eng.est.rack.reoMult, reo)
		}
		if f := s.eng.est.quiet.get(); f != 0 {
			t.Fatalf("quiet floor %v after a spurious fast retransmission: the timer was not wrong", f)
		}
	})
	t.Run("two resends", func(t *testing.T) {
		s, st := setup()
		id := st.msg.id
		timeout(s, st, base.Add(time.Millisecond))
		timeout(s, st, base.Add(3*time.Millisecond))
		all(s, st, id, 0, ppm, base.Add(stall))
		result(s, st, id, 3, base.Add(stall+time.Millisecond))
		if f := s.eng.est.quiet.get(); f != 0 || s.stats.spurious.Load() != 0 {
			t.Fatalf("after two resends (which one the duplicate answers is unknown): quiet floor %v, %d spurious resends, want none",
				f, s.stats.spurious.Load())
		}
	})
}

// testWords allocates a test's bitmaps (pktResults.alloc).
func testWords(n int) []uint64 { return make([]uint64, n) }
