package verbs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrCQOverrun: completions were lost because a completion queue was full.
// On an RNIC an overrun is a fatal asynchronous error that puts the CQ's
// QPs in error; a software CQ reports it from the Poll that finds it empty.
var ErrCQOverrun = errors.New("completion queue overrun: completions were lost")

// CQRing is the completion queue of a device implemented in Go (verbs/soft,
// verbs/verbstest, the instant switch of aggregation/instant): a bounded
// ring that the device fills and Poll drains, with libibverbs' notification
// — an armed CQ (RequestNotify) sends one event on its channel for the next
// completion, and an unarmed one costs the device no channel operation.
// A backend's CQ type embeds it and adds Wait (verbs.Wait, or its own when
// a closed device must end the wait). The zero value is unusable: Init it.
// Safe for concurrent use.
type CQRing struct {
	notify chan struct{} // the completion channel: one event at most
	armed  atomic.Bool
	closed atomic.Bool

	mu       sync.Mutex
	ring     []Completion
	head, n  int
	over     bool // lost completions not yet reported by Poll
	overruns uint64

	// CQs of different lanes are filled and drained from different cores:
	// two allocated one after another share no cache line.
	_ [64]byte
}

// Init gives the ring room for entries completions.
func (c *CQRing) Init(entries int) {
	c.ring = make([]Completion, entries)
	c.notify = make(chan struct{}, 1)
}

// Push adds a completion and sends the event if the CQ is armed; false
// if the CQ was full (the completion is lost and counted).
func (c *CQRing) Push(wc *Completion) bool {
	if !c.Add(wc) {
		return false
	}
	c.Wake()
	return true
}

// Add adds a completion without sending the event, for a device that
// wakes once per batch (Wake); false if the CQ was full.
func (c *CQRing) Add(wc *Completion) bool {
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.over = true
		c.overruns++
		c.mu.Unlock()
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
	return true
}

// Wake sends the completion event if the CQ is armed, and disarms it.
func (c *CQRing) Wake() {
	// A load first: the CQ is rarely armed while completions flow, and
	// the compare-and-swap is a locked instruction.
	if !c.armed.Load() || !c.armed.CompareAndSwap(true, false) {
		return
	}
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Overruns counts the completions lost because the CQ was full.
func (c *CQRing) Overruns() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overruns
}

// Poll moves up to len(wcs) completions into wcs. An empty CQ that lost
// completions since the last Poll returns ErrCQOverrun once.
func (c *CQRing) Poll(wcs []Completion) (int, error) {
	if c.closed.Load() {
		return 0, fmt.Errorf("verbs: poll CQ: %w", ErrClosed)
	}
	c.mu.Lock()
	k := min(len(wcs), c.n)
	first := copy(wcs[:k], c.ring[c.head:])
	copy(wcs[first:k], c.ring)
	c.head = (c.head + k) % len(c.ring)
	c.n -= k
	over := c.over && k == 0
	if over {
		c.over = false
	}
	c.mu.Unlock()
	if over {
		return 0, fmt.Errorf("verbs: poll CQ: %w; size the CQ for every outstanding work request", ErrCQOverrun)
	}
	return k, nil
}

// RequestNotify arms the CQ: the next completion sends an event on
// Notifications.
func (c *CQRing) RequestNotify() error {
	if c.closed.Load() {
		return fmt.Errorf("verbs: arm CQ: %w", ErrClosed)
	}
	c.armed.Store(true)
	return nil
}

// Notifications is the CQ's completion channel; Close sends an event too.
func (c *CQRing) Notifications() <-chan struct{} { return c.notify }

// Close closes the CQ and wakes a waiter. Idempotent.
func (c *CQRing) Close() error {
	c.closed.Store(true)
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return nil
}
