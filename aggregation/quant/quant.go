package quant

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

const (
	// MinExponent is the block exponent of an all-zero (or empty) block: the
	// identity of the switch's max, so an all-zero worker never lowers the
	// precision of the others. Blocks whose max|x| is below 2^-129 (tiny
	// subnormals) are clamped up to it too; 2^e > max|x| still holds.
	MinExponent int8 = math.MinInt8

	// MaxExponent is the largest block exponent of finite input. A block
	// with max|x| ≥ 2^126 (float32 values in [2^126, MaxFloat32]) is
	// clamped down to it; such values saturate in Quantize. The one int8
	// value above it is NonFiniteExponent.
	MaxExponent int8 = math.MaxInt8 - 1

	// NonFiniteExponent marks a block that holds a NaN or ±Inf
	// (MarkedBlockExponent). It is the largest int8, so the switch's
	// max-exponent rule carries it unchanged to every worker, and no finite
	// block reaches it (MaxExponent is one below). A Scale built for it
	// quantizes to zeros and dequantizes to NaN: the block comes back
	// non-finite on every worker (fp16 mixed precision relies on that to
	// skip the step).
	NonFiniteExponent int8 = math.MaxInt8

	// MaxWorkers is the largest n NewScale accepts. It keeps the factor a
	// normal float32 for every exponent (2^(31−16−127) = 2^-112), which
	// the error bound relies on; at n = 2^16 each worker has 15 bits left.
	MaxWorkers = 1 << 16

	// MaxFactor caps the factor for very small exponents (e < −95 −
	// ⌈log2 n⌉), where 2^(31−⌈log2 n⌉−e) would leave float32's normal
	// range or make its reciprocal subnormal. Capping only lowers the
	// factor, so the sum still cannot wrap, and the reciprocal 2^-126 is
	// still a normal float32, so dequantization stays one exact multiply.
	MaxFactor float32 = 0x1p126

	// maxFactorLog2 is log2(MaxFactor).
	maxFactorLog2 = 126

	maxInt32 = math.MaxInt32

	// u is the unit roundoff of float32 (round to nearest).
	u = 0x1p-24

	absMask  = 0x7FFFFFFF
	infBits  = 0x7F800000 // |x| bits ≥ infBits ⇔ x is ±Inf or NaN
	expShift = 23
)

// Scale is the quantization of one message of a job with n workers whose
// (maximum) block exponent is e. Build it with NewScale; the zero value
// quantizes everything to 0. A Scale is a small value: copy it freely.
//
// A Scale knows the width of the wire lanes it quantizes for: NewScale
// builds one for the int32 wire (Quantize, Dequantize, Quantize16,
// Dequantize16), NewScaleWire16 one for the int16 wire (QuantizeWire16,
// DequantizeWire16, QuantizeHalfWire16, DequantizeHalfWire16); WireBytes
// tells them apart, and a function given a Scale of the other width panics.
type Scale struct {
	factor float32 // q = round(x·factor); a power of two
	inv    float32 // result = float32(sum)·inv; exactly 1/factor
	limit  float32 // |q| ≤ limit, so n·limit ≤ 2^31−1 (2^15−1 on the 16-bit wire)
	n      int32
	e      int8
	wire16 bool // built by NewScaleWire16: int16 lanes
}

// ErrWorkerCount is wrapped by NewScale and NewScaleWire16 for a worker
// count the wire's headroom cannot hold.
var ErrWorkerCount = errors.New("worker count out of range")

// NewScale returns the scale every worker of an n-worker job uses for a
// message whose maximum block exponent (over the workers) is e:
//
//	factor = 2^k,  k = min(31 − ⌈log2 n⌉ − e, 126)
//	inv    = 2^-k
//	limit  = the largest float32 ≤ ⌊(2^31−1)/n⌋ (an integer)
//
// Every |x| < 2^e then has |x·factor| < 2^(31−⌈log2 n⌉) ≤ 2^31/n, so the
// switch's n-way int32 sum cannot wrap; the limit only bites for n a power
// of two from 256 up, on values within half a unit of 2^(31−⌈log2 n⌉).
// Because the factor is a power of two, x·factor is exact and
// dequantization is one exact multiply (docs/quantization.md "Exact
// semantics"). n must be in [1, MaxWorkers].
func NewScale(n int, e int8) (Scale, error) {
	if n < 1 || n > MaxWorkers {
		return Scale{}, fmt.Errorf("quant: %d workers: %w: the quantizer supports 1 to %d", n, ErrWorkerCount, MaxWorkers)
	}
	return newScale(n, e, 31), nil
}

// newScale is the scale of an n-worker job on a wire whose lanes hold bits
// magnitude bits (31 for int32, 15 for int16): factor 2^min(bits − ⌈log2
// n⌉ − e, 126), limit the largest float32 ≤ ⌊(2^bits − 1)/n⌋.
func newScale(n int, e int8, bits int) Scale {
	k := min(bits-log2Ceil(n)-int(e), maxFactorLog2)
	m := int64((1<<bits - 1) / n)
	l := float32(m)
	if int64(l) > m {
		l = math.Nextafter32(l, 0)
	}
	return Scale{
		factor: float32(math.Ldexp(1, k)),
		inv:    float32(math.Ldexp(1, -k)),
		limit:  l,
		n:      int32(n),
		e:      e,
		wire16: bits == 15,
	}
}

