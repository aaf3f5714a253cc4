package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

var formats = []Format{BFloat16, Float16}

// refValue16 is the exact value of a 16-bit pattern, computed from the
// format's definition in float64.
func refValue16(f Format, h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	if f == BFloat16 {
		e, m := int(h>>7)&0xFF, float64(h&0x7F)
		switch e {
		case 0:
			return sign * m * math.Ldexp(1, -133)
		case 0xFF:
			if m != 0 {
				return math.NaN()
			}
			return sign * math.Inf(1)
		}
		return sign * (1 + m/128) * math.Ldexp(1, e-127)
	}
	e, m := int(h>>10)&0x1F, float64(h&0x3FF)
	switch e {
	case 0:
		return sign * m * math.Ldexp(1, -24)
	case 0x1F:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Ldexp(1, e-15)
}

func TestToFloat32Exhaustive(t *testing.T) {
	for _, f := range formats {
		for h := range 1 << 16 {
			got, want := float64(f.ToFloat32(uint16(h))), refValue16(f, uint16(h))
			if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("%v: ToFloat32(%#04x) = %v, want %v", f, h, got, want)
			}
			if math.Signbit(got) != (h&0x8000 != 0) {
				t.Fatalf("%v: ToFloat32(%#04x) = %v: wrong sign", f, h, got)
			}
		}
	}
}

// refRound16 rounds x (finite, ≥ 0) to f by search over the ordered positive
// patterns: the nearest, ties to the even pattern; past the largest finite
// value by half an ulp or more, +Inf.
func refRound16(f Format, x float64) uint16 {
	top := int(f.infBits16()) // patterns 0 … top-1 are finite and increasing
	i := sort.Search(top, func(i int) bool { return refValue16(f, uint16(i)) >= x })
	if i == top {
		last := refValue16(f, uint16(top-1))
		ulp := last - refValue16(f, uint16(top-2))
		if x-last >= ulp/2 { // the next value would be 2^emax+1: ties go to it (even)
			return uint16(top)
		}
		return uint16(top - 1)
	}
	if i == 0 || refValue16(f, uint16(i)) == x {
		return uint16(i)
	}
	lo, hi := refValue16(f, uint16(i-1)), refValue16(f, uint16(i))
	switch {
	case x-lo < hi-x:
		return uint16(i - 1)
	case x-lo > hi-x:
		return uint16(i)
	case i%2 == 0:
		return uint16(i)
	}
	return uint16(i - 1)
}

func TestFromFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range formats {
		// Every 16-bit value round-trips.
		for h := range 1 << 16 {
			v := f.ToFloat32(uint16(h))
			if math.IsNaN(float64(v)) {
				if g := f.FromFloat32(v); g&0x7FFF <= f.infBits16() {
					t.Fatalf("%v: FromFloat32(NaN %#04x) = %#04x, not a NaN", f, h, g)
				}
				continue
			}
			if g := f.FromFloat32(v); g != uint16(h) {
				t.Fatalf("%v: FromFloat32(ToFloat32(%#04x)) = %#04x", f, h, g)
			}
		}
		// Random float32 across the format's range, midpoints, and edges,
		// against the search reference.
		var xs []float32
		for range 200000 {
			e := -30 + rng.IntN(50)
			if f == BFloat16 {
				e = -140 + rng.IntN(270)
			}
			xs = append(xs, float32(math.Ldexp(rng.Float64(), e)))
		}
		for h := range int(f.infBits16()) - 1 { // midpoints between neighbours: ties
			mid := (refValue16(f, uint16(h)) + refValue16(f, uint16(h+1))) / 2
			if m32 := float32(mid); float64(m32) == mid {
				xs = append(xs, m32, math.Nextafter32(m32, 0), math.Nextafter32(m32, math.MaxFloat32))
			}
		}
		xs = append(xs, 0, 65504, 65519.99, 65520, 65536, 1e9, math.MaxFloat32, 0x1p-25, 0x1p-26, 0x1.8p-25, 0x1p-149)
		for _, x := range xs {
			if math.IsInf(float64(x), 0) {
				continue
			}
			want := refRound16(f, float64(x))
			if got := f.FromFloat32(x); got != want {
				t.Fatalf("%v: FromFloat32(%v = %#08x) = %#04x (%v), want %#04x (%v)", f, x, math.Float32bits(x), got, refValue16(f, got), want, refValue16(f, want))
			}
			if got := f.FromFloat32(-x); got != want|0x8000 {
				t.Fatalf("%v: FromFloat32(%v) = %#04x, want %#04x", f, -x, got, want|0x8000)
			}
		}
	}
}

