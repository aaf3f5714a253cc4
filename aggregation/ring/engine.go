package ring

// The engine: one goroutine per rank, for the ring's lifetime, owns the
// rank's protocol state (ringEngine) and drives it; it keeps running
// between calls so that it acknowledges a neighbour's retransmissions.
// Each pass of its loop (engine):
//
//  1. takes a call AllReduce handed it (call.go) and starts it (start):
//     the call's geometry, and the items of it that arrived early;
//  2. runs the timers and fills the send window (progress: rto.go,
//     send.go), and fails the call after PeerTimeout without progress
//     (stalled);
//  3. polls the CQ, or waits for a completion, the next deadline or the
//     waker (a new call, a cancelled context, Close);
//  4. handles the completions (receive.go, ack.go).
//
// A call is done (finished) when every item has been received and every
// item sent has been acknowledged.

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// ringEngine is a rank's protocol state, owned by its engine goroutine:
// the call in progress and its geometry, the send window [sendBase,
// sendNext) and what has been acknowledged and received, the items in
// flight by send slot, the next call's early items, the timers and the
// work-request buffers.
type ringEngine struct {
	call    *ringCall
	inCall  bool
	epoch   uint8
	n, m, k int // elements, messages per segment, items per call

	sendNext, sendBase int
	acked              []bool
	recvDone           []bool
	recvCount          int
	flight             []ringFlight
	pending            []int // by receive slot: item+1 of the next call, 0 if none
	nextTimer          time.Time
	lastProgress       time.Time

	rtt   timing.RTT    // round trips of items sent once (Karn)
	rto   time.Duration // timeout of items sent from now on, doubled by expiries
	txSeq uint64        // transmissions so far (orders them)

	wcs     []verbs.Completion
	sendWRs []verbs.SendWR
	ackWRs  []verbs.SendWR
	recvWRs []verbs.RecvWR
	signal  int // sends since the last signaled one
}

// ringFlight is one item in flight, by send slot.
type ringFlight struct {
	k        int
	length   uint32
	sent     time.Time // last transmission
	seq      uint64    // transmission sequence number of the last transmission
	later    int       // items transmitted after it and acknowledged since
	resent   bool      // retransmitted at least once (no RTT sample: Karn)
	restarts int       // expired timer restarts behind an older item (timers)
	deadline time.Time
}

// engine is the rank's protocol loop; it owns rr.e.
func (rr *Rank) engine() {
	defer close(rr.engineDone)
	e := &rr.e
	finish := func(err error) {
		if err == nil {
			rr.cnt.allReduces.Add(1)
		}
		c := e.call
		e.call, e.inCall = nil, false
		c.result <- err
	}
	fail := func(err error) {
		rr.broken = err
		if e.call != nil {
			finish(err)
		}
	}
	for {
		rr.waker.Reset()
		if rr.closing.Load() {
			if e.call != nil {
				finish(ErrClosed)
			}
			return
		}
		now := time.Now()
		if e.call == nil {
			select {
			case c := <-rr.reqs:
				if err := rr.start(c, now); err != nil {
					fail(err)
					return
				}
			default:
			}
		}
		wake := now.Add(time.Hour)
		if e.call != nil {
			if err := e.call.ctx.Err(); err != nil {
				fail(fmt.Errorf("ring: rank %d: all-reduce interrupted, the ring cannot continue: %w", rr.rank, err))
				return
			}
			if err := rr.progress(now, &wake); err != nil {
				fail(err)
				return
			}
			if rr.finished() {
				finish(nil)
				continue
			}
		}
		k, err := rr.cq.Poll(e.wcs)
		if err == nil && k == 0 {
			rr.waker.Arm(wake.Sub(now))
			k, err = verbs.Await(rr.cq, e.wcs, rr.waker.C())
			if err == nil && k == 0 {
				continue // woken
			}
		}
		if err != nil {
			fail(fmt.Errorf("ring: rank %d: completion queue: %w", rr.rank, err))
			return
		}
		if err := rr.handle(e.wcs[:k], time.Now()); err != nil {
			fail(err)
			return
		}
		if e.call != nil && rr.finished() {
			finish(nil)
		}
	}
}

// finished: every item of the call received, every item sent acknowledged.
func (rr *Rank) finished() bool {
	e := &rr.e
	return e.recvCount == e.k && e.sendBase == e.k
}

// start sets up a call: geometry, bitmaps, and the items of this call that
// arrived before it started.
func (rr *Rank) start(c *ringCall, now time.Time) error {
	e := &rr.e
	e.call, e.inCall = c, true
	e.epoch++
	e.n = len(c.f) + len(c.i)
	e.m = max((ceilDiv(e.n, rr.size)+rr.vals-1)/rr.vals, 1)
	e.k = 2 * (rr.size - 1) * e.m
	e.acked = resetBools(e.acked, e.k)
	e.recvDone = resetBools(e.recvDone, e.k)
	e.recvCount, e.sendNext, e.sendBase = 0, 0, 0
	e.nextTimer = now.Add(time.Hour)
	e.lastProgress = now
	for k := range e.k {
		if lo, hi := rr.recvRange(k); lo == hi {
			e.recvDone[k] = true
			e.recvCount++
		}
	}
	for slot, p := range e.pending {
		if p == 0 {
			continue
		}
		e.pending[slot] = 0
		if err := rr.onData(p-1, rr.e.epoch, uint32(rr.msgBytes), now, true); err != nil {
			return err
		}
	}
	return rr.flushAcks()
}

// resetBools is b resized to n and cleared, reusing its array when it can.
func resetBools(b []bool, n int) []bool {
	if cap(b) < n {
		return make([]bool, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// progress runs the timers and fills the send window; wake is lowered to the
// next time the engine must look again.
func (rr *Rank) progress(now time.Time, wake *time.Time) error {
	e := &rr.e
	if !now.Before(e.nextTimer) {
		if err := rr.timers(now); err != nil {
			return err
		}
	}
	if now.Sub(e.lastProgress) >= rr.cfg.PeerTimeout {
		return rr.stalled(now)
	}
	if err := rr.fill(now); err != nil {
		return err
	}
	*wake = timing.Earlier(*wake, timing.Earlier(e.nextTimer, e.lastProgress.Add(rr.cfg.PeerTimeout)))
	return nil
}

// stalled is the ErrPeerTimeout of a rank without progress: what it
// waits for, from which neighbour, and how far the call got.
func (rr *Rank) stalled(now time.Time) error {
	e := &rr.e
	what := fmt.Sprintf("waiting for data from rank %d (%s)", rr.mod(rr.rank-1), rr.left.Addr())
	if e.sendBase < e.sendNext {
		what = fmt.Sprintf("waiting for data from rank %d (%s) and acknowledgements from rank %d (%s)",
			rr.mod(rr.rank-1), rr.left.Addr(), rr.mod(rr.rank+1), rr.right.Addr())
	}
	return fmt.Errorf("ring: rank %d: %w: nothing new for %v, %s; %d of %d messages received, %d of %d acknowledged (is every rank calling AllReduce with the same length? raise Config.PeerTimeout if the network is merely slow)",
		rr.rank, ErrPeerTimeout, now.Sub(e.lastProgress).Round(time.Millisecond), what, e.recvCount, e.k, e.sendBase, e.k)
}
