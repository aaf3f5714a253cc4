package aggregation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/verbstest"
)

// toyCluster is a toy switch, a real controller and fake NICs on one
// in-memory network.
type toyCluster struct {
	net     *verbstest.Network
	sw      *toySwitch
	ctlAddr string
}

func newToyCluster(t testing.TB, liveness time.Duration) *toyCluster {
	t.Helper()
	n := verbstest.NewNetwork()
	t.Cleanup(func() { n.Close() })
	swAddr := addr4(10, 0, 0, 1)
	sw, err := newToySwitch(n, swAddr)
	if err != nil {
		t.Fatal(err)
	}
	return &toyCluster{net: n, sw: sw, ctlAddr: startController(t, sw, swAddr, liveness)}
}

func (c *toyCluster) device(base byte) func(int) (verbs.Device, error) {
	return func(r int) (verbs.Device, error) {
		return c.net.NewDevice(addr4(10, base, byte(r>>8), byte(r+2)))
	}
}

func toyConfig(session uint32) Config {
	return Config{
		SessionID:         session,
		QPs:               3,
		PacketSize:        256,
		PacketsPerMessage: 2,
		RetransmitTimeout: 2 * time.Millisecond,
		PeerTimeout:       2 * time.Second,
	}
}

func TestToyAllReduce(t *testing.T) {
	c := newToyCluster(t, 0)
	for _, tc := range []struct {
		name    string
		n, l, q int
	}{
		{"n1-one-element", 1, 1, 3},
		{"n2-partial-message", 2, 300, 3},
		{"n3-fewer-messages-than-qps", 3, 130, 4},
		{"n5-many-messages", 5, 4000, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := toyConfig(uint32(100 + tc.n))
			cfg.QPs = tc.q
			j := openJob(t, c.ctlAddr, tc.n, cfg, c.device(byte(tc.n)))
			in := gradients(uint64(tc.l), tc.n, tc.l)
			var first [][]float32
			for round := range 3 {
				out := clone2(in)
				noErrors(t, j.allReduce(context.Background(), out))
				checkSums(t, in, out, 256*2/4)
				if round == 0 {
					first = out
				} else {
					sameBits(t, fmt.Sprintf("round %d vs 0", round), out[0], first[0])
				}
			}
			st := j.workers[0].sess.Stats()
			// Retransmissions happen without loss too: a worker that starts
			// its call an RTO after the others makes them resend.
			if st.AllReduces != 3 || st.Results != st.Messages {
				t.Errorf("stats %+v: want 3 all-reduces and a result per message", st)
			}
		})
	}
}

func TestToyAllReduceInt32(t *testing.T) {
	c := newToyCluster(t, 0)
	cfg := toyConfig(7)
	cfg.DType = wire.Int32
	const n = 3
	j := openJob(t, c.ctlAddr, n, cfg, c.device(1))
	for _, l := range []int{1, 129, 1000} {
		in := int32Inputs(uint64(l), n, l)
		out := make([][]int32, n)
		for r := range in {
			out[r] = append([]int32(nil), in[r]...)
		}
		noErrors(t, j.allReduceInt32(context.Background(), out))
		checkInt32(t, in, out)
	}
	if err := j.workers[0].sess.AllReduce(context.Background(), []float32{1}); err == nil || !strings.Contains(err.Error(), "AllReduceInt32") {
		t.Errorf("AllReduce on an int32 session: %v", err)
	}
}

// TestToyLoss drops messages in both directions; results must be
// bit-identical to the loss-free run.
func TestToyLoss(t *testing.T) {
	c := newToyCluster(t, 0)
	const n, l = 4, 2500
	in := gradients(3, n, l)

	clean := openJob(t, c.ctlAddr, n, toyConfig(1), c.device(1))
	want := clone2(in)
	noErrors(t, clean.allReduce(context.Background(), want))

	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	c.net.SetDrop(func(m *verbstest.Message) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64() < 0.05
	})
	defer c.net.SetDrop(nil)
	lossy := openJob(t, c.ctlAddr, n, toyConfig(2), c.device(2))
	for range 2 {
		got := clone2(in)
		noErrors(t, lossy.allReduce(context.Background(), got))
		for r := range n {
			sameBits(t, fmt.Sprintf("rank %d lossy vs clean", r), got[r], want[0])
		}
	}
	var retx uint64
	for _, w := range lossy.workers {
		retx += w.sess.Stats().Retransmissions
	}
	swRetx, unicasts, _, _ := c.sw.counters()
	t.Logf("retransmissions: workers %d, seen by switch %d, unicast answers %d; network %+v", retx, swRetx, unicasts, c.net.Stats())
	if retx == 0 || c.net.Stats().Dropped == 0 {
		t.Fatalf("no loss recovery exercised (retransmissions %d)", retx)
	}
}

