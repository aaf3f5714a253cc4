package aggregation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// threadsOf gives the workers of the lane tests different Threads: which
// lane drives which QP is a worker's own business, so a job whose workers
// split their QPs differently must sum exactly as one whose workers do not.
var threadsOf = []int{1, 3, 5, 2}

// TestSoftThreads: a job of four workers with 1, 3, 5 and 2 lanes over
// five QPs (some lanes one QP, some two) sums float32, bfloat16, float16
// and int32 bit for bit as the same job with one lane per worker, over
// both transports, with message and packet writes.
func TestSoftThreads(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 70, 0, 0)
		const n, q, l = 4, 5, 9000
		for i, w := range []Writes{MessageWrites, PacketWrites} {
			t.Run(w.String(), func(t *testing.T) {
				cfg := softConfig(uint32(10+i), 256, 4, q)
				cfg.Writes = w
				single := openJob(t, c.ctlAddr, n, cfg, c.device(2+20*i))
				lanes := openJobWith(t, c.ctlAddr, n, func(r int) Config {
					c := cfg
					c.SessionID += 100
					c.Threads = threadsOf[r]
					return c
				}, c.device(10+20*i))
				for r, wk := range lanes.workers {
					if got, want := len(wk.sess.lanes), min(threadsOf[r], q); got != want {
						t.Fatalf("rank %d: %d lanes, want %d", r, got, want)
					}
				}
				in := gradients(uint64(i), n, l)
				want, got := clone2(in), clone2(in)
				noErrors(t, single.allReduce(context.Background(), want))
				checkSums(t, in, want, 256)
				noErrors(t, lanes.allReduce(context.Background(), got))
				for r := range got {
					sameBits(t, fmt.Sprintf("rank %d, lanes %d vs one", r, threadsOf[r]), got[r], want[0])
				}

				for _, f := range []quant.Format{quant.BFloat16, quant.Float16} {
					in16 := halfInputs(in, f)
					want16, got16 := clone2(in16), clone2(in16)
					noErrors(t, allReduce16(single, want16, f))
					noErrors(t, allReduce16(lanes, got16, f))
					for r := range got16 {
						for k := range got16[r] {
							if got16[r][k] != want16[0][k] {
								t.Fatalf("%v rank %d element %d: %#04x with lanes, %#04x with one", f, r, k, got16[r][k], want16[0][k])
							}
						}
					}
				}
			})
		}

		cfg := softConfig(30, 1024, 2, q)
		cfg.DType = wire.Int32
		j := openJobWith(t, c.ctlAddr, n, func(r int) Config {
			c := cfg
			c.Threads = threadsOf[r]
			return c
		}, c.device(60))
		in := int32Inputs(3, n, 7*1024/4*2+5)
		out := clone2(in)
		noErrors(t, j.allReduceInt32(context.Background(), out))
		checkInt32(t, in, out)
	})
}

// halfInputs converts float32 inputs to f, clamped to f's range.
func halfInputs(in [][]float32, f quant.Format) [][]uint16 {
	out := make([][]uint16, len(in))
	for r, x := range in {
		out[r] = make([]uint16, len(x))
		for i, v := range x {
			if f == quant.Float16 {
				v = max(-60000, min(60000, v))
			}
			out[r][i] = f.FromFloat32(v)
		}
	}
	return out
}

// allReduce16 runs a 16-bit all-reduce of x on every worker of j at once.
func allReduce16(j *job, x [][]uint16, f quant.Format) []error {
	errs := make([]error, len(j.workers))
	var wg sync.WaitGroup
	for r, w := range j.workers {
		wg.Go(func() { errs[r] = w.sess.AllReduce16Async(context.Background(), x[r], f).Wait(context.Background()) })
	}
	wg.Wait()
	return errs
}

