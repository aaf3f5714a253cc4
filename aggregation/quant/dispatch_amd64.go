//go:build amd64 && !purego

package quant

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAVX2 selects the assembly kernels (AVX2 and FMA, which every AVX2 CPU
// but a few VIA models has); x/sys/cpu also checks that the OS saves the YMM
// registers. Tests flip it to run the public API on the scalar
// code.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// hasF16C: the CPU converts float16 (VCVTPH2PS, VCVTPS2PH). The float16
// kernels need it as well as AVX2; bfloat16 needs AVX2 only.
var hasF16C = cpu.X86.HasF16C

// simdName names the kernels in use, for test logs and benchmarks.
var simdName = map[bool]string{true: "avx2", false: "scalar"}[useAVX2]

// simd16 reports whether the 16-bit kernels for f run on this CPU.
func simd16(f Format) bool { return useAVX2 && (f == BFloat16 || hasF16C) }

// ntThreshold is the output size from which the kernels store with
// non-temporal hints, as the runtime's memmove does: such outputs do not fit
// the caches anyway, and skipping the read-for-ownership of each destination
// line saves a third of the memory traffic. Messages (KiBs) stay cached.
const ntThreshold = 1 << 20

// The kernels process n values, n a multiple of 8; the Go wrappers run the
// scalar code on the rest. nt selects non-temporal stores (dst 32-byte
// aligned) followed by an SFENCE.

//go:noescape
func maxAbsBitsAVX2(src *float32, n int) uint32

// quantizeAVX2 returns infBits if src held a NaN or ±Inf, else 0 (not the
// max |x| bits: the kernel tracks finiteness with one FMA per vector).
//
//go:noescape
func quantizeAVX2(dst *byte, src *float32, n int, factor, limit float32, nt bool) (nonFinite uint32)

//go:noescape
func dequantizeAVX2(dst *float32, src *byte, n int, inv float32, nt bool)

//go:noescape
func bswap32AVX2(dst, src *byte, n int, nt bool)

// The 16-bit kernels (quant16_amd64.s): maxAbsBits16AVX2 takes n a multiple
// of 16, the others n a multiple of 8. The quantize kernels report
// finiteness as quantizeAVX2 does.

//go:noescape
func maxAbsBits16AVX2(src *uint16, n int) uint16

//go:noescape
func quantizeBF16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)

//go:noescape
func quantizeF16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)

//go:noescape
func dequantizeBF16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)

//go:noescape
func dequantizeF16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)

// The 16-bit wire's kernels (wire16_amd64.s) take n a multiple of 8
// (bswap16AVX2: of 16) and report finiteness as quantizeAVX2 does.

//go:noescape
func quantizeW16AVX2(dst *byte, src *float32, n int, factor, limit float32, nt bool) (nonFinite uint32)

//go:noescape
func quantizeBF16W16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)

//go:noescape
func quantizeF16W16AVX2(dst *byte, src *uint16, n int, factor, limit float32, nt bool) (nonFinite uint32)

//go:noescape
func dequantizeW16AVX2(dst *float32, src *byte, n int, inv float32, nt bool)

//go:noescape
func dequantizeBF16W16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)

//go:noescape
func dequantizeF16W16AVX2(dst *uint16, src *byte, n int, inv float32, nt bool)

//go:noescape
func bswap16AVX2(dst, src *byte, n int, nt bool)

// ntHead decides whether to store an output of size bytes at p, made of
// elem-byte values (2 or 4), with non-temporal stores, and if so how many
// leading values to write normally so the rest starts 32-byte aligned.
// Outputs that are not even elem-byte aligned use normal stores.
func ntHead(p unsafe.Pointer, size, elem int) (head int, nt bool) {
	a := int(uintptr(p) & 31)
	if size < ntThreshold || a%elem != 0 {
		return 0, false
	}
	return ((32 - a) & 31) / elem, true
}

func maxAbsBits(x []float32) uint32 {
	k := len(x) &^ 7
	if !useAVX2 || k == 0 {
		return maxAbsBitsGeneric(x)
	}
	return max(maxAbsBitsAVX2(&x[0], k), maxAbsBitsGeneric(x[k:]))
}

