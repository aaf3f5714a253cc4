package testutil

import (
	"testing"
	"time"
)

// WaitLimit bounds how long WaitFor polls (scaled for the race detector by
// Scale): long enough for any state a test awaits on a loaded host, so
// that reaching it only turns a hang into a failure.
const WaitLimit = 10 * time.Second

// WaitFor polls cond until it holds, and fails t naming what was awaited
// if it does not within Scale(WaitLimit). It is the wait on a state that
// another goroutine or process reaches without telling anyone — a
// counter, a job's end, a metric — where the test has no channel to block
// on; cond runs on the caller's goroutine, so it may call t.Fatal.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	limit := Scale(WaitLimit)
	if !Poll(limit, cond) {
		t.Fatalf("%s: not within %v", what, limit)
	}
}

// Poll calls cond until it holds or d has passed, pausing between calls
// from 100 µs, doubling up to 20 ms (quick for what is nearly there,
// cheap for what takes seconds), and reports whether cond held. It is the
// one polling loop of the tests: WaitFor, WaitBlocked and the leak check
// use it, and so do the tests that bound a wait by their own limit.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := 100 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
	return true
}
