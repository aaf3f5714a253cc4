package soft

import (
	"context"
	"fmt"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// CQ is a completion queue (verbs.CQRing): a bounded ring filled by the NIC
// and drained by Poll or Wait. A full CQ drops completions and counts
// CQOverrun (a hardware CQ overrun is a fatal asynchronous error; here Poll
// reports it). The receive goroutine adds a batch of completions and wakes
// a waiter once per batch (see rxWakes).
type CQ struct {
	verbs.CQRing
	dev *Device
}

var _ verbs.CQ = (*CQ)(nil)

func newCQ(d *Device, entries int) *CQ {
	c := &CQ{dev: d}
	c.Init(entries)
	return c
}

// push adds a completion and wakes a waiter; false if the CQ is full.
func (c *CQ) push(wc *verbs.Completion) bool {
	if !c.add(wc) {
		return false
	}
	c.Wake()
	return true
}

// add adds a completion without waking a waiter; false if the CQ is full.
func (c *CQ) add(wc *verbs.Completion) bool {
	if !c.Add(wc) {
		c.dev.cnt.cqOverrun.Add(1)
		return false
	}
	return true
}

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
		case <-c.Notifications():
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.dev.done:
			return 0, fmt.Errorf("soft: wait on CQ: device %s: %w", c.dev.name, verbs.ErrClosed)
		}
	}
}
