package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The tests of the 16-bit wire (wire16.go): the scale, exact sums, the
// error bound against math/big, no int16 wrap at the extremes, non-finite
// input and the marker, as quant_test.go and exact_test.go test the int32
// wire; and every path against the scalar reference bit for bit.

func TestNewScaleWire16(t *testing.T) {
	for _, n := range []int{0, -1, MaxWorkersWire16 + 1, MaxWorkers} {
		if _, err := NewScaleWire16(n, 0); !errors.Is(err, ErrWorkerCount) {
			t.Errorf("NewScaleWire16(%d, 0): error %v, want ErrWorkerCount", n, err)
		}
	}
	if _, err := NewScale(MaxWorkers+1, 0); !errors.Is(err, ErrWorkerCount) {
		t.Errorf("NewScale(%d, 0): error %v, want ErrWorkerCount", MaxWorkers+1, err)
	}
	tests := []struct {
		name   string
		n      int
		e      int8
		factor float32
		limit  float32
	}{
		{"n=1 e=0", 1, 0, 0x1p15, 32767},
		{"n=2 e=1 (ones)", 2, 1, 0x1p13, 16383},
		{"n=3 e=-2", 3, -2, 0x1p15, 10922},
		{"n=4 e=-2", 4, -2, 0x1p15, 8191},
		{"n=5 e=0", 5, 0, 0x1p12, 6553},
		{"n=33 e=5", 33, 5, 0x1p4, 992},
		{"n=256 e=0", 256, 0, 0x1p7, 127},
		{"factor capped", 1, -120, MaxFactor, 32767},
		{"n=1 e=-111 capped", 1, -112, MaxFactor, 32767},
		{"n=1 e=-111 not capped", 1, -111, 0x1p126, 32767},
		{"n=2 e=-112 capped", 2, -112, MaxFactor, 16383},
		{"largest", MaxWorkersWire16, MaxExponent, 0x1p-125, 1},
		{"non-finite marker", MaxWorkersWire16, NonFiniteExponent, 0x1p-126, 1},
	}
	for _, tc := range tests {
		s, err := NewScaleWire16(tc.n, tc.e)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.Factor() != tc.factor || s.Limit() != tc.limit {
			t.Errorf("%s: factor %g limit %.1f, want %g %.1f", tc.name, s.Factor(), s.Limit(), tc.factor, tc.limit)
		}
		if s.Workers() != tc.n || s.Exponent() != tc.e || s.WireBytes() != 2 {
			t.Errorf("%s: Workers %d Exponent %d WireBytes %d", tc.name, s.Workers(), s.Exponent(), s.WireBytes())
		}
		if got, want := s.NonFinite(), tc.e == NonFiniteExponent; got != want {
			t.Errorf("%s: NonFinite %v", tc.name, got)
		}
	}
	if s, _ := NewScale(3, 0); s.WireBytes() != 4 {
		t.Errorf("NewScale: WireBytes %d, want 4", s.WireBytes())
	}
	if (Scale{}).WireBytes() != 4 {
		t.Errorf("zero Scale: WireBytes %d, want 4", (Scale{}).WireBytes())
	}
	for n := 1; n <= MaxWorkersWire16; n += 1 + n/16 {
		for e := int(MinExponent); e <= int(NonFiniteExponent); e += 1 + e&15 {
			s, _ := NewScaleWire16(n, int8(e))
			l := float64(s.Limit())
			if l != math.Trunc(l) || l*float64(n) > math.MaxInt16 || l < 1 || l+1 <= float64(math.MaxInt16/n) {
				t.Fatalf("n=%d: limit %g is not the largest integer with n·limit ≤ 2^15−1", n, l)
			}
			fb, ib := math.Float32bits(s.Factor()), math.Float32bits(s.Inverse())
			if fb&(1<<expShift-1) != 0 || ib&(1<<expShift-1) != 0 || s.Factor() > MaxFactor ||
				s.Factor() < 0x1p-126 || s.Inverse() < 0x1p-126 || float64(s.Factor())*float64(s.Inverse()) != 1 {
				t.Fatalf("n=%d e=%d: factor %g inverse %g: not powers of two, reciprocal and normal", n, e, s.Factor(), s.Inverse())
			}
			if math.Ldexp(float64(s.Factor()), e)*float64(n) > 0x1p15 {
				t.Fatalf("n=%d e=%d: factor %g: n·2^e·F above 2^15", n, e, s.Factor())
			}
			if s.Factor() < MaxFactor && math.Ldexp(float64(s.Factor()), e+1)*float64(n) <= 0x1p15 {
				t.Fatalf("n=%d e=%d: factor %g is not the largest that fits", n, e, s.Factor())
			}
		}
	}
}

// TestRoundingErrorWire16 pins δ on the 16-bit wire: ⌊(2^15−1)/n⌋ is an
// exact float32, so for every power of two n Limit = 2^(15−c) − 1 clamps
// the largest |x·F| (just below 2^(15−c)): δ = 1; for other n Limit ≥
// 2^(15−c) and δ = 1/2.
func TestRoundingErrorWire16(t *testing.T) {
	for n := 1; n <= MaxWorkersWire16; n++ {
		s, _ := NewScaleWire16(n, 0)
		want := 0.5
		if n&(n-1) == 0 {
			want = 1
		}
		if got := s.roundingError(); got != want {
			t.Fatalf("n=%d: δ = %v, want %v", n, got, want)
		}
	}
}

