package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
)

// Format is a 16-bit floating-point element format: the gradients of
// mixed-precision training. Both are quantized straight into the same
// block-floating-point int32 wire payload as float32 (no float32 copy of the
// tensor): every 16-bit value converts to float32 exactly, so quantizing it
// is quantizing that float32, with the same Scale and the same error bound;
// dequantizing rounds the float32 result once more, to the format.
type Format uint8

const (
	// BFloat16 is bfloat16 (1 sign, 8 exponent, 7 mantissa bits): the top
	// half of a float32.
	BFloat16 Format = 1
	// Float16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits,
	// largest finite 65504).
	Float16 Format = 2
)

func (f Format) String() string {
	switch f {
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Unit is the format's unit roundoff (round to nearest): 2^-8 for
// bfloat16, 2^-11 for float16.
func (f Format) Unit() float64 {
	if f == Float16 {
		return 0x1p-11
	}
	return 0x1p-8
}

// infBits16 is the smallest |x| bit pattern of ±Inf (NaN is above).
func (f Format) infBits16() uint16 {
	if f == Float16 {
		return 0x7C00
	}
	return 0x7F80
}

func (f Format) check(op string) {
	if f != BFloat16 && f != Float16 {
		panic(fmt.Sprintf("quant: %s: %v is not a 16-bit format", op, f))
	}
}

// ToFloat32 converts a 16-bit value to float32 (exact).
func (f Format) ToFloat32(h uint16) float32 {
	if f == BFloat16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1F
	m := uint32(h & 0x3FF)
	switch e {
	case 0: // zero or subnormal: m·2^-24
		return math.Float32frombits(sign | math.Float32bits(float32(m)*0x1p-24))
	case 0x1F: // Inf or NaN
		return math.Float32frombits(sign | 0x7F800000 | m<<13)
	}
	return math.Float32frombits(sign | (e+112)<<23 | m<<13)
}

// FromFloat32 rounds a float32 to the format, to nearest even; beyond the
// largest finite value it gives ±Inf, a NaN gives a quiet NaN.
func (f Format) FromFloat32(x float32) uint16 {
	b := math.Float32bits(x)
	if f == BFloat16 {
		if b&absMask > infBits {
			return uint16(b>>16) | 0x0040
		}
		return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
	}
	sign := uint16(b>>16) & 0x8000
	a := b & absMask
	switch {
	case a > infBits:
		return sign | 0x7E00
	case a >= 0x477FF000: // ≥ 65520: rounds to Inf
		return sign | 0x7C00
	case a >= 0x38800000: // ≥ 2^-14: normal
		a -= 112 << 23
		a += 0xFFF + (a>>13)&1
		return sign | uint16(a>>13)
	}
	// Below 2^-14: a multiple of 2^-24 (a subnormal; 1024 is the smallest
	// normal, whose encoding is the same integer). The product is exact.
	v := math.Float32frombits(a) * 0x1p24
	return sign | uint16(math.Float64bits(float64(v)+roundMagic))
}

// exponentOfBits16 is the block exponent of the non-negative finite 16-bit
// value with bits m.
func (f Format) exponentOfBits16(m uint16) int8 {
	if f == BFloat16 {
		return exponentOfBits(uint32(m) << 16)
	}
	if m == 0 {
		return MinExponent
	}
	// As exponentOfBits: a normal value lies in [2^(biased−15),
	// 2^(biased−14)), a subnormal is m·2^-24. No clamp: float16's range is
	// [2^-24, 65504].
	if m < 1<<10 {
		return int8(bits.Len16(m) - 24)
	}
	return int8(int(m>>10) - 14)
}

// maxAbsBits16Generic returns max over x of x&0x7FFF: as for float32, the
// magnitudes of both formats order like their bit patterns, and NaN and ±Inf
// have the largest ones.
func maxAbsBits16Generic(x []uint16) uint16 {
	var m uint16
	for _, v := range x {
		m = max(m, v&0x7FFF)
	}
	return m
}

func (f Format) firstNonFinite16(x []uint16) error {
	inf := f.infBits16()
	for i, v := range x {
		if v&0x7FFF >= inf {
			return &NonFiniteError{Index: i, Value: f.ToFloat32(v)}
		}
	}
	return nil
}

// BlockExponent16 is BlockExponent for 16-bit values in format f.
func BlockExponent16(x []uint16, f Format) (int8, error) {
	f.check("BlockExponent16")
	m := maxAbsBits16(x)
	if m >= f.infBits16() {
		return 0, f.firstNonFinite16(x)
	}
	return f.exponentOfBits16(m), nil
}

// MarkedBlockExponent16 is MarkedBlockExponent for 16-bit values in format f.
func MarkedBlockExponent16(x []uint16, f Format) int8 {
	f.check("MarkedBlockExponent16")
	m := maxAbsBits16(x)
	if m >= f.infBits16() {
		return NonFiniteExponent
	}
	return f.exponentOfBits16(m)
}

// Quantize16 is Quantize for 16-bit values in format f: each value is
// converted to float32 (exactly) and quantized as Quantize does, with the
// same float semantics, straight into dst (at least 4·len(src) bytes).
func Quantize16(dst []byte, src []uint16, f Format, s Scale) error {
	f.check("Quantize16")
	s.checkWidth("Quantize16", 4)
	if len(dst) < 4*len(src) {
		panic(fmt.Sprintf("quant: Quantize16: %d-byte destination for %d values", len(dst), len(src)))
	}
	dst = dst[:4*len(src)]
	if s.NonFinite() {
		clear(dst)
		return nil
	}
	if quantize16(dst, src, f, s.factor, s.limit) {
		return f.firstNonFinite16(src)
	}
	return nil
}

// quantize16Generic is Quantize16 without the checks; it returns
// maxAbsBits16Generic(src) so the caller can tell whether src was finite.
// len(dst) == 4·len(src).
func quantize16Generic(dst []byte, src []uint16, f Format, factor, limit float32) uint16 {
	dst = dst[:4*len(src)]
	var m uint16
	if f == BFloat16 {
		for i, h := range src {
			m = max(m, h&0x7FFF)
			binary.BigEndian.PutUint32(dst[4*i:], quantizeOne(math.Float32frombits(uint32(h)<<16), factor, limit))
		}
		return m
	}
	tab := float16Table()
	for i, h := range src {
		m = max(m, h&0x7FFF)
		binary.BigEndian.PutUint32(dst[4*i:], quantizeOne(tab[h], factor, limit))
	}
	return m
}

var (
	f16Once sync.Once
	f16Tab  *[1 << 16]float32
)

// float16Table is ToFloat32 for every float16 pattern (256 KiB, built on
// first use): a load instead of the branches per element.
func float16Table() *[1 << 16]float32 {
	f16Once.Do(func() {
		t := new([1 << 16]float32)
		for h := range t {
			t[h] = Float16.ToFloat32(uint16(h))
		}
		f16Tab = t
	})
	return f16Tab
}

// quantizeOne is one value of quantizeGeneric.
func quantizeOne(x, factor, limit float32) uint32 {
	v := float32(x * factor)
	if !(v > -limit) {
		v = -limit
	}
	if !(v < limit) {
		v = limit
	}
	return uint32(math.Float64bits(float64(v) + roundMagic))
}

// Dequantize16 is Dequantize into 16-bit values in format f: the float32
// result Dequantize would give, rounded to f (nearest even; ±Inf beyond
// float16's 65504). src must hold at least 4·len(dst) bytes. With a
// NonFinite scale every dst[i] is NaN.
func Dequantize16(dst []uint16, src []byte, f Format, s Scale) {
	f.check("Dequantize16")
	s.checkWidth("Dequantize16", 4)
	if len(src) < 4*len(dst) {
		panic(fmt.Sprintf("quant: Dequantize16: %d-byte source for %d values", len(src), len(dst)))
	}
	src = src[:4*len(dst)]
	if s.NonFinite() {
		nan := f.FromFloat32(float32(math.NaN()))
		for i := range dst {
			dst[i] = nan
		}
		return
	}
	dequantize16(dst, src, f, s.inv)
}

// dequantize16Generic is Dequantize16 without the checks. len(src) ==
// 4·len(dst). The float32 result is never NaN (a finite sum times a finite
// inverse), so bfloat16 needs no NaN case.
func dequantize16Generic(dst []uint16, src []byte, f Format, inv float32) {
	src = src[:4*len(dst)]
	if f == BFloat16 {
		for i := range dst {
			r := float32(int32(binary.BigEndian.Uint32(src[4*i:]))) * inv
			b := math.Float32bits(r)
			dst[i] = uint16((b + 0x7FFF + (b>>16)&1) >> 16)
		}
		return
	}
	for i := range dst {
		dst[i] = Float16.FromFloat32(float32(int32(binary.BigEndian.Uint32(src[4*i:]))) * inv)
	}
}

// ErrorBound16 bounds the error of one element of an all-reduce of 16-bit
// values in format f, as ErrorBound does for float32 (the x_i are the
// 16-bit inputs, exactly representable in float32): the float32 result is
// within ErrorBound(sumAbs) of Σx_i, and rounding it to f adds at most
// Unit()·|result| plus, for float16, half its subnormal spacing 2^-25:
//
//	|r − Σx_i| ≤ (1+u16)·ErrorBound(Σ|x_i|) + u16·Σ|x_i| + η
//
// with u16 = f.Unit() and η = 2^-25 for float16, 0 for bfloat16 (whose
// range is float32's), unless the result overflows the format (float16:
// |Σx_i| near 65504 or above).
func (s Scale) ErrorBound16(f Format, sumAbs float64) float64 {
	u16 := f.Unit()
	eta := 0.0
	if f == Float16 {
		eta = 0x1p-25
	}
	return (1+u16)*s.ErrorBound(sumAbs) + u16*sumAbs + eta
}
