package quant

import (
	"fmt"
	"math"
	"math/bits"
)

const (
	// MinExponent is the block exponent of an all-zero (or empty) block: the
	// identity of the switch's max, so an all-zero worker never lowers the
	// precision of the others. Blocks whose max|x| is below 2^-128 (tiny
	// subnormals) are clamped up to it too; 2^e ≥ max|x| still holds.
	MinExponent int8 = math.MinInt8

	// MaxExponent is the largest block exponent of finite input. A block
	// with max|x| > 2^126 (float32 values in (2^126, MaxFloat32]) is
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
	// normal float32 for every exponent (2^31/(2^16·2^127) = 2^-112), which
	// the error bound relies on; at n = 2^16 each worker has 15 bits left.
	MaxWorkers = 1 << 16

	// MaxFactor caps the factor for very small exponents (e ≤ −96 at n = 1),
	// where (2^31−1)/(n·2^e) would overflow float32. Capping only lowers the
	// factor, so the sum still cannot wrap; its reciprocal 2^-126 is still a
	// normal float32.
	MaxFactor float32 = 0x1p126

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
type Scale struct {
	factor float32 // q = round(x·factor)
	inv    float32 // result = float32(sum)·inv
	limit  float32 // |q| ≤ limit, so n·limit ≤ 2^31−1
	n      int32
	e      int8
}

// NewScale returns the scale every worker of an n-worker job uses for a
// message whose maximum block exponent (over the workers) is e:
//
//	factor = float32(float64(2^31−1) / (float64(n)·2^e)), capped at MaxFactor
//	inv    = float32(1 / float64(factor))
//	limit  = the largest float32 ≤ ⌊(2^31−1)/n⌋ (an integer)
//
// Each is computed in a fixed way, so all workers agree bit for bit. n must be
// in [1, MaxWorkers].
func NewScale(n int, e int8) (Scale, error) {
	if n < 1 || n > MaxWorkers {
		return Scale{}, fmt.Errorf("quant: %d workers: the quantizer supports 1 to %d", n, MaxWorkers)
	}
	f := float32(float64(maxInt32) / math.Ldexp(float64(n), int(e)))
	if f > MaxFactor {
		f = MaxFactor
	}
	m := int64(maxInt32 / n)
	l := float32(m)
	if int64(l) > m {
		l = math.Nextafter32(l, 0)
	}
	return Scale{
		factor: f,
		inv:    float32(1 / float64(f)),
		limit:  l,
		n:      int32(n),
		e:      e,
	}, nil
}

// Factor is the multiplier applied before rounding: (2^31−1)/(n·2^e) as a float32.
func (s Scale) Factor() float32 { return s.factor }

// Inverse is the multiplier Dequantize applies to a sum: float32(1/Factor).
func (s Scale) Inverse() float32 { return s.inv }

// Limit is the saturation bound: every quantized value satisfies |q| ≤ Limit
// and Workers()·Limit ≤ 2^31−1.
func (s Scale) Limit() float32 { return s.limit }

// Workers is the n the scale was built for.
func (s Scale) Workers() int { return int(s.n) }

// Exponent is the block exponent the scale was built for.
func (s Scale) Exponent() int8 { return s.e }

// NonFinite reports whether the scale was built for NonFiniteExponent: a
// block that some worker's non-finite input marked.
func (s Scale) NonFinite() bool { return s.e == NonFiniteExponent && s.n > 0 }

// ErrorBound bounds the error of one element of an all-reduce: if each of the
// Workers() workers holds a finite x_i with |x_i| ≤ 2^Exponent(), quantizes it
// with s, the int32 values are summed exactly, and the sum is dequantized
// with s to r, then
//
//	|r − Σx_i| ≤ (1+4u)·n/F + 8u·Σ|x_i|      u = 2^-24, F = Factor()
//
// where sumAbs = Σ|x_i| (n·2^e bounds it when the inputs are unknown), unless
// the result overflows float32 (only possible when e is near MaxExponent).
// Derivation: rounding x·F to float32 then to an integer is off by at most
// 0.5 + u·|x·F|; a value clamped to Limit (only at |x| ≈ 2^e, because F was
// rounded up) is off by at most 1 + 3.0001u·|x·F|; so each term is off by at
// most 1/F + 4u·|x_i| in x units. Dequantization rounds three times (sum to
// float32, the reciprocal, the product): a relative error of at most 3.001u.
// docs/quantization.md has the details.
func (s Scale) ErrorBound(sumAbs float64) float64 {
	if s.factor == 0 {
		return math.Inf(1)
	}
	return (1+4*u)*float64(s.n)/float64(s.factor) + 8*u*sumAbs
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
// 2^e ≥ max|x|, clamped to [MinExponent, MaxExponent]. An empty or all-zero
// block gives MinExponent. A NaN or ±Inf anywhere in x gives a
// *NonFiniteError naming the first one.
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
// with bits m.
func exponentOfBits(m uint32) int8 {
	if m == 0 {
		return MinExponent
	}
	biased := int(m >> expShift)
	mant := m & (1<<expShift - 1)
	var e int
	switch {
	case biased == 0: // subnormal: mant·2^-149, mant ≥ 1
		e = bits.Len32(mant-1) - 149
	case mant == 0: // exact power of two
		e = biased - 127
	default:
		e = biased - 126
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
// ties to even. Values with |x| > 2^e saturate at ±L instead of wrapping.
//
// If src holds a NaN or ±Inf, Quantize returns a *NonFiniteError naming the
// first one; dst is then fully written but must not be sent. With a
// NonFinite scale, Quantize writes zeros and returns nil: the marker in the
// exponent already says what the result is.
func Quantize(dst []byte, src []float32, s Scale) error {
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
// big-endian int32 at src[4i:4i+4]: an exact int32 → float32 conversion
// rounded to nearest even, then one float32 multiplication. src must hold at
// least 4·len(dst) bytes and may have any alignment. With a NonFinite
// scale every dst[i] is NaN.
func Dequantize(dst []float32, src []byte, s Scale) {
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