// testScalesWire16 are the 16-bit-wire scales of the bit-for-bit tests:
// n = 1, 2, 4 (exact ties), odd n, capped and tiny factors, and powers of
// two where Limit clamps the values just below 2^e.
func testScalesWire16(t *testing.T) []Scale {
	var ss []Scale
	for _, c := range []struct {
		n int
		e int8
	}{{1, 0}, {2, 3}, {4, -7}, {3, 0}, {7, 10}, {33, -3}, {1, -120}, {5, MaxExponent}, {MaxWorkersWire16, MaxExponent},
		{1000, -128}, {256, 5}, {4096, -40}, {MaxWorkersWire16, 0}, {MaxWorkersWire16 - 1, 2}} {
		s, err := NewScaleWire16(c.n, c.e)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

// TestQuantizeWire16Reference checks the scalar reference against the
// definition computed in float64, and ties to even on every path.
func TestQuantizeWire16Reference(t *testing.T) {
	for _, s := range testScalesWire16(t) {
		for _, x := range edgeValues(s) {
			var buf [2]byte
			quantizeWire16Generic(buf[:], []float32{x}, s.factor, s.limit)
			got := int16(binary.BigEndian.Uint16(buf[:]))
			v := float64(float32(float64(x) * float64(s.factor)))
			l := float64(s.limit)
			if math.IsNaN(v) {
				v = -l
			}
			v = min(max(v, -l), l)
			if want := int16(math.RoundToEven(v)); got != want {
				t.Errorf("x=%g factor=%g: q=%d, want %d", x, s.factor, got, want)
			}
		}
	}
	// With n = 1, e = 0 the factor is exactly 2^15.
	s, _ := NewScaleWire16(1, 0)
	for _, c := range []struct {
		x    float32
		want int16
	}{{0.5 * 0x1p-15, 0}, {1.5 * 0x1p-15, 2}, {2.5 * 0x1p-15, 2}, {-2.5 * 0x1p-15, -2}, {-3.5 * 0x1p-15, -4},
		{math.Nextafter32(1, 0), 32767}, {-math.Nextafter32(1, 0), -32767}} {
		for _, path := range paths() {
			restore := usePath(path)
			src := make([]float32, 33) // long enough for the kernel's 32-value step
			for _, pos := range []int{0, 7, 31, 32} {
				clear(src)
				src[pos] = c.x
				dst := make([]byte, 2*len(src))
				if err := QuantizeWire16(dst, src, s); err != nil {
					t.Fatal(err)
				}
				if got := int16(binary.BigEndian.Uint16(dst[2*pos:])); got != c.want {
					t.Errorf("%s: x·2^15 = %g at %d: q = %d, want %d", path, float64(c.x)*0x1p15, pos, got, c.want)
				}
			}
			restore()
		}
	}
}

// switchSumWire16 is switchSum on the 16-bit wire: block exponents, the
// switch's max, NewScaleWire16, QuantizeWire16, the switch's wrapping int16
// adds (checked against an int64 sum: they must never wrap) and
// DequantizeWire16.
func switchSumWire16(t *testing.T, xs [][]float32) ([]float32, Scale) {
	t.Helper()
	e := MinExponent
	for _, x := range xs {
		ew, err := BlockExponent(x)
		if err != nil {
			t.Fatal(err)
		}
		e = max(e, ew)
	}
	s, err := NewScaleWire16(len(xs), e)
	if err != nil {
		t.Fatal(err)
	}
	l := len(xs[0])
	buf := make([]byte, 2*l)
	sum := make([]int16, l)
	wide := make([]int64, l)
	q := make([]int16, l)
	for _, x := range xs {
		if err := QuantizeWire16(buf, x, s); err != nil {
			t.Fatal(err)
		}
		DecodeInt16(q, buf)
		for i, v := range q {
			sum[i] += v
			wide[i] += int64(v)
		}
	}
	for i := range sum {
		if wide[i] != int64(sum[i]) {
			t.Fatalf("n=%d e=%d: the int16 sum of element %d wraps (%d)", len(xs), e, i, wide[i])
		}
	}
	EncodeInt16(buf, sum)
	r := make([]float32, l)
	DequantizeWire16(r, buf, s)
	return r, s
}

// exactInputsWire16 are tensors whose values fit the block's 15 − ⌈log2 n⌉
// bits for n ≤ 33 (every x·F an integer): what must sum exactly.
var exactInputsWire16 = []struct {
	name string
	gen  func(rng *rand.Rand, n, w, l int) []float32
}{
	{"ones", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(int) float32 { return 1 }) }},
	{"halves", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(int) float32 { return 0.5 }) }},
	{"minus 2^-20", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(int) float32 { return -0x1p-20 }) }},
	{"arange", func(_ *rand.Rand, _, _, l int) []float32 { return fill(l, func(i int) float32 { return float32(i) }) }},
	{"rank+1", func(_ *rand.Rand, _, w, l int) []float32 { return fill(l, func(int) float32 { return float32(w + 1) }) }},
	// Below 2^8: 15 − 6 − 9 ≥ 0 fraction bits for n ≤ 64.
	{"small integers", func(rng *rand.Rand, _, _, l int) []float32 {
		return fill(l, func(int) float32 { return float32(rng.IntN(511) - 255) })
	}},
	// Powers of two spanning the 14 − ⌈log2 n⌉ binades below the largest
	// (2^10 here), both signs, zeros.
	{"powers of two", func(rng *rand.Rand, n, _, l int) []float32 {
		span := 14 - log2Ceil(n)
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
	// Multiples of 2^-4 up to 4 in magnitude: dyadic fractions such as 0.375
	// or -3.25.
	{"dyadic", func(rng *rand.Rand, _, _, l int) []float32 {
		return fill(l, func(int) float32 { return float32(rng.IntN(129)-64) * 0x1p-4 })
	}},
}

// TestExactSumsWire16: inputs that fit the block's 15 − ⌈log2 n⌉ bits sum
// exactly through QuantizeWire16 → int16 sum → DequantizeWire16, for
// n = 1..33 on every path, bit for bit against the float32 rounding of the
// math/big sum (which is the sum itself: dequantizing an int16 is exact).
func TestExactSumsWire16(t *testing.T) {
	const l = 75 // the kernels' 32- and 8-value steps, then an odd tail
	for _, path := range paths() {
		restore := usePath(path)
		for _, in := range exactInputsWire16 {
			rng := rand.New(rand.NewPCG(17, uint64(len(in.name))))
			for n := 1; n <= 33; n++ {
				xs := make([][]float32, n)
				for w := range xs {
					xs[w] = in.gen(rng, n, w, l)
				}
				r, s := switchSumWire16(t, xs)
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

// TestExactSumsHalfWire16: the same for bfloat16 and float16 through
// QuantizeHalfWire16 and DequantizeHalfWire16: the result is the format's
// rounding of the exact sum (the sum itself where the format holds it).
func TestExactSumsHalfWire16(t *testing.T) {
	const l = 75
	inputs := []struct {
		name string
		v    func(rng *rand.Rand, n, w int) float32
	}{
		{"ones", func(*rand.Rand, int, int) float32 { return 1 }},
		{"halves", func(*rand.Rand, int, int) float32 { return 0.5 }},
		{"rank+1", func(_ *rand.Rand, _, w int) float32 { return float32(w + 1) }},
		{"small integers", func(rng *rand.Rand, _, _ int) float32 { return float32(rng.IntN(257) - 128) }},
		// 2^4 down to 2^(c−10): the 15 − c binades a block with e = 5 holds.
		{"powers of two", func(rng *rand.Rand, n, _ int) float32 {
			return float32(math.Ldexp(1, 4-rng.IntN(15-log2Ceil(n))))
		}},
	}
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			for _, in := range inputs {
				rng := rand.New(rand.NewPCG(18, uint64(len(in.name))))
				for n := 1; n <= 33; n++ {
					xs := make([][]uint16, n)
					e := MinExponent
					for w := range xs {
						xs[w] = make([]uint16, l)
						for i := range xs[w] {
							xs[w][i] = f.FromFloat32(in.v(rng, n, w))
						}
						ew, err := BlockExponent16(xs[w], f)
						if err != nil {
							t.Fatal(err)
						}
						e = max(e, ew)
					}
					s, err := NewScaleWire16(n, e)
					if err != nil {
						t.Fatal(err)
					}
					buf := make([]byte, 2*l)
					sum := make([]int64, l)
					for _, x := range xs {
						if err := QuantizeHalfWire16(buf, x, f, s); err != nil {
							t.Fatal(err)
						}
						for i := range sum {
							sum[i] += int64(int16(binary.BigEndian.Uint16(buf[2*i:])))
						}
					}
					for i, v := range sum {
						if v != int64(int16(v)) {
							t.Fatalf("%v n=%d: the int16 sum of element %d wraps", f, n, i)
						}
						binary.BigEndian.PutUint16(buf[2*i:], uint16(int16(v)))
					}
					r := make([]uint16, l)
					DequantizeHalfWire16(r, buf, f, s)
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

// TestAllReduceErrorBoundWire16 is TestAllReduceErrorBound on the 16-bit
// wire: n = 1..33 workers with random tensors (magnitudes 2^-120..2^80,
// zeros, subnormals, values exactly at 2^e), int16 wrapping adds that must
// never wrap, the result within ErrorBound of the math/big sum.
func TestAllReduceErrorBoundWire16(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	exact, term, diff := new(big.Float).SetPrec(2048), new(big.Float).SetPrec(2048), new(big.Float).SetPrec(2048)
	for _, path := range paths() {
		restore := usePath(path)
		var worst float64
		for trial := range 165 {
			n := 1 + trial%33
			length := rng.IntN(300)
			xs := make([][]float32, n)
			for w := range xs {
				scale := rng.IntN(40) - 20
				if trial%5 == 0 {
					scale = rng.IntN(200) - 120 // includes capped factors
				}
				xs[w] = randomTensor(rng, length, scale)
				if trial%7 == 0 && length > 0 { // a value exactly at 2^e: the saturation edge
					xs[w][rng.IntN(length)] = float32(math.Ldexp(1, scale+3))
				}
				if trial%11 == 0 && length > 0 { // just below 2^e: the clamp for n = 2^c
					xs[w][rng.IntN(length)] = math.Nextafter32(float32(math.Ldexp(1, scale+3)), 0)
				}
			}
			if length == 0 {
				continue
			}
			r, s := switchSumWire16(t, xs)
			for i := range r {
				exact.SetInt64(0)
				var sumAbs float64
				for _, x := range xs {
					exact.Add(exact, term.SetFloat64(float64(x[i])))
					sumAbs += math.Abs(float64(x[i]))
				}
				d, _ := diff.Sub(term.SetFloat64(float64(r[i])), exact).Float64()
				bound := s.ErrorBound(sumAbs)
				if math.Abs(d) > bound {
					t.Fatalf("%s trial %d n=%d e=%d element %d: |error| %g > bound %g (result %g)", path, trial, n, s.Exponent(), i, math.Abs(d), bound, r[i])
				}
				worst = max(worst, math.Abs(d)/bound)
			}
		}
		t.Logf("%s: worst |error|/bound = %.3f", path, worst)
		restore()
	}
}

// TestErrorBoundClampWire16 checks ErrorBound where δ = 1 (n a power of
// two: Limit clamps the values just below 2^e) and around it: every worker
// at the clamp in some elements, random values in the others.
func TestErrorBoundClampWire16(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const l = 16
	for _, n := range []int{1, 2, 3, 4, 32, 33, 255, 256, 257, 4096, MaxWorkersWire16 - 1, MaxWorkersWire16} {
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
					xs[w][i] = float32(math.Ldexp(rng.NormFloat64(), -rng.IntN(16)))
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
			r, s := switchSumWire16(t, xs)
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

// TestNoWrapAtExtremesWire16 is TestNoWrapAtExtremes on the 16-bit wire:
// every worker holds the same extreme value, at n = 1..33 and around
// powers of two up to MaxWorkersWire16; the n-way int16 sum never wraps,
// below the exponent clamp the result is within ErrorBound (powers of two:
// exact).
func TestNoWrapAtExtremesWire16(t *testing.T) {
	var ns []int
	for n := 1; n <= 33; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 127, 128, 129, 255, 256, 257, 1023, 1024, 1<<13, MaxWorkersWire16-1, MaxWorkersWire16)
	sub := math.Float32frombits
	var vals []float32
	for _, j := range []int{-149, -140, -129, -128, -127, -126, -100, -60, -1, 0, 1, 14, 15, 23, 24, 30, 31, 100, 125} {
		p := float32(math.Ldexp(1, j))
		vals = append(vals, p, math.Nextafter32(p, 0), math.Nextafter32(p, 2*p))
	}
	vals = append(vals, sub(0x007FFFFF), sub(0x00123456), 0x1p126, math.Nextafter32(0x1p126, 0), 0x1p127, math.MaxFloat32)
	const l = 41 // the kernels' 32- and 8-value steps, and a scalar tail
	for _, path := range paths() {
		restore := usePath(path)
		for _, n := range ns {
			for _, v := range vals {
				for _, x := range []float32{v, -v} {
					e, err := BlockExponent([]float32{x})
					if err != nil {
						t.Fatal(err)
					}
					s, err := NewScaleWire16(n, e)
					if err != nil {
						t.Fatal(err)
					}
					var buf [2 * l]byte
					src := make([]float32, l)
					for i := range src {
						src[i] = x
					}
					if err := QuantizeWire16(buf[:], src, s); err != nil {
						t.Fatal(err)
					}
					for i := range src {
						q := int64(int16(binary.BigEndian.Uint16(buf[2*i:])))
						if sum := q * int64(n); sum > math.MaxInt16 || sum < math.MinInt16 {
							t.Fatalf("%s n=%d x=%g (e=%d): q=%d: the %d-way sum %d wraps", path, n, x, e, q, n, sum)
						}
						binary.BigEndian.PutUint16(buf[2*i:], uint16(int16(q*int64(n))))
					}
					r := make([]float32, l)
					DequantizeWire16(r, buf[:], s)
					for i := range r {
						if math.Float32bits(r[i]) != math.Float32bits(r[l-1]) {
							t.Fatalf("%s n=%d x=%g: element %d %g, tail %g", path, n, x, i, r[i], r[l-1])
						}
					}
					abs := math.Abs(float64(x))
					exact := float64(n) * float64(x)
					if abs >= 0x1p126 || math.Abs(exact) > math.MaxFloat32 {
						continue // saturated at the MaxExponent clamp, or beyond float32
					}
					if d := math.Abs(float64(r[0]) - exact); d > s.ErrorBound(float64(n)*abs) {
						t.Fatalf("%s n=%d x=%g: got %g, exact %g: error %g above the bound %g", path, n, x, r[0], exact, d, s.ErrorBound(float64(n)*abs))
					}
					if mant := math.Float32bits(x) & (1<<expShift - 1); mant == 0 && abs >= 0x1p-126 && abs*float64(s.Factor()) >= 1 {
						if want := float32(exact); r[0] != want {
							t.Fatalf("%s n=%d x=%g: a power of two sums to %g, want %g", path, n, x, r[0], want)
						}
					}
				}
			}
		}
		restore()
	}
}

func TestNonFiniteWire16(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0xFFC00001), math.Float32frombits(0x7F800001)}
	s, _ := NewScaleWire16(4, 3)
	for _, path := range paths() {
		restore := usePath(path)
		for n := 1; n <= 67; n++ {
			x := make([]float32, n)
			dst := make([]byte, 2*n)
			for pos := range n {
				for _, v := range bad {
					for i := range x {
						x[i] = float32(i%7) - 3
					}
					x[pos] = v
					if pos+3 < n {
						x[pos+3] = float32(math.NaN()) // a later one is not reported
					}
					checkNonFinite(t, path+" QuantizeWire16", QuantizeWire16(dst, x, s), pos, v)
				}
			}
		}
		for _, f := range formats {
			inf, nan := f.infBits16(), f.infBits16()|1
			for n := 1; n <= 67; n += 3 {
				x := make([]uint16, n)
				for pos := range n {
					for _, v := range []uint16{inf, inf | 0x8000, nan} {
						for i := range x {
							x[i] = f.FromFloat32(float32(i%7) - 3)
						}
						x[pos] = v
						err := QuantizeHalfWire16(make([]byte, 2*n), x, f, s)
						checkNonFinite(t, path+" "+f.String()+" QuantizeHalfWire16", err, pos, f.ToFloat32(v))
					}
				}
			}
		}
		restore()
	}
}

// TestMarkerWire16: a 16-bit-wire scale for the non-finite marker sends
// zeros and gives NaN back, for float32 and both 16-bit formats.
func TestMarkerWire16(t *testing.T) {
	s, err := NewScaleWire16(4, NonFiniteExponent)
	if err != nil || !s.NonFinite() {
		t.Fatalf("NewScaleWire16(4, marker) = %+v, %v", s, err)
	}
	dst := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := QuantizeWire16(dst, []float32{float32(math.NaN()), 1, 2, 3}, s); err != nil || binary.BigEndian.Uint64(dst) != 0 {
		t.Fatalf("QuantizeWire16 with the marker: %v, %x; want zeros", err, dst)
	}
	copy(dst, []byte{0, 1, 0, 2, 0, 3, 0, 4})
	r := []float32{1, 2, 3, 4}
	DequantizeWire16(r, dst, s)
	for _, v := range r {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("DequantizeWire16 with the marker gave %v, want NaN", v)
		}
	}
	for _, f := range formats {
		copy(dst, []byte{1, 2, 3, 4, 5, 6, 7, 8})
		if err := QuantizeHalfWire16(dst, []uint16{f.infBits16(), 0, 1, 2}, f, s); err != nil || binary.BigEndian.Uint64(dst) != 0 {
			t.Fatalf("%v: QuantizeHalfWire16 with the marker: %v, %x", f, err, dst)
		}
		r16 := []uint16{1, 2, 3, 4}
		DequantizeHalfWire16(r16, []byte{0, 1, 0, 2, 0, 3, 0, 4}, f, s)
		for _, v := range r16 {
			if !math.IsNaN(float64(f.ToFloat32(v))) {
				t.Fatalf("%v: DequantizeHalfWire16 with the marker gave %#04x, want NaN", f, v)
			}
		}
	}
}

// TestHalfWire16MatchesFloat32: quantizing 16-bit values onto the 16-bit
// wire is quantizing their float32 values, bit for bit; dequantizing to a
// format is the format's rounding of DequantizeWire16.
func TestHalfWire16MatchesFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			for _, n := range []int{0, 1, 7, 33, 1000} {
				x := random16(rng, f, n, -20, 15)
				w := widen(f, x)
				e, err := BlockExponent(w)
				if err != nil {
					t.Fatal(err)
				}
				for _, workers := range []int{1, 4, 33, 1024} {
					s, err := NewScaleWire16(workers, e)
					if err != nil {
						t.Fatal(err)
					}
					a, b := make([]byte, 2*n), make([]byte, 2*n)
					if err := QuantizeHalfWire16(a, x, f, s); err != nil {
						t.Fatal(err)
					}
					if err := QuantizeWire16(b, w, s); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(a, b) {
						t.Fatalf("%s %v n=%d workers=%d: QuantizeHalfWire16 differs from QuantizeWire16 of the float32 values", path, f, n, workers)
					}
					for i := range n { // sums, not only single values
						binary.BigEndian.PutUint16(a[2*i:], uint16(int16(binary.BigEndian.Uint16(a[2*i:]))*int16(workers)))
					}
					r16, r32 := make([]uint16, n), make([]float32, n)
					DequantizeHalfWire16(r16, a, f, s)
					DequantizeWire16(r32, a, s)
					for i := range r16 {
						if want := f.FromFloat32(r32[i]); r16[i] != want {
							t.Fatalf("%s %v: DequantizeHalfWire16[%d] = %#04x, want %#04x (float32 %v rounded)", path, f, i, r16[i], want, r32[i])
						}
					}
				}
			}
		}
		restore()
	}
}

// TestAllReduceErrorBoundHalfWire16 is TestAllReduceErrorBound16 on the
// 16-bit wire: random 16-bit tensors of n workers, int16 sums, the result
// in the format against ErrorBound16 of the exact (float64) sum.
func TestAllReduceErrorBoundHalfWire16(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const size = 512
	for _, f := range formats {
		worst := 0.0
		for _, n := range []int{1, 2, 3, 8, 33, 256} {
			for trial := range 10 {
				lo, hi := -14+rng.IntN(10), 0+rng.IntN(12)
				if f == BFloat16 {
					lo, hi = -30+rng.IntN(20), -5+rng.IntN(30)
				}
				xs := make([][]uint16, n)
				e := MinExponent
				for w := range xs {
					xs[w] = random16(rng, f, size, lo, hi)
					if trial%5 == 0 {
						xs[w][0] = f.FromFloat32(float32(math.Ldexp(1, hi)))
					}
					ew, err := BlockExponent16(xs[w], f)
					if err != nil {
						t.Fatal(err)
					}
					e = max(e, ew)
				}
				s, err := NewScaleWire16(n, e)
				if err != nil {
					t.Fatal(err)
				}
				sum := make([]int64, size)
				buf := make([]byte, 2*size)
				for w := range xs {
					if err := QuantizeHalfWire16(buf, xs[w], f, s); err != nil {
						t.Fatal(err)
					}
					for i := range sum {
						sum[i] += int64(int16(binary.BigEndian.Uint16(buf[2*i:])))
					}
				}
				for i, v := range sum {
					if v != int64(int16(v)) {
						t.Fatalf("%v: n=%d: int16 sum wraps at %d", f, n, i)
					}
					binary.BigEndian.PutUint16(buf[2*i:], uint16(int16(v)))
				}
				got := make([]uint16, size)
				DequantizeHalfWire16(got, buf, f, s)
				for i := range got {
					exact, sumAbs := 0.0, 0.0
					for w := range xs {
						v := refValue16(f, xs[w][i])
						exact += v
						sumAbs += math.Abs(v)
					}
					if f == Float16 && math.Abs(exact) > 65000 {
						continue // overflows the format: excluded from the bound
					}
					bound := s.ErrorBound16(f, sumAbs)
					if d := math.Abs(refValue16(f, got[i]) - exact); d > bound {
						t.Fatalf("%v n=%d e=%d: element %d: exact %v, error %g > bound %g", f, n, e, i, exact, d, bound)
					} else if bound > 0 {
						worst = max(worst, d/bound)
					}
				}
			}
		}
		t.Logf("%v: worst error / bound = %.3f", f, worst)
	}
}

// TestWire16MatchesScalar checks the dispatching 16-bit-wire code against
// the scalar reference bit for bit: every length 0..67, every source and
// destination misalignment, random and edge values (±0, subnormals,
// ±MaxFloat32, ties, the saturation edge, NaN, ±Inf); each edge value in
// every lane position; dequantization of random int16 sums.
func TestWire16MatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	specials := []int16{0, 1, -1, math.MaxInt16, math.MinInt16, 0x4000, -0x4001, 0x0100, 0x00FF, -0x0100}
	for _, path := range paths() {
		restore := usePath(path)
		for si, s := range testScalesWire16(t) {
			edges := edgeValues(s)
			for n := 0; n <= 67; n++ {
				for off := range 8 {
					src := make([]float32, n+off)[off:]
					for i := range src {
						if rng.IntN(2) == 0 {
							src[i] = edges[rng.IntN(len(edges))]
						} else {
							src[i] = float32(math.Ldexp(rng.NormFloat64(), int(s.Exponent())-rng.IntN(20)))
						}
					}
					got := make([]byte, 2*n+off)[off:]
					want := make([]byte, 2*n)
					bad := quantizeWire16(got, src, s.factor, s.limit)
					mw := quantizeWire16Generic(want, src, s.factor, s.limit)
					if bad != (mw >= infBits) || !bytes.Equal(got, want) {
						t.Fatalf("%s scale %d len %d off %d: differs from scalar:\nnon-finite %v vs %#x\n%x\n%x\nsrc %v", path, si, n, off, bad, mw, got, want, src)
					}
					wire := make([]byte, 2*n+off)[off:]
					for i := range n {
						v := int16(rng.Uint32()) >> rng.IntN(16)
						if rng.IntN(4) == 0 {
							v = specials[rng.IntN(len(specials))]
						}
						binary.BigEndian.PutUint16(wire[2*i:], uint16(v))
					}
					r := make([]float32, n+off)[off:]
					rw := make([]float32, n)
					DequantizeWire16(r, wire, s)
					dequantizeWire16Generic(rw, wire, s.inv)
					for i := range rw {
						if math.Float32bits(r[i]) != math.Float32bits(rw[i]) {
							t.Fatalf("%s scale %d len %d off %d [%d]: DequantizeWire16 %g, scalar %g", path, si, n, off, i, r[i], rw[i])
						}
					}
				}
			}
			for _, v := range edges {
				for pos := range 40 {
					src := make([]float32, 40)
					src[pos] = v
					got, want := make([]byte, 80), make([]byte, 80)
					quantizeWire16(got, src, s.factor, s.limit)
					quantizeWire16Generic(want, src, s.factor, s.limit)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s scale %d: %g at %d: %x, scalar %x", path, si, v, pos, got[2*pos:2*pos+2], want[2*pos:2*pos+2])
					}
				}
			}
		}
		restore()
	}
}

// TestHalfWire16MatchesScalar: QuantizeHalfWire16 and DequantizeHalfWire16
// on every path against the scalar reference, for lengths 0..100 and longer
// ones, misaligned buffers, random bit patterns (NaN and ±Inf included),
// edge values in every lane position, all 65 536 patterns of both formats,
// and int16 sums that reach every narrowing case.
func TestHalfWire16MatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	lengths := []int{127, 128, 129, 255, 1000, 4099}
	for n := range 101 {
		lengths = append(lengths, n)
	}
	scales := testScalesWire16(t)
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, path := range paths() {
		restore := usePath(path)
		for _, f := range formats {
			for _, n := range lengths {
				for off := range 4 {
					mode := (n + off) % 4
					s := scales[rng.IntN(len(scales))]
					src := make([]uint16, n+off)[off:]
					fill16(rng, f, src, mode, s.Exponent())
					what := path + " " + f.String() + " len " + strconv.Itoa(n) + " off " + strconv.Itoa(off) + " mode " + strconv.Itoa(mode)
					wire := checkHalfWire16(t, what, f, src, s, 2*off+1)
					for i := range n {
						q := int16(binary.BigEndian.Uint16(wire[2*i:]))
						switch rng.IntN(3) {
						case 0:
							q *= int16(min(s.Workers(), 1<<14))
						case 1:
							q = int16(rng.Uint32()) >> rng.IntN(16)
						}
						binary.BigEndian.PutUint16(wire[2*i:], uint16(q))
					}
					checkHalfWire16Dequantize(t, what, f, wire, s, off)
				}
			}
			for _, v := range edges16(f) {
				for pos := range 70 {
					src := make([]uint16, 70)
					fill16(rng, f, src, 1, 0)
					src[pos] = v
					checkHalfWire16(t, path+" "+f.String()+" edge at "+strconv.Itoa(pos), f, src, scales[pos%len(scales)], 0)
				}
			}
			extra := []Scale{}
			for _, e := range []int8{-24, -14, -1, 0, 5, 15, 16, 40} {
				s, _ := NewScaleWire16(3, e)
				extra = append(extra, s)
			}
			for _, s := range append(scales, extra...) {
				what := path + " " + f.String() + " all patterns, e " + strconv.Itoa(int(s.Exponent()))
				wire := checkHalfWire16(t, what, f, all, s, 1)
				checkHalfWire16Dequantize(t, what, f, wire, s, 1)
			}
			// Every int16 sum, with inverses that put the results on every
			// side of the format's range.
			every := make([]byte, 2<<16)
			for i := range 1 << 16 {
				binary.BigEndian.PutUint16(every[2*i:], uint16(i))
			}
			for _, inv := range []float32{0x1p-40, 0x1p-30, 0x1p-24, 0x1p-20, 0x1p-14, 0x1p-8, 1, 0x1p2, 0x1p4, 0x1p20, 0x1p110, 0x1p126} {
				s := Scale{inv: inv, wire16: true, n: 1}
				checkHalfWire16Dequantize(t, path+" "+f.String()+" every sum", f, every, s, 0)
			}
		}
		restore()
	}
}

