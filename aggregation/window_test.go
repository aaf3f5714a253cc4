package aggregation

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// TestWindowKeepsTheQueueShort: workers behind 200 Mbit/s links (in
// memory, a FIFO at the rate) keep two messages plus Config.QueueDelay's
// worth in flight once the delivery rate is measured, so the link's queue
// holds a few messages instead of one per QP; with the window off
// (QueueDelay < 0) it holds all of them. The workers' windows differ
// (rank 0's is the smallest there is) and parked messages leave in the
// call's order on every worker, so none waits for another's parked
// message: every call completes, with the right sums.
func TestWindowKeepsTheQueueShort(t *testing.T) {
	const n, q, ppm, msgs = 3, 8, 16, 96
	link := memlink.LinkConfig{Rate: 200e6, Overhead: 42, Queue: 4096, Delay: 20 * time.Microsecond}
	run := func(t *testing.T, net byte, delay time.Duration) (maxQueue, window int) {
		c := newSoftClusterWith(t, inMemory, net, 0, 0, clusterOpts{
			mem:  memlink.Config{RecvQueue: 1 << 14, MaxDatagram: 1100},
			link: func(netip.Addr) memlink.LinkConfig { return link },
		})
		j := openJobWith(t, c.ctlAddr, n, func(rank int) Config {
			cfg := softConfig(1, 1024, ppm, q)
			cfg.QueueDelay = delay
			if rank == 0 && delay > 0 {
				cfg.QueueDelay = time.Nanosecond // a window of three
			}
			return cfg
		}, c.device(2))
		defer j.close(t)
		in := gradients(7, n, msgs*ppm*1024/4)
		for call := range 3 {
			if call == 1 {
				// The first call measured the delivery rate; the queue
				// is judged from here on (SetLink resets the links'
				// counters; nothing is in flight between calls).
				for r := range n {
					a := addr4(127, 88, net, byte(2+r))
					if err := c.mem.SetLink(a, c.swAddr, link); err != nil {
						t.Fatal(err)
					}
					if err := c.mem.SetLink(c.swAddr, a, link); err != nil {
						t.Fatal(err)
					}
				}
			}
			out := clone2(in)
			noErrors(t, j.allReduce(context.Background(), out))
			checkSums(t, in, out, ppm*1024/4)
		}
		up, down := c.linkStats()
		if up.QueueDrops+down.QueueDrops+up.Overflow+down.Overflow != 0 {
			t.Fatalf("links dropped packets: up %+v, down %+v", up, down)
		}
		for _, w := range j.workers[1:] {
			window = max(window, w.sess.lanes[0].window())
		}
		t.Logf("queue delay %v: window %d messages (rank 0: %d), up-link queue at most %d packets", delay, window, j.workers[0].sess.lanes[0].window(), up.MaxQueue)
		return up.MaxQueue, window
	}
	withWindow, w := run(t, 90, 0)
	if w >= q || w < 3 {
		t.Fatalf("window %d messages at 200 Mbit/s, want 3 to %d (two, plus 1 ms at the rate)", w, q-1)
	}
	// In flight: the window, and one message more (the oldest goes
	// whatever the window); the call's round 0 is windowed too.
	if bound := (w + 1) * ppm; withWindow > bound {
		t.Fatalf("up-link queue reached %d packets with a window of %d messages, want at most %d", withWindow, w, bound)
	}
	without, _ := run(t, 91, -1)
	if without <= withWindow {
		t.Fatalf("without the window the queue reached %d packets, with it %d: the window keeps nothing out of the queue", without, withWindow)
	}
}

// TestWindowSize: two messages plus QueueDelay at the delivery rate, at
// most one per QP; every QP before a rate is measured, with the window
// off, where results come back fast (loopback), and under loss.
func TestWindowSize(t *testing.T) {
	const q, ppm = 8, 16
	s := timerSession(q, ppm)
	s.cfg.QueueDelay = DefaultQueueDelay
	if w := s.window(); w != q {
		t.Fatalf("before any rate sample: window %d, want %d", w, q)
	}
	rate := func(per time.Duration) {
		s.eng.est.delivery = timing.DeliveryRate{}
		for range 32 {
			at := s.eng.est.delivery.Delivered()
			s.eng.est.delivery.Deliver(q * ppm)
			s.eng.est.delivery.Sample(time.Unix(1, 0).Add(q*ppm*per), time.Unix(1, 0), at)
		}
	}
	rate(17600 * time.Nanosecond) // 500 Mbit/s: a message every 282 µs
	if w := s.window(); w != 4 {
		t.Fatalf("500 Mbit/s: window %d, want 2 + ceil(500 µs / 282 µs) = 4", w)
	}
	rate(44 * time.Microsecond) // 200 Mbit/s: 704 µs
	if w := s.window(); w != 3 {
		t.Fatalf("200 Mbit/s: window %d, want 3", w)
	}
	s.adapt.lastHeard = true
	if w := s.window(); w != q {
		t.Fatalf("200 Mbit/s after a call with loss: window %d, want every QP (%d)", w, q)
	}
	s.adapt.lastHeard = false
	s.cfg.QueueDelay = -1
	if w := s.window(); w != q {
		t.Fatalf("window off: %d, want %d", w, q)
	}
	s.cfg.QueueDelay = DefaultQueueDelay
	rate(3 * time.Microsecond) // loopback
	if w := s.window(); w != q {
		t.Fatalf("loopback: window %d, want every QP (%d)", w, q)
	}
}