// random16 draws n 16-bit values of f with magnitudes 2^lo … 2^hi, some zeros.
func random16(rng *rand.Rand, f Format, n, lo, hi int) []uint16 {
	x := make([]uint16, n)
	for i := range x {
		if rng.IntN(20) == 0 {
			continue
		}
		v := math.Ldexp(rng.Float64()*2-1, lo+rng.IntN(hi-lo+1))
		x[i] = f.FromFloat32(float32(v))
	}
	return x
}

func widen(f Format, x []uint16) []float32 {
	y := make([]float32, len(x))
	for i, h := range x {
		y[i] = f.ToFloat32(h)
	}
	return y
}

// TestQuantize16MatchesFloat32: quantizing 16-bit values directly is
// quantizing their float32 values, bit for bit, and the block exponents
// agree.
func TestQuantize16MatchesFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range formats {
		for _, n := range []int{0, 1, 7, 33, 1000} {
			x := random16(rng, f, n, -20, 15)
			if n > 3 {
				x[n-1] = f.FromFloat32(65504)
				x[1] = 1 // a float16 subnormal / a bfloat16 tiny value
			}
			w := widen(f, x)
			e16, err16 := BlockExponent16(x, f)
			e32, err32 := BlockExponent(w)
			if e16 != e32 || err16 != nil || err32 != nil || MarkedBlockExponent16(x, f) != e32 {
				t.Fatalf("%v n=%d: BlockExponent16 = %d, %v; float32 %d, %v", f, n, e16, err16, e32, err32)
			}
			for _, workers := range []int{1, 4, 33} {
				s, err := NewScale(workers, e32)
				if err != nil {
					t.Fatal(err)
				}
				a, b := make([]byte, 4*n), make([]byte, 4*n)
				if err := Quantize16(a, x, f, s); err != nil {
					t.Fatal(err)
				}
				if err := Quantize(b, w, s); err != nil {
					t.Fatal(err)
				}
				if string(a) != string(b) {
					t.Fatalf("%v n=%d workers=%d: Quantize16 differs from Quantize of the float32 values", f, n, workers)
				}
				r16, r32 := make([]uint16, n), make([]float32, n)
				Dequantize16(r16, a, f, s)
				Dequantize(r32, b, s)
				for i := range r16 {
					if want := f.FromFloat32(r32[i]); r16[i] != want {
						t.Fatalf("%v: Dequantize16[%d] = %#04x, want %#04x (float32 %v rounded)", f, i, r16[i], want, r32[i])
					}
				}
			}
		}
	}
}

func TestNonFinite16(t *testing.T) {
	for _, f := range formats {
		inf, nan := f.infBits16(), f.infBits16()|1
		for _, bad := range []uint16{inf, inf | 0x8000, nan} {
			x := []uint16{0, f.FromFloat32(1.5), bad, 3}
			if _, err := BlockExponent16(x, f); err == nil {
				t.Fatalf("%v: BlockExponent16 with %#04x: no error", f, bad)
			} else {
				checkNonFinite(t, "BlockExponent16", err, 2, f.ToFloat32(bad))
			}
			if e := MarkedBlockExponent16(x, f); e != NonFiniteExponent {
				t.Fatalf("%v: MarkedBlockExponent16 with %#04x = %d", f, bad, e)
			}
			s, _ := NewScale(2, 3)
			err := Quantize16(make([]byte, 16), x, f, s)
			checkNonFinite(t, "Quantize16", err, 2, f.ToFloat32(bad))
		}
	}
}