// checkHalfWire16 runs QuantizeHalfWire16 on the current path into a buffer
// at byte offset dstOff and compares it with the scalar reference; it
// returns the wire bytes.
func checkHalfWire16(t *testing.T, what string, f Format, src []uint16, s Scale, dstOff int) []byte {
	t.Helper()
	bad := firstBad16(f, src)
	got := make([]byte, 2*len(src)+dstOff)[dstOff:]
	want := make([]byte, 2*len(src))
	err := QuantizeHalfWire16(got, src, f, s)
	quantizeHalfWire16Generic(want, src, f, s.factor, s.limit)
	if bad >= 0 {
		checkNonFinite(t, what+": QuantizeHalfWire16", err, bad, f.ToFloat32(src[bad]))
	} else if err != nil {
		t.Fatalf("%s: QuantizeHalfWire16: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		for i := range src {
			if g, w := got[2*i:2*i+2], want[2*i:2*i+2]; !bytes.Equal(g, w) {
				t.Fatalf("%s: QuantizeHalfWire16[%d] of %#04x = %x, scalar %x", what, i, src[i], g, w)
			}
		}
	}
	return got
}

// checkHalfWire16Dequantize runs DequantizeHalfWire16 on the current path
// into a buffer at value offset dstOff and compares it with the scalar
// reference.
func checkHalfWire16Dequantize(t *testing.T, what string, f Format, src []byte, s Scale, dstOff int) {
	t.Helper()
	n := len(src) / 2
	got := make([]uint16, n+dstOff)[dstOff:]
	want := make([]uint16, n)
	DequantizeHalfWire16(got, src, f, s)
	dequantizeHalfWire16Generic(want, src, f, s.inv)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: DequantizeHalfWire16[%d] of %d = %#04x, scalar %#04x", what, i, int16(binary.BigEndian.Uint16(src[2*i:])), got[i], want[i])
		}
	}
}

