package rdma

import (
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

func TestCRCShiftCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name         string
		lenA, lenB   int
		combinations int
	}{
		{"empty suffix", 37, 0, 4},
		{"one byte", 12, 1, 16},
		{"odd", 5, 7, 16},
		{"empty prefix", 0, 64, 4},
		{"1 KiB payload", 28, 1024, 16},
		{"4 KiB payload", 44, 4096, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCRCShift(tc.lenB)
			if s.Len() != tc.lenB {
				t.Fatalf("Len() = %d, want %d", s.Len(), tc.lenB)
			}
			for i := 0; i < tc.combinations; i++ {
				ab := make([]byte, tc.lenA+tc.lenB)
				for j := range ab {
					ab[j] = byte(r.Uint32())
				}
				a, b := ab[:tc.lenA], ab[tc.lenA:]
				want := crc32.ChecksumIEEE(ab)
				if got := s.Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b)); got != want {
					t.Fatalf("Combine = %#08x, want crc(A‖B) = %#08x", got, want)
				}
			}
		})
	}
}

func TestSealCombinedMatchesSeal(t *testing.T) {
	flows := map[string]Flow{
		"IPv4": {Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: UDPPort, DstPort: UDPPort, DF: true},
		"IPv6": {Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 50000, DstPort: UDPPort},
	}
	for fname, flow := range flows {
		for _, op := range []Opcode{UCRDMAWriteFirst, UCRDMAWriteMiddle, UCRDMAWriteLastWithImm, UCRDMAWriteOnlyWithImm} {
			for _, size := range []int{0, 256, 1024} {
				t.Run(fname+"/"+op.String()+"/"+sizeName(size), func(t *testing.T) {
					pkt := make([]byte, PacketLen(op, size))
					pf := PacketFields{
						BTH:  BTHFields{Opcode: op, PKey: DefaultPKey, DestQP: 0x123456, PSN: 0xABCDEF},
						RETH: RETHFields{VA: 0x1000, RKey: 7, DMALen: 4096},
						Imm:  0xDEADBEEF,
					}
					off, err := pf.Encode(pkt, size)
					if err != nil {
						t.Fatal(err)
					}
					for i := range size {
						pkt[off+i] = byte(i*7 + 3)
					}
					var h FlowICRC
					h.Reset(&flow)
					if err := h.Seal(pkt); err != nil {
						t.Fatal(err)
					}
					want := StoredICRC(pkt)
					clear(pkt[len(pkt)-ICRCSize:])
					s := NewCRCShift(size)
					payloadCRC := crc32.ChecksumIEEE(pkt[off : off+size])
					if err := h.SealCombined(pkt, payloadCRC, s); err != nil {
						t.Fatal(err)
					}
					if got := StoredICRC(pkt); got != want {
						t.Fatalf("SealCombined ICRC = %#08x, Seal's = %#08x", got, want)
					}
					if err := h.Verify(pkt); err != nil {
						t.Fatalf("Verify after SealCombined: %v", err)
					}
					if a := testing.AllocsPerRun(100, func() { h.SealCombined(pkt, payloadCRC, s) }); a != 0 {
						t.Errorf("SealCombined allocates %v times per packet", a)
					}
				})
			}
		}
	}
	var h FlowICRC
	h.Reset(&Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")})
	if err := h.SealCombined(make([]byte, BTHSize+ICRCSize+10), 0, NewCRCShift(11)); err != ErrTruncated {
		t.Errorf("suffix overlapping the BTH: err = %v, want ErrTruncated", err)
	}
}

// BenchmarkSealResults seals one result packet for each of 4 workers:
// `direct` with a FlowICRC.Seal per worker (4 CRC passes over the payload),
// `combined` with one payload CRC and a FlowICRC.SealCombined per worker.
// combined_vs_direct = direct time ÷ combined time, measured alternately in
// the same benchmark.
func BenchmarkSealResults(b *testing.B) {
	const workers = 4
	for _, size := range []int{256, 1024, 4096} {
		b.Run(sizeName(size), func(b *testing.B) {
			op := UCRDMAWriteMiddle
			pkts := make([][]byte, workers)
			hs := make([]FlowICRC, workers)
			for w := range pkts {
				pkts[w] = make([]byte, PacketLen(op, size))
				pf := PacketFields{BTH: BTHFields{Opcode: op, DestQP: uint32(100 + w)}}
				pf.Encode(pkts[w], size)
				hs[w].Reset(&Flow{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + w)}), SrcPort: UDPPort, DstPort: UDPPort, DF: true})
			}
			s := NewCRCShift(size)
			off := BTHSize
			direct := func() {
				for w := range pkts {
					hs[w].Seal(pkts[w])
				}
			}
			combined := func() {
				c := crc32.ChecksumIEEE(pkts[0][off : off+size])
				for w := range pkts {
					hs[w].SealCombined(pkts[w], c, s)
				}
			}
			b.ReportAllocs()
			b.SetBytes(int64(workers * size))
			const block = 256
			var tDirect, tComb time.Duration
			for done := 0; done < b.N; done += block {
				k := min(block, b.N-done)
				t0 := time.Now()
				for i := 0; i < k; i++ {
					direct()
				}
				t1 := time.Now()
				for i := 0; i < k; i++ {
					combined()
				}
				tDirect += t1.Sub(t0)
				tComb += time.Since(t1)
			}
			b.ReportMetric(float64(tDirect)/float64(tComb), "combined_vs_direct")
			b.ReportMetric(float64(tComb.Nanoseconds())/float64(b.N), "combined_ns/op")
		})
	}
}
