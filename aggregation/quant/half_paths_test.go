package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The tests below run the 16-bit public API on every implementation this
// machine has (paths(): the AVX2/F16C kernels and the scalar code) and
// compare each with the scalar reference (the *Generic functions) bit for
// bit, as quant_test.go does for float32.

// edges16 are 16-bit patterns of f that stress the kernels: ±0, the
// smallest and largest subnormals, the smallest normal, the largest finite
// value, 1, ±Inf, quiet and signalling NaNs of both signs.
func edges16(f Format) []uint16 {
	if f == BFloat16 {
		return []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080,
			0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFFF, 0x7FBF}
	}
	return []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400,
		0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFFFF, 0x7DFF}
}

// fill16 writes test values of f into x: mode 0 any bit pattern (every
// exponent, NaN and ±Inf included), mode 1 any finite pattern, mode 2
// mostly edge values, mode 3 finite values of magnitude around 2^e (some
// saturate, some round to zero).
func fill16(rng *rand.Rand, f Format, x []uint16, mode int, e int8) {
	edges := edges16(f)
	inf := f.infBits16()
	for i := range x {
		switch mode {
		case 0:
			x[i] = uint16(rng.Uint32())
		case 1:
			x[i] = uint16(rng.Uint32())
			if x[i]&0x7FFF >= inf {
				x[i] &= 0x8000 | (inf - 1)
			}
		case 2:
			if rng.IntN(2) == 0 {
				x[i] = edges[rng.IntN(len(edges))]
			} else {
				x[i] = uint16(rng.Uint32())
			}
		default:
			v := float32(math.Ldexp(rng.Float64()*2-1, int(e)+1-rng.IntN(40)))
			x[i] = f.FromFloat32(v)
			if x[i]&0x7FFF >= inf {
				x[i] = 0
			}
		}
	}
}

// firstBad16 is the index of the first NaN or ±Inf in x, or −1.
func firstBad16(f Format, x []uint16) int {
	for i, v := range x {
		if v&0x7FFF >= f.infBits16() {
			return i
		}
	}
	return -1
}

// check16 runs the public 16-bit API on src (on the current path) and
// compares it with the scalar reference for scale s: maxAbsBits16,
// BlockExponent16, MarkedBlockExponent16 and Quantize16 (into a buffer at
// byte offset dstOff). It returns the wire bytes.
func check16(t *testing.T, what string, f Format, src []uint16, s Scale, dstOff int) []byte {
	t.Helper()
	mw := maxAbsBits16Generic(src)
	if m := maxAbsBits16(src); m != mw {
		t.Fatalf("%s: maxAbsBits16 %#04x, scalar %#04x", what, m, mw)
	}
	bad := firstBad16(f, src)
	e, err := BlockExponent16(src, f)
	if bad >= 0 {
		checkNonFinite(t, what+": BlockExponent16", err, bad, f.ToFloat32(src[bad]))
		if me := MarkedBlockExponent16(src, f); me != NonFiniteExponent {
			t.Fatalf("%s: MarkedBlockExponent16 = %d with a non-finite value at %d", what, me, bad)
		}
	} else {
		if want := f.exponentOfBits16(mw); err != nil || e != want {
			t.Fatalf("%s: BlockExponent16 = %d, %v; want %d", what, e, err, want)
		}
		if me := MarkedBlockExponent16(src, f); me != e {
			t.Fatalf("%s: MarkedBlockExponent16 = %d, want %d", what, me, e)
		}
	}
	got := make([]byte, 4*len(src)+dstOff)[dstOff:]
	want := make([]byte, 4*len(src))
	err = Quantize16(got, src, f, s)
	quantize16Generic(want, src, f, s.factor, s.limit)
	if bad >= 0 {
		checkNonFinite(t, what+": Quantize16", err, bad, f.ToFloat32(src[bad]))
	} else if err != nil {
		t.Fatalf("%s: Quantize16: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		for i := range src {
			if g, w := got[4*i:4*i+4], want[4*i:4*i+4]; !bytes.Equal(g, w) {
				t.Fatalf("%s: Quantize16[%d] of %#04x = %x, scalar %x", what, i, src[i], g, w)
			}
		}
	}
	return got
}

// check16Dequantize runs Dequantize16 on the current path into a buffer at
// value offset dstOff and compares it with the scalar reference.
func check16Dequantize(t *testing.T, what string, f Format, src []byte, s Scale, dstOff int) {
	t.Helper()
	n := len(src) / 4
	got := make([]uint16, n+dstOff)[dstOff:]
	want := make([]uint16, n)
	Dequantize16(got, src, f, s)
	dequantize16Generic(want, src, f, s.inv)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: Dequantize16[%d] of %d = %#04x, scalar %#04x", what, i, int32(binary.BigEndian.Uint32(src[4*i:])), got[i], want[i])
		}
	}
}

