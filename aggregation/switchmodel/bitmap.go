package switchmodel

// BitmapChecker holds, per slot, one bitmap of workers per set. A packet for
// set s ORs its worker's bit into s and clears it in ¬s; if the bit was
// already set in s the packet is a retransmission. Clearing ¬s is what lets
// a slot be reused: a worker only sends set s for a slot after it received
// the result of set ¬s for it, so by the time every worker has moved on to
// ¬s, set s is empty again. P4: p4/rdma_switch BitmapChecker.
type BitmapChecker struct {
	words int      // 64-bit words per bitmap
	bits  []uint64 // [(slot·2 + set)·words + w/64]
}

func (b *BitmapChecker) init(pool uint32, maxWorkers int) {
	b.words = (maxWorkers + 63) / 64
	b.bits = make([]uint64, int(pool)*2*b.words)
}

func (b *BitmapChecker) clear(lo, hi uint32) {
	clear(b.bits[int(lo)*2*b.words : int(hi)*2*b.words])
}

// Check sets md.Retransmission.
func (b *BitmapChecker) Check(md *Metadata) {
	w := md.Rank
	bit := uint64(1) << (w & 63)
	base := int(md.slot) * 2 * b.words
	mine := base + int(md.set)*b.words + w>>6
	other := base + int(md.set^1)*b.words + w>>6
	md.Retransmission = b.bits[mine]&bit != 0
	b.bits[mine] |= bit
	b.bits[other] &^= bit
}

// Bitmap returns the bitmap word of set of slot that holds worker w's bit
// (for tests and debugging).
func (b *BitmapChecker) Bitmap(slot uint32, set uint8, w int) uint64 {
	return b.bits[(int(slot)*2+int(set&1))*b.words+w>>6]
}

// WorkersCounter holds, per (slot, set), the number of contributions still
// missing. A new contribution that finds 0 is the first of a new round and
// sets it to n−1; others decrement; the one that brings it to 0 is the last.
// A retransmission only reads it: 0 means the slot is complete. P4:
// p4/rdma_switch WorkersCounter.
type WorkersCounter struct {
	missing []uint32 // [slot·2 + set]
}

func (c *WorkersCounter) init(pool uint32) { c.missing = make([]uint32, int(pool)*2) }

func (c *WorkersCounter) clear(lo, hi uint32) { clear(c.missing[lo*2 : hi*2]) }

// Count sets md.FirstContribution, md.LastContribution and md.Complete.
func (c *WorkersCounter) Count(md *Metadata) {
	i := md.slot*2 + uint32(md.set)
	m := c.missing[i]
	if md.Retransmission {
		md.Complete = m == 0
		return
	}
	if m == 0 {
		md.FirstContribution = true
		m = uint32(md.job.n)
	}
	m--
	c.missing[i] = m
	md.LastContribution = m == 0
	md.Complete = m == 0
}

// Missing returns the counter of (slot, set) (for tests and debugging).
func (c *WorkersCounter) Missing(slot uint32, set uint8) uint32 {
	return c.missing[slot*2+uint32(set&1)]
}
