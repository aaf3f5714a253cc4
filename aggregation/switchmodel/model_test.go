package switchmodel

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

const (
	tBase  = 8
	tSlots = 16
	tVals  = 64 // 256-byte packets
)

// stalePSN in a step's request: the PSN of the packet before the last one
// its QP sent.
const stalePSN = 0xFFFFFF

type step struct {
	from   int // worker rank; -1: a stranger's address
	qp     int // QP index of that worker; -1: use req.qpn as is
	req    req
	want   Decision
	reason DropReason
}

func pi(slot uint32, set uint8) uint32 { return uint32(wire.MakePoolIndex(slot, set)) }

func only(slot uint32, set uint8, v int32) req {
	return req{op: rdma.UCRDMAWriteOnlyWithImm, rkey: pi(slot, set), msgLen: 4 * tVals, payload: fill(tVals, v)}
}

func TestNextStepDecisions(t *testing.T) {
	first := func(slot uint32, psn uint32) req {
		return req{op: rdma.UCRDMAWriteFirst, psn: psn, rkey: pi(slot, 0), msgLen: 3 * 4 * tVals, payload: fill(tVals, 1)}
	}
	middle := func(psn uint32) req {
		return req{op: rdma.UCRDMAWriteMiddle, psn: psn, payload: fill(tVals, 1)}
	}
	last := func(psn uint32) req {
		return req{op: rdma.UCRDMAWriteLastWithImm, psn: psn, payload: fill(tVals, 1)}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"first contribution", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
		}},
		{"middle contribution", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
			{1, 0, only(8, 0, 1), Consume, 0},
		}},
		{"last contribution broadcasts", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
			{1, 0, only(8, 0, 1), Consume, 0},
			{2, 0, only(8, 0, 1), Broadcast, 0},
		}},
		{"middle and last packets of a message", []step{
			{0, 1, first(10, 5), Consume, 0},
			{0, 1, middle(6), Consume, 0},
			{0, 1, last(7), Consume, 0},
		}},
		{"retransmission into an incomplete slot", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
			{1, 0, only(8, 0, 1), Consume, 0},
			{0, 0, only(8, 0, 1), Drop, DropRetransmitIncomplete},
		}},
		{"retransmission into a completed slot", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
			{1, 0, only(8, 0, 1), Consume, 0},
			{2, 0, only(8, 0, 1), Broadcast, 0},
			{1, 0, only(8, 0, 1), Unicast, 0},
		}},
		{"retransmission after others moved to the other set", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
			{1, 0, only(8, 0, 1), Consume, 0},
			{2, 0, only(8, 0, 1), Broadcast, 0},
			{0, 0, only(8, 1, 1), Consume, 0},
			{2, 0, only(8, 1, 1), Consume, 0},
			{1, 0, only(8, 0, 1), Unicast, 0},
			{1, 0, only(8, 1, 1), Broadcast, 0},
		}},
		{"a packet overtaken by a newer one of its QP is dropped", []step{
			{0, 0, only(8, 0, 1), Consume, 0},
			{0, 0, only(8, 1, 1), Consume, 0},
			// Worker 0's first packet again, after its newer one: counted,
			// it would start a round of set 0 with an old contribution
			// and clear worker 0's bit in set 1.
			{0, 0, req{op: rdma.UCRDMAWriteOnlyWithImm, psn: stalePSN, rkey: pi(8, 0), msgLen: 4 * tVals, payload: fill(tVals, 1)}, Drop, DropStalePSN},
			{1, 0, only(8, 1, 1), Consume, 0},
			{2, 0, only(8, 1, 1), Broadcast, 0},
		}},
		{"PSN gap drops the rest of the message", []step{
			{0, 0, first(8, 5), Consume, 0},
			{0, 0, last(7), Drop, DropPSN},
			{0, 0, middle(8), Drop, DropPSN},
			{0, 0, first(8, 20), Drop, DropRetransmitIncomplete},
			{0, 0, middle(21), Consume, 0},
		}},
		{"MIDDLE before any FIRST", []step{
			{0, 0, middle(0), Drop, DropPSN},
		}},
		{"unknown source address", []step{
			{-1, 0, only(8, 0, 1), Drop, DropUnknownQP},
		}},
		{"unknown QPN", []step{
			{0, -1, func() req { r := only(8, 0, 1); r.qpn = 0x777; return r }(), Drop, DropUnknownQP},
		}},
		{"another worker's QPN", []step{
			{0, -1, func() req { r := only(8, 0, 1); r.qpn = 1<<12 | 2; return r }(), Drop, DropUnknownQP},
		}},
		{"pool index below the job", []step{
			{0, 0, only(7, 0, 1), Drop, DropPoolRange},
		}},
		{"pool index above the job", []step{
			{0, 0, only(24, 1, 1), Drop, DropPoolRange},
		}},
		{"huge pool index", []step{
			{0, 0, func() req { r := only(0, 0, 1); r.rkey = math.MaxUint32; return r }(), Drop, DropPoolRange},
		}},
		{"message running past the job's pool", []step{
			{0, 0, first(23, 1), Consume, 0},
			{0, 0, middle(2), Drop, DropPoolRange},
			{0, 0, last(3), Drop, DropPSN},
		}},
		{"wrong payload length", []step{
			{0, 0, req{op: rdma.UCRDMAWriteOnlyWithImm, rkey: pi(8, 0), payload: fill(tVals/2, 1)}, Drop, DropLength},
		}},
		{"RC write", []step{
			{0, 0, req{op: rdma.RCRDMAWriteOnly, rkey: pi(8, 0), payload: fill(tVals, 1)}, Drop, DropOpcode},
		}},
		{"UC send", []step{
			{0, 0, req{op: rdma.UCSendOnly, payload: fill(tVals, 1)}, Drop, DropOpcode},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(1, 3, 2, tBase, tSlots, 4*tVals)
			p := mustPipeline(t, job)
			var md Metadata
			var drops [NumDropReasons]uint64
			// A NIC numbers every packet it sends, resends included: an
			// ONLY step without a PSN gets its QP's next one.
			nextPSN := map[[2]int]uint32{}
			for i, s := range tc.steps {
				r := s.req
				src := netip.MustParseAddr("127.0.9.9")
				if s.from >= 0 {
					src = job.Workers[s.from].Addr
				}
				if s.qp >= 0 {
					r.qpn = job.Workers[max(s.from, 0)].SwitchQPNs[s.qp]
				}
				if k := [2]int{s.from, s.qp}; r.psn == 0 && r.op.IsFirst() && r.op.IsLast() {
					r.psn = 100 + nextPSN[k]
					nextPSN[k]++
				} else if r.psn == stalePSN {
					r.psn = 100 + nextPSN[k] - 2 // the packet before the last one
				}
				p.Process(src, r.parsed(t), &md)
				if md.Decision != s.want || md.Reason != s.reason {
					t.Fatalf("step %d: got %v/%v, want %v/%v", i, md.Decision, md.Reason, s.want, s.reason)
				}
				if s.want == Drop {
					drops[s.reason]++
				}
				if got := md.Dests(); (s.want == Broadcast && got != 3) || (s.want == Unicast && got != 1) || ((s.want == Drop || s.want == Consume) && got != 0) {
					t.Fatalf("step %d: %v with %d destinations", i, s.want, got)
				}
			}
			if p.Counters.Drops != drops {
				t.Errorf("drop counters %v, want %v", p.Counters.Drops, drops)
			}
		})
	}
}

