package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// makeInputs returns every rank's deterministic input tensor of n elements:
// rank r's comes from a generator seeded with r, so any process of a job
// (embedded or one worker of many) can rebuild all of them and check a
// result. Exactly one of the two slices is non-nil, by dtype.
func makeInputs(dtype wire.DType, workers, n int) ([][]float32, [][]int32) {
	if dtype == wire.Int32 {
		in := make([][]int32, workers)
		for r := range in {
			in[r] = makeInputInt32(r, n)
		}
		return nil, in
	}
	in := make([][]float32, workers)
	for r := range in {
		in[r] = makeInputFloat32(r, n)
	}
	return in, nil
}

// makeInputFloat32 is rank r's float32 input: standard normal values.
func makeInputFloat32(r, n int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// makeInputInt32 is rank r's int32 input: uniform in [-2^19, 2^19), so the
// sum of up to 2^11 workers fits an int32.
func makeInputInt32(r, n int) []int32 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, 7))
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(rng.IntN(1<<20)) - 1<<19
	}
	return x
}

// verify checks results against every worker's input: in (or inI) holds all
// the job's inputs, out (or outI) the results at hand — every worker's in
// the embedded bench, one in a worker process. int32 must equal the int64
// sum exactly (which must fit); float32 must lie within the quantization
// error bound of the float64 sum (docs/quantization.md), and all results
// must be bit-identical.
func verify(dtype wire.DType, in [][]float32, inI [][]int32, out [][]float32, outI [][]int32) error {
	w := max(len(in), len(inI))
	if dtype == wire.Int32 {
		for i := range outI[0] {
			var sum int64
			for r := 0; r < w; r++ {
				sum += int64(inI[r][i])
			}
			for r := range outI {
				if int64(outI[r][i]) != sum {
					return fmt.Errorf("result %d element %d: %d, want %d", r, i, outI[r][i], sum)
				}
			}
		}
		return nil
	}
	// A bound valid for every block: the tensor-wide exponent is ≥ each
	// message's, and the bound grows with the exponent.
	maxAbs := 0.0
	for r := 0; r < w; r++ {
		for _, v := range in[r] {
			maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
		}
	}
	e, err := quant.BlockExponent([]float32{float32(maxAbs)})
	if err != nil {
		return err
	}
	scale, err := quant.NewScale(w, e)
	if err != nil {
		return err
	}
	for i := range out[0] {
		var sum, sumAbs float64
		for r := 0; r < w; r++ {
			sum += float64(in[r][i])
			sumAbs += math.Abs(float64(in[r][i]))
		}
		bound := scale.ErrorBound(sumAbs)
		for r := range out {
			if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
				return fmt.Errorf("element %d: result %d has %v, result 0 has %v (results must be bit-identical)", i, r, out[r][i], out[0][i])
			}
		}
		if d := math.Abs(float64(out[0][i]) - sum); d > bound {
			return fmt.Errorf("element %d: %v, float64 reference %v, error %g > bound %g", i, out[0][i], sum, d, bound)
		}
	}
	return nil
}
