package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestBlockExponent(t *testing.T) {
	sub := math.Float32frombits // subnormals and exact bit patterns
	tests := []struct {
		name string
		x    []float32
		want int8
	}{
		{"empty", nil, MinExponent},
		{"all zero", []float32{0, 0, 0}, MinExponent},
		{"negative zero", []float32{float32(math.Copysign(0, -1))}, MinExponent},
		{"one", []float32{1}, 1},
		{"minus one", []float32{-1}, 1},
		{"just below one", []float32{math.Nextafter32(1, 0)}, 0},
		{"just above one", []float32{math.Nextafter32(1, 2)}, 1},
		{"1.5", []float32{0.25, 1.5}, 1},
		{"two", []float32{2}, 2},
		{"just below two", []float32{math.Nextafter32(2, 0)}, 1},
		{"0.75", []float32{-0.75}, 0},
		{"half", []float32{0.5}, 0},
		{"max of mixed signs", []float32{3, -5, 4}, 3},
		{"max of mixed signs, a power of two", []float32{3, -4, 1}, 3},
		{"just below 2^126", []float32{math.Nextafter32(0x1p126, 0)}, 126},
		{"2^126 clamps", []float32{0x1p126}, MaxExponent},
		{"2^127 clamps", []float32{0x1p127}, MaxExponent},
		{"MaxFloat32 clamps", []float32{math.MaxFloat32}, MaxExponent},
		{"-MaxFloat32 clamps", []float32{-math.MaxFloat32}, MaxExponent},
		{"smallest normal", []float32{0x1p-126}, -125},
		{"largest subnormal", []float32{sub(0x007FFFFF)}, -126},
		{"2^-127 subnormal", []float32{sub(0x00400000)}, -126},
		{"just below 2^-127", []float32{sub(0x003FFFFF)}, -127},
		{"2^-128 subnormal", []float32{sub(0x00200000)}, -127},
		{"2^-129 subnormal", []float32{sub(0x00100000)}, -128},
		{"just below 2^-129 clamps", []float32{sub(0x000FFFFF)}, MinExponent},
		{"smallest subnormal clamps", []float32{sub(1)}, MinExponent},
		{"tiny subnormal clamps", []float32{sub(3), 0}, MinExponent},
	}
	for _, path := range paths() {
		restore := usePath(path)
		for _, tc := range tests {
			// Pad so the SIMD kernel sees the case in the vector part too.
			for _, pad := range []int{0, 8, 37} {
				x := append(make([]float32, pad), tc.x...)
				got, err := BlockExponent(x)
				if err != nil || got != tc.want {
					t.Errorf("%s: %s (pad %d): BlockExponent = %d, %v; want %d", path, tc.name, pad, got, err, tc.want)
				}
			}
		}
		restore()
	}
}

func TestBlockExponentProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, path := range paths() {
		restore := usePath(path)
		for trial := range 2000 {
			x := randomTensor(rng, rng.IntN(100), rng.IntN(240)-120)
			e, err := BlockExponent(x)
			if err != nil {
				t.Fatal(err)
			}
			var m float64
			for _, v := range x {
				m = max(m, math.Abs(float64(v)))
			}
			if math.Ldexp(1, int(e)) <= m {
				t.Fatalf("%s trial %d: 2^%d ≤ max|x| = %g", path, trial, e, m)
			}
			if e > MinExponent && e < MaxExponent && math.Ldexp(1, int(e)-1) > m {
				t.Fatalf("%s trial %d: 2^%d > max|x| = %g: not the smallest", path, trial, e-1, m)
			}
		}
		restore()
	}
}

func TestNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0xFFC00001), math.Float32frombits(0x7F800001)} // other NaNs
	s, _ := NewScale(4, 3)
	for _, path := range paths() {
		restore := usePath(path)
		for n := 1; n <= 67; n++ {
			x := make([]float32, n)
			dst := make([]byte, 4*n)
			for pos := range n {
				for _, v := range bad {
					for i := range x {
						x[i] = float32(i%7) - 3
					}
					x[pos] = v
					if pos+3 < n {
						x[pos+3] = float32(math.NaN()) // a later one is not reported
					}
					_, err := BlockExponent(x)
					checkNonFinite(t, path+" BlockExponent", err, pos, v)
					checkNonFinite(t, path+" Quantize", Quantize(dst, x, s), pos, v)
				}
			}
		}
		restore()
	}
	_, err := BlockExponent([]float32{1, float32(math.NaN())})
	if want := "quant: element 1 is NaN: gradients must be finite"; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
	err = Quantize(make([]byte, 8), []float32{float32(math.Inf(-1)), 1}, s)
	if want := "quant: element 0 is -Inf: gradients must be finite"; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func checkNonFinite(t *testing.T, op string, err error, pos int, v float32) {
	t.Helper()
	var nf *NonFiniteError
	if !errors.As(err, &nf) {
		t.Fatalf("%s: %v at %d: error %v, want *NonFiniteError", op, v, pos, err)
	}
	if nf.Index != pos || math.Float32bits(nf.Value) != math.Float32bits(v) {
		t.Fatalf("%s: %v at %d: got index %d value %v", op, v, pos, nf.Index, nf.Value)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("element %d is ", pos)) {
		t.Fatalf("%s: error %q does not name the index", op, err)
	}
}

func TestNewScale(t *testing.T) {
	for _, n := range []int{0, -1, MaxWorkers + 1} {
		if _, err := NewScale(n, 0); err == nil {
			t.Errorf("NewScale(%d, 0) succeeded", n)
		}
	}
	tests := []struct {
		name   string
		n      int
		e      int8
		factor float32
		limit  float32
	}{
		{"n=1 e=0", 1, 0, 0x1p31, 2147483520}, // float32(2^31−1) rounds up to 2^31
		{"n=2 e=0", 2, 0, 0x1p30, 1073741760},
		{"n=2 e=1 (ones)", 2, 1, 0x1p29, 1073741760},
		{"n=3 e=-2", 3, -2, 0x1p31, 715827840},
		{"n=4 e=-2", 4, -2, 0x1p31, 536870880},
		{"n=5 e=0", 5, 0, 0x1p28, 429496704},
		{"n=33 e=5", 33, 5, 0x1p20, 65075260},
		{"n=256 e=0", 256, 0, 0x1p23, 8388607},
		{"factor capped", 1, -100, MaxFactor, 2147483520},
		{"n=1 e=-96 capped", 1, -96, MaxFactor, 2147483520},
		{"n=1 e=-95 not capped", 1, -95, 0x1p126, 2147483520},
		{"n=2 e=-96 not capped", 2, -96, 0x1p126, 1073741760},
		{"n=2 e=-97 capped", 2, -97, MaxFactor, 1073741760},
		{"largest", MaxWorkers, MaxExponent, 0x1p-111, 32767},
		{"non-finite marker", MaxWorkers, NonFiniteExponent, 0x1p-112, 32767},
	}
	for _, tc := range tests {
		s, err := NewScale(tc.n, tc.e)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.Factor() != tc.factor || s.Limit() != tc.limit {
			t.Errorf("%s: factor %g limit %.1f, want %g %.1f", tc.name, s.Factor(), s.Limit(), tc.factor, tc.limit)
		}
		if s.Workers() != tc.n || s.Exponent() != tc.e {
			t.Errorf("%s: Workers %d Exponent %d", tc.name, s.Workers(), s.Exponent())
		}
	}
	for n := 1; n <= MaxWorkers; n += 1 + n/8 {
		for e := int(MinExponent); e <= int(NonFiniteExponent); e += 1 + e&15 {
			s, _ := NewScale(n, int8(e))
			l := float64(s.Limit())
			if l != math.Trunc(l) || l*float64(n) > maxInt32 || l < 1 {
				t.Fatalf("n=%d: limit %g is not an integer with n·limit ≤ 2^31−1", n, l)
			}
			if next := math.Nextafter32(s.Limit(), math.MaxFloat32); float64(next) <= float64(maxInt32/n) {
				t.Fatalf("n=%d: limit %g is not the largest", n, l)
			}
			// A power of two in the normal range, its inverse exactly its
			// reciprocal (also normal), and no larger than the headroom
			// of n workers allows: 2^e·F ≤ 2^31/n.
			fb, ib := math.Float32bits(s.Factor()), math.Float32bits(s.Inverse())
			if fb&(1<<expShift-1) != 0 || ib&(1<<expShift-1) != 0 || s.Factor() > MaxFactor ||
				s.Factor() < 0x1p-126 || s.Inverse() < 0x1p-126 || float64(s.Factor())*float64(s.Inverse()) != 1 {
				t.Fatalf("n=%d e=%d: factor %g inverse %g: not powers of two, reciprocal and normal", n, e, s.Factor(), s.Inverse())
			}
			if math.Ldexp(float64(s.Factor()), e)*float64(n) > 0x1p31 {
				t.Fatalf("n=%d e=%d: factor %g: n·2^e·F above 2^31", n, e, s.Factor())
			}
			if s.Factor() < MaxFactor && math.Ldexp(float64(s.Factor()), e+1)*float64(n) <= 0x1p31 {
				t.Fatalf("n=%d e=%d: factor %g is not the largest that fits", n, e, s.Factor())
			}
		}
	}
}