func quantize(dst []byte, src []float32, factor, limit float32) uint32 {
	if !useAVX2 || len(src) < 8 {
		return quantizeGeneric(dst, src, factor, limit)
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), len(dst), 4)
	m := quantizeGeneric(dst[:4*head], src[:head], factor, limit)
	src, dst = src[head:], dst[4*head:]
	if k := len(src) &^ 7; k > 0 {
		m = max(m, quantizeAVX2(&dst[0], &src[0], k, factor, limit, nt))
		src, dst = src[k:], dst[4*k:]
	}
	return max(m, quantizeGeneric(dst, src, factor, limit))
}

func dequantize(dst []float32, src []byte, inv float32) {
	if !useAVX2 || len(dst) < 8 {
		dequantizeGeneric(dst, src, inv)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), 4*len(dst), 4)
	dequantizeGeneric(dst[:head], src[:4*head], inv)
	dst, src = dst[head:], src[4*head:]
	if k := len(dst) &^ 7; k > 0 {
		dequantizeAVX2(&dst[0], &src[0], k, inv, nt)
		dst, src = dst[k:], src[4*k:]
	}
	dequantizeGeneric(dst, src, inv)
}

func encodeInt32(dst []byte, src []int32) {
	if !useAVX2 || len(src) < 8 {
		encodeInt32Generic(dst, src)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), len(dst), 4)
	encodeInt32Generic(dst[:4*head], src[:head])
	src, dst = src[head:], dst[4*head:]
	if k := len(src) &^ 7; k > 0 {
		bswap32AVX2(&dst[0], (*byte)(unsafe.Pointer(&src[0])), k, nt)
		src, dst = src[k:], dst[4*k:]
	}
	encodeInt32Generic(dst, src)
}

func decodeInt32(dst []int32, src []byte) {
	if !useAVX2 || len(dst) < 8 {
		decodeInt32Generic(dst, src)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), 4*len(dst), 4)
	decodeInt32Generic(dst[:head], src[:4*head])
	dst, src = dst[head:], src[4*head:]
	if k := len(dst) &^ 7; k > 0 {
		bswap32AVX2((*byte)(unsafe.Pointer(&dst[0])), &src[0], k, nt)
		dst, src = dst[k:], src[4*k:]
	}
	decodeInt32Generic(dst, src)
}

func maxAbsBits16(x []uint16) uint16 {
	k := len(x) &^ 15
	if !useAVX2 || k == 0 {
		return maxAbsBits16Generic(x)
	}
	return max(maxAbsBits16AVX2(&x[0], k), maxAbsBits16Generic(x[k:]))
}

func quantize16(dst []byte, src []uint16, f Format, factor, limit float32) (nonFinite bool) {
	if !simd16(f) || len(src) < 8 {
		return quantize16Generic(dst, src, f, factor, limit) >= f.infBits16()
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), len(dst), 4)
	m := quantize16Generic(dst[:4*head], src[:head], f, factor, limit)
	src, dst = src[head:], dst[4*head:]
	var bad uint32
	if k := len(src) &^ 7; k > 0 {
		// Direct calls (not through a func value) keep go:noescape.
		if f == BFloat16 {
			bad = quantizeBF16AVX2(&dst[0], &src[0], k, factor, limit, nt)
		} else {
			bad = quantizeF16AVX2(&dst[0], &src[0], k, factor, limit, nt)
		}
		src, dst = src[k:], dst[4*k:]
	}
	m = max(m, quantize16Generic(dst, src, f, factor, limit))
	return bad != 0 || m >= f.infBits16()
}

func dequantize16(dst []uint16, src []byte, f Format, inv float32) {
	if !simd16(f) || len(dst) < 8 {
		dequantize16Generic(dst, src, f, inv)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), 2*len(dst), 2)
	dequantize16Generic(dst[:head], src[:4*head], f, inv)
	dst, src = dst[head:], src[4*head:]
	if k := len(dst) &^ 7; k > 0 {
		if f == BFloat16 {
			dequantizeBF16AVX2(&dst[0], &src[0], k, inv, nt)
		} else {
			dequantizeF16AVX2(&dst[0], &src[0], k, inv, nt)
		}
		dst, src = dst[k:], src[4*k:]
	}
	dequantize16Generic(dst, src, f, inv)
}

