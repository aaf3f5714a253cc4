package quant

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// switchSum is the protocol's round trip for one message of len(xs)
// workers, through the public API on the current path: each worker's block
// exponent, the switch's max, NewScale, Quantize, the switch's wrapping
// int32 adds (checked against an int64 sum: they must never wrap) and
// Dequantize. It returns the result and the scale.
func switchSum(t *testing.T, xs [][]float32) ([]float32, Scale) {
	t.Helper()
	e := MinExponent
	for _, x := range xs {
		ew, err := BlockExponent(x)
		if err != nil {
			t.Fatal(err)
		}
		e = max(e, ew)
	}
	s, err := NewScale(len(xs), e)
	if err != nil {
		t.Fatal(err)
	}
	l := len(xs[0])
	buf := make([]byte, 4*l)
	sum := make([]int32, l)
	wide := make([]int64, l)
	for _, x := range xs {
		if err := Quantize(buf, x, s); err != nil {
			t.Fatal(err)
		}
		for i := range sum {
			q := int32(binary.BigEndian.Uint32(buf[4*i:]))
			sum[i] += q
			wide[i] += int64(q)
		}
	}
	for i := range sum {
		if wide[i] != int64(sum[i]) {
			t.Fatalf("n=%d e=%d: the int32 sum of element %d wraps (%d)", len(xs), e, i, wide[i])
		}
	}
	EncodeInt32(buf, sum)
	r := make([]float32, l)
	Dequantize(r, buf, s)
	return r, s
}

// exactSum is Σ xs[w][i] computed exactly (math/big) and its float32
// rounding (nearest even).
func exactSum(xs [][]float32, i int) (*big.Float, float32) {
	sum, term := new(big.Float).SetPrec(512), new(big.Float).SetPrec(512) // ≥ the inputs' span plus log2(MaxWorkers)
	for _, x := range xs {
		sum.Add(sum, term.SetFloat64(float64(x[i])))
	}
	f, _ := sum.Float32()
	return sum, f
}

// exactInputs are tensors whose values fit the block's 31 − ⌈log2 n⌉ bits
// (every x·F an integer): what must sum exactly. Each returns worker w's
// tensor of length l for an n-worker job.
var exactInputs = []struct {
	name string
	gen  func(rng *rand.Rand, n, w, l int) []float32
}{
	{"ones", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(int) float32 { return 1 }) }},
	{"halves", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(int) float32 { return 0.5 }) }},
	{"minus 2^-20", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(int) float32 { return -0x1p-20 }) }},
	{"arange", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(i int) float32 { return float32(i) }) }},
	{"rank+1", func(_ *rand.Rand, _, w, l int) []float32 { return fill(l, func(int) float32 { return float32(w + 1) }) }},
	{"small integers", func(rng *rand.Rand, _, _, l int) []float32 {
		return fill(l, func(int) float32 { return float32(rng.IntN(2001) - 1000) })
	}},
	// Up to 24 bits: exact in float32, and below 2^(31−⌈log2 n⌉) for
	// n ≤ 128; their sums pass 2^24 and round once, as a float32 would.
	{"24-bit integers", func(rng *rand.Rand, _, _, l int) []float32 {
		return fill(l, func(int) float32 { return float32(rng.IntN(1<<25) - 1<<24 + 1) })
	}},
	// Powers of two spanning the 30 − ⌈log2 n⌉ binades below the largest
	// (2^10 here), both signs, zeros.
	{"powers of two", func(rng *rand.Rand, n, _, l int) []float32 {
		span := 30 - log2Ceil(n)
		return fill(l, func(i int) float32 {
			if i == 0 {
				return 0x1p10 // the block's max: its exponent is 11
			}
			v := float32(math.Ldexp(1, 10-rng.IntN(span+1)))
			switch rng.IntN(4) {
			case 0:
				v = -v
			case 1:
				v = 0
			}
			return v
		})
	}},
	// Multiples of 2^-8 below 2^7: dyadic fractions such as 0.375 or -3.25.
	{"dyadic", func(rng *rand.Rand, _, _, l int) []float32 {
		return fill(l, func(int) float32 { return float32(rng.IntN(1<<16)-1<<15) * 0x1p-8 })
	}},
}

func fill(l int, f func(i int) float32) []float32 {
	x := make([]float32, l)
	for i := range x {
		x[i] = f(i)
	}
	return x
}

