package quant

import (
	"fmt"
	"testing"
	"time"
	"unsafe"
)

// The benchmarks compare each operation with copy() of the same bytes
// between the same buffers in the same run (the target: ≥ 0.8 × copy for
// 64 MiB; docs/quantization.md "float32 and int32"). Operation and copy
// alternate in chunks of at least 1 MiB, so both see the same machine (other
// processes, memory traffic, frequency); ns/op and MB/s are the operation's
// alone, copy-MB/s is the copy's, and x-copy = (operation throughput)/(copy
// throughput).

var benchSizes = []struct {
	name  string
	bytes int
}{
	{"4KiB", 4 << 10}, // one message: cache resident
	{"64MiB", 64 << 20},
}

type benchImpl struct {
	name       string
	quantize   func(dst []byte, src []float32, s Scale)
	dequantize func(dst []float32, src []byte, s Scale)
}

var benchImpls = []benchImpl{
	{simdName,
		func(dst []byte, src []float32, s Scale) { _ = Quantize(dst, src, s) },
		func(dst []float32, src []byte, s Scale) { Dequantize(dst, src, s) }},
	{"scalar",
		func(dst []byte, src []float32, s Scale) { quantizeGeneric(dst, src, s.factor, s.limit) },
		func(dst []float32, src []byte, s Scale) { dequantizeGeneric(dst, src, s.inv) }},
}

func asBytes(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

func benchBuffers(size int) ([]float32, []byte, Scale) {
	x := make([]float32, size/4)
	for i := range x {
		x[i] = float32(i%1000-500) / 7
	}
	e, err := BlockExponent(x)
	if err != nil {
		panic(err)
	}
	s, err := NewScale(8, e)
	if err != nil {
		panic(err)
	}
	q := make([]byte, size)
	if err := Quantize(q, x, s); err != nil {
		panic(err)
	}
	return x, q, s
}

// runVsCopy runs op and copy(dst, src) b.N times each, alternating.
func runVsCopy(b *testing.B, size int, dst, src []byte, op func()) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	op() // warm up (page faults, caches)
	copy(dst, src)
	chunk := max(1, (1<<20)/size)
	var opTime, copyTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		k := min(chunk, b.N-done)
		t0 := time.Now()
		for range k {
			op()
		}
		t1 := time.Now()
		for range k {
			copy(dst, src)
		}
		opTime += t1.Sub(t0)
		copyTime += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(opTime.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(size)*n/opTime.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(size)*n/copyTime.Seconds()/1e6, "copy-MB/s")
	b.ReportMetric(copyTime.Seconds()/opTime.Seconds(), "x-copy")
}

func BenchmarkQuantize(b *testing.B) {
	for _, sz := range benchSizes {
		x, q, s := benchBuffers(sz.bytes)
		for _, impl := range benchImpls {
			b.Run(fmt.Sprintf("%s/%s", sz.name, impl.name), func(b *testing.B) {
				runVsCopy(b, sz.bytes, q, asBytes(x), func() { impl.quantize(q, x, s) })
			})
		}
	}
}

func BenchmarkDequantize(b *testing.B) {
	for _, sz := range benchSizes {
		x, q, s := benchBuffers(sz.bytes)
		for _, impl := range benchImpls {
			b.Run(fmt.Sprintf("%s/%s", sz.name, impl.name), func(b *testing.B) {
				runVsCopy(b, sz.bytes, asBytes(x), q, func() { impl.dequantize(x, q, s) })
			})
		}
	}
}

func BenchmarkBlockExponent(b *testing.B) {
	for _, sz := range benchSizes {
		x, _, _ := benchBuffers(sz.bytes)
		b.Run(fmt.Sprintf("%s/%s", sz.name, simdName), func(b *testing.B) {
			b.SetBytes(int64(sz.bytes))
			b.ReportAllocs()
			for range b.N {
				if _, err := BlockExponent(x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkInt32(b *testing.B) {
	for _, sz := range benchSizes {
		ints := make([]int32, sz.bytes/4)
		for i := range ints { // written, so no read comes from the shared zero page
			ints[i] = int32(i * 2654435761)
		}
		wire := make([]byte, sz.bytes)
		ib := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ints))), sz.bytes)
		b.Run(fmt.Sprintf("Encode/%s/%s", sz.name, simdName), func(b *testing.B) {
			runVsCopy(b, sz.bytes, wire, ib, func() { EncodeInt32(wire, ints) })
		})
		b.Run(fmt.Sprintf("Decode/%s/%s", sz.name, simdName), func(b *testing.B) {
			runVsCopy(b, sz.bytes, ib, wire, func() { DecodeInt32(ints, wire) })
		})
	}
}

// BenchmarkHalf: Quantize16, Dequantize16 and BlockExponent16 for both
// 16-bit formats, on every path (paths(): the AVX2/F16C kernels and the
// scalar Go). size is the 16-bit tensor's bytes (the wire payload is twice
// that); copy() moves the tensor's bytes, so x-copy compares the quantizer
// with copying the tensor once (the quantizer moves 1.5 times those bytes:
// 2 read and 4 written per value, or 4 read and 2 written).
func BenchmarkHalf(b *testing.B) {
	for _, sz := range benchSizes {
		for _, f := range []Format{BFloat16, Float16} {
			x := make([]uint16, sz.bytes/2)
			for i := range x {
				x[i] = f.FromFloat32(float32(i%1000-500) / 7)
			}
			e, err := BlockExponent16(x, f)
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewScale(8, e)
			if err != nil {
				b.Fatal(err)
			}
			q := make([]byte, 2*sz.bytes)
			if err := Quantize16(q, x, f, s); err != nil {
				b.Fatal(err)
			}
			other := make([]byte, sz.bytes)
			xb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), sz.bytes)
			for _, path := range paths() {
				b.Run(fmt.Sprintf("Quantize/%v/%s/%s", f, sz.name, path), func(b *testing.B) {
					defer usePath(path)()
					runVsCopy(b, sz.bytes, other, xb, func() { _ = Quantize16(q, x, f, s) })
				})
				b.Run(fmt.Sprintf("Dequantize/%v/%s/%s", f, sz.name, path), func(b *testing.B) {
					defer usePath(path)()
					runVsCopy(b, sz.bytes, xb, other, func() { Dequantize16(x, q, f, s) })
				})
				b.Run(fmt.Sprintf("BlockExponent/%v/%s/%s", f, sz.name, path), func(b *testing.B) {
					defer usePath(path)()
					b.SetBytes(int64(sz.bytes))
					b.ReportAllocs()
					for range b.N {
						_, _ = BlockExponent16(x, f)
					}
				})
			}
		}
	}
}

