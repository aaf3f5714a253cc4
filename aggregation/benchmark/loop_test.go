package benchmark

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// memGroup is an all-reduce among in-process ranks through shared memory:
// every rank's call waits for the others, then all get the int64-exact
// (int32) or float64-then-rounded (float32) sum. corrupt, if set, changes
// rank's result after the sum.
type memGroup struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	round   int
	arrived int
	f       [][]float32
	i       [][]int32
	corrupt func(rank int, f []float32, i []int32)
	fail    map[int]error
}

func newMemGroup(n int) *memGroup {
	g := &memGroup{n: n, f: make([][]float32, n), i: make([][]int32, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

type memRank struct {
	g    *memGroup
	rank int
}

func (r memRank) AllReduce(ctx context.Context, x []float32) error { return r.do(x, nil) }

func (r memRank) AllReduceInt32(ctx context.Context, x []int32) error { return r.do(nil, x) }

func (r memRank) do(f []float32, iv []int32) error {
	g := r.g
	if err := g.fail[r.rank]; err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	round := g.round
	g.f[r.rank], g.i[r.rank] = f, iv
	g.arrived++
	if g.arrived == g.n {
		for e := range len(f) + len(iv) {
			var sf float64
			var si int32
			for k := range g.n {
				if f != nil {
					sf += float64(g.f[k][e])
				} else {
					si += g.i[k][e]
				}
			}
			for k := range g.n {
				if f != nil {
					g.f[k][e] = float32(sf)
				} else {
					g.i[k][e] = si
				}
			}
		}
		if g.corrupt != nil {
			for k := range g.n {
				g.corrupt(k, g.f[k], g.i[k])
			}
		}
		g.arrived = 0
		g.round++
		g.cond.Broadcast()
		return nil
	}
	for g.round == round {
		g.cond.Wait()
	}
	return nil
}

func (g *memGroup) reducers() []AllReducer {
	out := make([]AllReducer, g.n)
	for r := range out {
		out[r] = memRank{g, r}
	}
	return out
}

// TestRunInProcess: Run drives every rank at once, verifies each result,
// measures Iters, calls Step and Observe per all-reduce, and fails naming
// the all-reduce and the rank on a wrong result or an error.
func TestRunInProcess(t *testing.T) {
	for _, dt := range []wire.DType{wire.Float32, wire.Int32} {
		t.Run(dt.String(), func(t *testing.T) {
			g := newMemGroup(3)
			steps, observed := 0, 0
			res, err := Run(t.Context(), g.reducers(), Config{Workers: 3, Elements: 500, DType: dt, Warmup: 2, Iters: 3, Bound: Float32Bound,
				Step: func() { steps++ }, Observe: func(time.Duration) { observed++ }})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Times) != 3 || steps != 5 || observed != 5 || len(res.ResultSHA256) != 64 {
				t.Fatalf("%d times, %d steps, %d observed, digest %q; want 3, 5, 5 and a SHA-256", len(res.Times), steps, observed, res.ResultSHA256)
			}
		})
	}
	t.Run("mismatch", func(t *testing.T) {
		g := newMemGroup(2)
		g.corrupt = func(rank int, _ []float32, i []int32) {
			if rank == 1 && g.round == 1 {
				i[7]++
			}
		}
		_, err := Run(t.Context(), g.reducers(), Config{Workers: 2, Elements: 100, DType: wire.Int32, Warmup: 1, Iters: 2})
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "all-reduce 2 of 3: RESULT MISMATCH: result 1 element 7") {
			t.Fatalf("error %v, want a RESULT MISMATCH in all-reduce 2 naming result 1 element 7", err)
		}
	})
	t.Run("rank fails", func(t *testing.T) {
		g := newMemGroup(2)
		boom := errors.New("NIC gone")
		g.fail = map[int]error{0: boom, 1: boom}
		_, err := Run(t.Context(), g.reducers(), Config{Workers: 2, Elements: 10, DType: wire.Float32, Iters: 1, Label: "job 9"})
		if !errors.Is(err, boom) || err.Error() != "all-reduce 1 of 1 (job 9): every worker: NIC gone" {
			t.Fatalf("error %v", err)
		}
	})
}

// TestSummarize: median (upper middle of an even count), extremes, and
// rates at the median; the caller's slice keeps its order.
func TestSummarize(t *testing.T) {
	times := []time.Duration{4 * time.Millisecond, time.Millisecond, 2 * time.Millisecond, 8 * time.Millisecond}
	s := Summarize(times, 1000)
	if s.Median != 4*time.Millisecond || s.Min != time.Millisecond || s.Max != 8*time.Millisecond {
		t.Fatalf("%+v", s)
	}
	if s.ATEPerSec != 250000 || s.Gbps != 1000*32/0.004/1e9 {
		t.Fatalf("rates %v ATE/s, %v Gbit/s", s.ATEPerSec, s.Gbps)
	}
	if times[0] != 4*time.Millisecond {
		t.Fatal("Summarize sorted the caller's slice")
	}
	if (Summarize(nil, 10) != Summary{}) {
		t.Fatal("no times: want the zero Summary")
	}
}
