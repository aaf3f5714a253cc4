package rdma

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// CRCShift combines CRC-32 (IEEE) values: given crc(A) and crc(B), with
// len(B) fixed, it returns crc(A‖B) without reading A or B again,
//
//	crc(A‖B) = shift(crc(A)) ⊕ crc(B)
//
// where shift runs the CRC register over len(B) zero bytes (the pre- and
// post-inversion of CRC-32 cancel out). shift is linear over GF(2), so it
// is precomputed as four 256-entry tables, one per byte of the CRC, and a
// combine is four lookups.
//
// Why: a switch result packet goes to every worker with the same payload
// and different headers. Its ICRC to each worker is the CRC of that
// worker's (pseudo-)headers shifted over the payload, combined with the
// payload's CRC, which is computed once (FlowICRC.SealCombined).
//
// A CRCShift is immutable after NewCRCShift and safe for concurrent use.
type CRCShift struct {
	n int
	t [4][256]uint32
}

// NewCRCShift returns the operator for a suffix B of n bytes (n ≥ 0). It
// costs about 32·n table steps; build it once per length.
func NewCRCShift(n int) *CRCShift {
	if n < 0 {
		panic(fmt.Sprintf("rdma: NewCRCShift(%d): negative length", n))
	}
	s := &CRCShift{n: n}
	var basis [32]uint32
	for bit := range basis {
		v := uint32(1) << bit
		for i := 0; i < n; i++ {
			v = crc32.IEEETable[byte(v)] ^ v>>8
		}
		basis[bit] = v
	}
	for k := range s.t {
		for b := 0; b < 256; b++ {
			var v uint32
			for j := 0; j < 8; j++ {
				if b&(1<<j) != 0 {
					v ^= basis[8*k+j]
				}
			}
			s.t[k][b] = v
		}
	}
	return s
}

// Len is the suffix length the operator was built for.
func (s *CRCShift) Len() int { return s.n }

// Combine returns crc(A‖B) from crcA = crc32.ChecksumIEEE(A) and
// crcB = crc32.ChecksumIEEE(B), where len(B) == s.Len().
func (s *CRCShift) Combine(crcA, crcB uint32) uint32 {
	return s.shift(crcA) ^ crcB
}

func (s *CRCShift) shift(v uint32) uint32 {
	return s.t[0][byte(v)] ^ s.t[1][byte(v>>8)] ^ s.t[2][byte(v>>16)] ^ s.t[3][byte(v>>24)]
}

// SealCombined seals pkt (BTH … ICRC) whose last s.Len() bytes before the
// ICRC (the suffix: a payload shared by several packets) have CRC suffixCRC
// (crc32.ChecksumIEEE of exactly those bytes). Only the bytes in front of
// the suffix are read: sealing one payload for many destinations costs one
// CRC pass over the payload in all, plus a short pass over each packet's
// headers. The result is the same as Seal's.
func (h *FlowICRC) SealCombined(pkt []byte, suffixCRC uint32, s *CRCShift) error {
	if h.n == 0 {
		return fmt.Errorf("rdma: FlowICRC used before Reset")
	}
	end := len(pkt) - ICRCSize - s.n
	if end < BTHSize {
		return ErrTruncated
	}
	pc := h.pseudoCRC(len(pkt))
	saved := pkt[bthResv8a]
	pkt[bthResv8a] = 0xFF
	c := UpdateCRC(pc, pkt[:end])
	pkt[bthResv8a] = saved
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCSize:], s.Combine(c, suffixCRC))
	return nil
}