// scales used by the bit-for-bit tests: powers of two (n = 1, 2, 4 give
// exact ties), odd n, capped and tiny factors, and n = 256, 4096 where
// Limit clamps the values just below 2^e.
func testScales(t *testing.T) []Scale {
	var ss []Scale
	for _, c := range []struct {
		n int
		e int8
	}{{1, 0}, {2, 3}, {4, -7}, {3, 0}, {7, 10}, {33, -3}, {1, -120}, {5, MaxExponent}, {MaxWorkers, MaxExponent}, {1000, -128},
		{256, 5}, {4096, -40}} {
		s, err := NewScale(c.n, c.e)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

// edgeValues are inputs that stress rounding and saturation for s.
func edgeValues(s Scale) []float32 {
	f, l := s.Factor(), s.Limit()
	p := float32(math.Ldexp(1, int(s.Exponent())))
	vs := []float32{
		0, float32(math.Copysign(0, -1)), math.Float32frombits(1), math.Float32frombits(0x007FFFFF),
		0x1p-126, 1, -1, math.MaxFloat32, -math.MaxFloat32,
		p, -p, math.Nextafter32(p, 0), math.Nextafter32(p, math.MaxFloat32),
		l / f, -l / f, (l + 0.5) / f, (l - 0.5) / f, -(l + 0.5) / f, (l + 1) / f, 2 * l / f,
		0.5 / f, -0.5 / f, 1.5 / f, 2.5 / f, -2.5 / f, 0x1p22/f + 0.5/f, 0x1p23 / f, 3 / f,
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
	}
	for i := range 20 {
		vs = append(vs, (float32(i)+0.5)/f, -(float32(i)+0.5)/f)
	}
	return vs
}

// randomTensor returns n values of magnitude around 2^scale, with zeros,
// negative zeros and subnormals sprinkled in.
func randomTensor(rng *rand.Rand, n, scale int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch rng.IntN(20) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(math.Copysign(0, -1))
		case 2:
			x[i] = math.Float32frombits(rng.Uint32() & 0x807FFFFF) // subnormal
		default:
			x[i] = float32(math.Ldexp(rng.NormFloat64(), scale))
		}
	}
	return x
}

