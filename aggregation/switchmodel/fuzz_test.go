package switchmodel

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// FuzzProcess runs any packet rdma.Packet.Parse accepts, from a job's
// workers or a stranger, through a pipeline that keeps its state across
// inputs: it must never panic, and every result is either encoded to its
// full length or skipped as out of order for that worker QP (the stream rule
// of txPos, which state left by earlier inputs can trigger), nothing else.
// The pipeline holds a job of each wire width (int32 and int16 lanes).
func FuzzProcess(f *testing.F) {
	job := testJob(1, 3, 2, 4, 8, 256)
	job16 := testJob16(2, 2, 2, 12, 8, 256)
	p := mustPipeline(f, job, job16)
	srcs := []netip.Addr{netip.MustParseAddr("127.0.9.9"), netip.MustParseAddr("::1")}
	for _, j := range []*wire.Job{job, job16} {
		for _, w := range j.Workers {
			srcs = append(srcs, w.Addr)
		}
	}
	for _, op := range []rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteLastWithImm, rdma.UCRDMAWriteOnlyWithImm, rdma.UCRDMAWriteOnly} {
		for r := range 3 {
			q := req{op: op, qpn: job.Workers[r].SwitchQPNs[1], rkey: pi(5, 1), payload: fill(64, int32(r))}
			f.Add(q.bytes(f), uint8(2+r))
		}
		for r := range 2 {
			q := req{op: op, qpn: job16.Workers[r].SwitchQPNs[1], rkey: pi(13, 1), payload: fill16(128, int16(-1-r))}
			f.Add(q.bytes(f), uint8(5+r))
		}
	}
	var md Metadata
	buf := make([]byte, 2048)
	f.Fuzz(func(t *testing.T, data []byte, src uint8) {
		var pk rdma.Packet
		if pk.Parse(data) != nil {
			return
		}
		p.Process(srcs[int(src)%len(srcs)], &pk, &md)
		for d := 0; d < md.Dests(); d++ {
			skipped := p.Counters.ResultsSkipped
			n, _, err := p.EncodeResult(&md, d, buf)
			switch {
			case err == nil && n == md.ResultLen():
			case errors.Is(err, ErrOutOfOrder) && n == 0 && p.Counters.ResultsSkipped == skipped+1:
			default:
				t.Fatalf("result %d: %d bytes (want %d), %v", d, n, md.ResultLen(), err)
			}
		}
	})
}

// FuzzLeaf is FuzzProcess for a leaf job (SetUpstream) with packets from
// its workers, its spine and strangers: it must never panic, writes up and
// results down are encoded whole or skipped as out of order, and a held
// slot's release (NextResult) is encoded like any broadcast.
func FuzzLeaf(f *testing.F) {
	job := testJob(1, 3, 2, 4, 8, 256) // 2 QPs × 4 packets per message
	p := mustPipeline(f, job)
	spine := netip.MustParseAddr("127.0.8.1")
	if err := p.SetUpstream(1, &Upstream{Addr: spine, QPNs: []uint32{0x900, 0x901}, PSNs: []uint32{1, 2}, PoolBase: 40,
		RecvQPNs: []uint32{0x700, 0x701}, RecvPSNs: []uint32{100, 200}}); err != nil {
		f.Fatal(err)
	}
	srcs := []netip.Addr{spine, netip.MustParseAddr("127.0.9.9")}
	for _, w := range job.Workers {
		srcs = append(srcs, w.Addr)
	}
	for _, op := range []rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteLastWithImm, rdma.UCRDMAWriteOnlyWithImm} {
		for r := range 3 {
			q := req{op: op, qpn: job.Workers[r].SwitchQPNs[1], rkey: pi(8, 1), payload: fill(64, int32(r))}
			f.Add(q.bytes(f), uint8(2+r))
		}
	}
	for k := range 5 {
		q := req{op: rdma.UCRDMAWriteOnlyWithImm, qpn: 0x701, psn: uint32(200 + k), va: uint64(pi(44+uint32(k), 1)), rkey: 0x77, msgLen: 256, payload: fill(64, 9)}
		f.Add(q.bytes(f), uint8(0))
	}
	var md Metadata
	buf := make([]byte, 2048)
	f.Fuzz(func(t *testing.T, data []byte, src uint8) {
		var pk rdma.Packet
		if pk.Parse(data) != nil {
			return
		}
		p.Process(srcs[int(src)%len(srcs)], &pk, &md)
		for more := true; more; more = p.NextResult(&md) {
			for d := 0; d < md.Dests(); d++ {
				skipped := p.Counters.ResultsSkipped
				n, _, err := p.EncodeResult(&md, d, buf)
				switch {
				case err == nil && n == md.ResultLen():
				case errors.Is(err, ErrOutOfOrder) && n == 0 && p.Counters.ResultsSkipped == skipped+1:
				default:
					t.Fatalf("result %d of %v: %d bytes (want %d), %v", d, md.Decision, n, md.ResultLen(), err)
				}
			}
		}
	})
}
