package aggregation

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
)

// TestSoftExactSums: through the real software switch on the in-memory
// network, tensors whose values fit the block's 31 − ⌈log2 n⌉ bits (ones,
// halves, small integers, powers of two) come back exactly: ones sum to n,
// halves to n/2, the others to the float32 nearest their exact sum, on every
// rank, in float32, bfloat16 and float16 (docs/quantization.md "Exact
// sums").
func TestSoftExactSums(t *testing.T) {
	c := newSoftCluster(t, inMemory, 117, 0, 0)
	for i, n := range []int{1, 2, 3, 8, 33} {
		if testing.Short() && n > 8 {
			continue
		}
		t.Run(fmt.Sprint("n", n), func(t *testing.T) {
			j := openJob(t, c.ctlAddr, n, softConfig(uint32(i+1), 256, 4, 2), c.device(2+40*(i%3)))
			const l = 1000 // several messages, the last one partial
			inputs := map[string]func(r, k int) float32{
				"ones":    func(int, int) float32 { return 1 },
				"halves":  func(int, int) float32 { return 0.5 },
				"integer": func(r, k int) float32 { return float32((k*7+r*13)%201 - 100) },
				"power of two": func(r, k int) float32 {
					return float32(math.Ldexp(float64(1-2*((k+r)%2)), (k*5+r)%24-12))
				},
			}
			for name, gen := range inputs {
				in := make([][]float32, n)
				for r := range in {
					in[r] = make([]float32, l)
					for k := range in[r] {
						in[r][k] = gen(r, k)
					}
				}
				out := clone2(in)
				noErrors(t, j.allReduce(context.Background(), out))
				for k := range l {
					var exact float64 // exact: a few float32 values 2^-12 … 2^11
					for r := range in {
						exact += float64(in[r][k])
					}
					for r := range out {
						if out[r][k] != float32(exact) {
							t.Fatalf("%s: rank %d element %d: got %v, want %v exactly", name, r, k, out[r][k], exact)
						}
					}
				}
				if name == "ones" && out[0][0] != float32(n) {
					t.Fatalf("ones: got %v, want %d", out[0][0], n)
				}
			}
			for _, f := range []quant.Format{quant.BFloat16, quant.Float16} {
				for _, v := range []float32{1, 0.5, 3} {
					in := make([]uint16, l)
					for k := range in {
						in[k] = f.FromFloat32(v)
					}
					out := make([][]uint16, n)
					errs := make([]error, n)
					var wg sync.WaitGroup
					for r, w := range j.workers {
						out[r] = append([]uint16(nil), in...)
						wg.Go(func() { errs[r] = w.sess.AllReduce16Async(context.Background(), out[r], f).Wait(context.Background()) })
					}
					wg.Wait()
					noErrors(t, errs)
					want := f.FromFloat32(float32(n) * v) // a format value: n·v < 2^8
					for r := range out {
						for k, h := range out[r] {
							if h != want {
								t.Fatalf("%v %v: rank %d element %d: got %v, want %v exactly", f, v, r, k, f.ToFloat32(h), f.ToFloat32(want))
							}
						}
					}
				}
			}
			j.close(t)
		})
	}
}
