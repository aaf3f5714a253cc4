package benchmark

import (
	"context"
	"runtime"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// identity is the all-reduce of a one-worker job: the input is the sum.
type identity struct{}

func (identity) AllReduce(context.Context, []float32) error    { return nil }
func (identity) AllReduceInt32(context.Context, []int32) error { return nil }

// TestRunReusesBuffers: a second Run with the same Buffers allocates no
// tensor (the embedded bench's ring baseline after SwitchML: one set of
// tensors, not two, docs/operations.md "Memory"); one without allocates
// one per reducer.
func TestRunReusesBuffers(t *testing.T) {
	const elements = 1 << 20 // 4 MiB per tensor
	for _, dt := range []wire.DType{wire.Float32, wire.Int32} {
		in, err := NewInputs(dt, 1, elements)
		if err != nil {
			t.Fatal(err)
		}
		allocated := func(b *Buffers) uint64 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := Run(context.Background(), []AllReducer{identity{}}, Config{Inputs: in, Iters: 2, Buffers: b}); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			return after.TotalAlloc - before.TotalAlloc
		}
		b := new(Buffers)
		allocated(b)
		if got := allocated(b); got >= 4*elements/2 {
			t.Errorf("%v: the second Run with the same Buffers allocated %d bytes, want far less than a %d-byte tensor", dt, got, 4*elements)
		}
		if got := allocated(nil); got < 4*elements {
			t.Errorf("%v: a Run without Buffers allocated %d bytes, less than its %d-byte tensor: the test measures nothing", dt, got, 4*elements)
		}
	}
}
