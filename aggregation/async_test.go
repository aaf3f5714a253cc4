package aggregation

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestSoftAllReduceAsync: every worker queues several all-reduces of
// different lengths at once, then waits for all of them; each result is the
// sum (within the block floating point bound) and bit-identical to the
// synchronous AllReduce of the same inputs.
func TestSoftAllReduceAsync(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 60, 0, 0)
		const n = 3
		j := openJob(t, c.ctlAddr, n, softConfig(1, 1024, 2, 3), c.device(2))
		lens := []int{1, 5000, 300, 12345, 700}
		ins := make([][][]float32, len(lens)) // [call][rank]
		for k, l := range lens {
			ins[k] = gradients(uint64(100+k), n, l)
		}
		async := make([][][]float32, len(lens))
		for k := range lens {
			async[k] = clone2(ins[k])
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, w := range j.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hs := make([]*Handle, len(lens))
				for k := range lens {
					hs[k] = w.sess.AllReduceAsync(context.Background(), async[k][r])
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				errs[r] = WaitAll(ctx, hs...)
				for _, h := range hs {
					if done, err := h.Test(); !done || err != nil {
						errs[r] = errors.Join(errs[r], errors.New("Test after WaitAll: not done or failed"), err)
					}
				}
			}()
		}
		wg.Wait()
		noErrors(t, errs)
		for k := range lens {
			checkSums(t, ins[k], async[k], 1024*2/4)
			sync := clone2(ins[k])
			noErrors(t, j.allReduce(context.Background(), sync))
			for r := range n {
				sameBits(t, "async vs sync", async[k][r], sync[r])
			}
		}
		if got := j.workers[0].sess.Stats().AllReduces; got != uint64(2*len(lens)) {
			t.Errorf("Stats().AllReduces = %d, want %d", got, 2*len(lens))
		}
	})
}

// TestSoftAllReduceInt32Async: the int32 path is exact through the queue.
func TestSoftAllReduceInt32Async(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 61, 0, 0)
		const n = 2
		cfg := softConfig(1, 256, 4, 2)
		cfg.DType = wire.Int32
		j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
		in := [][][]int32{int32Inputs(1, n, 1000), int32Inputs(2, n, 3)}
		out := make([][][]int32, len(in))
		hs := make([][]*Handle, n)
		for k := range in {
			out[k] = make([][]int32, n)
			for r := range n {
				out[k][r] = append([]int32(nil), in[k][r]...)
				hs[r] = append(hs[r], j.workers[r].sess.AllReduceInt32Async(context.Background(), out[k][r]))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for r := range n {
			if err := WaitAll(ctx, hs[r]...); err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		for k := range in {
			checkInt32(t, in[k], out[k])
		}
		// A float32 call on an int32 session fails through its handle.
		if err := j.workers[0].sess.AllReduceAsync(context.Background(), []float32{1}).Wait(ctx); err == nil {
			t.Error("AllReduceAsync on an int32 session succeeded")
		}
	})
}

// TestSoftAsyncClose: calls queued on a worker whose peer never calls are
// pending (Wait with an expired context says so without ending them); Close
// fails every one of them promptly, and calls queued after Close fail with
// ErrClosed.
func TestSoftAsyncClose(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 62, 0, 0)
		j := openJob(t, c.ctlAddr, 2, softConfig(1, 1024, 2, 2), c.device(2))
		s := j.workers[0].sess
		var hs []*Handle
		for range 3 {
			hs = append(hs, s.AllReduceAsync(context.Background(), make([]float32, 1000)))
		}
		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := hs[0].Wait(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a call whose peer never calls: %v, want a context.DeadlineExceeded", err)
		}
		if done, _ := hs[2].Test(); done {
			t.Fatal("the third queued call is done although the first one is still running")
		}
		if err := s.Close(); err != nil {
			t.Logf("Close: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i, h := range hs {
			if err := h.Wait(ctx); err == nil || ctx.Err() != nil {
				t.Errorf("call %d after Close: %v (ctx %v), want a failure", i, err, ctx.Err())
			}
		}
		if err := s.AllReduceAsync(context.Background(), []float32{1}).Wait(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("AllReduceAsync after Close: %v, want ErrClosed", err)
		}
	})
}

// TestUserspaceNICIgnoresIPv4ID: a worker on the userspace NIC registers
// that it cannot see the IPv4 Identification (so the switch may send it
// GSO datagrams), and the job the switch gets says so for every rank.
func TestUserspaceNICIgnoresIPv4ID(t *testing.T) {
	c := newSoftCluster(t, sockets, 63, 0, 0)
	openJob(t, c.ctlAddr, 2, softConfig(1, 1024, 2, 1), c.device(2))
	jobs := c.ctl.Jobs()
	if len(jobs) != 1 {
		t.Fatalf("%d jobs", len(jobs))
	}
	for _, w := range jobs[0].Job.Workers {
		if !w.IgnoresIPv4ID {
			t.Errorf("rank %d (%v): registered without ignores_ipv4_id", w.Rank, w.Addr)
		}
	}
}
