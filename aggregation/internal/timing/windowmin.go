package timing

import "time"

// WindowMin is the smallest sample of the current window and of the one
// before it (windows are whatever the caller makes them: a call): it
// follows a change within a window or two instead of keeping one idle
// moment's minimum forever. The zero value has no sample; owned by one
// goroutine.
type WindowMin struct {
	cur, prev time.Duration
}

// Sample folds d into the current window.
func (w *WindowMin) Sample(d time.Duration) {
	if w.cur == 0 || d < w.cur {
		w.cur = d
	}
}

// Get is the smallest sample of the two windows; 0 before any.
func (w *WindowMin) Get() time.Duration {
	if w.prev > 0 && (w.cur == 0 || w.prev < w.cur) {
		return w.prev
	}
	return w.cur
}

// Next starts the next window; a window without a sample does not
// replace the previous one.
func (w *WindowMin) Next() {
	if w.cur > 0 {
		w.prev, w.cur = w.cur, 0
	}
}
