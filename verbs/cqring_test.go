package verbs

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

func newRing(entries int) *CQRing {
	c := new(CQRing)
	c.Init(entries)
	return c
}

func event(c *CQRing) bool {
	select {
	case <-c.Notifications():
		return true
	default:
		return false
	}
}

// TestCQRingNotification: an event follows a completion only when the CQ
// was armed, once per arming (ibv_req_notify_cq's contract).
func TestCQRingNotification(t *testing.T) {
	c := newRing(4)
	wc := Completion{WRID: 1}
	c.Push(&wc)
	if event(c) {
		t.Fatal("an unarmed CQ sent an event")
	}
	if err := c.RequestNotify(); err != nil {
		t.Fatal(err)
	}
	c.Push(&wc)
	c.Push(&wc)
	if !event(c) {
		t.Fatal("an armed CQ sent no event for a completion")
	}
	c.Push(&wc)
	if event(c) {
		t.Fatal("one arming sent two events")
	}
	c.Close()
	if !event(c) {
		t.Fatal("Close sent no event to wake a waiter")
	}
	if err := c.RequestNotify(); !errors.Is(err, ErrClosed) {
		t.Fatalf("arming a closed CQ: %v, want ErrClosed", err)
	}
	if _, err := c.Poll(make([]Completion, 4)); !errors.Is(err, ErrClosed) {
		t.Fatalf("polling a closed CQ: %v, want ErrClosed", err)
	}
}

// TestCQRingOrderAndOverrun: completions come out in the order they went
// in across the ring's wrap; one that finds the ring full is lost, counted,
// and reported once by the Poll that finds the ring empty.
func TestCQRingOrderAndOverrun(t *testing.T) {
	c := newRing(3)
	wcs := make([]Completion, 2)
	next, want := uint64(0), uint64(0)
	for range 5 {
		for range 2 {
			wc := Completion{WRID: next}
			if !c.Push(&wc) {
				t.Fatalf("push %d into a ring with room failed", next)
			}
			next++
		}
		n, err := c.Poll(wcs)
		if n != 2 || err != nil {
			t.Fatalf("Poll = %d, %v; want 2, nil", n, err)
		}
		for _, wc := range wcs[:n] {
			if wc.WRID != want {
				t.Fatalf("completion %d came out as %d", want, wc.WRID)
			}
			want++
		}
	}
	for i := range 4 {
		wc := Completion{WRID: uint64(i)}
		if ok := c.Push(&wc); ok != (i < 3) {
			t.Fatalf("push %d into a ring of 3: %v", i, ok)
		}
	}
	if c.Overruns() != 1 {
		t.Fatalf("Overruns = %d, want 1", c.Overruns())
	}
	all := make([]Completion, 8)
	if n, err := c.Poll(all); n != 3 || err != nil {
		t.Fatalf("Poll of a full ring = %d, %v; want 3, nil", n, err)
	}
	if _, err := c.Poll(all); !errors.Is(err, ErrCQOverrun) {
		t.Fatalf("Poll after an overrun: %v, want ErrCQOverrun", err)
	}
	if n, err := c.Poll(all); n != 0 || err != nil {
		t.Fatalf("second Poll after an overrun = %d, %v; want 0, nil", n, err)
	}
}

// TestAwait: Await returns completions already in the CQ, blocks until the
// next one when the CQ is empty, returns 0, nil when woken, and allocates
// nothing. The blocking half runs in a synctest bubble, where
// synctest.Wait says that Await has blocked.
func TestAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRing(4)
		cq := ringCQ{c}
		wcs := make([]Completion, 4)
		wake := make(chan struct{}, 1)
		wc := Completion{WRID: 7}
		c.Push(&wc)
		if n, err := Await(cq, wcs, wake); n != 1 || err != nil || wcs[0].WRID != 7 {
			t.Fatalf("Await with a completion waiting = %d, %v", n, err)
		}
		go func() {
			synctest.Wait() // Await has armed the empty CQ and blocks
			wc := Completion{WRID: 8}
			c.Push(&wc)
		}()
		if n, err := Await(cq, wcs, wake); n != 1 || err != nil || wcs[0].WRID != 8 {
			t.Fatalf("Await for a later completion = %d, %v", n, err)
		}
		wake <- struct{}{}
		if n, err := Await(cq, wcs, wake); n != 0 || err != nil {
			t.Fatalf("woken Await = %d, %v; want 0, nil", n, err)
		}
	})
	c := newRing(4)
	cq, wcs, wake := ringCQ{c}, make([]Completion, 4), make(chan struct{}, 1)
	wc := Completion{WRID: 9}
	if n := testing.AllocsPerRun(100, func() {
		c.Push(&wc)
		_, _ = Await(cq, wcs, wake)
	}); n != 0 {
		t.Fatalf("Await allocates %v times per call", n)
	}
}

// ringCQ is a CQ of a bare CQRing, as a backend builds one.
type ringCQ struct{ *CQRing }

func (c ringCQ) Wait(ctx context.Context, wcs []Completion) (int, error) { return Wait(ctx, c, wcs) }
