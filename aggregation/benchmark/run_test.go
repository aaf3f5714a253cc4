package benchmark

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestJoinAndRun is what an integrator does: join.Member, join.OpenNIC
// (soft), join.WaitForController, aggregation.Open, Run — two workers against the software switch and its controller on loopback. Both
// verify every result and end with the same result digest; int32 and
// float32. Addresses: 127.14.1.x.
func TestJoinAndRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := local.Start(ctx, local.Config{Switch: swswitch.Config{Addr: netip.MustParseAddr("127.14.1.1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctlAddr := cl.ControllerAddr

	for i, dt := range []wire.DType{wire.Float32, wire.Int32} {
		const workers = 2
		digests := make([]string, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for r := range workers {
			rank := r
			m, err := join.Member(join.Explicit{Rank: &rank, Workers: new(int)})
			if err == nil {
				t.Fatalf("a 0-worker job was accepted: %+v", m)
			}
			n := workers
			m, err = join.Member(join.Explicit{Rank: &rank, Workers: &n})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[m.Rank] = func() error {
					dev, err := join.OpenNIC(join.NICConfig{Kind: join.NICSoft, Addr: netip.AddrFrom4([4]byte{127, 14, 1, byte(2 + m.Rank)})})
					if err != nil {
						return err
					}
					defer dev.Close()
					if err := join.WaitForController(ctx, ctlAddr, 10*time.Second, nil); err != nil {
						return err
					}
					sess, err := aggregation.Open(ctx, aggregation.Config{Device: dev, ControllerAddr: ctlAddr, SessionID: uint32(10 + i),
						Rank: m.Rank, Workers: m.Workers, QPs: 2, PacketSize: 256, PacketsPerMessage: 4, DType: dt})
					if err != nil {
						return err
					}
					res, err := Run(ctx, []AllReducer{sess}, Config{Ranks: []int{m.Rank}, Workers: m.Workers, Elements: 3000, DType: dt, Warmup: 1, Iters: 2})
					if err != nil {
						sess.Abort(err.Error())
						return err
					}
					if len(res.Times) != 2 {
						t.Errorf("rank %d: %d times, want 2", m.Rank, len(res.Times))
					}
					digests[m.Rank] = res.ResultSHA256
					return sess.Close()
				}()
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%v rank %d: %v", dt, r, err)
			}
		}
		if len(digests[0]) != 64 || digests[0] != digests[1] {
			t.Fatalf("%v: result digests %q", dt, digests)
		}
	}
}

// TestRunArgs: Run refuses nonsense before calling anything.
func TestRunArgs(t *testing.T) {
	var s *aggregation.Session
	for _, c := range []Config{
		{Workers: 1, Elements: 1, DType: wire.Float32, Iters: 0},
		{Workers: 1, Elements: 1, Iters: 1, Ranks: []int{1}},
		{Workers: 0, Elements: 1, Iters: 1},
		{Workers: 2, Elements: 1, Iters: 1, Ranks: []int{0, 1}},
	} {
		if _, err := Run(t.Context(), []AllReducer{s}, c); err == nil {
			t.Fatalf("%+v: no error", c)
		}
	}
}

// spinReducer is a one-rank all-reduce that burns d of this process's CPU
// time and leaves the tensor as it is (the sum over one rank).
type spinReducer struct{ d time.Duration }

func (s spinReducer) spin() {
	u0, s0 := processCPU()
	for {
		u, k := processCPU()
		if u+k-u0-s0 >= s.d {
			return
		}
	}
}
func (s spinReducer) AllReduce(ctx context.Context, v []float32) error    { s.spin(); return nil }
func (s spinReducer) AllReduceInt32(ctx context.Context, v []int32) error { s.spin(); return nil }

// TestRunCPU: Run counts the process's CPU inside the measured calls: three
// calls that each burn 20 ms of CPU, after a warm-up, are at least 60 ms.
func TestRunCPU(t *testing.T) {
	const spin, iters = 20 * time.Millisecond, 3
	res, err := Run(context.Background(), []AllReducer{spinReducer{spin}}, Config{Workers: 1, Elements: 16, DType: wire.Float32, Warmup: 1, Iters: iters})
	if err != nil {
		t.Fatal(err)
	}
	got := res.CPUUser + res.CPUSys
	if runtime.GOOS == "linux" && got < iters*spin {
		t.Fatalf("CPU inside %d calls spinning %v each: %v user + %v kernel", iters, spin, res.CPUUser, res.CPUSys)
	}
	t.Logf("%v user + %v kernel", res.CPUUser, res.CPUSys)
}