// TestHalfMatchesScalar: every length 0..100 and some longer ones (around
// the 8-, 16-, 32- and 64-value steps of the kernels), source and
// destination misalignments, random bit patterns of every exponent, edge
// values, NaN and ±Inf, for both formats, on every path.
func TestHalfMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	specials := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 1 << 24, 1<<24 + 1, -(1<<24 + 3), 1<<30 + 65}
	lengths := []int{127, 128, 129, 255, 1000, 4099}
	for n := range 101 {
		lengths = append(lengths, n)
	}
	scales := testScales(t)
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			for _, n := range lengths {
				for off := range 4 {
					mode := (n + off) % 4
					s := scales[rng.IntN(len(scales))]
					srcBuf := make([]uint16, n+off)
					src := srcBuf[off:]
					fill16(rng, f, src, mode, s.Exponent())
					if mode == 3 && n > 0 && rng.IntN(2) == 0 {
						// The scale a worker would use for this block.
						e, err := BlockExponent16(src, f)
						if err != nil {
							t.Fatal(err)
						}
						if s, err = NewScale(1+rng.IntN(64), e); err != nil {
							t.Fatal(err)
						}
					}
					what := path + " " + f.String() + " len " + strconv.Itoa(n) + " off " + strconv.Itoa(off) + " mode " + strconv.Itoa(mode)
					wire := check16(t, what, f, src, s, 2*off+1)
					// Dequantize what was quantized, the n-fold sum, and
					// random sums.
					for i := range n {
						q := int32(binary.BigEndian.Uint32(wire[4*i:]))
						switch rng.IntN(3) {
						case 0:
							q *= int32(s.Workers())
						case 1:
							q = int32(rng.Uint32()) >> rng.IntN(32)
							if rng.IntN(4) == 0 {
								q = specials[rng.IntN(len(specials))]
							}
						}
						binary.BigEndian.PutUint32(wire[4*i:], uint32(q))
					}
					check16Dequantize(t, what, f, wire, s, off)
				}
			}
			// Every edge value in every lane position.
			for _, v := range edges16(f) {
				for pos := range 70 {
					src := make([]uint16, 70)
					fill16(rng, f, src, 1, 0)
					src[pos] = v
					check16(t, path+" "+f.String()+" edge at "+strconv.Itoa(pos), f, src, scales[pos%len(scales)], 0)
				}
			}
		}
		restore()
	}
}

// TestHalfExhaustive quantizes every 16-bit pattern of both formats with
// scales over the whole exponent range (values far above 2^e saturate,
// far below round to zero) and dequantizes their sums, on every path.
func TestHalfExhaustive(t *testing.T) {
	all := make([]uint16, 1<<16+3)
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			for _, off := range []int{0, 3} {
				src := all[off : off+1<<16]
				for i := range src {
					src[i] = uint16(i)
				}
				scales := testScales(t)
				for _, e := range []int8{-24, -14, -1, 0, 5, 15, 16, 40} {
					s, err := NewScale(3, e)
					if err != nil {
						t.Fatal(err)
					}
					scales = append(scales, s)
				}
				for _, s := range scales {
					what := path + " " + f.String() + " all patterns, off " + strconv.Itoa(off) + ", e " + strconv.Itoa(int(s.Exponent()))
					wire := check16(t, what, f, src, s, off)
					check16Dequantize(t, what, f, wire, s, off)
				}
			}
		}
		restore()
	}
}