func TestSingleWorkerJob(t *testing.T) {
	job := testJob(1, 1, 1, 0, 4, 4*tVals)
	p := mustPipeline(t, job)
	var md Metadata
	r := only(1, 0, 7)
	r.qpn = job.Workers[0].SwitchQPNs[0]
	r.imm = wire.MakeImm(9, -4, 3)
	for round, want := range []Decision{Broadcast, Unicast} {
		r.psn = uint32(round) // the resend is a new packet
		p.Process(job.Workers[0].Addr, r.parsed(t), &md)
		if md.Decision != want {
			t.Fatalf("round %d: %v, want %v", round, md.Decision, want)
		}
		res := emit(t, p, &md)
		if len(res) != 1 || res[0].payload[0] != 7 || res[0].imm != r.imm {
			t.Fatalf("round %d: results %v", round, res)
		}
	}
	if p.SlotsInUse() != 0 {
		t.Errorf("slots in use %d", p.SlotsInUse())
	}
}

// TestResultPackets checks every header of a broadcast and a unicast of a
// three-packet message.
func TestResultPackets(t *testing.T) {
	const n, q, qp = 3, 2, 1
	job := testJob(1, n, q, tBase, tSlots, 4*tVals)
	p := mustPipeline(t, job)
	const va, msgLen = 0x3000, 3 * 4 * tVals
	send := func(rank int, k int, psn uint32, e0, e1 int8) *Metadata {
		ops := []rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteLastWithImm}
		r := req{op: ops[k], qpn: job.Workers[rank].SwitchQPNs[qp], psn: psn, rkey: pi(12, 1), va: va, msgLen: msgLen,
			imm: wire.MakeImm(0x4242, e0, e1), payload: fill(tVals, int32(rank+1)*int32(k+1))}
		var md Metadata
		p.Process(job.Workers[rank].Addr, r.parsed(t), &md)
		return &md
	}
	exps := [n][2]int8{{-3, 0}, {5, -1}, {2, 7}}
	var got [][]result
	for k := 0; k < 3; k++ {
		for rank := 0; rank < n; rank++ {
			md := send(rank, k, uint32(100*rank+k), exps[rank][0], exps[rank][1])
			if want := map[bool]Decision{true: Broadcast, false: Consume}[rank == n-1]; md.Decision != want {
				t.Fatalf("packet %d rank %d: %v, want %v", k, rank, md.Decision, want)
			}
			if md.Decision == Broadcast {
				got = append(got, emit(t, p, md))
			}
		}
	}
	wantOps := []rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteLastWithImm}
	for k, res := range got {
		if len(res) != n {
			t.Fatalf("packet %d: %d results", k, len(res))
		}
		for d, r := range res {
			w := job.Workers[d]
			want := result{dst: w.Addr, op: wantOps[k], qpn: w.QPNs[qp], psn: w.PSNs[qp] + uint32(k),
				payload: fill(tVals, int32(1+2+3)*int32(k+1))}
			if k == 0 {
				want.va, want.rkey, want.msgLen = va, w.RKey, msgLen
			}
			if k == 2 {
				want.imm = wire.MakeImm(0x4242, 5, 7)
			}
			if r.dst != want.dst || r.op != want.op || r.qpn != want.qpn || r.psn != want.psn || r.va != want.va ||
				r.rkey != want.rkey || r.msgLen != want.msgLen || r.imm != want.imm || !slices.Equal(r.payload, want.payload) {
				t.Errorf("packet %d to rank %d:\n got %v va %#x rkey %#x len %d %v\nwant %v va %#x rkey %#x len %d %v", k, d,
					r, r.va, r.rkey, r.msgLen, r.payload[:2], want, want.va, want.rkey, want.msgLen, want.payload[:2])
			}
		}
	}
	// Rank 1 lost the results and resends the message: unicast, PSNs go on.
	for k := 0; k < 3; k++ {
		md := send(1, k, uint32(500+k), 5, -1)
		if md.Decision != Unicast {
			t.Fatalf("resend packet %d: %v", k, md.Decision)
		}
		res := emit(t, p, md)
		w := job.Workers[1]
		if len(res) != 1 || res[0].dst != w.Addr || res[0].op != wantOps[k] || res[0].psn != w.PSNs[qp]+3+uint32(k) ||
			res[0].payload[5] != 6*int32(k+1) {
			t.Fatalf("resend packet %d: %v", k, res)
		}
		if k == 2 && res[0].imm != wire.MakeImm(0x4242, 5, 7) {
			t.Fatalf("resend imm %#x", uint32(res[0].imm))
		}
	}
	var md Metadata
	if _, _, err := p.EncodeResult(&md, 0, make([]byte, 2048)); !errors.Is(err, ErrNoResult) {
		t.Errorf("encode of a drop: %v", err)
	}
}

