package soft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// CQ is a completion queue: a bounded ring filled by the NIC and drained by
// Poll or Wait. A full CQ drops completions and counts CQOverrun (a hardware
// CQ overrun is a fatal asynchronous error; here it is reported by Poll).
// Notification is libibverbs': an armed CQ (RequestNotify) sends one event
// on its channel for the next completion; an unarmed CQ costs the NIC no
// channel operation per completion.
type CQ struct {
	dev    *Device
	mu     sync.Mutex
	ring   []verbs.Completion
	head   int
	n      int
	notify chan struct{} // the completion channel: one event at most
	armed  atomic.Bool
	over   bool
	closed atomic.Bool
}

var _ verbs.CQ = (*CQ)(nil)

func newCQ(d *Device, entries int) *CQ {
	return &CQ{dev: d, ring: make([]verbs.Completion, entries), notify: make(chan struct{}, 1)}
}

// push adds a completion and wakes a waiter; false if the CQ is full.
func (c *CQ) push(wc *verbs.Completion) bool {
	if !c.add(wc) {
		return false
	}
	c.wake()
	return true
}

// wake sends the completion event if the CQ is armed.
func (c *CQ) wake() {
	if !c.armed.Load() || !c.armed.CompareAndSwap(true, false) { // Load: no locked instruction per completion while unarmed
		return
	}
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// add adds a completion without waking a waiter (the receive goroutine
// wakes once per batch: see rxWakes); false if the CQ is full.
func (c *CQ) add(wc *verbs.Completion) bool {
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.over = true
		c.mu.Unlock()
		c.dev.cnt.cqOverrun.Add(1)
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
	return true
}

// Poll moves up to len(wcs) completions into wcs.
func (c *CQ) Poll(wcs []verbs.Completion) (int, error) {
	if c.closed.Load() {
		return 0, fmt.Errorf("soft: poll CQ: %w", verbs.ErrClosed)
	}
	c.mu.Lock()
	k := min(len(wcs), c.n)
	for i := 0; i < k; i++ {
		wcs[i] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
	}
	c.n -= k
	over := c.over
	c.over = false
	c.mu.Unlock()
	if over && k == 0 {
		return 0, fmt.Errorf("soft: CQ overrun: completions were lost; size the CQ for every outstanding work request")
	}
	return k, nil
}

// RequestNotify arms the CQ: the next completion sends an event on
// Notifications.
func (c *CQ) RequestNotify() error {
	if c.closed.Load() {
		return fmt.Errorf("soft: arm CQ: %w", verbs.ErrClosed)
	}
	c.armed.Store(true)
	return nil
}

// Notifications is the CQ's completion channel.
func (c *CQ) Notifications() <-chan struct{} { return c.notify }

// Wait blocks until a completion is available, ctx is done or the device
// is closed.
func (c *CQ) Wait(ctx context.Context, wcs []verbs.Completion) (int, error) {
	for {
		n, err := c.Poll(wcs)
		if n > 0 || err != nil {
			return n, err
		}
		if err := c.RequestNotify(); err != nil {
			return 0, err
		}
		if n, err := c.Poll(wcs); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.dev.done:
			return 0, fmt.Errorf("soft: wait on CQ: device %s: %w", c.dev.name, verbs.ErrClosed)
		}
	}
}

// Close is idempotent.
func (c *CQ) Close() error {
	c.closed.Store(true)
	return nil
}
