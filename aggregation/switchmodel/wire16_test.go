package switchmodel

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// The 16-bit wire (docs/wire-format.md "Payload"): a job with
// ElementBytes 2 sends big-endian int16 lanes, which the Processor sums
// with 16-bit wrapping adds; everything else of the pipeline is the
// 32-bit wire's.

// testJob16 is testJob with int16 lanes.
func testJob16(id uint32, n, q int, poolBase, poolSlots uint32, payload int) *wire.Job {
	j := testJob(id, n, q, poolBase, poolSlots, payload)
	j.DType, j.ElementBytes = wire.Float32, 2
	return j
}

// pack16 lays int16 values out as req.payload's int32s so that the packet
// carries them big-endian in order: element 2i in the high half of int32 i.
func pack16(v []int16) []int32 {
	out := make([]int32, (len(v)+1)/2)
	for i, x := range v {
		out[i/2] |= int32(uint32(uint16(x)) << (16 * (1 - i&1)))
	}
	return out
}

// unpack16 is pack16's inverse: the int16 values a result payload carries.
func unpack16(p []int32) []int16 {
	out := make([]int16, 2*len(p))
	for i, w := range p {
		out[2*i], out[2*i+1] = int16(uint32(w)>>16), int16(w)
	}
	return out
}

func fill16(n int, v int16) []int32 {
	s := make([]int16, n)
	for i := range s {
		s[i] = v
	}
	return pack16(s)
}

// accumulate16Reference sums lane by lane with Go's int16 arithmetic, which
// wraps; the kernels must equal it bit for bit.
func accumulate16Reference(v []uint64, b []byte) {
	var acc [8]byte
	for k := range v {
		binary.BigEndian.PutUint64(acc[:], v[k])
		for l := 0; l < 8; l += 2 {
			s := int16(binary.BigEndian.Uint16(acc[l:])) + int16(binary.BigEndian.Uint16(b[8*k+l:]))
			binary.BigEndian.PutUint16(acc[l:], uint16(s))
		}
		v[k] = binary.BigEndian.Uint64(acc[:])
	}
}

func TestVectorKernels16(t *testing.T) {
	t.Logf("kernels: %s", vecKernels)
	rng := rand.New(rand.NewPCG(3, 4))
	edges := []uint16{0x7FFF, 0x8000, 0xFFFF, 0x0001, 0x0000, 0x7FFE, 0x8001}
	for _, n := range []int{8, 16, 24, 40, 128, 136, 256, 1024, 4096} {
		for trial := range 4 {
			b := make([]byte, n)
			acc := make([]uint64, n/8)
			for i := 0; i < n; i += 2 {
				x := uint16(rng.Uint32())
				if trial < 2 { // lanes at the edges, where adds wrap
					x = edges[rng.IntN(len(edges))]
				}
				binary.BigEndian.PutUint16(b[i:], x)
			}
			for i := range acc {
				acc[i] = rng.Uint64()
				if trial < 2 {
					for range 4 {
						acc[i] = acc[i]<<16 | uint64(edges[rng.IntN(len(edges))])
					}
				}
			}
			want, generic, got := slices.Clone(acc), slices.Clone(acc), slices.Clone(acc)
			accumulate16Reference(want, b)
			accumulate16Generic(generic, b)
			accumulate16(got, b)
			if !slices.Equal(generic, want) {
				t.Fatalf("accumulate16Generic of %d bytes differs from the lane-by-lane reference", n)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("accumulate16 (%s) of %d bytes differs from the lane-by-lane reference", vecKernels, n)
			}
		}
	}
}