func TestExponentMax(t *testing.T) {
	cases := []struct {
		name   string
		e0, e1 []int8
		noImm  []bool
		want0  int8
		want1  int8
	}{
		{"mixed", []int8{-3, 5, 2}, []int8{0, -1, 7}, nil, 5, 7},
		{"all negative", []int8{-9, -3, -120}, []int8{-128, -128, -2}, nil, -3, -2},
		{"extremes", []int8{127, -128, 0}, []int8{-128, -128, -128}, nil, 127, -128},
		{"a LAST without immediate does not count", []int8{-9, 0, -7}, []int8{-1, 0, -1}, []bool{false, true, false}, -7, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(1, 3, 1, 0, 4, 4*tVals)
			p := mustPipeline(t, job)
			var md Metadata
			for round := 0; round < 3; round++ { // rounds reuse the slot: state must reset
				for r := range 3 {
					q := only(2, uint8(round&1), 1)
					if tc.noImm != nil && tc.noImm[r] {
						q.op = rdma.UCRDMAWriteOnly
					}
					q.qpn, q.psn = job.Workers[r].SwitchQPNs[0], uint32(round)
					q.imm = wire.MakeImm(uint16(round+10), tc.e0[r]+int8(round&1), tc.e1[r])
					if tc.e0[r] == 127 {
						q.imm = q.imm.WithExponents(127, tc.e1[r])
					}
					p.Process(job.Workers[r].Addr, q.parsed(t), &md)
				}
				if md.Decision != Broadcast {
					t.Fatalf("round %d: %v", round, md.Decision)
				}
				want := wire.MakeImm(uint16(round+10), tc.want0+int8(round&1), tc.want1)
				if tc.want0 == 127 {
					want = want.WithExponents(127, tc.want1)
				}
				for _, r := range emit(t, p, &md) {
					if r.imm != want {
						t.Fatalf("round %d: imm %#x, want %#x", round, uint32(r.imm), uint32(want))
					}
				}
			}
		})
	}
}