// TestExactSums: inputs that fit the block's 31 − ⌈log2 n⌉ bits (small
// integers, powers of two, ones, dyadic fractions) sum exactly through
// quantize → int32 sum → dequantize, for n = 1..33 on every path: the
// result is the float32 nearest the exact sum, bit for bit (the sum itself
// when it is a float32, as all of these are below 2^24). All-reduce of ones
// gives n, of halves n/2 (docs/quantization.md "Exact sums").
func TestExactSums(t *testing.T) {
	const l = 75 // SIMD body, then an odd tail
	for _, path := range paths() {
		restore := usePath(path)
		for _, in := range exactInputs {
			rng := rand.New(rand.NewPCG(13, uint64(len(in.name))))
			for n := 1; n <= 33; n++ {
				xs := make([][]float32, n)
				for w := range xs {
					xs[w] = in.gen(rng, n, w, l)
				}
				r, s := switchSum(t, xs)
				for i := range r {
					exact, want := exactSum(xs, i)
					if math.Float32bits(r[i]) != math.Float32bits(want) {
						t.Fatalf("%s: %s n=%d element %d: got %v, want %v (exact sum %s, factor %g)",
							path, in.name, n, i, r[i], want, exact.Text('g', 20), s.Factor())
					}
				}
				switch in.name {
				case "ones":
					if r[0] != float32(n) {
						t.Fatalf("%s: n=%d: ones sum to %v", path, n, r[0])
					}
				case "halves":
					if r[0] != float32(n)/2 {
						t.Fatalf("%s: n=%d: halves sum to %v", path, n, r[0])
					}
				}
			}
		}
		restore()
	}
}

// TestExactSums16: the same for bfloat16 and float16 through Quantize16
// and Dequantize16: the result is the format's rounding of the float32
// nearest the exact sum (the exact sum itself where the format holds it:
// ones, halves and small integers).
func TestExactSums16(t *testing.T) {
	const l = 75
	inputs := []struct {
		name string
		v    func(rng *rand.Rand, w int) float32
	}{
		{"ones", func(*rand.Rand, int) float32 { return 1 }},
		{"halves", func(*rand.Rand, int) float32 { return 0.5 }},
		{"rank+1", func(_ *rand.Rand, w int) float32 { return float32(w + 1) }},
		{"small integers", func(rng *rand.Rand, _ int) float32 { return float32(rng.IntN(257) - 128) }},
		{"powers of two", func(rng *rand.Rand, _ int) float32 { return float32(math.Ldexp(1, rng.IntN(20)-10)) }},
	}
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			for _, in := range inputs {
				rng := rand.New(rand.NewPCG(14, uint64(len(in.name))))
				for n := 1; n <= 33; n++ {
					xs := make([][]uint16, n)
					e := MinExponent
					for w := range xs {
						xs[w] = make([]uint16, l)
						for i := range xs[w] {
							xs[w][i] = f.FromFloat32(in.v(rng, w))
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
					buf := make([]byte, 4*l)
					sum := make([]int64, l)
					for _, x := range xs {
						if err := Quantize16(buf, x, f, s); err != nil {
							t.Fatal(err)
						}
						for i := range sum {
							sum[i] += int64(int32(binary.BigEndian.Uint32(buf[4*i:])))
						}
					}
					for i, v := range sum {
						if v != int64(int32(v)) {
							t.Fatalf("%v n=%d: the int32 sum of element %d wraps", f, n, i)
						}
						binary.BigEndian.PutUint32(buf[4*i:], uint32(int32(v)))
					}
					r := make([]uint16, l)
					Dequantize16(r, buf, f, s)
					for i := range r {
						var exact int64 // every input is a multiple of 2^-10
						for _, x := range xs {
							exact += int64(f.ToFloat32(x[i]) * 0x1p10)
						}
						want := f.FromFloat32(float32(math.Ldexp(float64(exact), -10)))
						if r[i] != want {
							t.Fatalf("%s: %v %s n=%d element %d: got %v, want %v", path, f, in.name, n, i, f.ToFloat32(r[i]), f.ToFloat32(want))
						}
					}
					if in.name == "ones" && f.ToFloat32(r[0]) != float32(n) {
						t.Fatalf("%s: %v: n=%d: ones sum to %v", path, f, n, f.ToFloat32(r[0]))
					}
				}
			}
		}
		restore()
	}
}

