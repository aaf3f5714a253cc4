//go:build !amd64 || purego

package quant

// simdName names the kernels in use, for test logs and benchmarks.
const simdName = "scalar"

func maxAbsBits(x []float32) uint32 { return maxAbsBitsGeneric(x) }

func quantize(dst []byte, src []float32, factor, limit float32) uint32 {
	return quantizeGeneric(dst, src, factor, limit)
}

func dequantize(dst []float32, src []byte, inv float32) { dequantizeGeneric(dst, src, inv) }

func encodeInt32(dst []byte, src []int32) { encodeInt32Generic(dst, src) }

func decodeInt32(dst []int32, src []byte) { decodeInt32Generic(dst, src) }

func maxAbsBits16(x []uint16) uint16 { return maxAbsBits16Generic(x) }

func quantize16(dst []byte, src []uint16, f Format, factor, limit float32) (nonFinite bool) {
	return quantize16Generic(dst, src, f, factor, limit) >= f.infBits16()
}

func dequantize16(dst []uint16, src []byte, f Format, inv float32) {
	dequantize16Generic(dst, src, f, inv)
}

func quantizeWire16(dst []byte, src []float32, factor, limit float32) (nonFinite bool) {
	return quantizeWire16Generic(dst, src, factor, limit) >= infBits
}

func dequantizeWire16(dst []float32, src []byte, inv float32) { dequantizeWire16Generic(dst, src, inv) }

func quantizeHalfWire16(dst []byte, src []uint16, f Format, factor, limit float32) (nonFinite bool) {
	return quantizeHalfWire16Generic(dst, src, f, factor, limit) >= f.infBits16()
}

func dequantizeHalfWire16(dst []uint16, src []byte, f Format, inv float32) {
	dequantizeHalfWire16Generic(dst, src, f, inv)
}

func encodeInt16(dst []byte, src []int16) { encodeInt16Generic(dst, src) }

func decodeInt16(dst []int16, src []byte) { decodeInt16Generic(dst, src) }
