package aggregation

import "context"

// AllReducer is one rank's all-reduce: a *Session (through the switch) or
// a *ring.Rank (the ring all-reduce of package aggregation/ring, the
// baseline SwitchML is measured against). Each call replaces x by the
// element-wise sum over every rank's x; every rank calls it with a tensor
// of the same length and element type. Code that measures or checks
// all-reduces (the benchmark loop) takes AllReducers and so runs either.
//
// Concurrency: as the implementation says; both run one call at a time per
// rank and must not be given x again before the call returns.
type AllReducer interface {
	// AllReduce sums float32 tensors (SwitchML: block floating point,
	// docs/quantization.md; the ring: in float32, in ring order).
	AllReduce(ctx context.Context, x []float32) error
	// AllReduceInt32 sums int32 tensors exactly, wrapping on overflow.
	AllReduceInt32(ctx context.Context, x []int32) error
}

var _ AllReducer = (*Session)(nil)
