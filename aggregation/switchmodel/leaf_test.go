package switchmodel

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// tree is two leaf pipelines of two workers each under a spine pipeline,
// one QP per worker, ppm packets per message, wired by hand: the leaves'
// writes go to the spine, the spine's results to the leaves.
type tree struct {
	spine  *Pipeline
	leaves [2]*Pipeline
	jobs   [2]*wire.Job // the leaves' jobs
	spineA netip.Addr
	leafA  [2]netip.Addr
	ppm    int
}

const treePayload = 256 // 64 int32 lanes

func newTree(t *testing.T, ppm int) *tree {
	t.Helper()
	tr := &tree{spineA: netip.MustParseAddr("127.9.0.1"), ppm: ppm}
	spineJob := &wire.Job{ID: 50, DType: wire.Int32, PacketSize: treePayload, PoolBase: 20, PoolSlots: uint32(ppm)}
	for k := range 2 {
		tr.leafA[k] = netip.AddrFrom4([4]byte{127, 9, 1, byte(k + 1)})
		spineJob.Workers = append(spineJob.Workers, wire.Worker{Rank: k, Addr: tr.leafA[k], RKey: 0x77,
			QPNs: []uint32{0x500 + uint32(k)}, PSNs: []uint32{7000 + uint32(k)}, SwitchQPNs: []uint32{0x900 + uint32(k)}})
	}
	tr.spine = mustPipeline(t, spineJob)
	for k := range 2 {
		j := testJob(uint32(k+1), 2, 1, uint32(4*k), uint32(ppm), treePayload)
		tr.jobs[k] = j
		tr.leaves[k] = mustPipeline(t, j)
		w := spineJob.Workers[k]
		if err := tr.leaves[k].SetUpstream(j.ID, &Upstream{Addr: tr.spineA, QPNs: w.SwitchQPNs, PSNs: []uint32{3000},
			PoolBase: spineJob.PoolBase, RecvQPNs: w.QPNs, RecvPSNs: w.PSNs}); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// flat is the same four workers on one switch: worker 2k+r of the flat job
// is worker r of leaf k.
func newFlat(t *testing.T, ppm int) (*Pipeline, *wire.Job) {
	j := testJob(9, 4, 1, 0, uint32(ppm), treePayload)
	return mustPipeline(t, j), j
}

// deliver runs one packet through p and returns the encoded results (raw
// bytes), as the software switch sends them.
func deliver(t *testing.T, p *Pipeline, src netip.Addr, b []byte) (Metadata, [][]byte, []netip.Addr) {
	t.Helper()
	var pkt rdma.Packet
	if err := pkt.Parse(b); err != nil {
		t.Fatal(err)
	}
	var md Metadata
	p.Process(src, &pkt, &md)
	var out [][]byte
	var dst []netip.Addr
	for d := 0; d < md.Dests(); d++ {
		buf := make([]byte, md.ResultLen())
		n, a, err := p.EncodeResult(&md, d, buf)
		if errors.Is(err, ErrOutOfOrder) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, dst = append(out, buf[:n]), append(dst, a)
	}
	return md, out, dst
}

// workerPacket is packet k of message m of a worker whose QP starts at
// pool index base and has sent psn packets: FIRST … LAST (or ONLY).
func workerPacket(t *testing.T, job *wire.Job, r, m, k, ppm int, psn uint32, vals []int32, e0 int8) []byte {
	t.Helper()
	vals = lanes(vals)
	first, last := k == 0, k == ppm-1
	op := rdma.WriteOpcode(rdma.TransportUC, first, last, last)
	q := req{op: op, qpn: job.Workers[r].SwitchQPNs[0], psn: psn, payload: vals,
		rkey: uint32(wire.MakePoolIndex(job.PoolBase, uint8(m&1))), va: uint64(m%8) * 4096, msgLen: uint32(ppm * treePayload)}
	if last {
		q.imm = wire.MakeImm(uint16(m), e0, 0)
	}
	return q.bytes(t)
}

// lanes repeats vals over a packet's int32 lanes.
func lanes(vals []int32) []int32 {
	out := make([]int32, treePayload/4)
	for i := range out {
		out[i] = vals[i%len(vals)]
	}
	return out
}

// decode parses an encoded packet for comparison.
func decode(t *testing.T, b []byte, dst netip.Addr) result {
	t.Helper()
	var pk rdma.Packet
	if err := pk.Parse(b); err != nil {
		t.Fatal(err)
	}
	r := result{dst: dst, op: pk.BTH.Opcode(), qpn: pk.BTH.DestQP(), psn: pk.BTH.PSN()}
	if pk.RETH != nil {
		r.va, r.rkey, r.msgLen = pk.RETH.VA(), pk.RETH.RKey(), pk.RETH.DMALen()
	}
	if pk.ImmDt != nil {
		r.imm = wire.Imm(pk.ImmDt.Imm())
	}
	for i := 0; i+4 <= len(pk.Payload); i += 4 {
		r.payload = append(r.payload, int32(uint32(pk.Payload[i])<<24|uint32(pk.Payload[i+1])<<16|uint32(pk.Payload[i+2])<<8|uint32(pk.Payload[i+3])))
	}
	return r
}

// up sends a leaf's upstream writes to the spine and the spine's results
// back down to the leaves; it returns what the leaves send their workers,
// by leaf.
func (tr *tree) up(t *testing.T, k int, ups [][]byte) [2][]result {
	t.Helper()
	var got [2][]result
	for _, b := range ups {
		_, res, dst := deliver(t, tr.spine, tr.leafA[k], b)
		for i, rb := range res {
			l := slices.Index(tr.leafA[:], dst[i])
			md, down, ddst := deliver(t, tr.leaves[l], tr.spineA, rb)
			if md.Decision == Drop && md.Reason != DropUpstreamDuplicate {
				t.Fatalf("leaf %d dropped the spine's result: %v", l, md.Reason)
			}
			for j := range down {
				got[l] = append(got[l], decode(t, down[j], ddst[j]))
			}
		}
	}
	return got
}

// TestLeafSumsAsFlat: random rounds of two-packet messages through a
// two-level tree give every worker the payload and immediate a flat switch
// gives it.
func TestLeafSumsAsFlat(t *testing.T) {
	const ppm, rounds = 2, 20
	tr := newTree(t, ppm)
	flat, fj := newFlat(t, ppm)
	rng := rand.New(rand.NewPCG(1, 2))
	psn := make([]uint32, 4)
	for m := range rounds {
		var want [4][]result
		var got [2][]result
		for k := range ppm {
			for w := range 4 {
				vals := []int32{rng.Int32() - 1<<30, int32(w), -int32(m), rng.Int32N(100)}
				e0 := int8(rng.IntN(40) - 20)
				leaf, r := w/2, w%2
				_, res, dst := deliver(t, flat, fj.Workers[w].Addr, workerPacket(t, fj, w, m, k, ppm, psn[w], vals, e0))
				for i := range res {
					rr := decode(t, res[i], dst[i])
					d := slices.IndexFunc(fj.Workers, func(x wire.Worker) bool { return x.Addr == rr.dst })
					want[d] = append(want[d], rr)
				}
				lj := tr.jobs[leaf]
				md, ups, _ := deliver(t, tr.leaves[leaf], lj.Workers[r].Addr, workerPacket(t, lj, r, m, k, ppm, psn[w], vals, e0))
				psn[w]++
				if md.Decision == Broadcast || md.Decision == Unicast {
					t.Fatalf("leaf answered its workers before the spine: %v", md.Decision)
				}
				g := tr.up(t, leaf, ups)
				got[0], got[1] = append(got[0], g[0]...), append(got[1], g[1]...)
			}
		}
		for w := range 4 {
			leaf, r := w/2, w%2
			var mine []result
			for _, x := range got[leaf] {
				if x.dst == tr.jobs[leaf].Workers[r].Addr {
					mine = append(mine, x)
				}
			}
			if len(mine) != len(want[w]) {
				t.Fatalf("round %d worker %d: %d result packets through the tree, %d flat", m, w, len(mine), len(want[w]))
			}
			for i := range mine {
				a, b := mine[i], want[w][i]
				if a.op != b.op || a.imm != b.imm || a.va != b.va || a.msgLen != b.msgLen || !slices.Equal(a.payload, b.payload) {
					t.Fatalf("round %d worker %d packet %d: tree %v %v, flat %v %v", m, w, i, a, a.payload, b, b.payload)
				}
			}
		}
	}
	if c := tr.leaves[0].Counters; c.UpstreamWrites != rounds*ppm || c.SpineResults != rounds*ppm {
		t.Errorf("leaf 0: %d writes up, %d spine results; want %d each", c.UpstreamWrites, c.SpineResults, rounds*ppm)
	}
}

// TestLeafResends: a worker's resend into a slot the leaf completed goes up
// again while the spine's result is missing; a second result is dropped;
// once the result is in, a resend is answered from it; a stale result from
// the spine is dropped.
func TestLeafResends(t *testing.T) {
	tr := newTree(t, 1)
	lj := tr.jobs[0]
	send := func(r int, psn uint32) (Metadata, [][]byte) {
		md, out, _ := deliver(t, tr.leaves[0], lj.Workers[r].Addr, workerPacket(t, lj, r, 0, 0, 1, psn, []int32{1, 2, 3, 4}, 5))
		return md, out
	}
	if md, _ := send(0, 10); md.Decision != Consume {
		t.Fatalf("first contribution: %v", md.Decision)
	}
	if md, _ := send(0, 11); md.Decision != Drop || md.Reason != DropRetransmitIncomplete {
		t.Fatalf("resend into an incomplete slot: %v %v", md.Decision, md.Reason)
	}
	md, ups := send(1, 20)
	if md.Decision != SendUp || len(ups) != 1 {
		t.Fatalf("last contribution: %v, %d packets", md.Decision, len(ups))
	}
	up := decode(t, ups[0], tr.spineA)
	if up.op != rdma.WriteOpcode(rdma.TransportUC, true, true, true) || up.qpn != 0x900 || up.psn != 3000 || up.rkey != uint32(wire.MakePoolIndex(20, 0)) ||
		!slices.Equal(up.payload, lanes([]int32{2, 4, 6, 8})) || up.imm.E0() != 5 {
		t.Fatalf("upstream write %v %v", up, up.payload)
	}
	// The write is lost; both workers resend: the leaf writes again, each
	// time with the next PSN.
	md, ups2 := send(0, 12)
	if md.Decision != SendUp || len(ups2) != 1 || decode(t, ups2[0], tr.spineA).psn != 3001 {
		t.Fatalf("resend while the spine's result is missing: %v", md.Decision)
	}
	_, ups3 := send(1, 21)
	if len(ups3) != 1 {
		t.Fatal("second resend not sent up")
	}
	if got := tr.up(t, 0, ups2); len(got[0])+len(got[1]) != 0 {
		t.Fatal("the spine answered before leaf 1 contributed")
	}
	// Leaf 1 completes the spine's slot: both leaves get the result.
	_, ups1, _ := deliver(t, tr.leaves[1], tr.jobs[1].Workers[0].Addr, workerPacket(t, tr.jobs[1], 0, 0, 0, 1, 1, []int32{10, 10, 10, 10}, 9))
	if len(ups1) != 0 {
		t.Fatal("leaf 1 sent up before its slot completed")
	}
	_, ups1, _ = deliver(t, tr.leaves[1], tr.jobs[1].Workers[1].Addr, workerPacket(t, tr.jobs[1], 1, 0, 0, 1, 1, []int32{10, 10, 10, 10}, -3))
	got := tr.up(t, 1, ups1)
	if len(got[0]) != 2 || len(got[1]) != 2 {
		t.Fatalf("results down: %d and %d packets", len(got[0]), len(got[1]))
	}
	for _, r := range append(got[0], got[1]...) {
		if !slices.Equal(r.payload, lanes([]int32{22, 24, 26, 28})) || r.imm.E0() != 9 {
			t.Fatalf("result %v %v", r, r.payload)
		}
	}
	// The second resend reaches the spine now: its unicast answer is
	// dropped by the leaf, which holds the result.
	_, uni, _ := deliver(t, tr.spine, tr.leafA[0], ups3[0])
	if len(uni) != 1 {
		t.Fatalf("spine answered a resend into a complete slot with %d packets", len(uni))
	}
	if md, out, _ := deliver(t, tr.leaves[0], tr.spineA, uni[0]); md.Decision != Drop || md.Reason != DropUpstreamDuplicate || len(out) != 0 {
		t.Fatalf("second spine result: %v %v", md.Decision, md.Reason)
	}
	// The lost first write, arriving late, is older than the resends.
	if md, _, _ := deliver(t, tr.spine, tr.leafA[0], ups[0]); md.Reason != DropStalePSN {
		t.Fatalf("late first write at the spine: %v", md.Reason)
	}
	// A worker that lost the result resends: answered from the held result.
	md, out := send(1, 22)
	if md.Decision != Unicast || len(out) != 1 {
		t.Fatalf("resend after the spine's result: %v, %d packets", md.Decision, len(out))
	}
	if r := decode(t, out[0], lj.Workers[1].Addr); !slices.Equal(r.payload, lanes([]int32{22, 24, 26, 28})) || r.qpn != lj.Workers[1].QPNs[0] {
		t.Fatalf("unicast %v %v", r, r.payload)
	}
	if n := tr.leaves[0].Counters.Drops[DropUpstreamDuplicate]; n != 1 {
		t.Errorf("upstream_duplicate drops: %d, want 1", n)
	}
}

// TestLeafResendsOncePerRoundTrip: once the leaf has timed a slot's way
// to the spine and back, a worker's resend of a slot whose write up is
// younger than that goes no further (the workers of a leaf resend a
// missing result at about the same time: one write up answers them all);
// an older one goes up. A slot written up more than once gives no time.
func TestLeafResendsOncePerRoundTrip(t *testing.T) {
	tr := newTree(t, 1)
	leaf := tr.leaves[0]
	psn := [2][2]uint32{{10, 20}, {1, 1}} // next PSN by leaf and worker
	send := func(l, r, m int, at int64) (Metadata, [][]byte) {
		t.Helper()
		tr.leaves[l].SetClock(at)
		md, out, _ := deliver(t, tr.leaves[l], tr.jobs[l].Workers[r].Addr, workerPacket(t, tr.jobs[l], r, m, 0, 1, psn[l][r], []int32{1, 2, 3, 4}, 5))
		psn[l][r]++
		return md, out
	}
	// round completes leaf 1's slot of message m and brings the spine's
	// result down to leaf 0 at clock at.
	round := func(m int, at int64) {
		t.Helper()
		send(1, 0, m, 0)
		_, ups := send(1, 1, m, 0)
		leaf.SetClock(at)
		if got := tr.up(t, 1, ups); len(got[0]) != 2 {
			t.Fatalf("message %d: %d results down at leaf 0", m, len(got[0]))
		}
	}
	up := func(md Metadata, out [][]byte) bool {
		t.Helper()
		switch {
		case md.Decision == SendUp && len(out) == 1:
			return true
		case md.Decision == Drop && md.Reason == DropRetransmitIncomplete && len(out) == 0:
			return false
		}
		t.Fatalf("%v %v, %d packets", md.Decision, md.Reason, len(out))
		return false
	}

	// Message 0: written up at 100, its result down at 150: 50 there
	// and back.
	send(0, 0, 0, 100)
	md, ups := send(0, 1, 0, 100)
	if !up(md, ups) {
		t.Fatal("a completed slot did not go up")
	}
	tr.up(t, 0, ups)
	round(0, 150)

	// Message 1's write up at 1000 is lost. Resends within 50 of it stay
	// at the leaf; the first after goes up, and the next 50 stay again.
	send(0, 0, 1, 1000)
	if md, ups := send(0, 1, 1, 1000); !up(md, ups) {
		t.Fatal("message 1 did not go up")
	}
	for _, c := range []struct {
		r    int
		at   int64
		goes bool
	}{{0, 1020, false}, {1, 1049, false}, {0, 1050, true}, {1, 1055, false}, {1, 1099, false}, {1, 1100, true}} {
		md, out := send(0, c.r, 1, c.at)
		if got := up(md, out); got != c.goes {
			t.Fatalf("worker %d's resend at %d: up %v, want %v", c.r, c.at, got, c.goes)
		}
		if c.goes {
			ups = out
		}
	}
	// The last write up's result comes back 2 after it: no time, for it
	// was the slot's third.
	tr.up(t, 0, ups)
	round(1, 1102)

	// Message 2: a resend 30 after its write up still stays.
	send(0, 0, 2, 2000)
	send(0, 1, 2, 2000)
	if md, out := send(0, 0, 2, 2030); up(md, out) {
		t.Fatal("a resend 30 after the write up went up: the leaf took the time of a slot written up three times")
	}
}

// TestLeafStaleSpineResult: a spine result with a PSN older than one
// already taken on its QP is dropped before it touches a slot.
func TestLeafStaleSpineResult(t *testing.T) {
	tr := newTree(t, 1)
	res := func(psn uint32, slot uint32) []byte {
		return req{op: rdma.WriteOpcode(rdma.TransportUC, true, true, true), qpn: 0x500, psn: psn, va: uint64(wire.MakePoolIndex(slot, 0)), rkey: 0x77,
			msgLen: treePayload, payload: lanes([]int32{1})}.bytes(t)
	}
	if md, _, _ := deliver(t, tr.leaves[0], tr.spineA, res(7005, 20)); md.Reason != DropUpstreamDuplicate {
		t.Fatalf("a result for a slot that waits for none: %v", md.Reason)
	}
	if md, _, _ := deliver(t, tr.leaves[0], tr.spineA, res(7004, 20)); md.Reason != DropStalePSN {
		t.Fatalf("an older result: %v", md.Reason)
	}
	if md, _, _ := deliver(t, tr.leaves[0], tr.spineA, res(7006, 25)); md.Reason != DropPoolRange {
		t.Fatalf("a result outside the QP's slots: %v", md.Reason)
	}
	if md, _, _ := deliver(t, tr.leaves[0], netip.MustParseAddr("127.9.9.9"), res(7007, 20)); md.Reason != DropUnknownQP {
		t.Fatalf("a result from another address: %v", md.Reason)
	}
}

func TestSetUpstreamErrors(t *testing.T) {
	tr := newTree(t, 1)
	p := tr.leaves[0]
	ok := Upstream{Addr: tr.spineA, QPNs: []uint32{1}, PSNs: []uint32{1}, RecvQPNs: []uint32{0x600}, RecvPSNs: []uint32{1}}
	for name, tc := range map[string]struct {
		id   uint32
		up   Upstream
		want error
	}{
		"unknown job":   {id: 99, up: ok, want: ErrUpstream},
		"no address":    {id: 1, up: Upstream{QPNs: ok.QPNs, PSNs: ok.PSNs, RecvQPNs: ok.RecvQPNs, RecvPSNs: ok.RecvPSNs}, want: ErrUpstream},
		"QP count":      {id: 1, up: Upstream{Addr: ok.Addr, QPNs: []uint32{1, 2}, PSNs: ok.PSNs, RecvQPNs: ok.RecvQPNs, RecvPSNs: ok.RecvPSNs}, want: ErrUpstream},
		"wide QPN":      {id: 1, up: Upstream{Addr: ok.Addr, QPNs: ok.QPNs, PSNs: ok.PSNs, RecvQPNs: []uint32{1 << 24}, RecvPSNs: ok.RecvPSNs}, want: ErrUpstream},
		"a worker's QP": {id: 1, up: Upstream{Addr: tr.jobs[0].Workers[0].Addr, QPNs: ok.QPNs, PSNs: ok.PSNs, RecvQPNs: []uint32{tr.jobs[0].Workers[0].SwitchQPNs[0]}, RecvPSNs: ok.RecvPSNs}, want: ErrConflict},
	} {
		if err := p.SetUpstream(tc.id, &tc.up); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if err := p.SetUpstream(1, nil); err != nil || p.downs != nil {
		t.Fatalf("flat again: %v, %d receive QPs", err, len(p.downs))
	}
}

// TestLeafHoldsUntilPredecessor: the spine completes a message's second
// slot before its first (the first's writes were late); the leaf holds the
// second slot's result and broadcasts it right after the first's, so every
// worker gets FIRST then LAST with consecutive PSNs, as from a flat switch.
func TestLeafHoldsUntilPredecessor(t *testing.T) {
	const ppm = 2
	tr := newTree(t, ppm)
	var ups [2][2][]byte // [leaf][packet]
	for l := range 2 {
		lj := tr.jobs[l]
		for k := range ppm {
			for r := range 2 {
				md, out, _ := deliver(t, tr.leaves[l], lj.Workers[r].Addr, workerPacket(t, lj, r, 0, k, ppm, uint32(10+k), []int32{int32(l + 1)}, 3))
				if r == 1 {
					if md.Decision != SendUp || len(out) != 1 {
						t.Fatalf("leaf %d packet %d: %v", l, k, md.Decision)
					}
					ups[l][k] = out[0]
				}
			}
		}
	}
	// Packet 1's writes reach the spine first (packet 0's are lost): its
	// result is held.
	tr.up(t, 0, [][]byte{ups[0][1]})
	_, res, dst := deliver(t, tr.spine, tr.leafA[1], ups[1][1])
	if len(res) != 2 {
		t.Fatalf("spine: %d results for slot 1", len(res))
	}
	for i := range res {
		l := slices.Index(tr.leafA[:], dst[i])
		md, out, _ := deliver(t, tr.leaves[l], tr.spineA, res[i])
		if md.Decision != Consume || len(out) != 0 {
			t.Fatalf("leaf %d: the second slot's result before the first's: %v, %d packets", l, md.Decision, len(out))
		}
	}
	// Packet 0's writes were lost; a worker of each leaf resends packet 0
	// and its leaf writes the slot again: the first slot's result comes,
	// and the held one after it.
	for l := range 2 {
		lj := tr.jobs[l]
		md, out, _ := deliver(t, tr.leaves[l], lj.Workers[0].Addr, workerPacket(t, lj, 0, 0, 0, ppm, 12, []int32{int32(l + 1)}, 3))
		if md.Decision != SendUp || len(out) != 1 {
			t.Fatalf("leaf %d: a resend into a slot without its spine result: %v", l, md.Decision)
		}
		ups[l][0] = out[0]
	}
	tr.up(t, 0, [][]byte{ups[0][0]})
	_, res, dst = deliver(t, tr.spine, tr.leafA[1], ups[1][0])
	if len(res) != 2 {
		t.Fatalf("spine: %d results for slot 0", len(res))
	}
	for i := range res {
		l := slices.Index(tr.leafA[:], dst[i])
		var pkt rdma.Packet
		if err := pkt.Parse(res[i]); err != nil {
			t.Fatal(err)
		}
		var md Metadata
		tr.leaves[l].Process(tr.spineA, &pkt, &md)
		var got []result
		for more := true; more; more = tr.leaves[l].NextResult(&md) {
			got = append(got, emit(t, tr.leaves[l], &md)...)
		}
		if len(got) != 4 {
			t.Fatalf("leaf %d: %d packets down, want FIRST and LAST to 2 workers", l, len(got))
		}
		for w := range 2 {
			a, b := got[w], got[2+w]
			if a.dst != b.dst || a.op != rdma.WriteOpcode(rdma.TransportUC, true, false, true) ||
				b.op != rdma.WriteOpcode(rdma.TransportUC, false, true, true) || b.psn != a.psn+1 ||
				a.payload[0] != 6 || b.payload[0] != 6 || b.imm.E0() != 3 {
				t.Fatalf("leaf %d worker %d: %v %v then %v %v", l, w, a, a.payload[:1], b, b.payload[:1])
			}
		}
	}
}

// TestLeafMessageIDs: a leaf's broadcast carries the message id of the
// packet that completed its slot at the leaf, whatever id the spine's
// result carries: a slot completed by one-packet writes goes down as a
// WRITE ONLY with the packet's id, one completed by a message's LAST as a
// LAST with the message's id, though the spine answers both leaves alike.
func TestLeafMessageIDs(t *testing.T) {
	const ppm = 2
	tr := newTree(t, ppm)
	pktID := wire.PacketMsgID(0, 1, 1)
	var ups [2][2][]byte // [leaf][packet]
	for l := range 2 {
		lj := tr.jobs[l]
		for r := range 2 {
			// Packet 0 as a message's FIRST, then packet 1: on leaf 0
			// as a one-packet write with its own id.
			for k := range ppm {
				b := workerPacket(t, lj, r, 0, k, ppm, uint32(10+k), []int32{1}, 4)
				if l == 0 && k == 1 {
					b = req{op: rdma.WriteOpcode(rdma.TransportUC, true, true, true), qpn: lj.Workers[r].SwitchQPNs[0], psn: 11,
						rkey: uint32(wire.MakePoolIndex(lj.PoolBase+1, 0)), va: treePayload, msgLen: treePayload,
						imm: wire.MakeImm(pktID, 4, 0), payload: lanes([]int32{1})}.bytes(t)
				}
				if _, out, _ := deliver(t, tr.leaves[l], lj.Workers[r].Addr, b); r == 1 {
					ups[l][k] = out[0]
				}
			}
		}
	}
	tr.up(t, 0, [][]byte{ups[0][0]})
	tr.up(t, 1, [][]byte{ups[1][0]})
	// The spine completes slot 1 with leaf 1's write, whose id is the
	// message's; leaf 0 still answers its workers with the id of their
	// one-packet writes, and in their place.
	tr.up(t, 0, [][]byte{ups[0][1]})
	down := tr.up(t, 1, [][]byte{ups[1][1]})
	for l, want := range []struct {
		op rdma.Opcode
		id uint16
	}{{rdma.WriteOpcode(rdma.TransportUC, true, true, true), pktID}, {rdma.WriteOpcode(rdma.TransportUC, false, true, true), 0}} {
		if len(down[l]) != 2 {
			t.Fatalf("leaf %d: %d packets down for slot 1", l, len(down[l]))
		}
		for _, r := range down[l] {
			if r.op != want.op || r.imm.MsgID() != want.id || r.imm.E0() != 4 || r.payload[0] != 4 {
				t.Errorf("leaf %d: %v %v, want %v with message id %#x", l, r, r.payload[:1], want.op, want.id)
			}
		}
	}
}

// TestLeafOrphanFirst: a message's second slot went down as a WRITE ONLY
// (a one-packet resend completed it at the leaf) before its first slot's
// result came from the spine; the first slot's FIRST is not broadcast,
// since nothing would complete the message it opens, and a worker's
// one-packet resend of packet 0 is answered alone.
func TestLeafOrphanFirst(t *testing.T) {
	const ppm = 2
	tr := newTree(t, ppm)
	only := rdma.WriteOpcode(rdma.TransportUC, true, true, true)
	onePacket := func(lj *wire.Job, r, k int, psn uint32) []byte {
		return req{op: only, qpn: lj.Workers[r].SwitchQPNs[0], psn: psn, rkey: uint32(wire.MakePoolIndex(lj.PoolBase+uint32(k), 0)),
			va: uint64(k * treePayload), msgLen: treePayload, imm: wire.MakeImm(wire.PacketMsgID(0, k, 1), 2, 0), payload: lanes([]int32{1})}.bytes(t)
	}
	var ups [2][2][]byte
	for l := range 2 {
		lj := tr.jobs[l]
		// Worker 0 sends the message whole; worker 1's LAST is lost and
		// resent alone, its FIRST comes late: slot 1 completes with a
		// WRITE ONLY, slot 0 with a FIRST.
		deliver(t, tr.leaves[l], lj.Workers[0].Addr, workerPacket(t, lj, 0, 0, 0, ppm, 10, []int32{1}, 2))
		deliver(t, tr.leaves[l], lj.Workers[0].Addr, workerPacket(t, lj, 0, 0, 1, ppm, 11, []int32{1}, 2))
		_, out, _ := deliver(t, tr.leaves[l], lj.Workers[1].Addr, onePacket(lj, 1, 1, 21))
		ups[l][1] = out[0]
		_, out, _ = deliver(t, tr.leaves[l], lj.Workers[1].Addr, workerPacket(t, lj, 1, 0, 0, ppm, 22, []int32{1}, 2))
		ups[l][0] = out[0]
	}
	tr.up(t, 0, [][]byte{ups[0][1]})
	if down := tr.up(t, 1, [][]byte{ups[1][1]}); len(down[0]) != 2 || down[0][0].op != only {
		t.Fatalf("slot 1 down: %v", down[0])
	}
	tr.up(t, 0, [][]byte{ups[0][0]})
	if down := tr.up(t, 1, [][]byte{ups[1][0]}); len(down[0])+len(down[1]) != 0 {
		t.Fatalf("slot 0's FIRST was broadcast after its message's last slot went down: %v %v", down[0], down[1])
	}
	md, out, _ := deliver(t, tr.leaves[0], tr.jobs[0].Workers[0].Addr, onePacket(tr.jobs[0], 0, 0, 12))
	if md.Decision != Unicast || len(out) != 1 {
		t.Fatalf("a one-packet resend of packet 0: %v, %d packets", md.Decision, len(out))
	}
	if r := decode(t, out[0], tr.jobs[0].Workers[0].Addr); r.op != only || r.payload[0] != 4 {
		t.Fatalf("answer %v %v", r, r.payload[:1])
	}
}
