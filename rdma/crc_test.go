package rdma

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestUpdateCRC: UpdateCRC is crc32.Update with the IEEE table for every
// length up to a few packets' headers past the folding threshold, from any
// starting CRC and at any alignment of the buffer.
func TestUpdateCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4200)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for _, n := range append(rangeInts(0, 300), 1036, 1052, 1040, 4108, 4124) {
		for _, off := range []int{0, 1, 7} {
			p := buf[off : off+n]
			for _, c := range []uint32{0, 0xFFFFFFFF, r.Uint32()} {
				if got, want := UpdateCRC(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
					t.Fatalf("UpdateCRC(%#x, %d bytes at +%d) = %#x, want %#x", c, n, off, got, want)
				}
			}
		}
	}
}

func rangeInts(lo, hi int) []int {
	var s []int
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// BenchmarkUpdateCRC times UpdateCRC against crc32.Update over the covered
// bytes of a UC FIRST, MIDDLE and LAST-with-immediate packet of 1 KiB (and
// a MIDDLE of 4 KiB): the lengths whose tail crc32 takes a byte at a time.
func BenchmarkUpdateCRC(b *testing.B) {
	for _, n := range []int{1052, 1036, 1040, 4108} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		b.Run(itoa(n)+"B/crc32", func(b *testing.B) {
			b.SetBytes(int64(n))
			var c uint32
			for b.Loop() {
				c = crc32.Update(c, crc32.IEEETable, p)
			}
		})
		b.Run(itoa(n)+"B/UpdateCRC", func(b *testing.B) {
			b.SetBytes(int64(n))
			var c uint32
			for b.Loop() {
				c = UpdateCRC(c, p)
			}
		})
	}
}
