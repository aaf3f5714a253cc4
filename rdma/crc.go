package rdma

import (
	"encoding/binary"
	"hash/crc32"
)

// Every ICRC pass goes through UpdateCRC, so that the CRC of a packet runs
// on the folding kernel whatever its length. On amd64, crc32.Update with
// IEEETable folds 16 bytes at a time with carry-less multiplication over
// the largest multiple of 16 of a buffer of 64 bytes or more, and takes the
// remaining len%16 bytes one table lookup each, every lookup waiting for
// the one before: a UC MIDDLE packet (12-byte BTH, 1 KiB payload) spent
// about as long on its last 12 bytes as on the 1024 before them
// (docs/benchmarks.md "ICRC and CRC combination"). A CRC can be continued
// from any point, so UpdateCRC takes those len%16 bytes at the front
// instead, eight and four at a time (slicing-by-8 and -by-4: independent
// lookups), and hands the kernel a multiple of 16.

// crcSlicing is the slicing-by-8 table of CRC-32 (IEEE), reflected:
// crcSlicing[0] is crc32.IEEETable and crcSlicing[k][b] the CRC register
// after byte b and k zero bytes.
var crcSlicing = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for b := range 256 {
		c := t[0][b]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][b] = c
		}
	}
	return t
}()

// crcFoldMin is the shortest buffer crc32 hands to its folding kernel.
const crcFoldMin = 64

// UpdateCRC returns crc32.Update(crc, crc32.IEEETable, p): the same value,
// computed so that the standard library's folding kernel covers all of p
// but its first len(p)%16 bytes, which are hashed eight and four at a time,
// as is all of a buffer too short to fold (a packet's headers).
func UpdateCRC(crc uint32, p []byte) uint32 {
	if len(p) < crcFoldMin+16 {
		return crcSliced(crc, p)
	}
	if head := len(p) & 15; head != 0 {
		crc = crcSliced(crc, p[:head])
		p = p[head:]
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}

// crcSliced is crc32.Update with slicing-by-8 down to the last 4 bytes,
// where crc32's own slicing takes up to 8 bytes one at a time.
func crcSliced(crc uint32, p []byte) uint32 {
	t := crcSlicing
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xFF] ^ t[6][crc>>8&0xFF] ^ t[7][crc&0xFF]
		p = p[8:]
	}
	if len(p) >= 4 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][crc>>24] ^ t[1][crc>>16&0xFF] ^ t[2][crc>>8&0xFF] ^ t[3][crc&0xFF]
		p = p[4:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}
