package timing

import (
	"testing"
	"time"
)

// TestStandingRTT: the standing round trip follows a queue that builds up
// within two spans, and ignores a single outlier.
func TestStandingRTT(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(0, 0)
	var s StandingRTT
	if s.Get() != 0 {
		t.Fatal("a sample before any")
	}
	// Unloaded: 1 ms round trips, one outlier (a peer's resend).
	for i, r := range []time.Duration{ms, ms, 30 * ms, ms} {
		s.Sample(t0.Add(time.Duration(i)*ms/2), r, 2*ms)
	}
	if s.Get() != ms {
		t.Fatalf("standing %v with an outlier, want 1ms", s.Get())
	}
	// A queue builds: every round trip is now 6 ms. Within two spans the
	// standing round trip is 6 ms, where an all-time minimum stays 1 ms.
	now := t0.Add(2 * ms)
	for range 10 {
		now = now.Add(ms)
		s.Sample(now, 6*ms, 6*ms)
	}
	if s.Get() != 6*ms {
		t.Fatalf("standing %v under a 5 ms queue, want 6ms", s.Get())
	}
}