func TestWrappingAdd(t *testing.T) {
	vals := [][]int32{
		{math.MaxInt32, math.MinInt32, -1, 0, 123456789, math.MaxInt32},
		{1, -1, -1, 0, -123456789, math.MaxInt32},
		{0, 0, math.MinInt32, 5, 0, 2},
	}
	job := testJob(1, 3, 1, 0, 4, 4*tVals)
	p := mustPipeline(t, job)
	var md Metadata
	for r := range 3 {
		q := only(0, 0, 0)
		copy(q.payload, vals[r])
		q.qpn = job.Workers[r].SwitchQPNs[0]
		p.Process(job.Workers[r].Addr, q.parsed(t), &md)
	}
	res := emit(t, p, &md)
	for i := range vals[0] {
		var want int32
		for r := range vals {
			want += vals[r][i] // Go's int32 addition wraps
		}
		for d := range res {
			if res[d].payload[i] != want {
				t.Errorf("element %d to %d: %d, want %d", i, d, res[d].payload[i], want)
			}
		}
		if got := p.Processor.Value(0, 0, i); got != want {
			t.Errorf("element %d in the slot: %d, want %d", i, got, want)
		}
	}
	for i := range 4 {
		a, b := uint64(vals[0][i])<<32|uint64(uint32(vals[1][i])), uint64(uint32(vals[2][i]))<<32|uint64(uint32(vals[0][i]))
		got := add2(a, b)
		if int32(got>>32) != vals[0][i]+vals[2][i] || int32(got) != vals[1][i]+vals[0][i] {
			t.Errorf("add2 lanes %d", i)
		}
	}
}

