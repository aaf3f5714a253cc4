package switchmodel

import (
	"testing"

	"github.com/swml-rdma/swml-rdma/rdma"
)

// BenchmarkPipeline pushes 1 KiB packets of 4-packet messages from 4
// workers through the pipeline, round after round over 64 slots with
// alternating sets, and encodes every result packet into a buffer. One op is
// one request packet; the result packets it triggers (4 per 4 requests on
// average) are included. The wire16 cases run a job of the 16-bit wire
// (int16 lanes).
func BenchmarkPipeline(b *testing.B) {
	for _, bc := range []struct {
		name    string
		payload int
		encode  bool
		wire16  bool
	}{
		{"1KiB", 1024, true, false},
		{"1KiB/process-only", 1024, false, false},
		{"256B", 256, true, false},
		{"4KiB", 4096, true, false},
		{"1KiB/wire16", 1024, true, true},
		{"1KiB/wire16/process-only", 1024, false, true},
	} {
		b.Run(bc.name, func(b *testing.B) { benchPipeline(b, bc.payload, bc.encode, bc.wire16) })
	}
}

func benchPipeline(b *testing.B, payload int, encode, wire16 bool) {
	const n, q, ppm, slots = 4, 16, 4, 16 * 4
	job := testJob(1, n, q, 0, slots, payload)
	if wire16 {
		job = testJob16(1, n, q, 0, slots, payload)
	}
	p, err := New(Config{PoolSize: slots, MaxPayload: payload})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.AddJob(job); err != nil {
		b.Fatal(err)
	}
	ops := [ppm]rdma.Opcode{rdma.UCRDMAWriteFirst, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteMiddle, rdma.UCRDMAWriteLastWithImm}
	// pk[set][qp][k][rank]
	var pk [2][q][ppm][n]*rdma.Packet
	for set := range 2 {
		for i := range q {
			for k := range ppm {
				for r := range n {
					rq := req{op: ops[k], qpn: job.Workers[r].SwitchQPNs[i], rkey: pi(uint32(i*ppm), uint8(set)),
						msgLen: uint32(ppm * payload), imm: 0x10203, payload: fill(payload/4, int32(r))}
					pk[set][i][k][r] = rq.parsed(b)
				}
			}
		}
	}
	var psn [q][n]uint32
	var md Metadata
	buf := make([]byte, 8192)
	b.SetBytes(int64(payload))
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for round := 0; done < b.N; round++ {
		set := round & 1
		for i := 0; i < q && done < b.N; i++ {
			for k := 0; k < ppm; k++ {
				for r := 0; r < n; r++ {
					pkt := pk[set][i][k][r]
					pkt.BTH.SetPSN(psn[i][r])
					psn[i][r]++
					p.Process(job.Workers[r].Addr, pkt, &md)
					if encode {
						for d := 0; d < md.Dests(); d++ {
							p.EncodeResult(&md, d, buf)
						}
					}
				}
			}
			done += ppm * n
		}
	}
	b.StopTimer()
	if p.Counters.Drops != [NumDropReasons]uint64{} || p.Counters.Retransmissions != 0 {
		b.Fatalf("unexpected drops: %+v", p.Counters)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/pkt")
}
