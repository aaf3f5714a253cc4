package udp

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestSchedulerOrder(t *testing.T) {
	sw := netip.MustParseAddrPort("127.0.0.1:4791")
	w1 := netip.MustParseAddrPort("127.0.0.2:4791")
	w2 := netip.MustParseAddrPort("127.0.0.3:4791")
	type batch struct {
		dst     netip.AddrPort
		qpn     uint32
		middles int
		skip    int // packets of the message sent in an earlier batch
		keep    int // packets of the message in this batch (0: the rest)
	}
	for _, tc := range []struct {
		name string
		in   []batch
		// runs of equal size to one address after ordering
		runs int
	}{
		{"one message", []batch{{sw, 1, 14, 0, 0}}, 3},
		{"two messages of one QP keep their order", []batch{{sw, 1, 14, 0, 0}, {sw, 1, 14, 0, 0}}, 6},
		{"four QPs to one address", []batch{{sw, 1, 14, 0, 0}, {sw, 2, 14, 0, 0}, {sw, 3, 14, 0, 0}, {sw, 4, 14, 0, 0}}, 3},
		{"two QPs, two messages each", []batch{{sw, 1, 2, 0, 0}, {sw, 2, 2, 0, 0}, {sw, 1, 2, 0, 0}, {sw, 2, 2, 0, 0}}, 6},
		{"two addresses", []batch{{sw, 1, 3, 0, 0}, {w1, 1, 3, 0, 0}, {sw, 2, 3, 0, 0}, {w1, 2, 3, 0, 0}}, 6},
		// Single packets (LASTs), the addresses and QPs taking turns as
		// the switch's broadcast results do, then out of turn.
		{"addresses taking turns", []batch{{sw, 1, 0, 1, 0}, {w1, 1, 0, 1, 0}, {sw, 2, 0, 1, 0}, {w1, 2, 0, 1, 0}, {sw, 3, 0, 1, 0}, {w1, 3, 0, 1, 0}}, 2},
		{"addresses out of turn", []batch{{sw, 1, 0, 1, 0}, {w1, 1, 0, 1, 0}, {sw, 2, 0, 1, 0}, {w1, 2, 0, 1, 0}, {w2, 1, 0, 1, 0}, {sw, 1, 0, 1, 0}, {w2, 1, 0, 1, 0}, {w1, 1, 0, 1, 0}}, 3},
		// One QP at its FIRST and LAST, the others with MIDDLEs between:
		// the first QP's LAST waits for the others' MIDDLEs by vote.
		{"uneven messages", []batch{{sw, 1, 0, 0, 0}, {sw, 2, 5, 0, 0}, {sw, 3, 1, 0, 0}}, 3},
		// One QP at its LAST, the others in their MIDDLEs.
		{"QPs at different stages", []batch{{sw, 1, 2, 3, 0}, {sw, 2, 2, 1, 0}, {sw, 3, 2, 1, 0}}, 2},
		// The switch's results when QP 2's first slot completed before
		// QP 1's last ones: QP 2 heads every round, but its LAST is
		// younger than QP 1's and waits for it.
		{"an end younger than its stream's first packet", []batch{{sw, 2, 2, 0, 1}, {sw, 1, 2, 1, 0}, {sw, 2, 2, 1, 0}}, 3},
		// QP 2's LAST wins the vote (larger than QP 1's MIDDLEs) but is
		// younger than QP 1's LAST: QP 1's MIDDLEs go first.
		{"a voted end waits", []batch{{sw, 1, 3, 1, 0}, {sw, 2, 1, 2, 0}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []Msg
			var streams []uint32
			var ends []bool
			for _, b := range tc.in {
				ms, ss, es := message(b.dst, b.qpn, b.middles, b.skip, b.keep)
				msgs = append(msgs, ms...)
				streams = append(streams, ss...)
				ends = append(ends, es...)
			}
			var s Scheduler
			checkOrder(t, &s, msgs, streams, ends, tc.runs)
		})
	}
}

