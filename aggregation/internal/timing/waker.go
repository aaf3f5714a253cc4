package timing

import "time"

// Waker is an engine's resettable wake-up event: the engine blocks on C
// together with its completion queue's notifications (verbs.Await), and
// the event is set when the engine's next deadline passes (Arm) or when
// something outside the engine needs it (Fire: a new call, a cancelled
// context, Close, a lost controller).
//
// The event holds one token: a Fire while the engine is busy is not lost,
// it makes the next wait return at once. The protocol that makes this
// enough: whoever fires first makes its reason visible (a flag, a closed
// channel, a cancelled context), then fires; the engine, woken, checks
// every reason. Reset clears the event before such a check, never after.
// A wake-up whose reason was already handled (a timer that fired while
// the engine was awake) is spurious and harmless: the engine re-checks
// and waits again.
//
// All methods are safe for concurrent use; Arm, Reset and a receive from C
// allocate nothing.
type Waker struct {
	c     chan struct{}
	timer *time.Timer
}

// NewWaker returns a waker whose event is clear and whose timer is not
// armed.
func NewWaker() *Waker {
	w := &Waker{c: make(chan struct{}, 1)}
	w.timer = time.AfterFunc(time.Hour, w.Fire)
	w.timer.Stop()
	return w
}

// C is the event: a receive from it consumes the token.
func (w *Waker) C() <-chan struct{} { return w.c }

// Fire sets the event (idempotent while it is set).
func (w *Waker) Fire() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Reset clears the event; the caller then checks its reasons.
func (w *Waker) Reset() {
	select {
	case <-w.c:
	default:
	}
}

// Arm sets the event after d (at once if d ≤ 0), replacing the deadline of
// an earlier Arm. It never clears the event: a Fire since the engine's
// last check must still wake it.
func (w *Waker) Arm(d time.Duration) { w.timer.Reset(max(d, 0)) }

// Halt stops the timer; the waker stays usable.
func (w *Waker) Halt() { w.timer.Stop() }
