package ring

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// This package's tests own 127.89.x.x (docs/architecture.md).

// ringDevs opens n soft NICs at 127.89.<third>.1, .2, …
func ringDevs(t testing.TB, third, n int, loss float64) []verbs.Device {
	t.Helper()
	devs := make([]verbs.Device, n)
	for i := range devs {
		addr := netip.AddrFrom4([4]byte{127, 89, byte(third), byte(1 + i)})
		d, err := soft.Open(soft.Config{Addr: addr, RecvLoss: loss, SendLoss: loss, Seed: uint64(100*third + i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return devs
}

func newTestRing(t testing.TB, devs []verbs.Device, cfg Config) *Ring {
	t.Helper()
	r, err := New(devs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func ringInputs(ranks, n int, seed uint64) ([][]float32, [][]int32) {
	f := make([][]float32, ranks)
	iv := make([][]int32, ranks)
	for r := range ranks {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		f[r] = make([]float32, n)
		iv[r] = make([]int32, n)
		for i := range n {
			f[r][i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10)))
			iv[r][i] = int32(rng.Uint32()) // sums wrap: the ring must wrap the same way
		}
	}
	return f, iv
}

// allReduce runs one call on every rank concurrently, with a bound.
func allReduce(t *testing.T, r *Ring, f [][]float32, iv [][]int32) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, r.Size())
	var wg sync.WaitGroup
	for i := range r.Size() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f != nil {
				errs[i] = r.Rank(i).AllReduce(ctx, f[i])
			} else {
				errs[i] = r.Rank(i).AllReduceInt32(ctx, iv[i])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func checkInt32(t *testing.T, in, out [][]int32) {
	t.Helper()
	for i := range out[0] {
		var sum int32
		for r := range in {
			sum += in[r][i]
		}
		for r := range out {
			if out[r][i] != sum {
				t.Fatalf("rank %d element %d: %d, want %d", r, i, out[r][i], sum)
			}
		}
	}
}

func checkFloat32(t *testing.T, in, out [][]float32) {
	t.Helper()
	for i := range out[0] {
		var sum, sumAbs float64
		for r := range in {
			sum += float64(in[r][i])
			sumAbs += math.Abs(float64(in[r][i]))
		}
		for r := range out {
			if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
				t.Fatalf("element %d: rank %d has %v, rank 0 %v: results must be bit-identical", i, r, out[r][i], out[0][i])
			}
		}
		// Each of the N−1 additions rounds once, plus the final rounding.
		if bound := float64(len(in)) * 0x1p-24 * sumAbs; math.Abs(float64(out[0][i])-sum) > bound {
			t.Fatalf("element %d: %v, float64 sum %v, error beyond %g", i, out[0][i], sum, bound)
		}
	}
}

func clone[T any](in [][]T) [][]T {
	out := make([][]T, len(in))
	for i := range in {
		out[i] = append([]T(nil), in[i]...)
	}
	return out
}

func TestRingAllReduce(t *testing.T) {
	tests := []struct {
		ranks, n int
		cfg      Config
	}{
		{1, 5, Config{}},
		{2, 1, Config{MessageSize: 256, MTU: 256}},
		{2, 1001, Config{MessageSize: 1024, MTU: 256}},
		{3, 2, Config{MessageSize: 256, MTU: 256}}, // fewer elements than ranks: empty segments
		{3, 10007, Config{MessageSize: 1000, MTU: 256}},
		{5, 4099, Config{MessageSize: 512, MTU: 512, Window: 3}},
		{5, 33333, Config{}},
	}
	for ti, tt := range tests {
		t.Run(fmt.Sprintf("ranks%d/n%d/msg%d", tt.ranks, tt.n, tt.cfg.MessageSize), func(t *testing.T) {
			r := newTestRing(t, ringDevs(t, 8, tt.ranks, 0), tt.cfg)
			reduceAndCheck(t, r, 3, tt.ranks, tt.n, uint64(10*ti))
			if s := r.Stats(); s.AllReduces != uint64(6*tt.ranks) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// reduceAndCheck runs calls successive calls (they exercise the epochs),
// each a float32 and an int32 all-reduce of n elements with inputs seeded
// seed+call, and checks every rank's result.
func reduceAndCheck(t *testing.T, r *Ring, calls, ranks, n int, seed uint64) {
	t.Helper()
	for call := range calls {
		f, iv := ringInputs(ranks, n, seed+uint64(call))
		outF, outI := clone(f), clone(iv)
		if err := allReduce(t, r, outF, nil); err != nil {
			t.Fatal(err)
		}
		checkFloat32(t, f, outF)
		if err := allReduce(t, r, nil, outI); err != nil {
			t.Fatal(err)
		}
		checkInt32(t, iv, outI)
	}
}

func TestRingAllReduceWithLoss(t *testing.T) {
	for i, loss := range []float64{0.01, 0.02} {
		for j, ranks := range []int{3, 5} {
			t.Run(fmt.Sprintf("loss%g/ranks%d", loss, ranks), func(t *testing.T) {
				devs := ringDevs(t, 9+2*i+j, ranks, loss)
				r := newTestRing(t, devs, Config{MessageSize: 2048, MTU: 512, Window: 8, RetransmitTimeout: 5 * time.Millisecond})
				const n = 20011
				reduceAndCheck(t, r, 3, ranks, n, 0)
				s := r.Stats()
				if s.Retransmissions == 0 {
					t.Fatalf("%g loss and no retransmission: %+v", loss, s)
				}
				t.Logf("stats %+v", s)
			})
		}
	}
}

// TestRingFakeNetwork runs the ring over verbstest with a deterministic drop
// of every 7th message (data and acknowledgements alike).
func TestRingFakeNetwork(t *testing.T) {
	nw := verbstest.NewNetwork()
	defer nw.Close()
	var count atomic.Uint64
	nw.SetDrop(func(*verbstest.Message) bool { return count.Add(1)%7 == 0 })
	devs := make([]verbs.Device, 4)
	for i := range devs {
		d, err := nw.NewDevice(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)}))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	r := newTestRing(t, devs, Config{MessageSize: 64, Window: 4, RetransmitTimeout: 2 * time.Millisecond})
	reduceAndCheck(t, r, 4, 4, 997, 0)
	if s := r.Stats(); s.Retransmissions == 0 || s.Duplicates == 0 {
		t.Fatalf("lost acknowledgements must cause retransmissions and duplicates: %+v", s)
	}
}

func TestRingPeerTimeout(t *testing.T) {
	r := newTestRing(t, ringDevs(t, 13, 3, 0), Config{MessageSize: 256, MTU: 256, RetransmitTimeout: 5 * time.Millisecond, PeerTimeout: 300 * time.Millisecond})
	x := make([]float32, 1000)
	errs := make(chan error, 2)
	for i := range 2 { // rank 2 never calls
		go func() { errs <- r.Rank(i).AllReduce(context.Background(), append([]float32(nil), x...)) }()
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrPeerTimeout) || !strings.Contains(err.Error(), "rank") {
				t.Fatalf("error %v, want ErrPeerTimeout naming a rank", err)
			}
			t.Log(err)
		case <-time.After(30 * time.Second):
			t.Fatal("AllReduce hung with a missing rank")
		}
	}
	if err := r.Rank(0).AllReduce(context.Background(), x); !errors.Is(err, ErrBroken) {
		t.Fatalf("call after failure: %v, want ErrBroken", err)
	}
}

func TestRingCancelAndClose(t *testing.T) {
	r, err := New(ringDevs(t, 14, 2, 0), Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// Rank 1 never calls: rank 0's call waits, under way, until cancelled.
	go func() { done <- r.Rank(0).AllReduce(ctx, make([]float32, 100)) }()
	testutil.WaitBlocked(t, 1, "ring.(*Rank).do")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled AllReduce did not return")
	}
	go func() { done <- r.Rank(1).AllReduce(context.Background(), make([]float32, 100)) }()
	testutil.WaitBlocked(t, 1, "ring.(*Rank).do")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("error %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AllReduce did not return after Close")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := r.Rank(0).AllReduce(context.Background(), make([]float32, 1)); err == nil {
		t.Fatal("AllReduce on a closed ring succeeded")
	}
}

func TestRingLengthMismatch(t *testing.T) {
	r := newTestRing(t, ringDevs(t, 15, 2, 0), Config{MessageSize: 256, MTU: 256, PeerTimeout: 2 * time.Second})
	errs := make(chan error, 2)
	go func() { errs <- r.Rank(0).AllReduce(context.Background(), make([]float32, 100)) }()
	go func() { errs <- r.Rank(1).AllReduce(context.Background(), make([]float32, 101)) }()
	for range 2 {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("tensors of different lengths were reduced")
			}
			t.Log(err)
		case <-time.After(30 * time.Second):
			t.Fatal("hung")
		}
	}
}

func TestRingConfigErrors(t *testing.T) {
	nw := verbstest.NewNetwork()
	defer nw.Close()
	d, err := nw.NewDevice(netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{MessageSize: 6}, "multiple of 4"},
		{Config{MTU: 1000}, "256, 512, 1024, 2048 or 4096"},
		{Config{Window: -1}, "window"},
		{Config{RetransmitTimeout: time.Second, PeerTimeout: time.Millisecond}, "peer timeout"},
	} {
		if _, err := New([]verbs.Device{d}, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config %+v: error %v, want it to mention %q", tt.cfg, err, tt.want)
		}
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("ring of no devices accepted")
	}
	r, err := New([]verbs.Device{d}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Rank(0).AllReduce(context.Background(), nil); err == nil {
		t.Error("empty tensor accepted")
	}
}

func TestDefaultWindow(t *testing.T) {
	for _, tt := range []struct {
		name              string
		messageSize, want int
	}{
		{"256 KiB of 16 KiB messages", 16 << 10, 16},
		{"at least 4 messages", 1 << 20, 4},
		{"at most 256 messages", 256, 256},
		{"between the bounds", 4 << 10, 64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultWindow(tt.messageSize); got != tt.want {
				t.Fatalf("DefaultWindow(%d) = %d, want %d", tt.messageSize, got, tt.want)
			}
			cfg, err := Config{MessageSize: tt.messageSize}.withDefaults()
			if err != nil || cfg.Window != tt.want {
				t.Fatalf("Config{MessageSize: %d} defaults to window %d (%v), want %d", tt.messageSize, cfg.Window, err, tt.want)
			}
		})
	}
}

// BenchmarkRingAllReduce: 4 ranks on loopback soft NICs, 1 MiB float32 per
// call. allocs/op is per all-reduce of 4 ranks × 48 messages: the engines
// allocate nothing per message.
func BenchmarkRingAllReduce(b *testing.B) {
	const ranks, n = 4, 1 << 18
	r := newTestRing(b, ringDevs(b, 15, ranks, 0), Config{MessageSize: 16 << 10, MTU: 1024})
	x := make([][]float32, ranks)
	for i := range x {
		x[i] = make([]float32, n)
	}
	ctx := context.Background()
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.SetBytes(4 * n)
	b.ResetTimer()
	for range b.N {
		for i := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = r.Rank(i).AllReduce(ctx, x[i])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	s := r.Stats()
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ATE/s")
	b.ReportMetric(float64(s.Retransmissions)/float64(b.N), "retx/op")
}

// A rank is driven the way a SwitchML session is.
var _ aggregation.AllReducer = (*Rank)(nil)
