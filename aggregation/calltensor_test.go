package aggregation

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestSoftAllReduce16: bfloat16 and float16 tensors through the software
// switch, mixed in one float32 session with float32 calls, against the
// float64 sum of the 16-bit inputs and quant's bound for the format.
func TestSoftAllReduce16(t *testing.T) {
	c := newSoftCluster(t, inMemory, 90, 0, 0)
	const n, l = 3, 3000
	cfg := softConfig(1, 256, 4, 2)
	j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
	vals := 256 * 4 / 4
	for _, f := range []quant.Format{quant.BFloat16, quant.Float16} {
		in32 := gradients(uint64(f), n, l)
		in := make([][]uint16, n)
		out := make([][]uint16, n)
		for r := range in32 {
			in[r] = make([]uint16, l)
			for i, v := range in32[r] {
				if f == quant.Float16 {
					v = float32(math.Max(-60000, math.Min(60000, float64(v))))
				}
				in[r][i] = f.FromFloat32(v)
			}
			out[r] = append([]uint16(nil), in[r]...)
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, w := range j.workers {
			wg.Go(func() { errs[r] = w.sess.AllReduce16Async(context.Background(), out[r], f).Wait(context.Background()) })
		}
		wg.Wait()
		noErrors(t, errs)
		for m := 0; m*vals < l; m++ {
			lo, hi := m*vals, min(l, (m+1)*vals)
			e := quant.MinExponent
			for r := range in {
				er, err := quant.BlockExponent16(in[r][lo:hi], f)
				if err != nil {
					t.Fatal(err)
				}
				e = max(e, er)
			}
			sc, _ := quant.NewScale(n, e)
			for i := lo; i < hi; i++ {
				exact, sumAbs := 0.0, 0.0
				for r := range in {
					v := float64(f.ToFloat32(in[r][i]))
					exact += v
					sumAbs += math.Abs(v)
				}
				for r := range out {
					if out[r][i] != out[0][i] {
						t.Fatalf("%v: element %d: rank %d got %#04x, rank 0 %#04x", f, i, r, out[r][i], out[0][i])
					}
				}
				if f == quant.Float16 && math.Abs(exact) > 65000 {
					continue
				}
				if d := math.Abs(float64(f.ToFloat32(out[0][i])) - exact); d > sc.ErrorBound16(f, sumAbs) {
					t.Fatalf("%v: element %d: got %v, exact %v: error %g above the bound %g", f, i, f.ToFloat32(out[0][i]), exact, d, sc.ErrorBound16(f, sumAbs))
				}
			}
		}
	}
	// The same session still sums float32.
	in := gradients(7, n, l)
	out := clone2(in)
	noErrors(t, j.allReduce(context.Background(), out))
	checkSums(t, in, out, vals)
}

// TestSoftNonFinite: with PropagateNonFinite, a message in which one
// worker holds an Inf or a NaN comes back NaN on every worker, the other
// messages are summed as usual, and the session goes on; without it, the
// worker with the bad input fails at once, naming the element.
func TestSoftNonFinite(t *testing.T) {
	c := newSoftCluster(t, inMemory, 91, 0, 0)
	const n, l = 3, 2000
	vals := 256 * 2 / 4
	cfg := softConfig(1, 256, 2, 2)
	cfg.PropagateNonFinite = true
	j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
	for step, bad := range []float32{float32(math.Inf(1)), float32(math.NaN()), float32(math.Inf(-1))} {
		in := gradients(uint64(step), n, l)
		badAt := 3*vals + 17 // message 3
		in[step%n][badAt] = bad
		out := clone2(in)
		noErrors(t, j.allReduce(context.Background(), out))
		for r := range out {
			for i, v := range out[r] {
				inBad := i/vals == badAt/vals
				if inBad != math.IsNaN(float64(v)) {
					t.Fatalf("step %d: rank %d element %d = %v (the bad value is in message %d)", step, r, i, v, badAt/vals)
				}
			}
		}
		// The finite messages are the usual sums: check them with the
		// bad message zeroed on every worker.
		for r := range in {
			clear(in[r][3*vals : 4*vals])
			clear(out[r][3*vals : 4*vals])
		}
		checkSums(t, in, out, vals)
	}
	// A finite call after the overflows: the session is fine.
	in := gradients(9, n, l)
	out := clone2(in)
	noErrors(t, j.allReduce(context.Background(), out))
	checkSums(t, in, out, vals)

	// Off (the default): the call fails before anything is sent.
	cfg = softConfig(2, 256, 2, 2)
	j2 := openJob(t, c.ctlAddr, 1, cfg, c.device(20))
	x := []float32{1, float32(math.Inf(1))}
	err := j2.workers[0].sess.AllReduce(context.Background(), x)
	var nf *quant.NonFiniteError
	if !errors.As(err, &nf) || nf.Index != 1 || !strings.Contains(err.Error(), "PropagateNonFinite") {
		t.Fatalf("non-finite input without PropagateNonFinite: %v", err)
	}
}

// TestSoftLengthMismatch: workers calling with different lengths are all
// told so by the exponent round, long before the peer timeout; both the
// worker whose length differs from the mean and the others.
func TestSoftLengthMismatch(t *testing.T) {
	c := newSoftCluster(t, inMemory, 92, 0, 0)
	for i, lens := range [][]int{{1000, 1001}, {100, 300, 200}, {5000, 5000, 5000 + 1<<16}} {
		cfg := softConfig(uint32(i+1), 256, 2, 2)
		cfg.PeerTimeout = 30 * time.Second
		j := openJob(t, c.ctlAddr, len(lens), cfg, c.device(2+10*i))
		in := make([][]float32, len(lens))
		for r, l := range lens {
			in[r] = gradients(uint64(r), 1, l)[0]
		}
		// Were the mismatch found only by the peer timeout, the error
		// would be ErrPeerTimeout.
		errs := j.allReduce(context.Background(), in)
		for r, err := range errs {
			if !errors.Is(err, ErrLengthMismatch) {
				t.Fatalf("lengths %v: rank %d: %v, want ErrLengthMismatch", lens, r, err)
			}
			if len(lens) == 2 && !strings.Contains(err.Error(), "the other worker's") {
				t.Fatalf("lengths %v: rank %d: %v does not name the other length", lens, r, err)
			}
			t.Logf("rank %d: %v", r, err)
		}
		j.close(t)
	}
	// int32 calls have round 0 too, for the length alone.
	cfg := softConfig(9, 256, 2, 2)
	cfg.DType = wire.Int32
	cfg.PeerTimeout = 30 * time.Second
	j := openJob(t, c.ctlAddr, 2, cfg, c.device(50))
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, w := range j.workers {
		wg.Go(func() { errs[r] = w.sess.AllReduceInt32(context.Background(), make([]int32, 700+r)) })
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, ErrLengthMismatch) || !strings.Contains(err.Error(), "the other worker's") {
			t.Fatalf("int32, lengths 700 and 701: rank %d: %v, want ErrLengthMismatch", r, err)
		}
	}
}