// TestLargeWire16 covers the non-temporal store paths (outputs ≥ 1 MiB)
// with aligned, element-aligned and unaligned destinations, on every path.
func TestLargeWire16(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const n = 1<<19 + 13 // the wire payload and the 16-bit results: just over 1 MiB
	s, _ := NewScaleWire16(3, 4)
	src := randomTensor(rng, n+1, 2)
	for _, path := range paths() {
		restore := usePath(path)
		for _, off := range []int{0, 2, 6, 1} {
			x := src[off%2 : off%2+n]
			got := make([]byte, 2*n+off+32)[off:][:2*n]
			want := make([]byte, 2*n)
			if err := QuantizeWire16(got, x, s); err != nil {
				t.Fatal(err)
			}
			quantizeWire16Generic(want, x, s.factor, s.limit)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s off %d: QuantizeWire16 differs from scalar", path, off)
			}
			f := make([]float32, n+off+8)[off:][:n]
			w := make([]float32, n)
			DequantizeWire16(f, got, s)
			dequantizeWire16Generic(w, want, s.inv)
			for i := range w {
				if math.Float32bits(f[i]) != math.Float32bits(w[i]) {
					t.Fatalf("%s off %d: DequantizeWire16[%d] = %g, scalar %g", path, off, i, f[i], w[i])
				}
			}
		}
		for _, fm := range formats {
			all := make([]uint16, n+1)
			fill16(rng, fm, all, 3, 4)
			for _, off := range []int{0, 4, 6, 1} {
				x := all[off%2 : off%2+n]
				what := path + " " + fm.String() + " large, off " + strconv.Itoa(off)
				wire := checkHalfWire16(t, what, fm, x, s, off)
				checkHalfWire16Dequantize(t, what, fm, wire, s, off/2)
			}
		}
		restore()
	}
}

