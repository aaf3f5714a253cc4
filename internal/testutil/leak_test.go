package testutil

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what Errorf reports.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func blockedOnPurpose(stop chan struct{}, done chan struct{}) {
	defer close(done)
	<-stop
}

func TestGoroutinesReportsALeak(t *testing.T) {
	g := SnapshotGoroutines()
	stop, done := make(chan struct{}), make(chan struct{})
	go blockedOnPurpose(stop, done)
	leaked := g.wait(20 * time.Millisecond)
	if len(leaked) != 1 || !strings.Contains(leaked[0].text, "blockedOnPurpose") {
		t.Fatalf("leaked = %+v, want the one blocked goroutine", leaked)
	}
	// Check waits for it to end: end it while Check waits.
	time.AfterFunc(50*time.Millisecond, func() { close(stop) })
	r := &recorder{TB: t}
	g.Check(r)
	<-done
	if len(r.errs) != 0 {
		t.Fatalf("Check reported %q for a goroutine that ended while it waited", r.errs)
	}
}

func TestGoroutinesIgnoresEarlierAndTesting(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go blockedOnPurpose(stop, done) // before the snapshot
	defer func() { close(stop); <-done }()
	g := SnapshotGoroutines()
	t.Run("sub", func(t *testing.T) {
		// The parent test's goroutine and this subtest's are the testing
		// package's.
		if leaked := g.wait(0); len(leaked) != 0 {
			t.Fatalf("leaked = %+v, want none", leaked)
		}
	})
}

func TestScale(t *testing.T) {
	want := time.Second
	if Race {
		want = 10 * time.Second
	}
	if got := Scale(time.Second); got != want {
		t.Fatalf("Scale(1s) = %v with Race=%v, want %v", got, Race, want)
	}
}

func TestWaitBlocked(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		// The sleep is the point: the goroutine parks in blockedOnPurpose
		// after WaitBlocked's first look, which must keep looking.
		time.Sleep(20 * time.Millisecond)
		blockedOnPurpose(stop, done)
	}()
	WaitBlocked(t, 1, "testutil.blockedOnPurpose")
	select {
	case <-done:
		t.Fatal("the goroutine ended before it was seen blocked")
	default:
	}
	close(stop)
	<-done
}

func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(Scale(WaitLimit), func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Fatalf("Poll of a condition true at the third call: %d calls", calls)
	}
	calls = 0
	if Poll(5*time.Millisecond, func() bool { calls++; return false }) || calls < 2 {
		t.Fatalf("Poll of a condition never true returned true or gave up at once (%d calls)", calls)
	}
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			n.Add(1)
		}
	}()
	WaitFor(t, "the counter at 1000", func() bool { return n.Load() == 1000 })
	<-done
}
