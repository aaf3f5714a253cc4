package swswitch

import (
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/rdma"
)

// BenchmarkSchedule orders one batch of results for GSO: 4 workers × 8 QPs,
// each QP a message of a FIRST, four MIDDLEs and a LAST, the packets
// interleaved as slots complete (every QP at the same stage), 192 packets.
func BenchmarkSchedule(b *testing.B) {
	e0, _ := testEngine(b, engineV4, ICRCVerify)
	e := newEngine(engineV4, ICRCVerify, e0.pipe, 256)
	sizes := []int{1056, 1040, 1040, 1040, 1040, 1044}
	for psn, size := range sizes {
		for qp := uint32(1); qp <= 8; qp++ {
			for dst := byte(2); dst < 6; dst++ {
				m := &e.out[e.nout]
				m.N = size
				m.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 77, 200, dst}), rdma.UDPPort)
				b := m.Bytes()
				clear(b)
				rdma.BTH(b).Encode(&rdma.BTHFields{Opcode: rdma.UCRDMAWriteMiddle, DestQP: qp, PSN: uint32(psn)})
				e.nout++
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if len(e.schedule()) != e.nout {
			b.Fatal("packets lost")
		}
	}
}
