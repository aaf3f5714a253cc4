package switchmodel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestVectorKernels(t *testing.T) {
	t.Logf("kernels: %s", vecKernels)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{8, 16, 24, 256, 1024, 4096} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		acc := make([]uint64, n/8)
		for i := range acc {
			acc[i] = rng.Uint64()
		}
		want, got := slices.Clone(acc), slices.Clone(acc)
		accumulateGeneric(want, b)
		accumulate(got, b)
		if !slices.Equal(got, want) {
			t.Fatalf("accumulate %d bytes differs from the generic code", n)
		}
		loadGeneric(want, b)
		load(got, b)
		if !slices.Equal(got, want) {
			t.Fatalf("load %d bytes differs", n)
		}
		out1, out2 := make([]byte, n), make([]byte, n)
		storeGeneric(out1, acc)
		store(out2, acc)
		if !slices.Equal(out1, out2) {
			t.Fatalf("store %d bytes differs", n)
		}
		load(acc, b)
		store(out2, acc)
		if !slices.Equal(out2, b) {
			t.Fatalf("store(load(b)) != b for %d bytes", n)
		}
	}
}

func BenchmarkAccumulate1KiB(b *testing.B) {
	buf := make([]byte, 1024)
	acc := make([]uint64, 128)
	b.SetBytes(1024)
	for b.Loop() {
		accumulate(acc, buf)
	}
}

func BenchmarkAccumulate16_1KiB(b *testing.B) {
	buf := make([]byte, 1024)
	acc := make([]uint64, 128)
	b.SetBytes(1024)
	for b.Loop() {
		accumulate16(acc, buf)
	}
}

func BenchmarkStore1KiB(b *testing.B) {
	buf := make([]byte, 1024)
	acc := make([]uint64, 128)
	b.SetBytes(1024)
	for b.Loop() {
		store(buf, acc)
	}
}

func BenchmarkCopy1KiB(b *testing.B) {
	buf := make([]byte, 1024)
	dst := make([]byte, 1024)
	b.SetBytes(1024)
	for b.Loop() {
		copy(dst, buf)
	}
}