// narrowCases returns float32 values whose rounding to f is worth testing:
// for every sign and float32 exponent, mantissas whose bits below f's
// rounding position (16 for bfloat16; 13 for float16 normals, more for its
// subnormals) are 0, 1, just below, at and just above the half (ties),
// all ones, or random; every 16-bit value of f (exactly representable) and
// every midpoint between neighbours; and the edges of float16's range.
func narrowCases(rng *rand.Rand, f Format) []float32 {
	var xs []float32
	for eb := range uint32(255) {
		p := 16
		if f == Float16 {
			p = 13 + max(0, 113-int(eb))
		}
		var lows []uint32
		if p < 24 {
			half := uint32(1) << (p - 1)
			lows = []uint32{0, 1, half - 1, half, half + 1, 2*half - 1, rng.Uint32() & (2*half - 1)}
		} else {
			lows = []uint32{0, 1, 1<<23 - 1, 1 << 22}
			p = 23
		}
		for k := range 24 {
			hi := rng.Uint32() << p & 0x7FFFFF
			switch k {
			case 0:
				hi = 0
			case 1:
				hi = 0x7FFFFF &^ (1<<p - 1)
			case 2:
				hi = 1 << p & 0x7FFFFF // odd last kept bit: ties go the other way
			}
			for _, lo := range lows {
				b := eb<<23 | (hi|lo)&0x7FFFFF
				xs = append(xs, math.Float32frombits(b), math.Float32frombits(b|0x80000000))
			}
		}
	}
	for h := range int(f.infBits16()) {
		v := f.ToFloat32(uint16(h))
		xs = append(xs, v, -v)
		if h+1 < int(f.infBits16()) {
			mid := (refValue16(f, uint16(h)) + refValue16(f, uint16(h+1))) / 2
			if m32 := float32(mid); float64(m32) == mid {
				xs = append(xs, m32, -m32, math.Nextafter32(m32, 0), math.Nextafter32(m32, math.MaxFloat32))
			}
		}
	}
	return append(xs, 65504, 65519.99, 65520, -65520, 65536, 1e9, math.MaxFloat32, -math.MaxFloat32,
		0x1p-14, math.Nextafter32(0x1p-14, 0), 0x1p-24, 0x1p-25, math.Nextafter32(0x1p-25, 1), math.Nextafter32(0x1p-25, 0),
		0x1.8p-25, 0x1.8p-24, 0x1p-26, 0x1p-126, 0x1p-149, -0x1p-149)
}

// TestDequantize16Rounding checks the narrowing of the kernels on every
// path against the scalar rule, for values that reach every float32: a
// finite float32 x is M·2^E with |M| < 2^24 and −149 ≤ E ≤ 104, so
// dequantizing the int32 sum M with the inverse 2^E gives exactly x (the
// conversion and the product are exact). The scalar rule (FromFloat32 for
// float16, the integer rule for bfloat16) is checked against a search over
// the format's values in TestFromFloat32. Inverses 2^104 with large sums
// overflow to ±Inf (as Dequantize can when e is near MaxExponent), an
// inverse 0 (the zero Scale) gives ±0.
func TestDequantize16Rounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, f := range formats {
		groups := map[int][]int32{} // E → the M of its values
		var want = map[int][]uint16{}
		for _, x := range narrowCases(rng, f) {
			b := math.Float32bits(x)
			eb, m := int(b>>23&0xFF), int32(b&0x7FFFFF)
			E := -149
			if eb > 0 {
				m |= 1 << 23
				E = eb - 150
			}
			if b>>31 != 0 {
				if m == 0 {
					continue // −0 is no sum times an inverse > 0 (the zero Scale gives it below)
				}
				m = -m
			}
			if float32(m)*float32(math.Ldexp(1, E)) != x {
				t.Fatalf("%v = %d·2^%d is not exact", x, m, E)
			}
			groups[E] = append(groups[E], m)
			want[E] = append(want[E], f.FromFloat32(x))
		}
		for _, inv := range []int{105, 106} { // 2^104 (E = 105 marks it) and 0
			groups[inv] = []int32{math.MaxInt32, math.MinInt32, 1 << 24, -(1 << 30), 1 << 23, 3, -3, 0, 1, -1}
		}
		for _, path := range paths() {
			restore := usePath(path)
			for E, ms := range groups {
				inv := float32(math.Ldexp(1, E))
				switch E {
				case 105:
					inv = 0x1p104
				case 106:
					inv = 0
				}
				src := make([]byte, 4*len(ms))
				for i, m := range ms {
					binary.BigEndian.PutUint32(src[4*i:], uint32(m))
				}
				for _, off := range []int{0, 1, 5} {
					got := make([]uint16, len(ms)+off)[off:]
					dequantize16(got, src, f, inv)
					for i, m := range ms {
						r := float32(m) * inv
						w := f.FromFloat32(r)
						if E < 105 && w != want[E][i] {
							t.Fatalf("%v: test case %d·2^%d is not %v", f, m, E, r)
						}
						if got[i] != w {
							t.Fatalf("%s %v: %v (%#08x) narrowed to %#04x, scalar %#04x", path, f, r, math.Float32bits(r), got[i], w)
						}
					}
				}
			}
			restore()
		}
	}
}

// TestLarge16 covers the non-temporal store paths (outputs ≥ 1 MiB) with
// aligned, element-aligned and unaligned destinations.
func TestLarge16(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const n = 1<<19 + 13 // Dequantize16's output is just over 1 MiB
	s, _ := NewScale(3, 4)
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			all := make([]uint16, n+1)
			fill16(rng, f, all, 3, 4)
			for _, off := range []int{0, 4, 6, 1} {
				src := all[off%2 : off%2+n]
				what := path + " " + f.String() + " large, off " + strconv.Itoa(off)
				wire := check16(t, what, f, src, s, off)
				check16Dequantize(t, what, f, wire, s, off/2)
			}
		}
		restore()
	}
}