// TestSoftThreadsLoss: with 1 % loss on the way to the switch and back,
// a job whose workers run 1, 3, 5 and 2 lanes recovers every message, and
// its sums are bit for bit the loss-free job's.
func TestSoftThreadsLoss(t *testing.T) {
	const n, l = 4, 60000
	in := gradients(43, n, l)
	cfg := softConfig(1, 1024, 4, 5)
	cfg.RetransmitTimeout = 5 * time.Millisecond

	clean := newSoftCluster(t, inMemory, 24, 0, 0)
	j := openJob(t, clean.ctlAddr, n, cfg, clean.device(2))
	want := clone2(in)
	noErrors(t, j.allReduce(context.Background(), want))
	j.close(t)

	lossy := newSoftCluster(t, inMemory, 25, 0.01, 0.01)
	j = openJobWith(t, lossy.ctlAddr, n, func(r int) Config {
		c := cfg
		c.Threads = threadsOf[r]
		return c
	}, lossy.device(2))
	for round := range 3 {
		got := clone2(in)
		noErrors(t, j.allReduce(context.Background(), got))
		for r := range n {
			sameBits(t, fmt.Sprintf("round %d rank %d (%d lanes), lossy vs loss-free", round, r, threadsOf[r]), got[r], want[0])
		}
	}
	var resent uint64
	for _, w := range j.workers {
		resent += w.sess.Stats().Retransmissions
	}
	if lostIn, lostOut := lossy.lost(); resent == 0 || lostIn == 0 || lostOut == 0 {
		t.Fatalf("loss recovery not exercised: %d resends, %d requests and %d results lost", resent, lostIn, lostOut)
	}
}

// TestSoftThreadsFail: when one lane's call fails, the call fails with
// that lane's error, the other lanes stop, and the session is broken; a
// closed session interrupts every lane of a call that waits.
func TestSoftThreadsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSoftCluster(t, inMemory, 26, 0, 0)
		cfg := softConfig(1, 256, 4, 6)
		cfg.Threads = 3
		cfg.PeerTimeout = 300 * time.Millisecond
		cfg.RetransmitTimeout = 5 * time.Millisecond
		j := openJob(t, c.ctlAddr, 2, cfg, c.device(2))
		in := gradients(5, 2, 4000)
		out := clone2(in)
		noErrors(t, j.allReduce(context.Background(), out))
		checkSums(t, in, out, 256)

		// Rank 1 never calls: rank 0's lanes wait for the switch until one
		// of them gives up.
		err := j.workers[0].sess.AllReduce(context.Background(), clone2(in)[0])
		var pt *PeerTimeoutError
		if !errors.As(err, &pt) {
			t.Fatalf("rank 0 alone: %v, want a *PeerTimeoutError", err)
		}
		if errors.Is(err, errLaneStopped) {
			t.Fatalf("the call reported a stopped lane, not the failure: %v", err)
		}
		if err := j.workers[0].sess.AllReduce(context.Background(), clone2(in)[0]); !errors.Is(err, ErrBroken) {
			t.Fatalf("after a failed call: %v, want ErrBroken", err)
		}

		// Close interrupts every lane of a waiting call.
		done := make(chan error, 1)
		go func() { done <- j.workers[1].sess.AllReduce(context.Background(), clone2(in)[1]) }()
		synctest.Wait() // its three lanes wait for rank 0, before its PeerTimeout
		if err := j.workers[1].sess.Close(); err != nil {
			t.Logf("close: %v", err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("a call interrupted by Close: %v, want ErrClosed", err)
			}
		case <-time.After(testutil.Scale(10 * time.Second)):
			t.Fatal("Close did not interrupt a call with three lanes")
		}
	})
}

// TestSoftThreadsNonFinite: each lane reads its own messages' exponents,
// and a non-finite element in any of them fails the call before any lane
// sends, naming the tensor's first bad element (not the first lane's);
// the session goes on.
func TestSoftThreadsNonFinite(t *testing.T) {
	c := newSoftCluster(t, inMemory, 27, 0, 0)
	cfg := softConfig(1, 256, 2, 6)
	cfg.Threads = 3
	j := openJob(t, c.ctlAddr, 1, cfg, c.device(2))
	s := j.workers[0].sess
	const vals = 256 * 2 / 4 // elements per message
	in := gradients(3, 1, 40*vals)
	// Message 3 is lane 1's (QPs 2 and 3), message 6 lane 0's (QP 0):
	// the lower element is lane 1's.
	x := clone2(in)[0]
	x[6*vals+1] = float32(math.Inf(1))
	x[3*vals+5] = float32(math.NaN())
	before := s.Stats()
	err := s.AllReduce(context.Background(), x)
	var nf *quant.NonFiniteError
	if !errors.As(err, &nf) || nf.Index != 3*vals+5 || errors.Is(err, ErrBroken) {
		t.Fatalf("non-finite input on two lanes: %v, want element %d named", err, 3*vals+5)
	}
	if after := s.Stats(); after.Messages != before.Messages || after.Packets != before.Packets {
		t.Fatalf("a refused call sent %d messages", after.Messages-before.Messages)
	}
	out := clone2(in)
	noErrors(t, j.allReduce(context.Background(), out))
	checkSums(t, in, out, vals)
}

