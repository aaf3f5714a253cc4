package aggregation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// The end-to-end tests run everything in process (aggregation/local): the
// real software switch, the real controller (gRPC on a loopback port) and one
// userspace RoCEv2 NIC per worker, over both transports (forTransports): an
// in-memory network (memlink; tests in parallel, no addresses to keep apart)
// and UDP sockets on loopback, where each test owns 127.88.<net>.0/24
// (switch .1, workers .2 and up) so that tests of other packages, which
// bind UDP 4791 on other loopback addresses, never collide with these.

func softConfig(session uint32, packet, ppm, q int) Config {
	return Config{
		SessionID:         session,
		QPs:               q,
		PacketSize:        packet,
		PacketsPerMessage: ppm,
		RetransmitTimeout: 20 * time.Millisecond,
		PeerTimeout:       5 * time.Second,
	}
}

func TestSoftAllReduce(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 1, 0, 0)
		cases := []struct {
			n, packet, ppm, q, l int
		}{
			{1, 256, 2, 2, 1},
			{2, 256, 4, 3, 1000},
			{3, 1024, 2, 2, 3001},
			{4, 4096, 1, 2, 5000},
			{8, 1024, 4, 4, 2500},
			{16, 256, 8, 2, 1200},
			{33, 512, 2, 2, 700},
		}
		for i, tc := range cases {
			if testing.Short() && tc.n > 8 {
				continue
			}
			t.Run(fmt.Sprintf("n%d-p%d-ppm%d-q%d-l%d", tc.n, tc.packet, tc.ppm, tc.q, tc.l), func(t *testing.T) {
				j := openJob(t, c.ctlAddr, tc.n, softConfig(uint32(i+1), tc.packet, tc.ppm, tc.q), c.device(2+40*(i%3)))
				in := gradients(uint64(i), tc.n, tc.l)
				var first [][]float32
				for round := range 2 {
					out := clone2(in)
					noErrors(t, j.allReduce(context.Background(), out))
					checkSums(t, in, out, tc.packet*tc.ppm/4)
					if round == 0 {
						first = out
					} else {
						sameBits(t, "repeated run", out[0], first[0])
					}
				}
				j.close(t)
			})
		}
	})
}

func TestSoftAllReduceInt32(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 2, 0, 0)
		for i, packet := range []int{256, 1024, 4096} {
			t.Run(fmt.Sprint(packet), func(t *testing.T) {
				cfg := softConfig(uint32(i+1), packet, 2, 3)
				cfg.DType = wire.Int32
				const n = 3
				j := openJob(t, c.ctlAddr, n, cfg, c.device(2+10*i))
				l := 3*packet/4*2 + 17
				in := int32Inputs(uint64(i), n, l)
				out := clone2(in)
				noErrors(t, j.allReduceInt32(context.Background(), out))
				checkInt32(t, in, out)
			})
		}
	})
}

// TestSoftLoss: with 1 % ingress and 1 % egress loss at the switch, the
// results are bit-identical to a loss-free run, and the workers count their
// retransmissions.
//
// Multi-packet messages (ppm4) check the in-order result rule of
// switchmodel.RDMASender: after a retransmission a unicast replay can
// interleave with the multicast of slots that complete meanwhile (FIRST(0)
// unicast, MIDDLE(2) multicast, MIDDLE(1) unicast, …); with consecutive PSNs
// a UC receiver would accept the message with packets swapped, so the
// sender skips, per worker QP, any MIDDLE/LAST that does not directly follow
// the last packet it sent there.
func TestSoftLoss(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		for i, ppm := range []int{1, 4} {
			t.Run(fmt.Sprintf("ppm%d", ppm), func(t *testing.T) {
				testLoss(t, tr, byte(3+2*i), 1024, ppm, 4)
			})
		}
	})
}

func testLoss(t *testing.T, tr transport, net byte, packet, ppm, q int) {
	const n, l = 4, 60000
	in := gradients(42, n, l)
	cfg := softConfig(1, packet, ppm, q)
	cfg.RetransmitTimeout = 5 * time.Millisecond
	vals := packet * ppm / 4

	clean := newSoftCluster(t, tr, net, 0, 0)
	j := openJob(t, clean.ctlAddr, n, cfg, clean.device(2))
	want := clone2(in)
	noErrors(t, j.allReduce(context.Background(), want))
	checkSums(t, in, want, vals)
	j.close(t)

	lossy := newSoftCluster(t, tr, net+1, 0.01, 0.01)
	j = openJob(t, lossy.ctlAddr, n, cfg, lossy.device(2))
	for round := range 2 {
		got := clone2(in)
		noErrors(t, j.allReduce(context.Background(), got))
		for r := range n {
			if !t.Failed() {
				diagnose(t, got[r], want[0], packet/4)
			}
			sameBits(t, fmt.Sprintf("round %d rank %d, lossy vs loss-free", round, r), got[r], want[0])
		}
	}
	var st Stats
	for _, w := range j.workers {
		s := w.sess.Stats()
		st.Retransmissions += s.Retransmissions
		st.StaleResults += s.StaleResults
		st.Messages += s.Messages
	}
	sw := lossy.sw.Stats()
	lostIn, lostOut := lossy.lost()
	t.Logf("workers: %d messages, %d retransmissions, %d stale results; switch: %d retransmissions seen, %d unicasts; lost: %d requests, %d results; psn drops %d",
		st.Messages, st.Retransmissions, st.StaleResults, sw.Model.Retransmissions, sw.Model.Unicasts,
		lostIn, lostOut, sw.Drops(switchmodel.DropPSN))
	if st.Retransmissions == 0 || lostIn == 0 || lostOut == 0 {
		t.Error("loss recovery not exercised: no retransmissions, or no loss on the way to or from the switch")
	}
}