// TestWrappingAdd16: int16 lanes wrap modulo 2^16 at both edges and carry
// nothing into the neighbouring lane; the same bytes in a 32-bit job give
// int32 sums.
func TestWrappingAdd16(t *testing.T) {
	vals := [][]int16{
		{math.MaxInt16, math.MinInt16, -1, 0, 12345, math.MaxInt16, -1, 1},
		{1, -1, -1, 0, -12345, math.MaxInt16, 1, -1},
		{0, 0, math.MinInt16, 5, 0, 2, 0, 0},
	}
	want := []int16{math.MinInt16, math.MaxInt16, math.MaxInt16 - 1, 5, 0, 0, 0, 0}
	job := testJob16(1, 3, 1, 0, 4, 2*2*tVals)
	p := mustPipeline(t, job)
	var md Metadata
	for r := range vals {
		q := only(0, 0, 0)
		q.payload = pack16(append(slices.Clone(vals[r]), make([]int16, 2*tVals-len(vals[r]))...))
		q.qpn = job.Workers[r].SwitchQPNs[0]
		p.Process(job.Workers[r].Addr, q.parsed(t), &md)
	}
	if md.Decision != Broadcast {
		t.Fatalf("last contribution: %v", md.Decision)
	}
	for _, res := range emit(t, p, &md) {
		if got := unpack16(res.payload)[:len(want)]; !slices.Equal(got, want) {
			t.Errorf("result to %v: %v, want %v", res.dst, got, want)
		}
	}
	for i, w := range want {
		if got := p.Processor.Value16(0, 0, i); got != w {
			t.Errorf("element %d in the slot: %d, want %d", i, got, w)
		}
	}
}

// TestMixedWidths: a 32-bit and a 16-bit job side by side in one pipeline,
// their packets interleaved, each carrying the same bytes: each job's sum
// has its own lane width (a carry out of bit 15 crosses into the next
// int16 lane only on the 32-bit wire, where it is not a lane boundary).
func TestMixedWidths(t *testing.T) {
	const n = 3
	a := testJob(1, n, 1, 0, 4, 2*2*tVals)
	b := testJob16(2, n, 1, 4, 4, 2*2*tVals)
	p := mustPipeline(t, a, b)
	rng := rand.New(rand.NewPCG(5, 6))
	payload := make([][]int32, n)
	for r := range payload {
		payload[r] = make([]int32, tVals)
		for i := range payload[r] {
			payload[r][i] = int32(rng.Uint32())
		}
		payload[r][0] = 0x0000_FFFF // the 32-bit sum carries into bit 16
	}
	var md Metadata
	results := map[uint32][]result{}
	for r := range n {
		for _, j := range []*wire.Job{a, b} {
			q := only(j.PoolBase+1, 1, 0)
			q.payload = payload[r]
			q.qpn = j.Workers[r].SwitchQPNs[0]
			p.Process(j.Workers[r].Addr, q.parsed(t), &md)
			if md.JobID != j.ID {
				t.Fatalf("packet of job %d matched job %d", j.ID, md.JobID)
			}
			if md.Decision == Broadcast {
				results[j.ID] = emit(t, p, &md)
			}
		}
	}
	want32 := make([]int32, tVals)
	want16 := make([]int16, 2*tVals)
	for r := range n {
		for i, v := range payload[r] {
			want32[i] += v
		}
		for i, v := range unpack16(payload[r]) {
			want16[i] += v
		}
	}
	if slices.Equal(pack16(want16), want32) {
		t.Fatal("the payloads do not tell the widths apart")
	}
	if len(results[1]) != n || len(results[2]) != n {
		t.Fatalf("results: %d of the 32-bit job, %d of the 16-bit job", len(results[1]), len(results[2]))
	}
	for d := range n {
		if got := results[1][d].payload; !slices.Equal(got, want32) {
			t.Errorf("32-bit job, rank %d: %#x…, want %#x…", d, got[:2], want32[:2])
		}
		if got := unpack16(results[2][d].payload); !slices.Equal(got, want16) {
			t.Errorf("16-bit job, rank %d: %v…, want %v…", d, got[:4], want16[:4])
		}
	}
}

