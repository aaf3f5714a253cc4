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

// TestChooseWrites walks AdaptiveWrites' decisions: message writes while
// RACK finds fewer than one message in 64 lost, packet writes after a call
// that found more, a probe with message writes every 16th packet-write
// call, and back to packet writes if the probe saw loss.
func TestChooseWrites(t *testing.T) {
	s := &Session{pktBits: 4}
	call := func(msgs, fast uint64) bool {
		s.stats.messages.Add(msgs)
		s.stats.fastRetransmissions.Add(fast)
		s.pktWrites = s.chooseWrites()
		return s.pktWrites
	}
	if call(0, 0) {
		t.Fatal("the first call sends packet writes")
	}
	if call(640, 9) { // the first call's counts: 9 of 640 < 1/64
		t.Fatal("packet writes after a call with 9 fast retransmissions in 640 messages")
	}
	if !call(640, 10) { // 10 of 640 = 1/64
		t.Fatal("message writes after a call with 1 fast retransmission in 64 messages")
	}
	for i := 1; i < probeMessageWrites; i++ {
		if !call(640, 0) {
			t.Fatalf("packet-write call %d: message writes before the probe", i)
		}
	}
	if call(640, 0) {
		t.Fatalf("no probe with message writes after %d packet-write calls", probeMessageWrites)
	}
	if !call(640, 64) { // the probe's counts: lossy
		t.Fatal("message writes after a probe that saw loss")
	}
	for i := 1; i < probeMessageWrites; i++ {
		call(640, 0)
	}
	for i := range 2 {
		if call(640, 0) {
			t.Fatalf("call %d after a clean probe sends packet writes", i)
		}
	}

	for _, tc := range []struct {
		w       Writes
		pktBits uint
		want    bool
	}{{PacketWrites, 4, true}, {MessageWrites, 4, false}, {PacketWrites, 0, false}, {AdaptiveWrites, 0, false}} {
		s := &Session{cfg: Config{Writes: tc.w}, pktBits: tc.pktBits}
		s.stats.messages.Add(64)
		s.stats.fastRetransmissions.Add(64)
		s.chooseWrites()
		s.stats.messages.Add(64)
		s.stats.fastRetransmissions.Add(64)
		if got := s.chooseWrites(); got != tc.want {
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

// TestPacketWriteTimer: with packet writes, an expiry backs off only while
// none of the message's results is back (its slots wait for a slow peer);
// once some are, the missing ones were lost, and each expiry resends just
// them at the pace of the estimate, however often a resend is lost again
// (at 20 % loss a third of the time) and whatever backoff came before.
func TestPacketWriteTimer(t *testing.T) {
	const ppm = 16
	qp := &postCounter{}
	mr := &fakeMR{buf: make([]byte, 3*ppm*256)}
	s := &Session{cfg: Config{PacketSize: 256, PacketsPerMessage: ppm, RetransmitTimeout: time.Millisecond,
		MaxRetransmitTimeout: time.Second, BackoffAfter: 1, QPs: 1}, msgBytes: ppm * 256, mr: mr,
		pktBits: 4, pktWrites: true, qps: []*qpState{{index: 0, got: make([]uint64, 1)}}}
	st := s.qps[0]
	st.qp = qp
	now := time.Now()
	if err := s.post(st, 0, now); err != nil {
		t.Fatal(err)
	}
	if len(qp.posted) != 1 || len(qp.posted[0]) != ppm {
		t.Fatalf("a packet-write message posted %d batches, first of %d WRs; want 1 of %d", len(qp.posted), len(qp.posted[0]), ppm)
	}
	for k, wr := range qp.posted[0] {
		if wr.Local.Length != 256 || wr.Signaled != (k == ppm-1) || wire.Imm(wr.Imm).MsgID() != wire.PacketMsgID(st.msgID, k, 4) {
			t.Fatalf("packet %d: %+v", k, wr)
		}
	}
	base := st.rto
	// Nothing back: each expiry doubles the timeout.
	for i := 1; i <= 3; i++ {
		st.queued = 0
		now = now.Add(st.rto)
		if err := s.retransmit(st, now); err != nil {
			t.Fatal(err)
		}
		if want := base << i; st.rto != want {
			t.Fatalf("expiry %d with nothing back: timeout %v, want %v", i, st.rto, want)
		}
	}
	// 15 of 16 back: each expiry resends packet 15 alone, at the base pace.
	st.got[0], st.ngot = 1<<15-1, 15
	for i := range 5 {
		st.queued = 0
		now = now.Add(st.rto)
		if err := s.retransmit(st, now); err != nil {
			t.Fatal(err)
		}
		last := qp.posted[len(qp.posted)-1]
		if st.rto != base || len(last) != 1 || wire.Imm(last[0].Imm).MsgID() != wire.PacketMsgID(st.msgID, 15, 4) || !last[0].Signaled {
			t.Fatalf("expiry %d with 15 of 16 back: timeout %v (want %v), resent %+v", i, st.rto, base, last)
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

// TestPacketWriteLossEvidence: with packet writes a message whose packets'
// results stopped coming is taken for lost a reordering window after the
// last one came back, without waiting for a later message's result (RACK)
// or the timer; with message writes, and before any result, there is no
// such evidence.
func TestPacketWriteLossEvidence(t *testing.T) {
	now := time.Now()
	s := &Session{pktWrites: true}
	s.rack.curMin = 4 * time.Millisecond // reordering window 1 ms
	st := &qpState{xmit: now}
	if _, ok := s.lostAt(st); ok {
		t.Fatal("evidence of loss before any result")
	}
	st.lastPkt, st.ngot = now.Add(3*time.Millisecond), 15
	if at, ok := s.lostAt(st); !ok || !at.Equal(now.Add(4*time.Millisecond)) {
		t.Fatalf("15 of 16 back 3 ms after sending: lost at %v (%v), want +4ms", at.Sub(now), ok)
	}
	// A later message's result gives the earlier of the two times.
	s.rack.xmit, s.rack.rtt = now.Add(time.Millisecond), time.Millisecond
	if at, _ := s.lostAt(st); !at.Equal(now.Add(2 * time.Millisecond)) {
		t.Fatalf("with RACK evidence: lost at %v, want +2ms", at.Sub(now))
	}
	s.rack.xmit = time.Time{}
	s.pktWrites = false
	if _, ok := s.lostAt(st); ok {
		t.Fatal("message writes: evidence from packet results")
	}
	s.pktWrites = true
	st.xmit = now.Add(5 * time.Millisecond) // resent after the last result
	if _, ok := s.lostAt(st); ok {
		t.Fatal("evidence from results that came back before the latest resend")
	}
}