// message returns the packets of one UC message on stream qpn to dst:
// FIRST (56 bytes), middles (40), LAST (44); of them, keep from skip on
// (0: all the rest): a message begun in an earlier batch, or to be ended
// in a later one. ends marks the LAST.
func message(dst netip.AddrPort, qpn uint32, middles, skip, keep int) (ms []Msg, ss []uint32, ends []bool) {
	ms = append(ms, Msg{N: 56, Addr: dst})
	for range middles {
		ms = append(ms, Msg{N: 40, Addr: dst})
	}
	ms = append(ms, Msg{N: 44, Addr: dst})
	for i := range ms {
		ends = append(ends, i == len(ms)-1)
	}
	ms, ends = ms[skip:], ends[skip:]
	if keep > 0 {
		ms, ends = ms[:keep], ends[:keep]
	}
	for range ms {
		ss = append(ss, qpn)
	}
	return ms, ss, ends
}

// TestSchedulerRandom: batches of several destinations' messages, posted
// in random interleavings, some begun in an earlier batch or ended in a
// later one; every order keeps each stream's order and the order of
// message ends to each destination.
func TestSchedulerRandom(t *testing.T) {
	addrs := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:4791"), netip.MustParseAddrPort("127.0.0.2:4791")}
	var s Scheduler
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		// Each stream's packets, then interleaved at random.
		type stream struct {
			ms   []Msg
			ends []bool
			qpn  uint32
		}
		var streams []*stream
		for qpn := range uint32(1 + rng.IntN(6)) {
			st := &stream{qpn: qpn}
			dst := addrs[rng.IntN(len(addrs))]
			for m := range 1 + rng.IntN(3) {
				skip := 0
				if m == 0 {
					skip = rng.IntN(3)
				}
				ms, _, es := message(dst, qpn, rng.IntN(4), skip, 0)
				st.ms, st.ends = append(st.ms, ms...), append(st.ends, es...)
			}
			if rng.IntN(3) == 0 && len(st.ms) > 1 {
				cut := 1 + rng.IntN(len(st.ms)-1)
				st.ms, st.ends = st.ms[:cut], st.ends[:cut]
			}
			if len(st.ms) > 0 {
				streams = append(streams, st)
			}
		}
		var msgs []Msg
		var qpns []uint32
		var ends []bool
		for len(streams) > 0 {
			i := rng.IntN(len(streams))
			st := streams[i]
			msgs, qpns, ends = append(msgs, st.ms[0]), append(qpns, st.qpn), append(ends, st.ends[0])
			if st.ms, st.ends = st.ms[1:], st.ends[1:]; len(st.ms) == 0 {
				streams = append(streams[:i], streams[i+1:]...)
			}
		}
		checkOrder(t, &s, msgs, qpns, ends, -1)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// checkOrder checks that s.Order sends every packet of msgs once, keeps
// each (address, stream)'s order and the order of each address's message
// ends, makes want runs of equal-size packets to one address (want < 0:
// any number), and does not allocate once warm.
func checkOrder(t *testing.T, s *Scheduler, msgs []Msg, streams []uint32, ends []bool, want int) {
	t.Helper()
	// Each packet's identity: its index, in Off.
	for i := range msgs {
		msgs[i].Off = i
	}
	out := s.Order(msgs, streams, ends)
	if len(out) != len(msgs) {
		t.Fatalf("Order returned %d packets of %d", len(out), len(msgs))
	}
	seen := make([]bool, len(msgs))
	last := map[[2]any]int{}
	lastEnd := map[netip.AddrPort]int{}
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
		if ends[i] {
			if p, ok := lastEnd[m.Addr]; ok && p > i {
				t.Fatalf("%v: the end of a message (packet %d) sent after a younger one's (packet %d)", m.Addr, i, p)
			}
			lastEnd[m.Addr] = i
		}
		if k == 0 || m.Addr != out[k-1].Addr || m.N != out[k-1].N {
			runs++
		}
	}
	if want >= 0 && runs != want {
		t.Errorf("%d runs of equal-size packets to one address, want %d", runs, want)
	}
	if a := testing.AllocsPerRun(100, func() { s.Order(msgs, streams, ends) }); a != 0 {
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
	var ends []bool
	for qp := uint32(1); qp <= 8; qp++ {
		msgs = append(msgs, Msg{N: 1056, Addr: sw})
		for range 14 {
			msgs = append(msgs, Msg{N: 1040, Addr: sw})
		}
		msgs = append(msgs, Msg{N: 1044, Addr: sw})
		for len(streams) < len(msgs) {
			streams = append(streams, qp)
			ends = append(ends, len(streams)%16 == 0)
		}
	}
	var s Scheduler
	b.ReportAllocs()
	for b.Loop() {
		s.Order(msgs, streams, ends)
	}
}