func quantizeWire16(dst []byte, src []float32, factor, limit float32) (nonFinite bool) {
	if !useAVX2 || len(src) < 8 {
		return quantizeWire16Generic(dst, src, factor, limit) >= infBits
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), len(dst), 2)
	m := quantizeWire16Generic(dst[:2*head], src[:head], factor, limit)
	src, dst = src[head:], dst[2*head:]
	var bad uint32
	if k := len(src) &^ 7; k > 0 {
		bad = quantizeW16AVX2(&dst[0], &src[0], k, factor, limit, nt)
		src, dst = src[k:], dst[2*k:]
	}
	m = max(m, quantizeWire16Generic(dst, src, factor, limit))
	return bad != 0 || m >= infBits
}

func dequantizeWire16(dst []float32, src []byte, inv float32) {
	if !useAVX2 || len(dst) < 8 {
		dequantizeWire16Generic(dst, src, inv)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), 4*len(dst), 4)
	dequantizeWire16Generic(dst[:head], src[:2*head], inv)
	dst, src = dst[head:], src[2*head:]
	if k := len(dst) &^ 7; k > 0 {
		dequantizeW16AVX2(&dst[0], &src[0], k, inv, nt)
		dst, src = dst[k:], src[2*k:]
	}
	dequantizeWire16Generic(dst, src, inv)
}

func quantizeHalfWire16(dst []byte, src []uint16, f Format, factor, limit float32) (nonFinite bool) {
	if !simd16(f) || len(src) < 8 {
		return quantizeHalfWire16Generic(dst, src, f, factor, limit) >= f.infBits16()
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), len(dst), 2)
	m := quantizeHalfWire16Generic(dst[:2*head], src[:head], f, factor, limit)
	src, dst = src[head:], dst[2*head:]
	var bad uint32
	if k := len(src) &^ 7; k > 0 {
		if f == BFloat16 {
			bad = quantizeBF16W16AVX2(&dst[0], &src[0], k, factor, limit, nt)
		} else {
			bad = quantizeF16W16AVX2(&dst[0], &src[0], k, factor, limit, nt)
		}
		src, dst = src[k:], dst[2*k:]
	}
	m = max(m, quantizeHalfWire16Generic(dst, src, f, factor, limit))
	return bad != 0 || m >= f.infBits16()
}

func dequantizeHalfWire16(dst []uint16, src []byte, f Format, inv float32) {
	if !simd16(f) || len(dst) < 8 {
		dequantizeHalfWire16Generic(dst, src, f, inv)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), 2*len(dst), 2)
	dequantizeHalfWire16Generic(dst[:head], src[:2*head], f, inv)
	dst, src = dst[head:], src[2*head:]
	if k := len(dst) &^ 7; k > 0 {
		if f == BFloat16 {
			dequantizeBF16W16AVX2(&dst[0], &src[0], k, inv, nt)
		} else {
			dequantizeF16W16AVX2(&dst[0], &src[0], k, inv, nt)
		}
		dst, src = dst[k:], src[2*k:]
	}
	dequantizeHalfWire16Generic(dst, src, f, inv)
}

func encodeInt16(dst []byte, src []int16) {
	if !useAVX2 || len(src) < 16 {
		encodeInt16Generic(dst, src)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), len(dst), 2)
	encodeInt16Generic(dst[:2*head], src[:head])
	src, dst = src[head:], dst[2*head:]
	if k := len(src) &^ 15; k > 0 {
		bswap16AVX2(&dst[0], (*byte)(unsafe.Pointer(&src[0])), k, nt)
		src, dst = src[k:], dst[2*k:]
	}
	encodeInt16Generic(dst, src)
}

func decodeInt16(dst []int16, src []byte) {
	if !useAVX2 || len(dst) < 16 {
		decodeInt16Generic(dst, src)
		return
	}
	head, nt := ntHead(unsafe.Pointer(&dst[0]), 2*len(dst), 2)
	decodeInt16Generic(dst[:head], src[:2*head])
	dst, src = dst[head:], src[2*head:]
	if k := len(dst) &^ 15; k > 0 {
		bswap16AVX2((*byte)(unsafe.Pointer(&dst[0])), &src[0], k, nt)
		dst, src = dst[k:], src[2*k:]
	}
	decodeInt16Generic(dst, src)
}