// TestBitmapsAndSets runs many rounds over one slot with the worker
// protocol (alternate sets, resend until the result arrives) under random
// request and result loss, and checks every result and the bitmaps.
func TestBitmapsAndSets(t *testing.T) {
	for _, n := range []int{1, 2, 3, 65} {
		job := testJob(1, n, 1, 0, 2, 4*tVals)
		p := mustPipeline(t, job)
		seed := uint64(n)
		rnd := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
		var md Metadata
		psn := make([]uint32, n)
		for round := 0; round < 40; round++ {
			set := uint8(round & 1)
			done := make([]bool, n)
			for left, tries := n, 0; left > 0; tries++ {
				if tries > 1000 {
					t.Fatalf("n=%d round %d: no progress", n, round)
				}
				for r := 0; r < n; r++ {
					if done[r] {
						continue
					}
					q := only(1, set, int32(round*1000+r))
					q.qpn, q.psn = job.Workers[r].SwitchQPNs[0], psn[r]
					psn[r]++
					if rnd()%4 == 0 { // request lost
						continue
					}
					p.Process(job.Workers[r].Addr, q.parsed(t), &md)
					for _, res := range emit(t, p, &md) {
						if rnd()%4 == 0 { // result lost
							continue
						}
						d := int(res.dst.As4()[3]) - 2
						want := int32(round*1000*n + n*(n-1)/2)
						if res.payload[0] != want {
							t.Fatalf("n=%d round %d: result %d, want %d", n, round, res.payload[0], want)
						}
						if !done[d] {
							done[d] = true
							left--
						}
					}
				}
			}
			// Every worker has moved to the other set: the bitmap of this
			// round's set holds everyone; the other is clear of them.
			for r := 0; r < n; r++ {
				if p.Bitmap.Bitmap(1, set, r)&(1<<(r&63)) == 0 || p.Bitmap.Bitmap(1, set^1, r)&(1<<(r&63)) != 0 {
					t.Fatalf("n=%d round %d: bitmaps of rank %d: %#x %#x", n, round, r, p.Bitmap.Bitmap(1, 0, r), p.Bitmap.Bitmap(1, 1, r))
				}
			}
			if p.Counter.Missing(1, set) != 0 {
				t.Fatalf("n=%d round %d: counter %d", n, round, p.Counter.Missing(1, set))
			}
		}
		if p.Counters.Retransmissions == 0 || p.Counters.Unicasts == 0 || (n > 1 && p.Counters.Drops[DropRetransmitIncomplete] == 0) {
			t.Errorf("n=%d: loss never exercised: %+v", n, p.Counters)
		}
		if p.SlotsInUse() != 0 {
			t.Errorf("n=%d: %d slots in use", n, p.SlotsInUse())
		}
	}
}

func snapshot(p *Pipeline) [][]uint64 {
	exp := make([]uint64, len(p.Exponents.imm))
	for i, e := range p.Exponents.imm {
		exp[i] = uint64(e.msgID)<<16 | uint64(uint8(e.e0))<<8 | uint64(uint8(e.e1))
	}
	cnt := make([]uint64, len(p.Counter.missing))
	for i, c := range p.Counter.missing {
		cnt[i] = uint64(c)
	}
	return [][]uint64{slices.Clone(p.Bitmap.bits), cnt, exp, slices.Clone(p.Processor.vec)}
}

