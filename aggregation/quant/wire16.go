package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MaxWorkersWire16 is the largest n NewScaleWire16 accepts: an int16 lane
// has 15 magnitude bits, and n workers need ⌈log2 n⌉ of them as headroom,
// so at n = 2^14 each worker keeps one bit (Limit 1) and beyond it none.
const MaxWorkersWire16 = 1 << 14

// NewScaleWire16 returns the scale of a message on the 16-bit wire (int16
// lanes, big-endian) for an n-worker job whose maximum block exponent is e:
//
//	factor = 2^k,  k = min(15 − ⌈log2 n⌉ − e, 126)
//	inv    = 2^-k
//	limit  = ⌊(2^15−1)/n⌋ (an integer float32)
//
// Every |x| < 2^e then has |x·factor| < 2^(15−⌈log2 n⌉), and every
// quantized value |q| ≤ limit, so the switch's n-way int16 sum cannot wrap;
// the limit clamps, for n a power of two, the values within half a unit of
// 2^(15−⌈log2 n⌉). The factor is a power of two, as NewScale's: inputs
// that fit the block's 15 − ⌈log2 n⌉ bits sum exactly
// (docs/quantization.md "The 16-bit wire"). n must be in [1,
// MaxWorkersWire16]; e = NonFiniteExponent gives a NonFinite scale.
func NewScaleWire16(n int, e int8) (Scale, error) {
	if n < 1 || n > MaxWorkersWire16 {
		return Scale{}, fmt.Errorf("quant: %d workers: %w: the 16-bit wire supports 1 to %d", n, ErrWorkerCount, MaxWorkersWire16)
	}
	return newScale(n, e, 15), nil
}

// QuantizeWire16 is Quantize for the 16-bit wire: it writes
// q_i = round(clamp(src[i]·s.Factor(), ±s.Limit())) as big-endian int16
// into dst[2i:2i+2], with exactly Quantize's float semantics (a float32
// multiply by a power of two, MAXPS/MINPS clamping with NaN becoming
// −Limit, rounding to nearest even). dst must hold at least 2·len(src)
// bytes and may have any alignment; s must come from NewScaleWire16.
//
// As Quantize: a NaN or ±Inf in src gives a *NonFiniteError naming the
// first one (dst is then fully written but must not be sent); a NonFinite
// scale writes zeros and returns nil.
func QuantizeWire16(dst []byte, src []float32, s Scale) error {
	s.checkWidth("QuantizeWire16", 2)
	if len(dst) < 2*len(src) {
		panic(fmt.Sprintf("quant: QuantizeWire16: %d-byte destination for %d values", len(dst), len(src)))
	}
	dst = dst[:2*len(src)]
	if s.NonFinite() {
		clear(dst)
		return nil
	}
	if quantizeWire16(dst, src, s.factor, s.limit) {
		return firstNonFinite(src)
	}
	return nil
}

// DequantizeWire16 is Dequantize for the 16-bit wire: dst[i] =
// float32(sum_i)·s.Inverse(), sum_i the big-endian int16 at src[2i:2i+2].
// Both steps are exact (|sum_i| < 2^24; the multiply by a power of two
// never gives a subnormal), so the result is sum_i/Factor unless it
// overflows float32. src must hold at least 2·len(dst) bytes; s must come
// from NewScaleWire16. With a NonFinite scale every dst[i] is NaN.
func DequantizeWire16(dst []float32, src []byte, s Scale) {
	s.checkWidth("DequantizeWire16", 2)
	if len(src) < 2*len(dst) {
		panic(fmt.Sprintf("quant: DequantizeWire16: %d-byte source for %d values", len(src), len(dst)))
	}
	if s.NonFinite() {
		nan := float32(math.NaN())
		for i := range dst {
			dst[i] = nan
		}
		return
	}
	dequantizeWire16(dst, src[:2*len(dst)], s.inv)
}

// QuantizeHalfWire16 is QuantizeWire16 for 16-bit values in format f: each
// value converts to float32 exactly and is quantized as QuantizeWire16
// quantizes it (bit for bit the same bytes), straight into dst (at least
// 2·len(src) bytes).
func QuantizeHalfWire16(dst []byte, src []uint16, f Format, s Scale) error {
	f.check("QuantizeHalfWire16")
	s.checkWidth("QuantizeHalfWire16", 2)
	if len(dst) < 2*len(src) {
		panic(fmt.Sprintf("quant: QuantizeHalfWire16: %d-byte destination for %d values", len(dst), len(src)))
	}
	dst = dst[:2*len(src)]
	if s.NonFinite() {
		clear(dst)
		return nil
	}
	if quantizeHalfWire16(dst, src, f, s.factor, s.limit) {
		return f.firstNonFinite16(src)
	}
	return nil
}

