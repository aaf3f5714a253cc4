package memlink

import (
	"sync"
	"time"
)

// ManualClock is a Network's time when a test moves it: links serialise,
// queue and delay against it, and a packet is readable once the clock has
// reached its due time. Safe for concurrent use.
type ManualClock struct {
	mu   sync.Mutex
	now  time.Duration
	nets []*Network
}

// Now is the time since the clock's start.
func (c *ManualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d and wakes the readers of its networks.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	nets := c.nets
	c.mu.Unlock()
	for _, n := range nets {
		n.advanced()
	}
}

func (c *ManualClock) attach(n *Network) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nets = append(c.nets, n)
}
