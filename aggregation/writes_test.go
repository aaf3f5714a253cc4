package aggregation

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestPacketWrites: with Writes PacketWrites every request the switch sees
// is a one-packet WRITE (so every result is one too), a lost packet is
// repaired by resending that packet alone, and results are bit-identical to
// a loss-free run. Every 16th request of rank 0 on QP 0 is lost, and every
// 16th result packet to rank 1.
func TestPacketWrites(t *testing.T) {
	c := newToyCluster(t, 0)
	const n, l = 4, 256 * 16 * 5
	cfg := toyConfig(40)
	cfg.PacketsPerMessage = 16
	cfg.QPs = 2
	in := gradients(11, n, l)

	clean := openJob(t, c.ctlAddr, n, cfg, c.device(1))
	want := clone2(in)
	noErrors(t, clean.allReduce(context.Background(), want))

	var multi, lostIn, lostOut atomic.Int64
	c.sw.setLoss(
		func(rank, qp, k, pkts int) bool {
			if pkts > 1 {
				multi.Add(1)
			}
			// Every one-packet request has k == 0: count them instead.
			return rank == 0 && qp == 0 && lostIn.Add(1)%16 == 4
		},
		func(rank, qp, k, pkts int) bool { return rank == 1 && lostOut.Add(1)%16 == 6 },
	)
	defer c.sw.setLoss(nil, nil)

	cfg.SessionID = 41
	cfg.Writes = PacketWrites
	lossy := openJob(t, c.ctlAddr, n, cfg, c.device(2))
	for range 2 {
		got := clone2(in)
		noErrors(t, lossy.allReduce(context.Background(), got))
		for r := range n {
			sameBits(t, fmt.Sprintf("rank %d packet writes under loss vs loss-free", r), got[r], want[0])
		}
	}
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
	c := newToyCluster(t, 0)
	const n, l = 4, 256 * 16 * 5
	cfg := toyConfig(42)
	cfg.PacketsPerMessage = 16
	cfg.QPs = 2
	in := gradients(12, n, l)

	clean := openJob(t, c.ctlAddr, n, cfg, c.device(1))
	want := clone2(in)
	noErrors(t, clean.allReduce(context.Background(), want))

	var seen atomic.Int64
	c.sw.setLoss(
		func(rank, qp, k, pkts int) bool { return seen.Add(1)%97 == 0 },
		func(rank, qp, k, pkts int) bool { return seen.Add(1)%89 == 0 },
	)
	defer c.sw.setLoss(nil, nil)

	cfg.SessionID = 43
	writes := []Writes{PacketWrites, MessageWrites, AdaptiveWrites, PacketWrites}
	j := openJobWith(t, c.ctlAddr, n, func(rank int) Config {
		cfg := cfg
		cfg.Writes = writes[rank]
		return cfg
	}, c.device(2))
	for range 3 {
		got := clone2(in)
		noErrors(t, j.allReduce(context.Background(), got))
		for r := range n {
			sameBits(t, fmt.Sprintf("rank %d (%v writes) in a mixed job vs loss-free", r, writes[r]), got[r], want[0])
		}
	}
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
	if call(640, 0) || call(640, 0) {
		t.Fatal("packet writes after a clean probe")
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