// magnitudeBits is the number of magnitude bits of the scale's wire lanes:
// 31 for int32, 15 for int16.
func (s Scale) magnitudeBits() int {
	if s.wire16 {
		return 15
	}
	return 31
}

// WireBytes is the width of one wire lane the scale quantizes for: 4
// (int32; NewScale and the zero Scale) or 2 (int16; NewScaleWire16).
func (s Scale) WireBytes() int {
	if s.wire16 {
		return 2
	}
	return 4
}

// log2Ceil is ⌈log2 n⌉ for n ≥ 1: the headroom bits an n-way sum needs.
func log2Ceil(n int) int { return bits.Len(uint(n - 1)) }

// Factor is the multiplier applied before rounding: 2^(31−⌈log2 n⌉−e)
// (2^(15−⌈log2 n⌉−e) on the 16-bit wire), at most MaxFactor.
func (s Scale) Factor() float32 { return s.factor }

// Inverse is the multiplier Dequantize applies to a sum: 1/Factor, exactly.
func (s Scale) Inverse() float32 { return s.inv }

// Limit is the saturation bound: every quantized value satisfies |q| ≤ Limit
// and Workers()·Limit ≤ 2^31−1 (2^15−1 on the 16-bit wire).
func (s Scale) Limit() float32 { return s.limit }

// Workers is the n the scale was built for.
func (s Scale) Workers() int { return int(s.n) }

// Exponent is the block exponent the scale was built for.
func (s Scale) Exponent() int8 { return s.e }

// checkWidth panics if the scale was built for another wire width than
// the function op writes or reads: quantizing for one width and summing in
// the other would wrap or lose the headroom, a programming error like a
// short buffer.
func (s Scale) checkWidth(op string, bytes int) {
	if s.WireBytes() != bytes {
		panic(fmt.Sprintf("quant: %s: a %d-bit wire scale for the %d-bit wire", op, 8*s.WireBytes(), 8*bytes))
	}
}

// NonFinite reports whether the scale was built for NonFiniteExponent: a
// block that some worker's non-finite input marked.
func (s Scale) NonFinite() bool { return s.e == NonFiniteExponent && s.n > 0 }

// ErrorBound bounds the error of one element of an all-reduce: if each of the
// Workers() workers holds a finite x_i with |x_i| < 2^Exponent(), quantizes
// it with s, the int32 values are summed exactly, and the sum is dequantized
// with s to r, then
//
//	|r − Σx_i| ≤ (1+u)·n·δ/F + u·Σ|x_i|      u = 2^-24, F = Factor()
//
// with δ = 1/2, or 1 where n is a power of two ≥ 256 (Limit clamps values
// within half a unit of 2^(31−log2 n)); on the 16-bit wire (NewScaleWire16)
// F = 2^(15−⌈log2 n⌉−e) and δ = 1 for every power of two n; sumAbs = Σ|x_i| (n·2^e bounds it
// when the inputs are unknown). The result overflows float32 only where
// the sum itself does (e near MaxExponent). Derivation: x·F is exact, so
// rounding to an integer is off by at most δ per term (1/F in x units);
// the n-term int32 sum is exact; dequantization rounds once (the sum to
// float32; the multiply by 2^-k is exact). In particular, inputs that are
// multiples of 1/F sum exactly, with only that last rounding: the result
// is the float32 nearest the exact sum. docs/quantization.md "Error bound"
// has the details.
func (s Scale) ErrorBound(sumAbs float64) float64 {
	if s.factor == 0 {
		return math.Inf(1)
	}
	return (1+u)*float64(s.n)*s.roundingError()/float64(s.factor) + u*sumAbs
}

// roundingError is δ, the most |q − x·F| can be for |x| < 2^e: 1/2 from
// rounding, or 1 where the largest float32 below 2^(b−⌈log2 n⌉) (the
// largest |x·F|; b the wire's magnitude bits, 31 or 15) is above Limit and
// gets clamped.
func (s Scale) roundingError() float64 {
	top := math.Nextafter32(float32(math.Ldexp(1, s.magnitudeBits()-log2Ceil(int(s.n)))), 0)
	if top > s.limit {
		return 1
	}
	return 0.5
}

// NonFiniteError reports a NaN or ±Inf in the input of BlockExponent or
// Quantize. Index is relative to the slice passed in; a caller that passes a
// part of a larger tensor adds its offset.
type NonFiniteError struct {
	Index int
	Value float32
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("quant: element %d is %v: gradients must be finite", e.Index, e.Value)
}

// firstNonFinite finds the element that made a max-abs scan report
// non-finite input; the scan is cheap, so it only runs on the error path.
func firstNonFinite(x []float32) error {
	for i, v := range x {
		if math.Float32bits(v)&absMask >= infBits {
			return &NonFiniteError{Index: i, Value: v}
		}
	}
	return nil
}

