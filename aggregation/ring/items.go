package ring

// Items: a call's tensor as the sequence of items each rank sends (Ring's
// doc comment, "Algorithm"): item k = step·M + message carries one
// message of a segment. These functions say which elements an item
// carries (itemRange), where it is staged and received in the rank's MR
// (slot: send or receive slot k mod Window) and how its immediate numbers
// it (imm).

import "unsafe"

const ringMaxItems = 1 << 24 // item index bits of the immediate

// ceilDiv is a/b rounded up.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// segment is segment j's element range.
func (rr *Rank) segment(j int) (lo, hi int) {
	n, p := rr.e.n, rr.size
	return j * n / p, (j + 1) * n / p
}

// mod is j mod the ring's size, in [0, size) for a negative j too.
func (rr *Rank) mod(j int) int { return ((j % rr.size) + rr.size) % rr.size }

// itemRange is the element range of item k as sent by rank r.
func (rr *Rank) itemRange(r, k int) (lo, hi int) {
	e := &rr.e
	s, m := k/e.m, k%e.m
	var j int
	if s < rr.size-1 {
		j = rr.mod(r - s) // reduce-scatter
	} else {
		j = rr.mod(r + 1 - (s - (rr.size - 1))) // all-gather
	}
	slo, shi := rr.segment(j)
	lo = min(slo+m*rr.vals, shi)
	return lo, min(lo+rr.vals, shi)
}

// sendRange and recvRange are item k's elements as this rank sends it and
// as it receives it from the left neighbour.
func (rr *Rank) sendRange(k int) (int, int) { return rr.itemRange(rr.rank, k) }

func (rr *Rank) recvRange(k int) (int, int) { return rr.itemRange(rr.rank-1, k) }

// slot is item k's slot in the MR: the send slots from offset 0, the
// receive slots from recvOff.
func (rr *Rank) slot(off uint64, k int) []byte {
	b := rr.mr.Bytes()
	o := off + uint64((k%rr.window)*rr.msgBytes)
	return b[o : o+uint64(rr.msgBytes)]
}

// f32s and i32s view a slot's bytes as elements (host byte order).
func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func i32s(b []byte) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// imm numbers item k of a call: the epoch in bits 31–24, k below.
func (rr *Rank) imm(epoch uint8, k int) uint32 { return uint32(epoch)<<24 | uint32(k) }
