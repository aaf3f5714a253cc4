package testutil

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// LeakWait bounds how long Check waits for goroutines to end (scaled for
// the race detector by Scale): closing gRPC connections and sockets winds
// down asynchronously.
const LeakWait = 5 * time.Second

// Goroutines is a snapshot of the running goroutines, by id.
type Goroutines struct {
	ids map[string]bool
}

// SnapshotGoroutines records the goroutines running now.
func SnapshotGoroutines() *Goroutines {
	g := &Goroutines{ids: map[string]bool{}}
	for _, s := range stacks() {
		g.ids[s.id] = true
	}
	return g
}

// NoLeaks takes a snapshot and registers a cleanup that checks it. Call it
// first in a test: cleanups run last-in first-out, so the check runs after
// every later cleanup has closed what the test opened.
func NoLeaks(t testing.TB) {
	t.Helper()
	g := SnapshotGoroutines()
	t.Cleanup(func() { g.Check(t) })
}

// Check fails t if goroutines started since the snapshot are still running
// after waiting up to Scale(LeakWait) for them to end, and prints their
// stacks. Goroutines the testing package starts (subtests, parallel tests)
// and the calling goroutine are not counted.
func (g *Goroutines) Check(t testing.TB) {
	t.Helper()
	if leaked := g.wait(Scale(LeakWait)); len(leaked) > 0 {
		var b strings.Builder
		for _, s := range leaked {
			b.WriteString(s.text)
			b.WriteString("\n\n")
		}
		t.Errorf("%d goroutines started during the test are still running:\n%s", len(leaked), b.String())
	}
}

// wait returns the goroutines started since the snapshot that are still
// running after waiting up to d for them to end.
func (g *Goroutines) wait(d time.Duration) []goroutine {
	var leaked []goroutine
	Poll(d, func() bool {
		leaked = g.leaked()
		return len(leaked) == 0
	})
	return leaked
}

func (g *Goroutines) leaked() []goroutine {
	var out []goroutine
	all := stacks()
	for i, s := range all {
		if i == 0 || g.ids[s.id] || s.createdByTesting() {
			continue // the first stack is the caller's own
		}
		out = append(out, s)
	}
	return out
}

type goroutine struct {
	id   string
	text string
}

// createdByTesting: a subtest or parallel test's goroutine, or one of the
// testing package's own (its timeout alarm, the tRunner of a sibling).
func (s goroutine) createdByTesting() bool {
	return strings.Contains(s.text, "\ncreated by testing.") || strings.Contains(s.text, "testing.tRunner(")
}

// stacks returns every goroutine's stack, the caller's first.
func stacks() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		text := string(bytes.TrimSpace(block))
		// "goroutine 17 [chan receive]:"
		var id int
		if _, err := fmt.Sscanf(text, "goroutine %d ", &id); err != nil {
			continue
		}
		out = append(out, goroutine{id: fmt.Sprint(id), text: text})
	}
	return out
}

// WaitBlocked waits until n goroutines other than the caller are blocked
// at once (parked: in a select, a channel operation, a lock, a condition
// variable or network I/O, not running) with fn in their stacks, e.g.
// "soft.(*CQ).Wait": the hook a test uses instead of a sleep to know that
// the calls it started are under way before it closes or kills something.
// It fails t after Scale(WaitLimit).
func WaitBlocked(t testing.TB, n int, fn string) {
	t.Helper()
	found := 0
	if !Poll(Scale(WaitLimit), func() bool {
		found = 0
		for i, s := range stacks() {
			if i > 0 && s.parked() && strings.Contains(s.text, fn+"(") {
				found++
			}
		}
		return found >= n
	}) {
		t.Fatalf("%d goroutines blocked in %s after %v, want %d", found, fn, Scale(WaitLimit), n)
	}
}

// parked reports whether the goroutine waits: its header's state is not
// running, runnable or a system call.
func (s goroutine) parked() bool {
	head, _, _ := strings.Cut(s.text, "\n")
	_, state, ok := strings.Cut(head, "[")
	if !ok {
		return false
	}
	state, _, _ = strings.Cut(state, "]")
	state, _, _ = strings.Cut(state, ",") // "select, 2 minutes"
	switch state {
	case "running", "runnable", "syscall":
		return false
	}
	return true
}
