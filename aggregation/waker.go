package aggregation

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errWoken is what a waker's Err says after it fired: not a failure, the
// engine just has a timer to look at or an event to check.
var errWoken = errors.New("aggregation: engine woken")

// waker is the context the engine passes to verbs.CQ.Wait. Its Done channel
// closes when the engine's next deadline passes (arm), or when something
// outside the engine needs it (stop: the caller's context is done, Close,
// the job was aborted). The engine re-arms it after every wake-up, so the
// channel and the timer are reused and a wait allocates nothing unless the
// timer actually fired. Spurious wake-ups are harmless: the engine re-checks
// everything after each one.
type waker struct {
	mu      sync.Mutex
	ch      chan struct{}
	fired   bool
	stopped bool // sticky until reset: arm must not reopen the channel
	timer   *time.Timer
}

var _ context.Context = (*waker)(nil)

func newWaker() *waker {
	w := &waker{ch: make(chan struct{})}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	return w
}

func (w *waker) fire() {
	w.mu.Lock()
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
	w.mu.Unlock()
}

// stop wakes the engine and keeps it awake until reset.
func (w *waker) stop() {
	w.mu.Lock()
	w.stopped = true
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
	w.mu.Unlock()
}

// reset starts a new AllReduce call: external events of the previous one
// are forgotten (the caller re-checks its own conditions after reset).
func (w *waker) reset() {
	w.mu.Lock()
	w.stopped = false
	if w.fired {
		w.ch = make(chan struct{})
		w.fired = false
	}
	w.mu.Unlock()
}

// arm makes Done close after d, unless stop was called.
func (w *waker) arm(d time.Duration) {
	w.mu.Lock()
	if w.fired && !w.stopped {
		w.ch = make(chan struct{})
		w.fired = false
	}
	w.mu.Unlock()
	w.timer.Reset(max(d, 0))
}

func (w *waker) halt() { w.timer.Stop() }

func (w *waker) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *waker) Value(any) any               { return nil }

func (w *waker) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *waker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return errWoken
	}
	return nil
}