// TestInt16 runs EncodeInt16 and DecodeInt16 on every path: lengths
// around the kernel's 16- and 64-value steps, misaligned buffers, and one
// of ≥ 1 MiB (non-temporal stores).
func TestInt16(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	var lengths []int
	for n := 0; n <= 150; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1<<19+13)
	for _, path := range paths() {
		restore := usePath(path)
		testInt16(t, path, rng, lengths)
		restore()
	}
}

func testInt16(t *testing.T, path string, rng *rand.Rand, lengths []int) {
	for _, n := range lengths {
		for off := range 4 {
			src := make([]int16, n+off)[off:]
			for i := range src {
				src[i] = int16(rng.Uint32())
			}
			enc := make([]byte, 2*n+off)[off:]
			EncodeInt16(enc, src)
			for i, v := range src {
				if got := int16(binary.BigEndian.Uint16(enc[2*i:])); got != v {
					t.Fatalf("%s len %d off %d: EncodeInt16[%d] = %d, want %d", path, n, off, i, got, v)
				}
			}
			dec := make([]int16, n+off)[off:]
			DecodeInt16(dec, enc)
			for i := range src {
				if dec[i] != src[i] {
					t.Fatalf("%s len %d off %d: DecodeInt16[%d] = %d, want %d", path, n, off, i, dec[i], src[i])
				}
			}
		}
	}
}

