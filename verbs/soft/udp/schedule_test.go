package udp

import (
	"net/netip"
	"testing"
)

func TestSchedulerOrder(t *testing.T) {
	sw := netip.MustParseAddrPort("127.0.0.1:4791")
	w1 := netip.MustParseAddrPort("127.0.0.2:4791")
	// message returns the packets of one UC message on stream qpn to dst:
	// FIRST (56 bytes), middles (40), LAST (44).
	message := func(dst netip.AddrPort, qpn uint32, middles int) (ms []Msg, ss []uint32) {
		ms = append(ms, Msg{N: 56, Addr: dst})
		for range middles {
			ms = append(ms, Msg{N: 40, Addr: dst})
		}
		ms = append(ms, Msg{N: 44, Addr: dst})
		for range ms {
			ss = append(ss, qpn)
		}
		return ms, ss
	}
	type batch struct {
		dst     netip.AddrPort
		qpn     uint32
		middles int
	}
	for _, tc := range []struct {
		name string
		in   []batch
		runs int // runs of equal size to one address after ordering
	}{
		{"one message", []batch{{sw, 1, 14}}, 3},
		{"two messages of one QP keep their order", []batch{{sw, 1, 14}, {sw, 1, 14}}, 6},
		{"four QPs to one address", []batch{{sw, 1, 14}, {sw, 2, 14}, {sw, 3, 14}, {sw, 4, 14}}, 3},
		{"two QPs, two messages each", []batch{{sw, 1, 2}, {sw, 2, 2}, {sw, 1, 2}, {sw, 2, 2}}, 6},
		{"two addresses", []batch{{sw, 1, 3}, {w1, 1, 3}, {sw, 2, 3}, {w1, 2, 3}}, 6},
		{"uneven messages", []batch{{sw, 1, 0}, {sw, 2, 5}, {sw, 3, 1}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []Msg
			var streams []uint32
			for _, b := range tc.in {
				ms, ss := message(b.dst, b.qpn, b.middles)
				msgs = append(msgs, ms...)
				streams = append(streams, ss...)
			}
			// Each packet's identity: its index, in Off.
			for i := range msgs {
				msgs[i].Off = i
			}
			var s Scheduler
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
			if runs != tc.runs {
				t.Errorf("%d runs of equal-size packets to one address, want %d", runs, tc.runs)
			}
			if a := testing.AllocsPerRun(100, func() { s.Order(msgs, streams) }); a != 0 {
				t.Errorf("Order allocates %v times per batch once warm", a)
			}
		})
	}
}
