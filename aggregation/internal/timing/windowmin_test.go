package timing

import (
	"testing"
	"time"
)

// TestWindowMin: the minimum of this window and the last; a window
// without samples keeps the last one's; an old minimum ages out after two
// windows.
func TestWindowMin(t *testing.T) {
	var w WindowMin
	if w.Get() != 0 {
		t.Fatal("a minimum before any sample")
	}
	w.Sample(3 * time.Millisecond)
	w.Sample(time.Millisecond) // an idle moment
	w.Sample(2 * time.Millisecond)
	if w.Get() != time.Millisecond {
		t.Fatalf("%v, want 1ms", w.Get())
	}
	w.Next()
	w.Next() // no sample in this window: the last one's stays
	if w.Get() != time.Millisecond {
		t.Fatalf("after an empty window: %v, want 1ms", w.Get())
	}
	w.Sample(5 * time.Millisecond) // a queue builds
	if w.Get() != time.Millisecond {
		t.Fatalf("one window into the queue: %v, want the last window's 1ms", w.Get())
	}
	w.Next()
	w.Sample(6 * time.Millisecond)
	w.Next()
	if w.Get() != 6*time.Millisecond {
		t.Fatalf("two windows into the queue: %v, want 6ms", w.Get())
	}
}