// TestMarker: the non-finite marker is above every finite exponent, so the
// switch's max carries it; its scale sends zeros and gives NaN back.
func TestMarker(t *testing.T) {
	if NonFiniteExponent != math.MaxInt8 || MaxExponent >= NonFiniteExponent {
		t.Fatalf("NonFiniteExponent %d, MaxExponent %d", NonFiniteExponent, MaxExponent)
	}
	if e, err := BlockExponent([]float32{math.MaxFloat32}); err != nil || e != MaxExponent {
		t.Fatalf("BlockExponent(MaxFloat32) = %d, %v: finite input must stay below the marker", e, err)
	}
	for _, x := range [][]float32{{1, float32(math.Inf(1))}, {float32(math.NaN())}, {float32(math.Inf(-1)), 0}} {
		if e := MarkedBlockExponent(x); e != NonFiniteExponent {
			t.Fatalf("MarkedBlockExponent(%v) = %d", x, e)
		}
	}
	if e := MarkedBlockExponent([]float32{3}); e != 2 {
		t.Fatalf("MarkedBlockExponent(3) = %d", e)
	}
	s, err := NewScale(4, NonFiniteExponent)
	if err != nil || !s.NonFinite() {
		t.Fatalf("NewScale(4, marker) = %+v, %v", s, err)
	}
	if z := (Scale{}); z.NonFinite() {
		t.Fatal("zero Scale is NonFinite")
	}
	dst := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := Quantize(dst, []float32{float32(math.NaN()), 1}, s); err != nil || binary.BigEndian.Uint64(dst) != 0 {
		t.Fatalf("Quantize with the marker: %v, %x; want zeros", err, dst)
	}
	r := []float32{1, 2}
	Dequantize(r, dst, s)
	for _, f := range formats {
		r16 := []uint16{1, 2}
		if err := Quantize16(dst, []uint16{f.infBits16(), 0}, f, s); err != nil || binary.BigEndian.Uint64(dst) != 0 {
			t.Fatalf("%v: Quantize16 with the marker: %v, %x", f, err, dst)
		}
		Dequantize16(r16, dst, f, s)
		for _, v := range r16 {
			if !math.IsNaN(float64(f.ToFloat32(v))) {
				t.Fatalf("%v: Dequantize16 with the marker gave %#04x, want NaN", f, v)
			}
		}
	}
	for _, v := range r {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("Dequantize with the marker gave %v, want NaN", v)
		}
	}
}

// TestAllReduceErrorBound16 quantizes random 16-bit tensors of n workers,
// sums the int32 values as the switch does, dequantizes to the format and
// compares with the exact sum (float64: the magnitudes span few enough bits
// that every float64 sum here is exact), against ErrorBound16.
func TestAllReduceErrorBound16(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const size = 512
	for _, f := range formats {
		worst := 0.0
		for _, n := range []int{1, 2, 3, 8, 33} {
			for trial := range 20 {
				lo, hi := -14+rng.IntN(10), 0+rng.IntN(12)
				if f == BFloat16 {
					lo, hi = -30+rng.IntN(20), -5+rng.IntN(30)
				}
				xs := make([][]uint16, n)
				e := MinExponent
				for w := range xs {
					xs[w] = random16(rng, f, size, lo, hi)
					if trial%5 == 0 { // a value exactly at a power of two
						xs[w][0] = f.FromFloat32(float32(math.Ldexp(1, hi)))
					}
					ew, err := BlockExponent16(xs[w], f)
					if err != nil {
						t.Fatal(err)
					}
					e = max(e, ew)
				}
				s, err := NewScale(n, e)
				if err != nil {
					t.Fatal(err)
				}
				sum := make([]int64, size)
				buf := make([]byte, 4*size)
				for w := range xs {
					if err := Quantize16(buf, xs[w], f, s); err != nil {
						t.Fatal(err)
					}
					for i := range sum {
						sum[i] += int64(int32(binary.BigEndian.Uint32(buf[4*i:])))
					}
				}
				for i, v := range sum {
					if v != int64(int32(v)) {
						t.Fatalf("%v: n=%d: int32 sum wraps at %d", f, n, i)
					}
					binary.BigEndian.PutUint32(buf[4*i:], uint32(int32(v)))
				}
				got := make([]uint16, size)
				Dequantize16(got, buf, f, s)
				for i := range got {
					exact, sumAbs := 0.0, 0.0
					for w := range xs {
						v := refValue16(f, xs[w][i])
						exact += v
						sumAbs += math.Abs(v)
					}
					r := refValue16(f, got[i])
					if f == Float16 && math.Abs(exact) > 65000 {
						continue // overflows the format: excluded from the bound
					}
					bound := s.ErrorBound16(f, sumAbs)
					if d := math.Abs(r - exact); d > bound {
						t.Fatalf("%v n=%d e=%d: element %d: result %v, exact %v, error %g > bound %g", f, n, e, i, r, exact, d, bound)
					} else if bound > 0 {
						worst = max(worst, d/bound)
					}
				}
			}
		}
		t.Logf("%v: worst error / bound = %.3f", f, worst)
	}
}

func TestAllocs16(t *testing.T) {
	x := make([]uint16, 4099)
	buf := make([]byte, 4*len(x))
	s, _ := NewScale(4, 3)
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			if a := testing.AllocsPerRun(10, func() {
				_, _ = BlockExponent16(x, f)
				_ = MarkedBlockExponent16(x, f)
				_ = Quantize16(buf, x, f, s)
				Dequantize16(x, buf, f, s)
			}); a != 0 {
				t.Errorf("%s %v: %v allocations per run", path, f, a)
			}
		}
		restore()
	}
}