// TestResend16: on the 16-bit wire a retransmission adds nothing: into an
// incomplete slot it is dropped, into a completed one it is answered to
// its sender with the stored 16-bit sum (every packet of a resent
// message), and the exponents are the 32-bit wire's.
func TestResend16(t *testing.T) {
	const n, qp = 2, 0
	job := testJob16(1, n, 1, tBase, tSlots, 2*2*tVals)
	p := mustPipeline(t, job)
	const msgLen = 2 * 2 * 2 * tVals
	vals := func(rank, k int) []int16 {
		v := make([]int16, 2*tVals)
		for i := range v {
			v[i] = int16(1000*(rank+1) + 100*k + i)
		}
		if rank == 0 {
			v[0] = math.MaxInt16 // wraps with rank 1's 1000+
		}
		return v
	}
	send := func(rank, k int, psn uint32) *Metadata {
		ops := []rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteLastWithImm}
		r := req{op: ops[k], qpn: job.Workers[rank].SwitchQPNs[qp], psn: psn, rkey: pi(tBase+2, 0), msgLen: msgLen,
			imm: wire.MakeImm(7, int8(rank), -int8(rank)), payload: pack16(vals(rank, k))}
		var md Metadata
		p.Process(job.Workers[rank].Addr, r.parsed(t), &md)
		return &md
	}
	sum := func(k int) []int16 {
		s := make([]int16, 2*tVals)
		for r := range n {
			for i, v := range vals(r, k) {
				s[i] += v
			}
		}
		return s
	}
	if md := send(0, 0, 10); md.Decision != Consume {
		t.Fatalf("rank 0 packet 0: %v", md.Decision)
	}
	if md := send(0, 0, 11); md.Decision != Drop || md.Reason != DropRetransmitIncomplete {
		t.Fatalf("rank 0 resends packet 0 into an incomplete slot: %v/%v", md.Decision, md.Reason)
	}
	send(0, 1, 12)
	if md := send(1, 0, 20); md.Decision != Broadcast {
		t.Fatalf("rank 1 packet 0: %v", md.Decision)
	} else if res := emit(t, p, md); len(res) != n || !slices.Equal(unpack16(res[1].payload), sum(0)) {
		t.Fatalf("broadcast of packet 0: %v", res)
	}
	if md := send(1, 1, 21); md.Decision != Broadcast {
		t.Fatalf("rank 1 packet 1: %v", md.Decision)
	} else if res := emit(t, p, md); len(res) != n || res[0].imm != wire.MakeImm(7, 1, 0) {
		t.Fatalf("broadcast of packet 1: %v", res)
	}
	for k := range 2 {
		md := send(0, k, uint32(30+k))
		if md.Decision != Unicast {
			t.Fatalf("rank 0 resends packet %d into the completed slot: %v", k, md.Decision)
		}
		res := emit(t, p, md)
		if len(res) != 1 || res[0].dst != job.Workers[0].Addr {
			t.Fatalf("resend of packet %d: %v", k, res)
		}
		if got := unpack16(res[0].payload); !slices.Equal(got, sum(k)) {
			t.Errorf("resend of packet %d answered %v…, want the stored sum %v…", k, got[:3], sum(k)[:3])
		}
	}
	if got, want := p.Processor.Value16(tBase+2, 0, 0), sum(0)[0]; got != want || want >= 0 {
		t.Errorf("stored element 0: %d, want %d (wrapped below 0)", got, want)
	}
}

// TestRandomSums16: many 16-bit jobs' rounds of random int16 lanes, of
// every packet size, against Go's wrapping int16 sum.
func TestRandomSums16(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, size := range []int{256, 1024} {
		const n = 5
		job := testJob16(1, n, 1, 0, 2, size)
		p := mustPipeline(t, job)
		var md Metadata
		psn := make([]uint32, n)
		for round := range 20 {
			set := uint8(round & 1)
			sum := make([]int16, size/2)
			var res []result
			for r := range n {
				v := make([]int16, size/2)
				for i := range v {
					v[i] = int16(rng.Uint32())
					sum[i] += v[i]
				}
				q := req{op: rdma.UCRDMAWriteOnlyWithImm, qpn: job.Workers[r].SwitchQPNs[0], psn: psn[r], rkey: pi(1, set),
					msgLen: uint32(size), payload: pack16(v)}
				psn[r]++
				p.Process(job.Workers[r].Addr, q.parsed(t), &md)
				res = append(res, emit(t, p, &md)...)
			}
			if len(res) != n {
				t.Fatalf("size %d round %d: %d results", size, round, len(res))
			}
			for _, x := range res {
				if got := unpack16(x.payload); !slices.Equal(got, sum) {
					t.Fatalf("size %d round %d: result to %v differs from the int16 sum", size, round, x.dst)
				}
			}
		}
	}
}