func equalSnap(a, b [][]uint64) bool {
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestJobIsolation: two jobs on one switch; one job's traffic and packets
// forged with its addresses against the other's pool never touch the other.
func TestJobIsolation(t *testing.T) {
	a := testJob(1, 2, 1, 0, 4, 4*tVals)
	b := testJob(2, 3, 1, 4, 4, 4*tVals)
	p := mustPipeline(t, a, b)
	var md Metadata
	psn := uint32(0)
	send := func(j *wire.Job, r int, slot uint32, v int32) {
		q := only(slot, 0, v)
		psn++ // every packet a new PSN, as a NIC sends them
		q.qpn, q.psn = j.Workers[r].SwitchQPNs[0], psn
		p.Process(j.Workers[r].Addr, q.parsed(t), &md)
	}
	send(b, 0, 5, 100)
	send(b, 1, 5, 200)
	before := snapshot(p)
	forged := []struct {
		name string
		src  netip.Addr
		q    req
	}{
		{"job A worker into job B's pool", a.Workers[0].Addr, func() req { r := only(5, 0, 1); r.qpn = a.Workers[0].SwitchQPNs[0]; return r }()},
		{"job A worker with job B's QPN", a.Workers[0].Addr, func() req { r := only(5, 0, 1); r.qpn = b.Workers[2].SwitchQPNs[0]; return r }()},
		{"stranger with job B's QPN", netip.MustParseAddr("127.0.0.200"), func() req { r := only(5, 0, 1); r.qpn = b.Workers[2].SwitchQPNs[0]; return r }()},
		{"IPv6 stranger", netip.MustParseAddr("::1"), func() req { r := only(5, 0, 1); r.qpn = b.Workers[2].SwitchQPNs[0]; return r }()},
	}
	for _, f := range forged {
		p.Process(f.src, f.q.parsed(t), &md)
		if md.Decision != Drop || (md.Reason != DropPoolRange && md.Reason != DropUnknownQP) {
			t.Errorf("%s: %v/%v", f.name, md.Decision, md.Reason)
		}
		if !equalSnap(before, snapshot(p)) {
			t.Fatalf("%s changed switch state", f.name)
		}
	}
	// Job A completes its own slot 1 meanwhile; B's partial sum is intact.
	send(a, 0, 1, 1)
	send(a, 1, 1, 2)
	if md.Decision != Broadcast || md.JobID != 1 || emit(t, p, &md)[0].payload[0] != 3 {
		t.Fatalf("job A: %v", md.Decision)
	}
	send(b, 2, 5, 300)
	res := emit(t, p, &md)
	if md.Decision != Broadcast || len(res) != 3 || res[0].payload[0] != 600 {
		t.Fatalf("job B: %v %v", md.Decision, res)
	}
	// IPv4-mapped IPv6 source is the same worker.
	q := only(6, 0, 1)
	q.qpn, q.psn = b.Workers[0].SwitchQPNs[0], 1000
	p.Process(netip.AddrFrom16(b.Workers[0].Addr.As16()), q.parsed(t), &md)
	if md.Decision != Consume {
		t.Errorf("IPv4-mapped source: %v/%v", md.Decision, md.Reason)
	}
	// Removing B clears its slots and table; A is untouched.
	p.RemoveJob(2)
	p.RemoveJob(2)
	if p.SlotsInUse() != 0 || p.Jobs() != 1 || p.SlotsAllocated() != 4 {
		t.Errorf("after remove: %d in use, %d jobs, %d allocated", p.SlotsInUse(), p.Jobs(), p.SlotsAllocated())
	}
	p.Process(b.Workers[0].Addr, q.parsed(t), &md)
	if md.Reason != DropUnknownQP {
		t.Errorf("removed job's packet: %v", md.Reason)
	}
	if p.Counter.Missing(6, 0) != 0 || p.Bitmap.Bitmap(6, 0, 0) != 0 || p.Processor.Value(5, 0, 0) != 0 {
		t.Errorf("removed job's slots not cleared")
	}
	send(a, 0, 1, 1)
	if md.Decision != Unicast {
		t.Errorf("job A after B's removal: %v", md.Decision)
	}
}

func TestAddJobErrors(t *testing.T) {
	base := testJob(1, 2, 2, 0, 8, 4*tVals)
	cases := []struct {
		name string
		job  *wire.Job
		want error
	}{
		{"nil", nil, wire.ErrBadJob},
		{"invalid", &wire.Job{ID: 5}, wire.ErrBadJob},
		{"same id", testJob(1, 1, 1, 20, 4, 256), ErrConflict},
		{"overlapping pool", testJob(2, 1, 1, 7, 4, 256), ErrConflict},
		{"same worker QP", func() *wire.Job {
			j := testJob(3, 1, 1, 20, 4, 256)
			j.Workers[0] = base.Workers[1]
			j.Workers[0].Rank = 0
			return j
		}(), ErrConflict},
		{"pool beyond the switch", testJob(4, 1, 1, 60, 8, 256), ErrCapacity},
		{"payload too big", testJob(5, 1, 1, 20, 4, 2048), ErrCapacity},
		{"too many workers", testJob(6, 129, 1, 20, 4, 256), ErrCapacity},
		{"duplicate QP within the job", func() *wire.Job {
			j := testJob(7, 1, 2, 20, 4, 256)
			j.Workers[0].SwitchQPNs[1] = j.Workers[0].SwitchQPNs[0]
			return j
		}(), wire.ErrBadJob},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPipeline(t, base)
			err := p.AddJob(tc.job)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if p.Jobs() != 1 {
				t.Fatalf("%d jobs after a failed add", p.Jobs())
			}
		})
	}
	if _, err := New(Config{MaxPayload: 12}); err == nil {
		t.Error("New accepted a payload size that is not a multiple of 8")
	}
}

