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

// TestWindowAIMD: additive increase of one message per window of results,
// one halving per loss episode, never below one, undone when the loss was
// spurious.
func TestWindowAIMD(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := NewWindow(8)
	if w.Size() != 8 {
		t.Fatalf("new window %d, want its ceiling 8", w.Size())
	}
	w.Result()
	if w.Size() != 8 {
		t.Fatalf("window %d above its ceiling", w.Size())
	}
	// A burst of losses of messages sent before the first was detected
	// halves the window once.
	if !w.Loss(at(1), at(10)) || w.Size() != 4 {
		t.Fatalf("after a loss: %d, want 4", w.Size())
	}
	for _, sent := range []int{2, 5, 9} {
		if w.Loss(at(sent), at(11)) {
			t.Fatalf("a loss of a message sent at %d ms, before the episode at 10 ms, shrank the window again", sent)
		}
	}
	if w.Size() != 4 {
		t.Fatalf("window %d after one episode, want 4", w.Size())
	}
	// About a window of results opens it by one: 4 + 1/4 + 1/4.25 + …
	for range 5 {
		w.Result()
	}
	if w.Size() != 5 {
		t.Fatalf("after a window of results: %d, want 5", w.Size())
	}
	// New episodes (messages sent after the last decrease) halve it down
	// to one message, not below.
	for i := range 4 {
		w.Loss(at(12+10*i), at(20+10*i))
	}
	if w.Size() != 1 {
		t.Fatalf("after four more episodes: %d, want the floor 1", w.Size())
	}

	// A spurious loss of a message sent before the decrease undoes it,
	// once; one sent after the decrease does not.
	w = NewWindow(8)
	w.Loss(at(1), at(10))
	w.Spurious(at(12))
	if w.Size() != 4 {
		t.Fatalf("undone by a message sent after the decrease: %d", w.Size())
	}
	w.Spurious(at(5))
	if w.Size() != 8 {
		t.Fatalf("after a spurious loss: %d, want 8 again", w.Size())
	}
	w.Loss(at(11), at(20))
	w.Spurious(at(5))
	w.Spurious(at(15))
	if w.Size() != 8 {
		t.Fatalf("second episode undone: %d, want 8", w.Size())
	}
	w.Loss(at(21), at(30))
	w.Spurious(at(25))
	w.Spurious(at(25))
	if w.Size() != 8 {
		t.Fatalf("%d: want 8", w.Size())
	}
}