// TestToyDeadPeer: a worker that never calls AllReduce makes the others
// fail with ErrPeerTimeout within PeerTimeout, and the session is broken.
func TestToyDeadPeer(t *testing.T) {
	c := newToyCluster(t, 0)
	cfg := toyConfig(9)
	cfg.PeerTimeout = 300 * time.Millisecond
	j := openJob(t, c.ctlAddr, 3, cfg, c.device(1))
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = j.workers[r].sess.AllReduce(context.Background(), make([]float32, 1000))
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	for r, err := range errs {
		if !errors.Is(err, ErrPeerTimeout) {
			t.Fatalf("rank %d: %v, want ErrPeerTimeout", r, err)
		}
	}
	t.Log(errs[0])
	if err := j.workers[0].sess.AllReduce(context.Background(), []float32{1}); !errors.Is(err, ErrBroken) {
		t.Errorf("after a failure: %v, want ErrBroken", err)
	}
}

// TestToyKilledWorker: a worker that disappears (its controller connection
// drops) makes the controller abort the job; the others fail quickly.
func TestToyKilledWorker(t *testing.T) {
	c := newToyCluster(t, 0)
	cfg := toyConfig(10)
	cfg.PeerTimeout = 30 * time.Second // the controller must be what ends it
	j := openJob(t, c.ctlAddr, 3, cfg, c.device(1))
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = j.workers[r].sess.AllReduce(context.Background(), make([]float32, 1000))
		}()
	}
	time.Sleep(50 * time.Millisecond)
	j.workers[2].cli.Close()
	j.workers[2].dev.Close()
	wg.Wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	for r, err := range errs {
		if !errors.Is(err, control.ErrJobEnded) {
			t.Fatalf("rank %d: %v, want control.ErrJobEnded", r, err)
		}
	}
	t.Log(errs[0])
}

func TestToyCancel(t *testing.T) {
	c := newToyCluster(t, 0)
	j := openJob(t, c.ctlAddr, 2, toyConfig(11), c.device(1))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := j.workers[0].sess.AllReduce(ctx, make([]float32, 100))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	// Close interrupts a running call too.
	done := make(chan error)
	go func() { done <- j.workers[1].sess.AllReduce(context.Background(), make([]float32, 100)) }()
	time.Sleep(20 * time.Millisecond)
	j.workers[1].sess.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

func TestInputErrors(t *testing.T) {
	c := newToyCluster(t, 0)
	j := openJob(t, c.ctlAddr, 1, toyConfig(12), c.device(1))
	s := j.workers[0].sess
	x := []float32{1, 2, float32(math.NaN())}
	if err := s.AllReduce(context.Background(), x); err == nil || !strings.Contains(err.Error(), "element 2") {
		t.Errorf("NaN: %v", err)
	}
	if err := s.AllReduce(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty: %v", err)
	}
	// The session still works after bad input.
	y := []float32{1, 2, 3}
	if err := s.AllReduce(context.Background(), y); err != nil || y[2] != 3 {
		t.Errorf("after bad input: %v %v", err, y)
	}
}

func TestConfigErrors(t *testing.T) {
	n := verbstest.NewNetwork()
	defer n.Close()
	dev, _ := n.NewDevice(addr4(10, 0, 0, 2))
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no device", Config{Workers: 1}, "Device is nil"},
		{"no workers", Config{Device: dev}, "Workers is 0"},
		{"bad rank", Config{Device: dev, Workers: 2, Rank: 2}, "ranks of a 2-worker job are 0..1"},
		{"packet size", Config{Device: dev, Workers: 1, PacketSize: 300}, "256, 512, 1024, 2048 and 4096"},
		{"ppm", Config{Device: dev, Workers: 1, PacketsPerMessage: 3}, "power of two"},
		{"peer timeout", Config{Device: dev, Workers: 1, RetransmitTimeout: time.Second, PeerTimeout: time.Millisecond}, "PeerTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(context.Background(), tc.cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrConfig mentioning %q", err, tc.want)
			}
		})
	}
}

func TestRTTEstimator(t *testing.T) {
	const floor, ceil = 10 * time.Millisecond, time.Second
	var e rttEstimator
	if got := e.rto(floor, ceil); got != floor {
		t.Fatalf("rto before samples = %v, want the floor %v", got, floor)
	}
	e.sample(time.Millisecond)
	if got := e.rto(floor, ceil); got != floor {
		t.Fatalf("rto after a 1 ms sample = %v, want the floor %v", got, floor)
	}
	for range 20 {
		e.sample(40 * time.Millisecond)
	}
	if got := e.rto(floor, ceil); got < 40*time.Millisecond || got > 100*time.Millisecond {
		t.Fatalf("rto after 40 ms samples = %v, want a little above 40 ms", got)
	}
	for range 20 {
		e.sample(10 * time.Second)
	}
	if got := e.rto(floor, ceil); got != ceil {
		t.Fatalf("rto after 10 s samples = %v, want the ceiling %v", got, ceil)
	}
}