// spinDevice gives its CQs a busy poll (verbs.BusyPoller), as libibverbs'
// have, and counts how often the engine arms them.
type spinDevice struct {
	verbs.Device
	spin  time.Duration
	arms  *atomic.Int64
	polls *atomic.Int64
}

type spinCQ struct {
	verbs.CQ
	d spinDevice
}

func (d spinDevice) CreateCQ(n int) (verbs.CQ, error) {
	cq, err := d.Device.CreateCQ(n)
	return spinCQ{cq, d}, err
}

func (c spinCQ) BusyPoll() time.Duration { return c.d.spin }

// spinPD hands the soft device its own CQs.
type spinPD struct{ verbs.PD }

func (d spinDevice) AllocPD() (verbs.PD, error) {
	pd, err := d.Device.AllocPD()
	return spinPD{pd}, err
}

func (p spinPD) CreateUCQP(cfg verbs.QPConfig) (verbs.QP, error) {
	for _, cq := range []*verbs.CQ{&cfg.SendCQ, &cfg.RecvCQ} {
		if s, ok := (*cq).(spinCQ); ok {
			*cq = s.CQ
		}
	}
	return p.PD.CreateUCQP(cfg)
}

func (c spinCQ) RequestNotify() error {
	c.d.arms.Add(1)
	return c.CQ.RequestNotify()
}

func (c spinCQ) Poll(wcs []verbs.Completion) (int, error) {
	c.d.polls.Add(1)
	return c.CQ.Poll(wcs)
}

// TestBusyPoll: on a CQ that asks for a busy poll (verbs.BusyPoller), the
// engine polls an empty CQ for up to its spin before it arms the CQ's
// notification — here a spin longer than the whole call, so the calls arm
// nothing once results flow — and the spin bounds nothing else: a result
// that never comes still times out (a timer cuts the spin short) and
// Close still interrupts a spinning call.
func TestBusyPoll(t *testing.T) {
	c := newSoftCluster(t, inMemory, 27, 0, 0)
	cfg := softConfig(1, 256, 4, 4)
	cfg.Threads = 2
	cfg.RetransmitTimeout = 5 * time.Millisecond
	cfg.PeerTimeout = 500 * time.Millisecond
	var arms, polls atomic.Int64
	dev := c.device(2)
	j := openJob(t, c.ctlAddr, 2, cfg, func(r int) (verbs.Device, error) {
		d, err := dev(r)
		return spinDevice{d, time.Hour, &arms, &polls}, err
	})
	in := gradients(9, 2, 20000)
	out := clone2(in)
	noErrors(t, j.allReduce(context.Background(), out)) // the first call waits for rank 1 to join
	arms0, polls0 := arms.Load(), polls.Load()
	for range 3 {
		out = clone2(in)
		noErrors(t, j.allReduce(context.Background(), out))
		checkSums(t, in, out, 256)
	}
	if a, p := arms.Load()-arms0, polls.Load()-polls0; a != 0 || p == 0 {
		t.Errorf("three calls armed the CQs %d times and polled them %d times; a spin of an hour arms nothing while results flow", a, p)
	}

	// Rank 1 stays away: rank 0's spin ends at its timers, and the call
	// fails at PeerTimeout.
	err := j.workers[0].sess.AllReduce(context.Background(), clone2(in)[0])
	var pt *PeerTimeoutError
	if !errors.As(err, &pt) {
		t.Fatalf("rank 0 alone: %v, want a *PeerTimeoutError", err)
	}

	// Close interrupts rank 1's lanes while they spin.
	done := make(chan error, 1)
	go func() { done <- j.workers[1].sess.AllReduce(context.Background(), clone2(in)[1]) }()
	for polls.Load() < polls0+1000 { // spinning: no wait to detect but the polls
		runtime.Gosched()
	}
	if err := j.workers[1].sess.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("a call interrupted by Close: %v, want ErrClosed", err)
		}
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("Close did not interrupt a spinning call")
	}
}
