package timing

import (
	"testing"
	"time"
)

// window plays a window-limited sender on a link that carries a packet
// result every per: w packets in flight, each result answers a packet sent
// w results earlier, so every sample spans one round trip of w packets.
// burst, when > 0, lets every 16th result's round trip take 1/burst of
// that (a token bucket that let the window through at once).
func window(d *DeliveryRate, now time.Time, results, w int, per time.Duration, burst int) time.Time {
	type tx struct {
		at   time.Time
		mark int64
	}
	sent := make([]tx, 0, results+w)
	for range w {
		sent = append(sent, tx{now, d.Delivered()})
	}
	for i := range results {
		now = now.Add(per)
		d.Deliver(1)
		x := sent[i]
		if burst > 0 && i%16 == 15 {
			x.at = now.Add(-time.Duration(w) * per / time.Duration(burst))
		}
		d.Sample(now, x.at, x.mark)
		sent = append(sent, tx{now, d.Delivered()})
	}
	return now
}

// TestDeliveryRate: the rate is the packets delivered over a round trip,
// grouped: a window-limited sender on a 200 Mbit/s link gives the link's
// rate; a round trip that fell inside a burst does not pass for a faster
// link; fewer packets in flight than deliveryMinPackets give no sample; a
// call's rate outlives one epoch.
func TestDeliveryRate(t *testing.T) {
	const per = 42600 * time.Nanosecond // 1 KiB packets at 200 Mbit/s
	t0 := time.Unix(0, 0)
	var d DeliveryRate
	if d.Drain(128) != 0 {
		t.Fatal("a drain time before any sample")
	}
	now := window(&d, t0, 1000, 128, per, 0)
	if got := d.Drain(128); got != 128*per {
		t.Fatalf("drain of 128 packets %v, want %v", got, 128*per)
	}

	// Every 16th round trip inside a burst at 3x the rate: a single
	// sample would make the link 3x faster, a group of 16 makes it
	// 16/(15+1/3) = 1.04x.
	var b DeliveryRate
	window(&b, t0, 1000, 128, per, 3)
	if got, lo := b.Drain(128), 128*per*15/16; got < lo || got > 128*per {
		t.Fatalf("with bursts: drain %v, want between %v and %v", got, lo, 128*per)
	}

	// Results read in one batch after a stall: the round trips of the
	// messages answered span the stall, so they are slow, not fast.
	var s DeliveryRate
	window(&s, t0, 200, 128, per, 0)
	want := s.Drain(128)
	mark, at := s.Delivered(), t0.Add(200*per)
	late := at.Add(50 * time.Millisecond)
	for range 64 {
		s.Deliver(16)
		s.Sample(late, at, mark)
	}
	if got := s.Drain(128); got != want {
		t.Fatalf("after a batch read late: drain %v, want %v", got, want)
	}

	// Fewer than deliveryMinPackets in flight: no sample.
	var f DeliveryRate
	window(&f, t0, 1000, deliveryMinPackets-1, per, 0)
	if got := f.Drain(128); got != 0 {
		t.Fatalf("%d packets in flight: drain %v, want 0 (no sample)", deliveryMinPackets-1, got)
	}

	// The next epoch keeps the last one's rate until it has its own,
	// and a slower epoch takes over only two epochs later.
	d.NewEpoch()
	now = window(&d, now.Add(time.Second), 1000, 128, 2*per, 0) // a shared link: half the rate
	if got := d.Drain(128); got != 128*per {
		t.Fatalf("a slower epoch after a fast one: %v, want the fast one's %v until the next epoch", got, 128*per)
	}
	// Two epochs later the slower rate leads; the group that straddled
	// the epochs holds samples of both, so the drain is at most the slow
	// rate's and above the fast one's.
	d.NewEpoch()
	if got := d.Drain(128); got <= 128*per || got > 256*per {
		t.Fatalf("two epochs later: %v, want above %v and at most %v", got, 128*per, 256*per)
	}
	window(&d, now, 1000, 128, 2*per, 0)
	d.NewEpoch()
	if got := d.Drain(128); got != 256*per {
		t.Fatalf("three epochs later: %v, want %v", got, 256*per)
	}
}
