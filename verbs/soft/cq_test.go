package soft

import (
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

func event(c *CQ) bool {
	select {
	case <-c.Notifications():
		return true
	default:
		return false
	}
}

// TestCQNotification: an event follows a completion only when the CQ was
// armed, once per arming (ibv_req_notify_cq's contract).
func TestCQNotification(t *testing.T) {
	c := newCQ(nil, 4)
	wc := verbs.Completion{WRID: 1}
	c.push(&wc)
	if event(c) {
		t.Fatal("an unarmed CQ sent an event")
	}
	if err := c.RequestNotify(); err != nil {
		t.Fatal(err)
	}
	c.push(&wc)
	c.push(&wc)
	if !event(c) {
		t.Fatal("an armed CQ sent no event for a completion")
	}
	c.push(&wc)
	if event(c) {
		t.Fatal("one arming sent two events")
	}
	c.Close()
	if err := c.RequestNotify(); err == nil {
		t.Fatal("a closed CQ was armed")
	}
}

// TestAwait: verbs.Await returns completions already in the CQ, blocks
// until the next one when the CQ is empty, and returns 0, nil when woken.
func TestAwait(t *testing.T) {
	c := newCQ(nil, 4)
	wcs := make([]verbs.Completion, 4)
	wake := make(chan struct{}, 1)
	wc := verbs.Completion{WRID: 7}
	c.push(&wc)
	if n, err := verbs.Await(c, wcs, wake); n != 1 || err != nil || wcs[0].WRID != 7 {
		t.Fatalf("Await with a completion waiting = %d, %v", n, err)
	}
	go func() {
		wc := verbs.Completion{WRID: 8}
		for !c.armed.Load() { // Await arms before it blocks
			time.Sleep(time.Millisecond)
		}
		c.push(&wc)
	}()
	if n, err := verbs.Await(c, wcs, wake); n != 1 || err != nil || wcs[0].WRID != 8 {
		t.Fatalf("Await for a later completion = %d, %v", n, err)
	}
	wake <- struct{}{}
	if n, err := verbs.Await(c, wcs, wake); n != 0 || err != nil {
		t.Fatalf("woken Await = %d, %v; want 0, nil", n, err)
	}
	if n := testing.AllocsPerRun(100, func() {
		c.push(&wc)
		_, _ = verbs.Await(c, wcs, wake)
	}); n != 0 {
		t.Fatalf("Await allocates %v times per call", n)
	}
}