// TestQuantizeMatchesScalar checks the dispatching kernels against the
// scalar reference bit for bit: every length 0..67 (around the 8- and
// 32-value vector widths), every source and destination misalignment,
// random and edge values including NaN and ±Inf.
func TestQuantizeMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for si, s := range testScales(t) {
		edges := edgeValues(s)
		for n := 0; n <= 67; n++ {
			for off := range 8 {
				srcBuf := make([]float32, n+off)
				src := srcBuf[off:]
				for i := range src {
					if rng.IntN(2) == 0 {
						src[i] = edges[rng.IntN(len(edges))]
					} else {
						src[i] = float32(math.Ldexp(rng.NormFloat64(), int(s.Exponent())-rng.IntN(30)))
					}
				}
				got := make([]byte, 4*n+off)[off:]
				want := make([]byte, 4*n)
				mg := quantize(got, src, s.factor, s.limit)
				mw := quantizeGeneric(want, src, s.factor, s.limit)
				// The kernel reports finiteness only (infBits or 0), the
				// scalar code the max |x| bits.
				if (mg >= infBits) != (mw >= infBits) || !bytes.Equal(got, want) {
					t.Fatalf("scale %d len %d off %d: SIMD and scalar differ:\nmax %#x vs %#x\n%x\n%x\nsrc %v", si, n, off, mg, mw, got, want, src)
				}
				if m := maxAbsBits(src); m != mw {
					t.Fatalf("scale %d len %d off %d: maxAbsBits %#x, scalar %#x", si, n, off, m, mw)
				}
			}
		}
		// Every edge value in every lane position.
		for _, v := range edges {
			for pos := range 40 {
				src := make([]float32, 40)
				src[pos] = v
				got, want := make([]byte, 160), make([]byte, 160)
				quantize(got, src, s.factor, s.limit)
				quantizeGeneric(want, src, s.factor, s.limit)
				if !bytes.Equal(got, want) {
					t.Fatalf("scale %d: %g at %d: SIMD %x, scalar %x", si, v, pos, got[4*pos:4*pos+4], want[4*pos:4*pos+4])
				}
			}
		}
	}
}

// TestQuantizeReference checks the scalar reference itself against the
// definition computed in float64 (exact for a float32 product's rounding).
func TestQuantizeReference(t *testing.T) {
	for _, s := range testScales(t) {
		for _, x := range edgeValues(s) {
			var buf [4]byte
			quantizeGeneric(buf[:], []float32{x}, s.factor, s.limit)
			got := int32(binary.BigEndian.Uint32(buf[:]))
			v := float64(float32(float64(x) * float64(s.factor))) // float32 product, rounded once
			l := float64(s.limit)
			if math.IsNaN(v) {
				v = -l
			}
			v = min(max(v, -l), l)
			if want := int32(math.RoundToEven(v)); got != want {
				t.Errorf("x=%g factor=%g: q=%d, want %d", x, s.factor, got, want)
			}
			if float64(got) > l || float64(got) < -l {
				t.Errorf("x=%g: |q|=%d above limit %g", x, got, l)
			}
		}
	}
	// Ties go to even: with n = 1, e = 0 the factor is exactly 2^31.
	s, _ := NewScale(1, 0)
	for _, c := range []struct {
		x    float32
		want int32
	}{{0.5 * 0x1p-31, 0}, {1.5 * 0x1p-31, 2}, {2.5 * 0x1p-31, 2}, {-2.5 * 0x1p-31, -2}, {-3.5 * 0x1p-31, -4}} {
		var buf [4]byte
		for _, path := range paths() {
			restore := usePath(path)
			src := make([]float32, 9) // long enough for the kernel
			src[8] = c.x
			dst := make([]byte, 36)
			if err := Quantize(dst, src, s); err != nil {
				t.Fatal(err)
			}
			copy(buf[:], dst[32:])
			restore()
			if got := int32(binary.BigEndian.Uint32(buf[:])); got != c.want {
				t.Errorf("%s: x·2^31 = %g: q = %d, want %d", path, float64(c.x)*0x1p31, got, c.want)
			}
		}
	}
}

// TestSaturation: at the edge (x = ±2^e, the factor rounded up, float
// rounding) and beyond it (|x| > 2^e, ±MaxFloat32) q stays within ±limit, so
// n saturated values still sum without wrapping; the kernel's overflow value
// 0x80000000 never appears.
func TestSaturation(t *testing.T) {
	for _, path := range paths() {
		restore := usePath(path)
		for n := 1; n <= 33; n++ {
			for _, e := range []int8{MinExponent, -100, -20, 0, 1, 30, 100, MaxExponent} {
				s, _ := NewScale(n, e)
				var src []float32
				for _, v := range edgeValues(s) {
					if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
						src = append(src, v)
					}
				}
				dst := make([]byte, 4*len(src))
				if err := Quantize(dst, src, s); err != nil {
					t.Fatal(err)
				}
				for i := range src {
					q := int64(int32(binary.BigEndian.Uint32(dst[4*i:])))
					if q*int64(n) > maxInt32 || q*int64(n) < -maxInt32 {
						t.Fatalf("%s n=%d e=%d x=%g: q=%d: the %d-way sum can wrap", path, n, e, src[i], q, n)
					}
				}
			}
		}
		restore()
	}
}

func TestDequantizeMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	specials := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 1 << 24, 1<<24 + 1, -(1<<24 + 3), 1<<30 + 65}
	for _, s := range testScales(t) {
		for n := 0; n <= 67; n++ {
			for off := range 8 {
				src := make([]byte, 4*n+off)[off:]
				for i := range n {
					v := int32(rng.Uint32()) >> rng.IntN(32)
					if rng.IntN(4) == 0 {
						v = specials[rng.IntN(len(specials))]
					}
					binary.BigEndian.PutUint32(src[4*i:], uint32(v))
				}
				got := make([]float32, n+off)[off:]
				want := make([]float32, n)
				Dequantize(got, src, s)
				dequantizeGeneric(want, src, s.inv)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("len %d off %d [%d]: SIMD %g, scalar %g", n, off, i, got[i], want[i])
					}
				}
			}
		}
	}
}

func TestInt32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 0; n <= 67; n++ {
		for off := range 8 {
			src := make([]int32, n+off)[off:]
			for i := range src {
				src[i] = int32(rng.Uint32())
			}
			enc := make([]byte, 4*n+off)[off:]
			EncodeInt32(enc, src)
			for i, v := range src {
				if got := int32(binary.BigEndian.Uint32(enc[4*i:])); got != v {
					t.Fatalf("len %d off %d: EncodeInt32[%d] = %d, want %d", n, off, i, got, v)
				}
			}
			dec := make([]int32, n+off)[off:]
			DecodeInt32(dec, enc)
			for i := range src {
				if dec[i] != src[i] {
					t.Fatalf("len %d off %d: DecodeInt32[%d] = %d, want %d", n, off, i, dec[i], src[i])
				}
			}
		}
	}
}

// TestLarge covers the non-temporal store path (outputs ≥ 1 MiB) with
// aligned, 4-byte aligned and unaligned destinations.
func TestLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 1<<18 + 13
	s, _ := NewScale(3, 4)
	src := randomTensor(rng, n+1, 2)
	for _, off := range []int{0, 4, 12, 1, 3} {
		for _, soff := range []int{0, 1} {
			x := src[soff : soff+n]
			got := make([]byte, 4*n+off+32)[off:][:4*n]
			want := make([]byte, 4*n)
			if err := Quantize(got, x, s); err != nil {
				t.Fatal(err)
			}
			quantizeGeneric(want, x, s.factor, s.limit)
			if !bytes.Equal(got, want) {
				t.Fatalf("off %d: Quantize differs from scalar", off)
			}
			if e, _ := BlockExponent(x); e != exponentOfBits(maxAbsBitsGeneric(x)) {
				t.Fatalf("BlockExponent %d", e)
			}
			if off%4 == 0 {
				f := make([]float32, n+off/4+8)[off/4:][:n]
				w := make([]float32, n)
				Dequantize(f, got, s)
				dequantizeGeneric(w, want, s.inv)
				for i := range w {
					if math.Float32bits(f[i]) != math.Float32bits(w[i]) {
						t.Fatalf("off %d: Dequantize[%d] = %g, scalar %g", off, i, f[i], w[i])
					}
				}
				d := make([]int32, n+off/4+8)[off/4:][:n]
				DecodeInt32(d, got)
				e := make([]byte, 4*n+off+32)[off:][:4*n]
				EncodeInt32(e, d)
				if !bytes.Equal(e, got) {
					t.Fatalf("off %d: int32 round trip differs", off)
				}
			}
		}
	}
}

