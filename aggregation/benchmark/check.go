package benchmark

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// MakeInputs returns every rank's deterministic input tensor of n elements:
// rank r's comes from a generator seeded with r, so any process of a job
// (embedded or one worker of many) can rebuild all of them and check a
// result. Exactly one of the two slices is non-nil, by dtype.
func MakeInputs(dtype wire.DType, workers, n int) ([][]float32, [][]int32) {
	if dtype == wire.Int32 {
		in := make([][]int32, workers)
		for r := range in {
			in[r] = InputInt32(r, n)
		}
		return nil, in
	}
	in := make([][]float32, workers)
	for r := range in {
		in[r] = InputFloat32(r, n)
	}
	return in, nil
}

// InputFloat32 is rank r's float32 input: standard normal values.
func InputFloat32(r, n int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// InputInt32 is rank r's int32 input: uniform in [-2^19, 2^19), so the
// sum of up to 2^11 workers fits an int32.
func InputInt32(r, n int) []int32 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, 7))
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(rng.IntN(1<<20)) - 1<<19
	}
	return x
}

// Checker checks all-reduce results against every worker's input: in (or
// inI) holds all the job's inputs; a check gets the results at hand — every
// worker's in the embedded bench, one in a worker process — and requires
// them bit-identical. int32 must equal the int64 sum exactly (which must
// fit). float32 from SwitchML must lie within the quantization error bound
// of the float64 sum (docs/quantization.md); from the ring, within float32
// rounding of it (N·2⁻²⁴·Σ|x|). Build it once: the bound's scale depends only
// on the inputs.
//
// Every call of a benchmark reduces the same inputs, so the reference is
// the same for every call: a result bit-identical to one that already
// passed passes at the cost of hashing it, not of rebuilding the float64
// sum over every rank's input. That sum is O(workers × elements) per check
// and per process: with 8 worker processes on 2 vCPUs it took more CPU
// than the all-reduce itself, and a rank still checking delays the next
// call of every rank. What is kept of a result that passed (per bound) is
// its 64-bit hash under a seed drawn per Checker (hash/maphash), not a
// copy: a copy was one more tensor in every process, which the memory
// check did not count (docs/operations.md "Memory"). A wrong result passes
// for a right one with probability 2⁻⁶⁴; any result with another hash gets
// the full check, as the first one did.
type Checker struct {
	dtype    wire.DType
	wireBits int // the element width on the wire: the bound's scale
	in       [][]float32
	inI      [][]int32
	scale    quant.Scale       // float32: for a tensor-wide block exponent
	seed     maphash.Seed      // of the hashes in verified
	verified map[string]uint64 // by bound name: the hash of a result that passed
}

// NewChecker is NewCheckerWire on the 32-bit wire.
func NewChecker(dtype wire.DType, in [][]float32, inI [][]int32) (*Checker, error) {
	return NewCheckerWire(dtype, 32, in, inI)
}

// NewCheckerWire checks the results of a job whose elements travel in
// wireBits-bit lanes (aggregation.Config.Wire: 32, or 16 with its own
// bound, docs/quantization.md).
func NewCheckerWire(dtype wire.DType, wireBits int, in [][]float32, inI [][]int32) (*Checker, error) {
	c := &Checker{dtype: dtype, wireBits: wireBits, in: in, inI: inI, seed: maphash.MakeSeed()}
	if dtype == wire.Int32 {
		return c, nil
	}
	// A bound valid for every block: the tensor-wide exponent is ≥ each
	// message's, and the bound grows with the exponent.
	var maxAbs float32
	for _, x := range in {
		for _, v := range x {
			if v < 0 {
				v = -v
			}
			if v > maxAbs {
				maxAbs = v
			}
		}
	}
	e, err := quant.BlockExponent([]float32{maxAbs})
	if err != nil {
		return nil, err
	}
	if wireBits == 16 {
		c.scale, err = quant.NewScaleWire16(len(in), e)
	} else {
		c.scale, err = quant.NewScale(len(in), e)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// SwitchML checks results of SwitchML (block floating point).
func (c *Checker) SwitchML(out [][]float32, outI [][]int32) error {
	return c.check(out, outI, c.scale.ErrorBound, "quantization error bound")
}

// Ring checks results of the float32 ring, which adds in float32.
func (c *Checker) Ring(out [][]float32, outI [][]int32) error {
	w := float64(len(c.in))
	return c.check(out, outI, func(sumAbs float64) float64 { return w * 0x1p-24 * sumAbs }, "float32 rounding bound")
}

func (c *Checker) check(out [][]float32, outI [][]int32, bound func(sumAbs float64) float64, boundName string) error {
	if h, ok := c.verified[boundName]; ok && c.allHash(out, outI, h) {
		return nil
	}
	if err := c.fullCheck(out, outI, bound, boundName); err != nil {
		return err
	}
	if c.verified == nil {
		c.verified = make(map[string]uint64)
	}
	if c.dtype == wire.Int32 {
		c.verified[boundName] = hashOf(c.seed, outI[0])
	} else {
		c.verified[boundName] = hashOf(c.seed, out[0])
	}
	return nil
}

// allHash reports whether every result in out (or outI) hashes to h.
func (c *Checker) allHash(out [][]float32, outI [][]int32, h uint64) bool {
	if c.dtype == wire.Int32 {
		return !slices.ContainsFunc(outI, func(x []int32) bool { return hashOf(c.seed, x) != h })
	}
	return !slices.ContainsFunc(out, func(x []float32) bool { return hashOf(c.seed, x) != h })
}

// hashOf is the hash of x's bytes (viewed in place, not copied) under seed.
func hashOf[T float32 | int32](seed maphash.Seed, x []T) uint64 {
	return maphash.Bytes(seed, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)))
}

func (c *Checker) fullCheck(out [][]float32, outI [][]int32, bound func(sumAbs float64) float64, boundName string) error {
	if c.dtype == wire.Int32 {
		for i := range outI[0] {
			var sum int64
			for _, x := range c.inI {
				sum += int64(x[i])
			}
			for r := range outI {
				if int64(outI[r][i]) != sum {
					return fmt.Errorf("result %d element %d: %d, want %d", r, i, outI[r][i], sum)
				}
			}
		}
		return nil
	}
	for i := range out[0] {
		var sum, sumAbs float64
		for _, x := range c.in {
			sum += float64(x[i])
			sumAbs += math.Abs(float64(x[i]))
		}
		got := out[0][i]
		for r := 1; r < len(out); r++ {
			if math.Float32bits(out[r][i]) != math.Float32bits(got) {
				return fmt.Errorf("element %d: result %d has %v, result 0 has %v (results must be bit-identical)", i, r, out[r][i], got)
			}
		}
		if d, b := math.Abs(float64(got)-sum), bound(sumAbs); d > b {
			return fmt.Errorf("element %d: %v, float64 reference %v, error %g > %s %g", i, got, sum, d, boundName, b)
		}
	}
	return nil
}
