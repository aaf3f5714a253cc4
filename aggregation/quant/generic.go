package quant

import (
	"encoding/binary"
	"math"
)

// The functions below are the scalar reference implementation. They run on
// every platform without AVX2, on the tails the SIMD kernels leave, and in
// the tests that check the kernels bit for bit.

// maxAbsBitsGeneric returns max over x of Float32bits(x)&0x7FFFFFFF. For
// non-negative floats the bit patterns order like the values, and every NaN
// or ±Inf has bits ≥ infBits, so one integer max answers both questions.
func maxAbsBitsGeneric(x []float32) uint32 {
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&absMask)
	}
	return m
}

// roundMagic is 1.5·2^52; see quantizeGeneric.
const roundMagic = 0x1.8p52

// quantizeGeneric is Quantize without the checks; it returns maxAbsBits(src)
// so the caller can tell whether src was finite. len(dst) == 4·len(src).
func quantizeGeneric(dst []byte, src []float32, factor, limit float32) uint32 {
	dst = dst[:4*len(src)]
	var m uint32
	for i, x := range src {
		m = max(m, math.Float32bits(x)&absMask)
		v := float32(x * factor)
		// Written as the x86 instructions behave: MAXPS/MINPS return their
		// second operand when the comparison is false, so NaN becomes −limit.
		if !(v > -limit) {
			v = -limit
		}
		if !(v < limit) {
			v = limit
		}
		// Round to nearest even: adding 1.5·2^52 leaves no fraction bits
		// in a float64 (exact for |v| < 2^51), and the low 32 bits of the
		// sum are then the two's complement integer.
		q := uint32(math.Float64bits(float64(v) + roundMagic))
		binary.BigEndian.PutUint32(dst[4*i:4*i+4], q)
	}
	return m
}

// dequantizeGeneric is Dequantize without the checks. len(src) == 4·len(dst).
func dequantizeGeneric(dst []float32, src []byte, inv float32) {
	src = src[:4*len(dst)]
	for i := range dst {
		sum := int32(binary.BigEndian.Uint32(src[4*i : 4*i+4]))
		dst[i] = float32(sum) * inv
	}
}

func encodeInt32Generic(dst []byte, src []int32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.BigEndian.PutUint32(dst[4*i:4*i+4], uint32(v))
	}
}

func decodeInt32Generic(dst []int32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = int32(binary.BigEndian.Uint32(src[4*i : 4*i+4]))
	}
}
