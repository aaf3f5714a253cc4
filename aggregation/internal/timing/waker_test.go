package timing

import (
	"testing"
	"time"
)

func set(w *Waker) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

// waitSet bounds a hang; the timers under test are 0 or an hour.
func waitSet(t *testing.T, w *Waker) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("waker did not fire")
	}
}

func TestWaker(t *testing.T) {
	w := NewWaker()
	defer w.Halt()
	if set(w) {
		t.Fatal("new waker is set")
	}

	w.Arm(0)
	waitSet(t, w)
	if set(w) {
		t.Fatal("the timer's event was consumed, yet the waker is still set")
	}

	// A Fire while the engine is busy wakes its next wait, whatever Arm
	// says: the event is not lost.
	w.Fire()
	w.Fire() // idempotent while set
	w.Arm(time.Hour)
	if !set(w) {
		t.Fatal("Arm cleared a Fire")
	}
	if set(w) {
		t.Fatal("two Fires left two tokens")
	}

	// Reset clears the event.
	w.Fire()
	w.Reset()
	if set(w) {
		t.Fatal("Reset did not clear the event")
	}

	// Halt stops the timer: a deadline halted never fires.
	w.Arm(20 * time.Millisecond)
	w.Halt()
	select {
	case <-w.C():
		t.Fatal("halted waker fired")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestWakerAllocs: re-arming a waker and consuming its event allocate
// nothing (the engine does both on every wait).
func TestWakerAllocs(t *testing.T) {
	w := NewWaker()
	defer w.Halt()
	if n := testing.AllocsPerRun(100, func() {
		w.Reset()
		w.Arm(time.Hour)
		w.Fire()
		<-w.C()
	}); n != 0 {
		t.Fatalf("%v allocations per re-arm, want 0", n)
	}
}
