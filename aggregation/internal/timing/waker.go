package timing

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrWoken is what a Waker's Err says after it fired: not a failure, the
// engine just has a timer to look at or an event to check.
var ErrWoken = errors.New("timing: engine woken")

// Waker is the context an engine passes to verbs.CQ.Wait. Its Done channel
// closes when the engine's next deadline passes (Arm), or when something
// outside the engine needs it (Stop: a new call, the caller's context is
// done, Close). The engine re-arms it after every wake-up, so the channel
// and the timer are reused and a wait allocates nothing unless the waker
// actually fired. Spurious wake-ups are harmless: the engine re-checks
// everything after each one.
//
// The protocol: the engine calls Reset, then checks its external
// conditions, then Arm, then waits. A Stop at any point after Reset keeps
// Done closed until the next Reset, so an event that comes after the check
// and before the wait is never missed. All methods are safe for concurrent
// use.
type Waker struct {
	mu      sync.Mutex
	ch      chan struct{}
	fired   bool
	stopped bool // sticky until Reset: Arm must not reopen the channel
	timer   *time.Timer
}

var _ context.Context = (*Waker)(nil)

// NewWaker returns a waker that is neither armed nor fired.
func NewWaker() *Waker {
	w := &Waker{ch: make(chan struct{})}
	w.timer = time.AfterFunc(time.Hour, w.Fire)
	w.timer.Stop()
	return w
}

// Fire wakes the engine once, as the timer does: the next Arm forgets it.
func (w *Waker) Fire() {
	w.mu.Lock()
	w.fireLocked()
	w.mu.Unlock()
}

// Stop wakes the engine and keeps it awake until Reset.
func (w *Waker) Stop() {
	w.mu.Lock()
	w.stopped = true
	w.fireLocked()
	w.mu.Unlock()
}

// fireLocked closes the wake channel once; the caller holds w.mu.
func (w *Waker) fireLocked() {
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
}

// Reset forgets earlier wake-ups, Stop's included: the caller re-checks its
// own conditions after Reset.
func (w *Waker) Reset() {
	w.mu.Lock()
	w.stopped = false
	if w.fired {
		w.ch = make(chan struct{})
		w.fired = false
	}
	w.mu.Unlock()
}

// Arm makes Done close after d (at once if d ≤ 0), unless Stop was called
// since the last Reset, in which case Done stays closed.
func (w *Waker) Arm(d time.Duration) {
	w.mu.Lock()
	if w.fired && !w.stopped {
		w.ch = make(chan struct{})
		w.fired = false
	}
	w.mu.Unlock()
	w.timer.Reset(max(d, 0))
}

// Halt stops the timer; the waker stays usable.
func (w *Waker) Halt() { w.timer.Stop() }

// Deadline reports no deadline: the waker closes Done itself.
func (w *Waker) Deadline() (time.Time, bool) { return time.Time{}, false }

// Value carries nothing.
func (w *Waker) Value(any) any { return nil }

// Done closes when the waker fires or is stopped.
func (w *Waker) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// Err is ErrWoken once Done is closed, nil before.
func (w *Waker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return ErrWoken
	}
	return nil
}