func TestAllocsWire16(t *testing.T) {
	s, _ := NewScaleWire16(8, 2)
	x := make([]float32, 1003)
	for i := range x {
		x[i] = float32(i) / 300
	}
	h := make([]uint16, len(x))
	b := make([]byte, 2*len(x))
	ints := make([]int16, len(x))
	for _, path := range paths() {
		restore := usePath(path)
		for name, f := range map[string]func(){
			"NewScaleWire16":       func() { s, _ = NewScaleWire16(8, 2) },
			"QuantizeWire16":       func() { _ = QuantizeWire16(b, x, s) },
			"DequantizeWire16":     func() { DequantizeWire16(x, b, s) },
			"QuantizeHalfWire16":   func() { _ = QuantizeHalfWire16(b, h, BFloat16, s) },
			"DequantizeHalfWire16": func() { DequantizeHalfWire16(h, b, Float16, s) },
			"EncodeInt16":          func() { EncodeInt16(b, ints) },
			"DecodeInt16":          func() { DecodeInt16(ints, b) },
		} {
			if a := testing.AllocsPerRun(100, f); a != 0 {
				t.Errorf("%s %s: %v allocations per run", path, name, a)
			}
		}
		restore()
	}
}

// TestWidthMismatchPanics: a scale of one wire width given to a function
// of the other is a programming error (the int32 wire's values would wrap
// the int16 sum; the 16-bit wire's would waste the int32 lanes), and so
// are short buffers.
func TestWidthMismatchPanics(t *testing.T) {
	s32, _ := NewScale(2, 0)
	s16, _ := NewScaleWire16(2, 0)
	for name, f := range map[string]func(){
		"Quantize with a 16-bit scale":             func() { _ = Quantize(make([]byte, 8), make([]float32, 2), s16) },
		"Dequantize with a 16-bit scale":           func() { Dequantize(make([]float32, 2), make([]byte, 8), s16) },
		"Quantize16 with a 16-bit scale":           func() { _ = Quantize16(make([]byte, 8), make([]uint16, 2), BFloat16, s16) },
		"Dequantize16 with a 16-bit scale":         func() { Dequantize16(make([]uint16, 2), make([]byte, 8), Float16, s16) },
		"QuantizeWire16 with a 32-bit scale":       func() { _ = QuantizeWire16(make([]byte, 4), make([]float32, 2), s32) },
		"DequantizeWire16 with a 32-bit scale":     func() { DequantizeWire16(make([]float32, 2), make([]byte, 4), s32) },
		"QuantizeHalfWire16 with a 32-bit scale":   func() { _ = QuantizeHalfWire16(make([]byte, 4), make([]uint16, 2), BFloat16, s32) },
		"DequantizeHalfWire16 with a 32-bit scale": func() { DequantizeHalfWire16(make([]uint16, 2), make([]byte, 4), BFloat16, s32) },
		"QuantizeWire16 with the zero Scale":       func() { _ = QuantizeWire16(make([]byte, 4), make([]float32, 2), Scale{}) },
		"QuantizeWire16 short":                     func() { _ = QuantizeWire16(make([]byte, 3), make([]float32, 2), s16) },
		"DequantizeWire16 short":                   func() { DequantizeWire16(make([]float32, 2), make([]byte, 3), s16) },
		"QuantizeHalfWire16 short":                 func() { _ = QuantizeHalfWire16(make([]byte, 3), make([]uint16, 2), Float16, s16) },
		"DequantizeHalfWire16 short":               func() { DequantizeHalfWire16(make([]uint16, 2), make([]byte, 3), Float16, s16) },
		"QuantizeHalfWire16 bad format":            func() { _ = QuantizeHalfWire16(make([]byte, 4), make([]uint16, 2), Format(0), s16) },
		"EncodeInt16 short":                        func() { EncodeInt16(make([]byte, 3), make([]int16, 2)) },
		"DecodeInt16 short":                        func() { DecodeInt16(make([]int16, 2), make([]byte, 3)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}
