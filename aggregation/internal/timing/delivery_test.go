package timing

import (
	"testing"
	"time"
)

// TestDeliveryRate: the rate follows the fastest stretch of packet results
// (a link's rate), is not slowed by a stall (a wait for a resend), ignores
// results read in one batch, and outlives one epoch.
func TestDeliveryRate(t *testing.T) {
	var d DeliveryRate
	t0 := time.Unix(0, 0)
	if d.Drain(128) != 0 {
		t.Fatal("a drain time before any sample")
	}
	// A 200 Mbit/s link: a 1 KiB packet every 42.6 µs, results read in
	// batches of 4, and one stall of 50 ms.
	const per = 42600 * time.Nanosecond
	now := t0
	for i := range 1000 {
		now = now.Add(4 * per)
		if i == 100 {
			now = now.Add(50 * time.Millisecond)
		}
		d.Sample(now, 4)
	}
	if got := d.Drain(128); got != 128*per {
		t.Fatalf("drain of 128 packets %v, want %v", got, 128*per)
	}
	// Loopback: everything read in one batch has one time.
	var b DeliveryRate
	for range 100 {
		b.Sample(t0, 16)
	}
	if b.Drain(128) != 0 {
		t.Fatalf("all in one batch: drain %v, want 0 (no rate)", b.Drain(128))
	}
	// The next epoch keeps the last one's rate until it has its own, and
	// its first results do not span back into the last epoch.
	d.NewEpoch()
	d.Sample(now.Add(time.Second), 16)
	if got := d.Drain(128); got != 128*per {
		t.Fatalf("after a new epoch: %v, want the last epoch's %v", got, 128*per)
	}
	now = now.Add(time.Second)
	for range 1000 {
		now = now.Add(2 * per) // a shared link: half the rate
		d.Sample(now, 1)
	}
	if got := d.Drain(128); got != 128*per {
		t.Fatalf("a slower epoch after a fast one: %v, want the fast one's %v until the next epoch", got, 128*per)
	}
	d.NewEpoch()
	if got := d.Drain(128); got != 256*per {
		t.Fatalf("two epochs later: %v, want %v", got, 256*per)
	}
}
