package udp

import (
	"net/netip"
	"testing"
)

func TestSchedulerOrder(t *testing.T) {
	sw := netip.MustParseAddrPort("127.0.0.1:4791")
	w1 := netip.MustParseAddrPort("127.0.0.2:4791")
	w2 := netip.MustParseAddrPort("127.0.0.3:4791")
	// message returns the packets of one UC message on stream qpn to dst:
	// FIRST (56 bytes), middles (40), LAST (44); all but the first skip
	// (the rest of a message begun in an earlier batch).
	message := func(dst netip.AddrPort, qpn uint32, middles, skip int) (ms []Msg, ss []uint32) {
		ms = append(ms, Msg{N: 56, Addr: dst})
		for range middles {
			ms = append(ms, Msg{N: 40, Addr: dst})
		}
		ms = append(ms, Msg{N: 44, Addr: dst})
		ms = ms[skip:]
		for range ms {
			ss = append(ss, qpn)
		}
		return ms, ss
	}
	type batch struct {
		dst     netip.AddrPort
		qpn     uint32
		middles int
		skip    int
	}
	for _, tc := range []struct {
		name string
		in   []batch
		// runs of equal size to one address after ordering
		runs int
	}{
		{"one message", []batch{{sw, 1, 14, 0}}, 3},
		{"two messages of one QP keep their order", []batch{{sw, 1, 14, 0}, {sw, 1, 14, 0}}, 6},
		{"four QPs to one address", []batch{{sw, 1, 14, 0}, {sw, 2, 14, 0}, {sw, 3, 14, 0}, {sw, 4, 14, 0}}, 3},
		{"two QPs, two messages each", []batch{{sw, 1, 2, 0}, {sw, 2, 2, 0}, {sw, 1, 2, 0}, {sw, 2, 2, 0}}, 6},
		{"two addresses", []batch{{sw, 1, 3, 0}, {w1, 1, 3, 0}, {sw, 2, 3, 0}, {w1, 2, 3, 0}}, 6},
		// Single packets (LASTs), the addresses and QPs taking turns as
		// the switch's broadcast results do, then out of turn.
		{"addresses taking turns", []batch{{sw, 1, 0, 1}, {w1, 1, 0, 1}, {sw, 2, 0, 1}, {w1, 2, 0, 1}, {sw, 3, 0, 1}, {w1, 3, 0, 1}}, 2},
		{"addresses out of turn", []batch{{sw, 1, 0, 1}, {w1, 1, 0, 1}, {sw, 2, 0, 1}, {w1, 2, 0, 1}, {w2, 1, 0, 1}, {sw, 1, 0, 1}, {w2, 1, 0, 1}, {w1, 1, 0, 1}}, 3},
		// One QP at its FIRST and LAST, the others with MIDDLEs between:
		// the first QP's LAST waits for the others' MIDDLEs by vote.
		{"uneven messages", []batch{{sw, 1, 0, 0}, {sw, 2, 5, 0}, {sw, 3, 1, 0}}, 3},
		// One QP at its LAST, the others in their MIDDLEs.
		{"QPs at different stages", []batch{{sw, 1, 2, 3}, {sw, 2, 2, 1}, {sw, 3, 2, 1}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []Msg
			var streams []uint32
			for _, b := range tc.in {
				ms, ss := message(b.dst, b.qpn, b.middles, b.skip)
				msgs = append(msgs, ms...)
				streams = append(streams, ss...)
			}
			// Each packet's identity: its index, in Off.
			for i := range msgs {
				msgs[i].Off = i
			}
			var s Scheduler
			checkOrder(t, &s, msgs, streams, tc.runs)
		})
	}
}

// checkOrder checks that s.Order sends every packet of msgs (Off holding
// its index) once, keeps each (address, stream)'s order, makes runs runs of
// equal-size packets to one address, and does not allocate once warm.
func checkOrder(t *testing.T, s *Scheduler, msgs []Msg, streams []uint32, want int) {
	t.Helper()
	out := s.Order(msgs, streams)
	if len(out) != len(msgs) {
		t.Fatalf("Order returned %d packets of %d", len(out), len(msgs))
	}
	seen := make([]bool, len(msgs))
	last := map[[2]any]int{}
	runs := 0
	for k, m := range out {
		i := m.Off
		if seen[i] {
			t.Fatalf("packet %d appears twice", i)
		}
		seen[i] = true
		key := [2]any{msgs[i].Addr, streams[i]}
		if p, ok := last[key]; ok && p > i {
			t.Fatalf("stream %v: packet %d sent after packet %d", key, i, p)
		}
		last[key] = i
		if k == 0 || m.Addr != out[k-1].Addr || m.N != out[k-1].N {
			runs++
		}
	}
	if runs != want {
		t.Errorf("%d runs of equal-size packets to one address, want %d", runs, want)
	}
	if a := testing.AllocsPerRun(100, func() { s.Order(msgs, streams) }); a != 0 {
		t.Errorf("Order allocates %v times per batch once warm", a)
	}
}

// BenchmarkSchedulerOrder orders a soft NIC's transmit queue: 8 QPs to one
// address, each a message of a FIRST, 14 MIDDLEs and a LAST, posted one
// QP after another (128 packets).
func BenchmarkSchedulerOrder(b *testing.B) {
	sw := netip.MustParseAddrPort("127.0.0.1:4791")
	var msgs []Msg
	var streams []uint32
	for qp := uint32(1); qp <= 8; qp++ {
		msgs = append(msgs, Msg{N: 1056, Addr: sw})
		for range 14 {
			msgs = append(msgs, Msg{N: 1040, Addr: sw})
		}
		msgs = append(msgs, Msg{N: 1044, Addr: sw})
		for len(streams) < len(msgs) {
			streams = append(streams, qp)
		}
	}
	var s Scheduler
	b.ReportAllocs()
	for b.Loop() {
		s.Order(msgs, streams)
	}
}