// DequantizeHalfWire16 is DequantizeWire16 into 16-bit values in format f:
// the float32 result DequantizeWire16 gives, rounded to f as Dequantize16
// rounds (nearest even; ±Inf beyond float16's 65504). src must hold at
// least 2·len(dst) bytes. With a NonFinite scale every dst[i] is NaN.
func DequantizeHalfWire16(dst []uint16, src []byte, f Format, s Scale) {
	f.check("DequantizeHalfWire16")
	s.checkWidth("DequantizeHalfWire16", 2)
	if len(src) < 2*len(dst) {
		panic(fmt.Sprintf("quant: DequantizeHalfWire16: %d-byte source for %d values", len(src), len(dst)))
	}
	if s.NonFinite() {
		nan := f.FromFloat32(float32(math.NaN()))
		for i := range dst {
			dst[i] = nan
		}
		return
	}
	dequantizeHalfWire16(dst, src[:2*len(dst)], f, s.inv)
}

// EncodeInt16 writes src as big-endian int16 into dst (at least 2·len(src)
// bytes): the 16-bit wire's lane layout.
func EncodeInt16(dst []byte, src []int16) {
	if len(dst) < 2*len(src) {
		panic(fmt.Sprintf("quant: EncodeInt16: %d-byte destination for %d values", len(dst), len(src)))
	}
	encodeInt16(dst[:2*len(src)], src)
}

// DecodeInt16 reads len(dst) big-endian int16 values from src (at least
// 2·len(dst) bytes).
func DecodeInt16(dst []int16, src []byte) {
	if len(src) < 2*len(dst) {
		panic(fmt.Sprintf("quant: DecodeInt16: %d-byte source for %d values", len(src), len(dst)))
	}
	decodeInt16(dst, src[:2*len(dst)])
}

// The scalar reference of the 16-bit wire: the code on every platform
// without the SIMD kernels, on their tails, and in the tests that check
// them bit for bit.

// quantizeWire16Generic is QuantizeWire16 without the checks; it returns
// maxAbsBits(src) so the caller can tell whether src was finite.
// len(dst) == 2·len(src).
func quantizeWire16Generic(dst []byte, src []float32, factor, limit float32) uint32 {
	dst = dst[:2*len(src)]
	var m uint32
	for i, x := range src {
		m = max(m, math.Float32bits(x)&absMask)
		// quantizeOne's low 16 bits: |q| ≤ limit ≤ 2^15−1, so they are the
		// int16's two's complement.
		binary.BigEndian.PutUint16(dst[2*i:], uint16(quantizeOne(x, factor, limit)))
	}
	return m
}

// dequantizeWire16Generic is DequantizeWire16 without the checks.
// len(src) == 2·len(dst).
func dequantizeWire16Generic(dst []float32, src []byte, inv float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = float32(int16(binary.BigEndian.Uint16(src[2*i:]))) * inv
	}
}

// quantizeHalfWire16Generic is QuantizeHalfWire16 without the checks; it
// returns maxAbsBits16Generic(src). len(dst) == 2·len(src).
func quantizeHalfWire16Generic(dst []byte, src []uint16, f Format, factor, limit float32) uint16 {
	dst = dst[:2*len(src)]
	var m uint16
	if f == BFloat16 {
		for i, h := range src {
			m = max(m, h&0x7FFF)
			binary.BigEndian.PutUint16(dst[2*i:], uint16(quantizeOne(math.Float32frombits(uint32(h)<<16), factor, limit)))
		}
		return m
	}
	tab := float16Table()
	for i, h := range src {
		m = max(m, h&0x7FFF)
		binary.BigEndian.PutUint16(dst[2*i:], uint16(quantizeOne(tab[h], factor, limit)))
	}
	return m
}

// dequantizeHalfWire16Generic is DequantizeHalfWire16 without the checks.
// len(src) == 2·len(dst). As in dequantize16Generic, the float32 result is
// never NaN.
func dequantizeHalfWire16Generic(dst []uint16, src []byte, f Format, inv float32) {
	src = src[:2*len(dst)]
	if f == BFloat16 {
		for i := range dst {
			b := math.Float32bits(float32(int16(binary.BigEndian.Uint16(src[2*i:]))) * inv)
			dst[i] = uint16((b + 0x7FFF + (b>>16)&1) >> 16)
		}
		return
	}
	for i := range dst {
		dst[i] = Float16.FromFloat32(float32(int16(binary.BigEndian.Uint16(src[2*i:]))) * inv)
	}
}

func encodeInt16Generic(dst []byte, src []int16) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		binary.BigEndian.PutUint16(dst[2*i:], uint16(v))
	}
}

func decodeInt16Generic(dst []int16, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = int16(binary.BigEndian.Uint16(src[2*i:]))
	}
}
