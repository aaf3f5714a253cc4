package timing

import (
	"errors"
	"testing"
	"time"
)

func closed(w *Waker) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// waitDone bounds a hang; the timers under test are 0 or an hour.
func waitDone(t *testing.T, w *Waker) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("waker did not fire")
	}
}

func TestWaker(t *testing.T) {
	w := NewWaker()
	defer w.Halt()
	if closed(w) || w.Err() != nil {
		t.Fatal("new waker already fired")
	}

	w.Arm(0)
	waitDone(t, w)
	if !errors.Is(w.Err(), ErrWoken) {
		t.Fatalf("Err after the timer fired = %v, want ErrWoken", w.Err())
	}

	// A timer wake-up is forgotten by the next Arm.
	w.Arm(time.Hour)
	if closed(w) || w.Err() != nil {
		t.Fatal("Arm did not reopen a waker the timer had fired")
	}

	// Stop is sticky: Arm must not reopen, or the event would be missed.
	w.Stop()
	w.Arm(time.Hour)
	if !closed(w) || !errors.Is(w.Err(), ErrWoken) {
		t.Fatal("Arm reopened a stopped waker")
	}

	// Reset forgets Stop.
	w.Reset()
	w.Arm(time.Hour)
	if closed(w) {
		t.Fatal("waker still closed after Reset and Arm")
	}

	// Fire (a one-off wake-up from outside) closes Done until the next Arm.
	w.Fire()
	if !closed(w) {
		t.Fatal("Fire did not close Done")
	}
	w.Fire() // idempotent while fired
	w.Arm(time.Hour)
	if closed(w) {
		t.Fatal("Arm did not reopen after Fire")
	}

	// Halt stops the timer: a short deadline halted never fires.
	w.Reset()
	w.Arm(time.Hour)
	w.Halt()
	if closed(w) {
		t.Fatal("halted waker fired")
	}
	if d, ok := w.Deadline(); ok || !d.IsZero() || w.Value("k") != nil {
		t.Fatal("waker reports a deadline or a value")
	}
}

// TestWakerAllocs: re-arming a waker that did not fire allocates nothing
// (the engine does it on every wait).
func TestWakerAllocs(t *testing.T) {
	w := NewWaker()
	defer w.Halt()
	if n := testing.AllocsPerRun(100, func() {
		w.Reset()
		w.Arm(time.Hour)
		_ = w.Done()
		_ = w.Err()
	}); n != 0 {
		t.Fatalf("%v allocations per re-arm, want 0", n)
	}
}