// TestAllReduceErrorBound is the property test of the protocol: n workers
// (1..33) compute block exponents, quantize with the scale of the maximum
// exponent, the int32 values are summed as the switch does (wrapping adds,
// which must never wrap), and the dequantized result is within
// Scale.ErrorBound of the exact sum (computed with math/big).
func TestAllReduceErrorBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	exact, term, diff := new(big.Float).SetPrec(2048), new(big.Float).SetPrec(2048), new(big.Float).SetPrec(2048)
	for _, path := range paths() {
		restore := usePath(path)
		var worst float64
		for trial := range 120 {
			n := 1 + trial%33
			length := rng.IntN(300)
			workers := make([][]float32, n)
			e := MinExponent
			for w := range workers {
				scale := rng.IntN(40) - 20
				if trial%5 == 0 {
					scale = rng.IntN(200) - 120 // includes capped factors
				}
				workers[w] = randomTensor(rng, length, scale)
				if trial%7 == 0 && length > 0 { // a value exactly at 2^e: the saturation edge
					workers[w][rng.IntN(length)] = float32(math.Ldexp(1, scale+3))
				}
				ew, err := BlockExponent(workers[w])
				if err != nil {
					t.Fatal(err)
				}
				e = max(e, ew)
			}
			s, err := NewScale(n, e)
			if err != nil {
				t.Fatal(err)
			}
			sum := make([]int32, length)
			wide := make([]int64, length)
			buf := make([]byte, 4*length)
			for _, x := range workers {
				if err := Quantize(buf, x, s); err != nil {
					t.Fatal(err)
				}
				for i := range sum {
					q := int32(binary.BigEndian.Uint32(buf[4*i:]))
					sum[i] += q
					wide[i] += int64(q)
				}
			}
			EncodeInt32(buf, sum)
			result := make([]float32, length)
			Dequantize(result, buf, s)
			for i := range result {
				if wide[i] != int64(sum[i]) {
					t.Fatalf("trial %d: the int32 sum of element %d wrapped", trial, i)
				}
				exact.SetInt64(0)
				var sumAbs float64
				for _, x := range workers {
					exact.Add(exact, term.SetFloat64(float64(x[i])))
					sumAbs += math.Abs(float64(x[i]))
				}
				err, _ := diff.Sub(term.SetFloat64(float64(result[i])), exact).Float64()
				bound := s.ErrorBound(sumAbs)
				if math.Abs(err) > bound {
					t.Fatalf("%s trial %d n=%d e=%d element %d: |error| %g > bound %g (result %g)", path, trial, n, e, i, math.Abs(err), bound, result[i])
				}
				worst = max(worst, math.Abs(err)/bound)
			}
		}
		t.Logf("%s: worst |error|/bound = %.3f", path, worst)
		restore()
	}
}

func TestAllocs(t *testing.T) {
	s, _ := NewScale(8, 2)
	x := make([]float32, 1000)
	for i := range x {
		x[i] = float32(i) / 300
	}
	b := make([]byte, 4*len(x))
	ints := make([]int32, len(x))
	for name, f := range map[string]func(){
		"BlockExponent": func() { _, _ = BlockExponent(x) },
		"NewScale":      func() { s, _ = NewScale(8, 2) },
		"Quantize":      func() { _ = Quantize(b, x, s) },
		"Dequantize":    func() { Dequantize(x, b, s) },
		"EncodeInt32":   func() { EncodeInt32(b, ints) },
		"DecodeInt32":   func() { DecodeInt32(ints, b) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations per run", name, a)
		}
	}
}

func TestShortBuffersPanic(t *testing.T) {
	s, _ := NewScale(1, 0)
	for name, f := range map[string]func(){
		"Quantize":    func() { _ = Quantize(make([]byte, 7), make([]float32, 2), s) },
		"Dequantize":  func() { Dequantize(make([]float32, 2), make([]byte, 7), s) },
		"EncodeInt32": func() { EncodeInt32(make([]byte, 7), make([]int32, 2)) },
		"DecodeInt32": func() { DecodeInt32(make([]int32, 2), make([]byte, 7)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a short buffer did not panic", name)
				}
			}()
			f()
		}()
	}
}