// TestSoftKilledWorker: a worker dies mid-job; the others get an error
// (the controller aborts the job), nothing leaks, and a new job then runs on
// the same switch.
func TestSoftKilledWorker(t *testing.T) {
	forTransports(t, false, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 5, 0, 0)
		goroutines := testutil.SnapshotGoroutines()
		cfg := softConfig(1, 1024, 2, 2)
		cfg.PeerTimeout = time.Minute // the controller's abort must be what ends it
		const n = 3
		j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
		in := gradients(5, n, 3000)
		noErrors(t, j.allReduce(context.Background(), clone2(in)))

		// Ranks 0 and 1 start the next all-reduce; rank 2 dies instead.
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = j.workers[r].sess.AllReduce(context.Background(), clone2(in)[r])
			}()
		}
		testutil.WaitBlocked(t, 2, "aggregation.(*lane).drive") // the survivors' calls are under way
		killed := time.Now()
		j.workers[2].cli.Close() // the process is gone: its controller connection drops
		j.workers[2].dev.Close() // and its NIC
		wg.Wait()
		// PeerTimeout is a minute: ErrJobEnded says the controller's abort,
		// not the timeout, ended the calls.
		for r, err := range errs {
			if !errors.Is(err, control.ErrJobEnded) || !strings.Contains(err.Error(), "rank 2") {
				t.Fatalf("rank %d: %v; want control.ErrJobEnded naming rank 2", r, err)
			}
		}
		t.Logf("survivor's error after %v: %v", time.Since(killed).Round(time.Millisecond), errs[0])
		j.close(t)

		// No goroutine outlives the job (gRPC connections wind down
		// asynchronously: Check waits for them).
		goroutines.Check(t)
		if t.Failed() {
			t.FailNow()
		}

		// The switch and the controller serve a new job, on the same addresses.
		j2 := openJob(t, c.ctlAddr, 2, softConfig(2, 1024, 2, 2), c.device(2))
		in2 := gradients(6, 2, 1000)
		out := clone2(in2)
		noErrors(t, j2.allReduce(context.Background(), out))
		checkSums(t, in2, out, 1024*2/4)
	})
}

// TestSoftAbortBetweenCalls: a worker that stops between two calls with
// Abort makes the others' next AllReduce fail at once, naming it and the
// reason, where a Close would have looked like a clean end.
func TestSoftAbortBetweenCalls(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 40, 0, 0)
		cfg := softConfig(1, 1024, 2, 2)
		cfg.PeerTimeout = time.Minute // the controller's abort must be what ends it
		const n = 3
		j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
		in := gradients(40, n, 3000)
		noErrors(t, j.allReduce(context.Background(), clone2(in)))

		if err := j.workers[2].sess.Abort("stopped by its operator"); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		if err := j.workers[2].sess.Close(); err != nil {
			t.Fatalf("Close after Abort: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for r := range 2 {
			err := j.workers[r].sess.AllReduce(ctx, clone2(in)[r])
			if !errors.Is(err, control.ErrJobEnded) || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), "stopped by its operator") {
				t.Fatalf("rank %d: %v; want control.ErrJobEnded naming rank 2 and the reason", r, err)
			}
		}
	})
}

// TestSoftDeadNIC: a worker whose NIC stops (its controller connection
// stays up, so the controller cannot tell) makes the others fail with
// ErrPeerTimeout within the PeerTimeout.
func TestSoftDeadNIC(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		inBubble(t, tr, func(t *testing.T) {
			c := newSoftCluster(t, tr, 7, 0, 0)
			cfg := softConfig(1, 1024, 2, 2)
			cfg.PeerTimeout = time.Second
			const n = 3
			j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
			j.workers[2].dev.Close()
			start := time.Now()
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = j.workers[r].sess.AllReduce(context.Background(), make([]float32, 5000))
				}()
			}
			wg.Wait()
			t.Logf("the survivors failed after %v (PeerTimeout %v)", time.Since(start).Round(time.Millisecond), cfg.PeerTimeout)
			for r, err := range errs {
				// The controller reads the switch's slots: rank 2 is missing
				// from every partial sum, and sent nothing.
				var pe *PeerTimeoutError
				if !errors.As(err, &pe) || !errors.Is(err, ErrWaitingForRank) || !slices.ContainsFunc(pe.Waiting, func(w control.RankWait) bool {
					return w.Rank == 2 && w.Addr == addr4(127, 88, 7, 4) && w.ActivityKnown && w.Packets == 0
				}) {
					t.Fatalf("rank %d: %v; want ErrPeerTimeout waiting for rank 2, which sent nothing", r, err)
				}
			}
			t.Log(errs[0])
		})
	})
}

