package aggregation

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// A lane is one driving goroutine's share of a session (Config.Threads):
// a block of neighbouring QPs (laneOf), the completion queue they
// complete on, and an engine of its own. Lanes run the worker protocol of
// docs/protocol.md side by side, as p4app-switchML's client runs one
// thread per group of QPs, and meet only where the job needs one worker:
//
//   - the tensor: every message owns its span (call.span), so lanes
//     quantize and dequantize disjoint memory;
//   - the choice of writes and the loss signal (writes.go), which must not
//     depend on how a worker splits its QPs;
//   - the session's counters, which are atomic;
//   - the end: the first lane to fail stops the others (driveLanes).
//
// Which lane drives which QP is this worker's own business: every worker
// sends message j on QP j mod QPs whatever its Threads, and the window's
// oldest-first rule (window.go, releaseParked) holds in each lane, so
// workers with different Threads never wait on each other.
//
// A lane embeds its session: the engine's methods read the session's
// configuration and counters through it, and its own qps, cq, eng and
// wake shadow nothing else.
type lane struct {
	*Session
	index int
	qps   []*qpState // the lane's QPs, by increasing index
	cq    verbs.CQ
	eng   engine
	wake  *timing.Waker
	// words is gotWords' block.
	words []uint64

	// stats are the lane's counts of the session's counters (Stats sums
	// them): counters every lane bumped per packet would bounce one cache
	// line between their cores. Nothing another lane writes is on their
	// lines.
	_     [cacheLine]byte
	stats counters
	_     [cacheLine]byte
}

// gotWords gives a QP of the lane n words for its packet-result bitmap
// (pktResults.got), from a block of the lane's own: bitmaps allocated one
// by one would sit side by side on the heap, a cache line written by every
// lane's results.
func (s *lane) gotWords(n int) []uint64 {
	if len(s.words) < n {
		s.words = make([]uint64, max(n, 64))
	}
	w := s.words[:n:n]
	s.words = s.words[n:]
	return w
}

// errLaneStopped ends a lane because another lane of the call failed; the
// call reports that lane's error.
var errLaneStopped = errors.New("aggregation: another lane of the call failed")

// driveLanes runs the call on every lane that has a message in it, lane 0
// on the calling goroutine. Each lane first reads the block exponents of
// its own messages (exponents); once every lane has, lane 0 checks them
// and begins the call (beginCall) and the lanes send. A bad element fails
// the call with nothing sent, as a badInput naming the tensor's first;
// otherwise driveLanes returns the first lane's error.
func (s *Session) driveLanes(ctx context.Context, c *call) error {
	lanes := s.lanes
	for len(lanes) > 1 && lanes[len(lanes)-1].qps[0].index >= c.msgs {
		// A lane whose first QP has no message has none at all.
		lanes = lanes[:len(lanes)-1]
	}
	if len(lanes) == 1 {
		if err := lanes[0].exponents(c); err != nil {
			return badInput{inputError(err)}
		}
		s.beginCall(c)
		return lanes[0].drive(ctx, c)
	}
	s.laneStop.Store(false)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		// The lanes meet once their exponents are read: ready counts
		// them, and lane 0 opens or shuts the gate. They wait without
		// parking, which could move a lane to another core (exponents).
		ready atomic.Int32
		gate  atomic.Int32
		bad   = make([]error, len(lanes))
	)
	const (
		gateOpen = 1
		gateShut = 2
	)
	run := func(l *lane) {
		bad[l.index] = l.exponents(c)
		ready.Add(1)
		if l.index == 0 {
			spinUntil(func() bool { return int(ready.Load()) == len(lanes) })
			if err := firstBadElement(bad); err != nil {
				mu.Lock()
				first = badInput{inputError(err)}
				mu.Unlock()
				gate.Store(gateShut)
				return
			}
			s.beginCall(c)
			gate.Store(gateOpen)
		} else if spinUntil(func() bool { return gate.Load() != 0 }); gate.Load() == gateShut {
			return
		}
		err := l.drive(ctx, c)
		if err == nil || errors.Is(err, errLaneStopped) {
			return
		}
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		s.laneStop.Store(true)
		s.fire()
	}
	for _, l := range lanes[1:] {
		wg.Go(func() { run(l) })
	}
	run(lanes[0])
	wg.Wait()
	return first
}

// spinUntil yields until done: a wait of the lanes for each other, as
// long as a lane's pass over its share of the tensor.
func spinUntil(done func() bool) {
	for !done() {
		runtime.Gosched()
	}
}

// fire wakes every lane's wait: Close, Abort, the controller or a
// cancelled context has something to say.
func (s *Session) fire() {
	for _, l := range s.lanes {
		l.wake.Fire()
	}
}

// laneOf is the lane that drives QP i: the QPs in blocks, lane l the
// l-th Threads-th of them. Message j goes on QP j mod QPs, so a lane's
// messages come in runs of QPs/Threads neighbours: each core works on
// long stretches of the tensor, not on every other message (alternating
// 16 KiB stretches between two cores cost more than one core alone, the
// cores' prefetchers reaching into each other's lines).
func (s *Session) laneOf(i int) int { return i * len(s.lanes) / s.cfg.QPs }

// threadsFor is how many lanes a session of cfg runs.
func threadsFor(cfg *Config) int { return max(1, min(cfg.Threads, cfg.QPs)) }
