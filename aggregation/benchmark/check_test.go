package benchmark

import (
	"math"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestChecker feeds the result check exact sums (accepted) and results
// broken in each way it must catch.
func TestChecker(t *testing.T) {
	const workers, n = 3, 1000
	in, _ := MakeInputs(wire.Float32, workers, n)
	_, inI := MakeInputs(wire.Int32, workers, n)
	c, err := NewChecker(wire.Float32, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	cI, err := NewChecker(wire.Int32, nil, inI)
	if err != nil {
		t.Fatal(err)
	}
	sums := func() ([][]float32, [][]int32) {
		out := [][]float32{make([]float32, n), make([]float32, n)}
		outI := [][]int32{make([]int32, n), make([]int32, n)}
		for i := range n {
			var s float64
			var sI int32
			for r := range workers {
				s += float64(in[r][i])
				sI += inI[r][i]
			}
			out[0][i], out[1][i] = float32(s), float32(s)
			outI[0][i], outI[1][i] = sI, sI
		}
		return out, outI
	}
	out, outI := sums()
	if err := c.SwitchML(out, nil); err != nil {
		t.Fatalf("exact float32 sums rejected: %v", err)
	}
	if err := c.Ring(out, nil); err != nil {
		t.Fatalf("exact float32 sums rejected by the ring check: %v", err)
	}
	if err := cI.SwitchML(nil, outI); err != nil {
		t.Fatalf("exact int32 sums rejected: %v", err)
	}

	// A result that passed passes again by its kept hash, and a changed
	// result (another hash) gets the full check.
	for _, check := range []func() error{func() error { return c.SwitchML(out, nil) }, func() error { return cI.SwitchML(nil, outI) }} {
		if err := check(); err != nil {
			t.Fatalf("the same result again: %v", err)
		}
	}
	out[1][7] += 1
	outI[0][7]++
	if err := c.SwitchML(out, nil); err == nil || !strings.Contains(err.Error(), "element 7") {
		t.Fatalf("a result changed after one passed: %v", err)
	}
	if err := cI.SwitchML(nil, outI); err == nil || !strings.Contains(err.Error(), "element 7") {
		t.Fatalf("an int32 result changed after one passed: %v", err)
	}
	out, outI = sums()

	// The quantization bound at this exponent, for scale.
	e, _ := quant.BlockExponent([]float32{8})
	sc, _ := quant.NewScale(workers, e)
	tests := []struct {
		name    string
		corrupt func(out [][]float32, outI [][]int32)
		int32   bool
		want    string
	}{
		{"float32 off by far more than the bound", func(out [][]float32, _ [][]int32) {
			out[0][7] += 1000 * float32(sc.ErrorBound(3))
			out[1][7] = out[0][7]
		}, false, "element 7"},
		{"float32 results differ between workers", func(out [][]float32, _ [][]int32) {
			out[1][9] = math.Nextafter32(out[1][9], 100)
		}, false, "bit-identical"},
		{"int32 off by one", func(_ [][]float32, outI [][]int32) { outI[1][3]++ }, true, "result 1 element 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, outI := sums()
			tt.corrupt(out, outI)
			var err error
			if tt.int32 {
				err = cI.SwitchML(nil, outI)
			} else {
				err = c.SwitchML(out, nil)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}
