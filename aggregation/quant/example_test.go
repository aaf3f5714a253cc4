package quant_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
)

// Two workers all-reduce one message. Each computes its block exponent and
// sends it ahead; the switch returns the maximum; both quantize with the
// scale of that maximum, the switch adds the int32 payloads, and both
// dequantize the same sums to the same floats.
func Example() {
	workers := [][]float32{
		{0.5, -1.25, 3, 0},
		{0.25, 1.25, -0.5, 1e-3},
	}

	e := quant.MinExponent // what the switch computes: max over the workers
	for _, x := range workers {
		ew, err := quant.BlockExponent(x)
		if err != nil {
			fmt.Println(err)
			return
		}
		e = max(e, ew)
	}
	scale, err := quant.NewScale(len(workers), e)
	if err != nil {
		fmt.Println(err)
		return
	}

	sums := make([]byte, 4*len(workers[0])) // the switch's slot
	payload := make([]byte, len(sums))      // a QP's registered buffer
	for _, x := range workers {
		if err := quant.Quantize(payload, x, scale); err != nil {
			fmt.Println(err)
			return
		}
		for i := 0; i < len(sums); i += 4 { // the switch: int32 adds
			s := binary.BigEndian.Uint32(sums[i:]) + binary.BigEndian.Uint32(payload[i:])
			binary.BigEndian.PutUint32(sums[i:], s)
		}
	}

	result := make([]float32, len(workers[0]))
	quant.Dequantize(result, sums, scale)
	fmt.Println("exponent:", e)
	fmt.Println("result:", result)
	fmt.Printf("error bound for |x| < 2^e: %.2g\n", scale.ErrorBound(float64(len(workers))*4))

	_, err = quant.BlockExponent([]float32{1, 2, float32(math.Inf(1))})
	fmt.Println(err)
	// Output:
	// exponent: 2
	// result: [0.75 0 2.5 0.0009999983]
	// error bound for |x| < 2^e: 4.8e-07
	// quant: element 2 is +Inf: gradients must be finite
}

// The first check a user runs: two workers all-reduce ones. The block
// exponent of 1 is 1 (the smallest e with 2^e > 1), the factor
// 2^(31−⌈log2 2⌉−1) = 2^29, each worker sends 2^29, the switch sums 2^30,
// and dequantizing multiplies by 2^-29: exactly 2, as any exact sum of
// inputs that fit the block's 30 bits comes back.
func ExampleNewScale() {
	ones := []float32{1, 1, 1, 1}
	e, _ := quant.BlockExponent(ones)
	scale, _ := quant.NewScale(2, e)
	payload := make([]byte, 4*len(ones))
	_ = quant.Quantize(payload, ones, scale)
	sums := make([]int32, len(ones))
	quant.DecodeInt32(sums, payload)
	for i := range sums {
		sums[i] *= 2 // the switch adds both workers' payloads
	}
	quant.EncodeInt32(payload, sums)
	result := make([]float32, len(ones))
	quant.Dequantize(result, payload, scale)
	fmt.Printf("exponent %d, factor 2^%d, sums %d, result %v\n", e, int(math.Log2(float64(scale.Factor()))), sums[0], result)
	// Output: exponent 1, factor 2^29, sums 1073741824, result [2 2 2 2]
}

// The 16-bit wire: the same two workers, int16 lanes (2 bytes per value).
// The factor is 2^(15−⌈log2 2⌉−1) = 2^13, each worker sends 8192, the
// switch's int16 sum is 16384, well inside int16, and the result is again
// exactly 2; 0.3 does not fit the block's 14 bits and comes back within
// ErrorBound.
func ExampleNewScaleWire16() {
	x := []float32{1, 1, 0.3, -1.5}
	e, _ := quant.BlockExponent(x)
	scale, _ := quant.NewScaleWire16(2, e)
	payload := make([]byte, 2*len(x))
	_ = quant.QuantizeWire16(payload, x, scale)
	sums := make([]int16, len(x))
	quant.DecodeInt16(sums, payload)
	for i := range sums {
		sums[i] *= 2 // the switch adds both workers' payloads, mod 2^16
	}
	quant.EncodeInt16(payload, sums)
	result := make([]float32, len(x))
	quant.DequantizeWire16(result, payload, scale)
	fmt.Printf("%d-byte lanes, factor 2^%d, sums %d, result %v, bound %.2g\n", scale.WireBytes(),
		int(math.Log2(float64(scale.Factor()))), sums, result, scale.ErrorBound(2*1.5))
	// Output: 2-byte lanes, factor 2^13, sums [16384 16384 4916 -24576], result [2 2 0.60009766 -3], bound 0.00024
}
