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
