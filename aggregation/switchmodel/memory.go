package switchmodel

import "unsafe"

// SlotBytes is the memory of one aggregation slot of a pipeline with c's
// limits (zero fields: the defaults), as New allocates it: both sets' sums
// (Processor: MaxPayload bytes of int32 lanes per set), the workers'
// bitmaps (Bitmap), the missing-worker counters (WorkersCounter) and the
// exponents (Exponents). A pool holds PoolSize × SlotBytes; a front end
// checks that against the memory it has before it starts a switch.
func (c Config) SlotBytes() uint64 {
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxWorkers == 0 {
		c.MaxWorkers = DefaultMaxWorkers
	}
	const sets = 2
	sums := uint64(c.MaxPayload/8) * 8          // Processor.vec: stride uint64s
	bitmap := uint64((c.MaxWorkers+63)/64) * 8  // Bitmap.bits: words uint64s
	counter := uint64(unsafe.Sizeof(uint32(0))) // WorkersCounter.missing
	exps := uint64(unsafe.Sizeof(expState{}))   // Exponents.imm
	return sets * (sums + bitmap + counter + exps)
}