// TestSoftStalledRankNamed: a rank that joined and made a call, then stops
// calling (a stopped process: its keep-alive stream and NIC stay up, so
// neither the controller's liveness checks nor the switch can tell it from
// a slow one) makes the others' calls fail after their PeerTimeout with an
// error that names it, its address and how long it has been silent, read
// from the switch's slots (docs/control-plane.md "Who a stalled job waits
// for").
func TestSoftStalledRankNamed(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		inBubble(t, tr, func(t *testing.T) {
			c := newSoftCluster(t, tr, 8, 0, 0)
			cfg := softConfig(1, 1024, 2, 2)
			// Long enough that the other survivor, late to its call on a
			// loaded host, is never taken for the stalled rank.
			cfg.PeerTimeout = testutil.Scale(time.Second)
			const n = 3
			j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
			in := gradients(8, n, 3000)
			noErrors(t, j.allReduce(context.Background(), clone2(in)))

			// Ranks 0 and 1 make the next call; rank 2 never does.
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = j.workers[r].sess.AllReduce(context.Background(), clone2(in)[r])
				}()
			}
			wg.Wait()
			for r, err := range errs {
				var pe *PeerTimeoutError
				if !errors.As(err, &pe) || !errors.Is(err, ErrWaitingForRank) || len(pe.Waiting) != 1 {
					t.Fatalf("rank %d: %v; want a *PeerTimeoutError waiting for one rank", r, err)
				}
				w := pe.Waiting[0]
				if w.Rank != 2 || w.Addr != addr4(127, 88, 8, 4) || w.MissingSlots == 0 || !w.ActivityKnown || w.Packets == 0 ||
					w.Idle < cfg.PeerTimeout/2 || w.Ended {
					t.Fatalf("rank %d: waiting for %+v; want rank 2 at 127.88.8.4, missing from a partial sum, with packets, silent since the first call", r, w)
				}
				if want := "rank 2 (127.88.8.4) silent "; !strings.Contains(err.Error(), want) {
					t.Fatalf("rank %d: %v; want it to contain %q", r, err, want)
				}
			}
			t.Log(errs[0])
		})
	})
}

// TestSoftTwoJobs runs two jobs with different worker counts and shapes on
// one switch at the same time.
func TestSoftTwoJobs(t *testing.T) {
	forTransports(t, true, func(t *testing.T, tr transport) {
		c := newSoftCluster(t, tr, 6, 0, 0)
		type spec struct {
			n   int
			cfg Config
			l   int
		}
		specs := []spec{
			{2, softConfig(1, 1024, 4, 2), 9000},
			{5, softConfig(2, 256, 2, 3), 4000},
		}
		jobs := make([]*job, len(specs))
		ins := make([][][]float32, len(specs))
		for k, sp := range specs {
			jobs[k] = openJob(t, c.ctlAddr, sp.n, sp.cfg, c.device(2+20*k))
			ins[k] = gradients(uint64(k), sp.n, sp.l)
		}
		if st := c.sw.Stats(); st.Jobs != 2 {
			t.Fatalf("the switch holds %d jobs, want 2", st.Jobs)
		}
		for range 3 {
			outs := make([][][]float32, len(specs))
			errs := make([][]error, len(specs))
			var wg sync.WaitGroup
			for k := range specs {
				outs[k] = clone2(ins[k])
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[k] = jobs[k].allReduce(context.Background(), outs[k])
				}()
			}
			wg.Wait()
			for k, sp := range specs {
				noErrors(t, errs[k])
				checkSums(t, ins[k], outs[k], sp.cfg.PacketSize*sp.cfg.PacketsPerMessage/4)
			}
		}
	})
}

// diagnose logs the packets of got that differ from want and where in want
// their content is found.
func diagnose(t testing.TB, got, want []float32, vals int) {
	for lo := 0; lo < len(got); lo += vals {
		hi := min(lo+vals, len(got))
		same := true
		for i := lo; i < hi; i++ {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				same = false
				break
			}
		}
		if same {
			continue
		}
		found := -1
		for lo2 := 0; lo2+hi-lo <= len(want); lo2 += vals {
			eq := true
			for i := range hi - lo {
				if math.Float32bits(got[lo+i]) != math.Float32bits(want[lo2+i]) {
					eq = false
					break
				}
			}
			if eq {
				found = lo2 / vals
				break
			}
		}
		t.Logf("packet %d differs: got[0]=%g want[0]=%g; got equals want's packet %d", lo/vals, got[lo], want[lo], found)
	}
}