// TestNoWrapAtExtremes: every worker holds the same extreme value — max|x|
// exactly a power of two (whose exponent is the next one), the float32
// just below it (the largest |x·F|, clamped by Limit when n is a power of
// two from 256 up), subnormals, the largest finite values (saturated at the
// MaxExponent clamp) — in both signs, at n = 1..33 and around powers of
// two up to MaxWorkers: the n-way int32 sum never wraps, and below the
// clamp the result is within ErrorBound of the exact sum (powers of two:
// exact).
func TestNoWrapAtExtremes(t *testing.T) {
	var ns []int
	for n := 1; n <= 33; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 127, 128, 129, 255, 256, 257, 1023, 1024, 1<<15, 1<<16-1, MaxWorkers)
	sub := math.Float32frombits
	var vals []float32
	for _, j := range []int{-149, -140, -129, -128, -127, -126, -100, -60, -1, 0, 1, 23, 24, 30, 31, 100, 125} {
		p := float32(math.Ldexp(1, j))
		vals = append(vals, p, math.Nextafter32(p, 0), math.Nextafter32(p, 2*p))
	}
	vals = append(vals, sub(0x007FFFFF), sub(0x00123456), 0x1p126, math.Nextafter32(0x1p126, 0), 0x1p127, math.MaxFloat32)
	for _, path := range paths() {
		restore := usePath(path)
		for _, n := range ns {
			for _, v := range vals {
				for _, x := range []float32{v, -v} {
					e, err := BlockExponent([]float32{x})
					if err != nil {
						t.Fatal(err)
					}
					s, err := NewScale(n, e)
					if err != nil {
						t.Fatal(err)
					}
					var buf [4 * 9]byte // 9 values: the kernel and the tail
					src := make([]float32, 9)
					for i := range src {
						src[i] = x
					}
					if err := Quantize(buf[:], src, s); err != nil {
						t.Fatal(err)
					}
					for i := range src {
						q := int64(int32(binary.BigEndian.Uint32(buf[4*i:])))
						if sum := q * int64(n); sum > math.MaxInt32 || sum < math.MinInt32 {
							t.Fatalf("%s n=%d x=%g (e=%d): q=%d: the %d-way sum %d wraps", path, n, x, e, q, n, sum)
						}
						sum := int32(q * int64(n))
						binary.BigEndian.PutUint32(buf[4*i:], uint32(sum))
					}
					r := make([]float32, 9)
					Dequantize(r, buf[:], s)
					abs := math.Abs(float64(x))
					if abs >= 0x1p126 {
						continue // saturated at the MaxExponent clamp: outside the bound
					}
					exact := float64(n) * float64(x)
					if math.Abs(exact) > math.MaxFloat32 {
						continue // the sum overflows float32 (docs/quantization.md "Error bound")
					}
					if d := math.Abs(float64(r[8]) - exact); d > s.ErrorBound(float64(n)*abs) {
						t.Fatalf("%s n=%d x=%g: got %g, exact %g: error %g above the bound %g", path, n, x, r[8], exact, d, s.ErrorBound(float64(n)*abs))
					}
					if math.Float32bits(r[0]) != math.Float32bits(r[8]) {
						t.Fatalf("%s n=%d x=%g: kernel %g, tail %g", path, n, x, r[0], r[8])
					}
					if mant := math.Float32bits(x) & (1<<expShift - 1); mant == 0 && abs >= 0x1p-126 && abs*float64(s.Factor()) >= 1 {
						if want := float32(exact); r[8] != want {
							t.Fatalf("%s n=%d x=%g: a power of two sums to %g, want %g", path, n, x, r[8], want)
						}
					}
				}
			}
		}
		restore()
	}
}

// TestErrorBoundManyWorkers checks ErrorBound against math/big where it is
// 1 unit per term rather than 1/2: n a power of two ≥ 256, with values just
// below 2^e (clamped to Limit) among random ones, and the n around them.
func TestErrorBoundManyWorkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const l = 16
	for _, n := range []int{255, 256, 257, 4096, MaxWorkers} {
		xs := make([][]float32, n)
		top := math.Nextafter32(0x1p3, 0)
		for w := range xs {
			xs[w] = make([]float32, l)
			for i := range xs[w] {
				switch {
				case i < 4: // every worker at the clamp, both signs
					xs[w][i] = top * float32(1-2*(i%2))
				case i < 8:
					xs[w][i] = top * float32(1-2*rng.IntN(2))
				default:
					xs[w][i] = float32(math.Ldexp(rng.NormFloat64(), -rng.IntN(30)))
				}
			}
		}
		exact := make([]*big.Float, l)
		sumAbs := make([]float64, l)
		for i := range l {
			exact[i], _ = exactSum(xs, i)
			for _, x := range xs {
				sumAbs[i] += math.Abs(float64(x[i]))
			}
		}
		for _, path := range paths() {
			restore := usePath(path)
			r, s := switchSum(t, xs)
			if s.Exponent() != 3 {
				t.Fatalf("n=%d: exponent %d, want 3", n, s.Exponent())
			}
			worst := 0.0
			for i := range r {
				d, _ := new(big.Float).Sub(new(big.Float).SetFloat64(float64(r[i])), exact[i]).Float64()
				bound := s.ErrorBound(sumAbs[i])
				if math.Abs(d) > bound {
					t.Fatalf("%s n=%d element %d: error %g above the bound %g", path, n, i, math.Abs(d), bound)
				}
				worst = max(worst, math.Abs(d)/bound)
			}
			t.Logf("%s n=%d: δ=%v, worst |error|/bound = %.3f", path, n, s.roundingError(), worst)
			restore()
		}
	}
}

// TestRoundingError pins δ: 1 exactly where Limit clamps the largest
// |x·F| (n a power of two from 256 up), 1/2 elsewhere.
func TestRoundingError(t *testing.T) {
	for n := 1; n <= MaxWorkers; n++ {
		s, _ := NewScale(n, 0)
		want := 0.5
		if n >= 256 && n&(n-1) == 0 {
			want = 1
		}
		if got := s.roundingError(); got != want {
			t.Fatalf("n=%d: δ = %v, want %v", n, got, want)
		}
	}
}