func TestProcessAllocs(t *testing.T) {
	job := testJob(1, 2, 1, 0, 4, 1024)
	p := mustPipeline(t, job)
	pk := [2]*rdma.Packet{}
	for r := range 2 {
		q := req{op: rdma.UCRDMAWriteOnlyWithImm, qpn: job.Workers[r].SwitchQPNs[0], rkey: pi(0, 0), payload: fill(256, 1)}
		pk[r] = q.parsed(t)
	}
	var md Metadata
	buf := make([]byte, 2048)
	allocs := testing.AllocsPerRun(100, func() {
		for r := range 2 {
			p.Process(job.Workers[r].Addr, pk[r], &md)
			for d := 0; d < md.Dests(); d++ {
				p.EncodeResult(&md, d, buf)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per round", allocs)
	}
}

// TestLossSimulator: Config.IngressLoss drops a request after the receiver
// moved its PSN state, as the Tofino program's DropSimulator does (docs/p4.md
// R18): the slot misses that contribution, the rest of the message is taken.
// Config.EgressLoss drops an encoded result, whose PSN stays used.
func TestLossSimulator(t *testing.T) {
	const n = 2
	job := testJob(1, n, 1, tBase, tSlots, 4*tVals)
	var lose, loseOut bool
	p, err := New(Config{PoolSize: 64, MaxPayload: 1024, MaxWorkers: 128,
		IngressLoss: func() bool { return lose }, EgressLoss: func() bool { return loseOut }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddJob(job); err != nil {
		t.Fatal(err)
	}
	send := func(rank int, r req) *Metadata {
		r.qpn = job.Workers[rank].SwitchQPNs[0]
		var md Metadata
		p.Process(job.Workers[rank].Addr, r.parsed(t), &md)
		return &md
	}
	// Rank 0's FIRST is lost after the receiver: its LAST is still in
	// sequence (no DropPSN) and aggregated.
	first := req{op: rdma.UCRDMAWriteFirst, psn: 10, rkey: pi(tBase, 0), msgLen: 2 * 4 * tVals, payload: fill(tVals, 1)}
	last := req{op: rdma.UCRDMAWriteLastWithImm, psn: 11, imm: wire.MakeImm(7, 0, 0), payload: fill(tVals, 1)}
	lose = true
	if md := send(0, first); md.Decision != Drop || md.Reason != DropIngressLoss {
		t.Fatalf("lost FIRST: %v %v", md.Decision, md.Reason)
	}
	lose = false
	if md := send(0, last); md.Decision != Consume {
		t.Fatalf("LAST after a simulated loss: %v %v, want consume (the PSN state moved)", md.Decision, md.Reason)
	}
	// Two one-packet messages complete; the first result to rank 0 is lost
	// at egress, and the next one to rank 0 carries the PSN after it.
	for k, slot := range []uint32{tBase + 4, tBase + 5} {
		var md *Metadata
		for rank := 0; rank < n; rank++ {
			r := only(slot, 0, int32(rank+1))
			r.psn = uint32(20 + k)
			md = send(rank, r)
		}
		if md.Decision != Broadcast {
			t.Fatalf("message %d: %v %v", k, md.Decision, md.Reason)
		}
		if k == 0 {
			loseOut = true
			if _, _, err := p.EncodeResult(md, 0, make([]byte, md.ResultLen())); !errors.Is(err, ErrEgressLoss) {
				t.Fatalf("egress loss: %v", err)
			}
			loseOut = false
			if _, _, err := p.EncodeResult(md, 1, make([]byte, md.ResultLen())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for d, r := range emit(t, p, md) {
			if want := job.Workers[d].PSNs[0] + 1; r.psn != want || r.payload[0] != 3 {
				t.Errorf("second result to rank %d: psn %d sum %d, want psn %d sum 3", d, r.psn, r.payload[0], want)
			}
		}
	}
	if got := p.Counters.Drops[DropIngressLoss]; got != 1 {
		t.Errorf("ingress loss drops %d, want 1", got)
	}
	if got := p.Counters.Drops[DropEgressLoss]; got != 1 {
		t.Errorf("egress loss drops %d, want 1", got)
	}
}