// BlockExponent returns the block exponent of x: the smallest e with
// 2^e > max|x| (strictly, so a power of two gets the next exponent and
// NewScale can give it an exact integer below 2^31/n), clamped to
// [MinExponent, MaxExponent]. An empty or all-zero block gives
// MinExponent. A NaN or ±Inf anywhere in x gives a *NonFiniteError naming
// the first one.
func BlockExponent(x []float32) (int8, error) {
	m := maxAbsBits(x)
	if m >= infBits {
		return 0, firstNonFinite(x)
	}
	return exponentOfBits(m), nil
}

// MarkedBlockExponent is BlockExponent, except that a block holding a NaN
// or ±Inf gives NonFiniteExponent instead of an error: the exponent to send
// when overflow must propagate through the switch.
func MarkedBlockExponent(x []float32) int8 {
	m := maxAbsBits(x)
	if m >= infBits {
		return NonFiniteExponent
	}
	return exponentOfBits(m)
}

// exponentOfBits is the block exponent of the non-negative finite float32
// with bits m: the smallest e with 2^e > m's value, clamped.
func exponentOfBits(m uint32) int8 {
	if m == 0 {
		return MinExponent
	}
	// A normal value lies in [2^(biased−127), 2^(biased−126)): the smallest
	// e with 2^e above it is biased − 126, as p4app-switchML's client
	// computes it (docs/interop.md, D8).
	e := int(m>>expShift) - 126
	if m < 1<<expShift { // subnormal: m·2^-149, m ≥ 1
		e = bits.Len32(m) - 149
	}
	return int8(min(max(e, int(MinExponent)), int(MaxExponent)))
}

// Quantize writes q_i = round(clamp(src[i]·s.Factor(), ±s.Limit())) as
// big-endian int32 into dst[4i:4i+4] for every i; dst must hold at least
// 4·len(src) bytes and may have any alignment.
//
// The float semantics, identical in the scalar and SIMD code: v = src[i]·F as
// a float32 multiplication (round to nearest even); v = max(v, −L) then
// min(v, L), with a NaN v becoming −L; q = v rounded to the nearest integer,
// ties to even. F is a power of two, so for |x| < 2^e the product is exact
// and the integer rounding is the only one. Larger values (|x| ≥ 2^e, where
// the exponent was clamped at MaxExponent) saturate at ±L where x·F exceeds
// it, so the n-way sum still cannot wrap.
//
// If src holds a NaN or ±Inf, Quantize returns a *NonFiniteError naming the
// first one; dst is then fully written but must not be sent. With a
// NonFinite scale, Quantize writes zeros and returns nil: the marker in the
// exponent already says what the result is.
func Quantize(dst []byte, src []float32, s Scale) error {
	s.checkWidth("Quantize", 4)
	if len(dst) < 4*len(src) {
		panic(fmt.Sprintf("quant: Quantize: %d-byte destination for %d values", len(dst), len(src)))
	}
	if s.NonFinite() {
		clear(dst[:4*len(src)])
		return nil
	}
	if quantize(dst[:4*len(src)], src, s.factor, s.limit) >= infBits {
		return firstNonFinite(src)
	}
	return nil
}

// Dequantize writes dst[i] = float32(sum_i)·s.Inverse(), where sum_i is the
// big-endian int32 at src[4i:4i+4]: an int32 → float32 conversion rounded to
// nearest even (exact for |sum_i| ≤ 2^24), then a multiplication by a power
// of two that is exact (the result is never subnormal). src must hold at
// least 4·len(dst) bytes and may have any alignment. With a NonFinite
// scale every dst[i] is NaN.
func Dequantize(dst []float32, src []byte, s Scale) {
	s.checkWidth("Dequantize", 4)
	if len(src) < 4*len(dst) {
		panic(fmt.Sprintf("quant: Dequantize: %d-byte source for %d values", len(src), len(dst)))
	}
	if s.NonFinite() {
		nan := float32(math.NaN())
		for i := range dst {
			dst[i] = nan
		}
		return
	}
	dequantize(dst, src[:4*len(dst)], s.inv)
}

// EncodeInt32 writes src as big-endian int32 into dst (at least 4·len(src)
// bytes): the exact path of int32 jobs.
func EncodeInt32(dst []byte, src []int32) {
	if len(dst) < 4*len(src) {
		panic(fmt.Sprintf("quant: EncodeInt32: %d-byte destination for %d values", len(dst), len(src)))
	}
	encodeInt32(dst[:4*len(src)], src)
}

// DecodeInt32 reads len(dst) big-endian int32 values from src (at least
// 4·len(dst) bytes).
func DecodeInt32(dst []int32, src []byte) {
	if len(src) < 4*len(dst) {
		panic(fmt.Sprintf("quant: DecodeInt32: %d-byte source for %d values", len(src), len(dst)))
	}
	decodeInt32(dst, src[:4*len(dst)])
}
