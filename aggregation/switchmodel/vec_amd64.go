//go:build amd64 && !purego

package switchmodel

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAVX2 selects the assembly kernels; x/sys/cpu also checks that the OS
// saves the YMM registers.
var useAVX2 = cpu.X86.HasAVX2

var vecKernels = map[bool]string{true: "avx2", false: "scalar"}[useAVX2]

// bswap64AVX2 writes the n bytes (a multiple of 8) of src to dst with every
// 8-byte word byte-reversed.
//
//go:noescape
func bswap64AVX2(dst, src unsafe.Pointer, n int)

// accumulateAVX2 adds the byte-reversed 8-byte words of src (n bytes, a
// multiple of 8) to acc as pairs of int32 lanes.
//
//go:noescape
func accumulateAVX2(acc, src unsafe.Pointer, n int)

// accumulate16AVX2 is accumulateAVX2 for int16 lanes.
//
//go:noescape
func accumulate16AVX2(acc, src unsafe.Pointer, n int)

func load(v []uint64, b []byte) {
	if !useAVX2 || len(v) == 0 {
		loadGeneric(v, b)
		return
	}
	b = b[:len(v)*8]
	bswap64AVX2(unsafe.Pointer(&v[0]), unsafe.Pointer(&b[0]), len(b))
}

func accumulate(v []uint64, b []byte) {
	if !useAVX2 || len(v) == 0 {
		accumulateGeneric(v, b)
		return
	}
	b = b[:len(v)*8]
	accumulateAVX2(unsafe.Pointer(&v[0]), unsafe.Pointer(&b[0]), len(b))
}

func accumulate16(v []uint64, b []byte) {
	if !useAVX2 || len(v) == 0 {
		accumulate16Generic(v, b)
		return
	}
	b = b[:len(v)*8]
	accumulate16AVX2(unsafe.Pointer(&v[0]), unsafe.Pointer(&b[0]), len(b))
}

func store(b []byte, v []uint64) {
	if !useAVX2 || len(v) == 0 {
		storeGeneric(b, v)
		return
	}
	b = b[:len(v)*8]
	bswap64AVX2(unsafe.Pointer(&b[0]), unsafe.Pointer(&v[0]), len(b))
}