// BenchmarkWire16: the 16-bit wire's kernels on every path (paths(): the
// AVX2/F16C kernels and the scalar Go), for float32, bfloat16 and float16
// tensors, and EncodeInt16/DecodeInt16. size is the tensor's bytes (the
// wire payload is 2 bytes per value: half a float32 tensor, as much as a
// 16-bit one), and x-copy compares the kernel with copy() of the tensor.
// copy() reads and writes size bytes; a float32 kernel reads size and
// writes size/2 (or the reverse), three quarters of copy's traffic; a
// 16-bit kernel moves as much as copy. Memory-bound, they would reach 1.33
// and 1.0 x-copy.
func BenchmarkWire16(b *testing.B) {
	for _, sz := range benchSizes {
		x, _, _ := benchBuffers(sz.bytes)
		e, err := BlockExponent(x)
		if err != nil {
			b.Fatal(err)
		}
		s, err := NewScaleWire16(8, e)
		if err != nil {
			b.Fatal(err)
		}
		q := make([]byte, sz.bytes/2)
		if err := QuantizeWire16(q, x, s); err != nil {
			b.Fatal(err)
		}
		other := make([]byte, sz.bytes)
		for _, path := range paths() {
			b.Run(fmt.Sprintf("Quantize/float32/%s/%s", sz.name, path), func(b *testing.B) {
				defer usePath(path)()
				runVsCopy(b, sz.bytes, other, asBytes(x), func() { _ = QuantizeWire16(q, x, s) })
			})
			b.Run(fmt.Sprintf("Dequantize/float32/%s/%s", sz.name, path), func(b *testing.B) {
				defer usePath(path)()
				runVsCopy(b, sz.bytes, asBytes(x), other, func() { DequantizeWire16(x, q, s) })
			})
		}
		for _, f := range []Format{BFloat16, Float16} {
			h := make([]uint16, sz.bytes/2)
			for i := range h {
				h[i] = f.FromFloat32(float32(i%1000-500) / 7)
			}
			e, err := BlockExponent16(h, f)
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewScaleWire16(8, e)
			if err != nil {
				b.Fatal(err)
			}
			q := make([]byte, sz.bytes)
			if err := QuantizeHalfWire16(q, h, f, s); err != nil {
				b.Fatal(err)
			}
			hb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(h))), sz.bytes)
			for _, path := range paths() {
				b.Run(fmt.Sprintf("Quantize/%v/%s/%s", f, sz.name, path), func(b *testing.B) {
					defer usePath(path)()
					runVsCopy(b, sz.bytes, other, hb, func() { _ = QuantizeHalfWire16(q, h, f, s) })
				})
				b.Run(fmt.Sprintf("Dequantize/%v/%s/%s", f, sz.name, path), func(b *testing.B) {
					defer usePath(path)()
					runVsCopy(b, sz.bytes, hb, other, func() { DequantizeHalfWire16(h, q, f, s) })
				})
			}
		}
		ints := make([]int16, sz.bytes/2)
		for i := range ints { // written, so no read comes from the shared zero page
			ints[i] = int16(i * 40503)
		}
		wire := make([]byte, sz.bytes)
		ib := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ints))), sz.bytes)
		for _, path := range paths() {
			b.Run(fmt.Sprintf("EncodeInt16/%s/%s", sz.name, path), func(b *testing.B) {
				defer usePath(path)()
				runVsCopy(b, sz.bytes, wire, ib, func() { EncodeInt16(wire, ints) })
			})
			b.Run(fmt.Sprintf("DecodeInt16/%s/%s", sz.name, path), func(b *testing.B) {
				defer usePath(path)()
				runVsCopy(b, sz.bytes, ib, wire, func() { DecodeInt16(ints, wire) })
			})
		}
	}
}
