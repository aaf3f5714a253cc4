package verbs

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestMTU(t *testing.T) {
	for _, m := range []MTU{256, 512, 1024, 2048, 4096} {
		if err := m.Check(); err != nil {
			t.Errorf("MTU %d rejected: %v", m, err)
		}
	}
	for _, m := range []MTU{0, 128, 1000, 1500, 8192} {
		if err := m.Check(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("MTU %d: %v", m, err)
		}
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{WCRemAccessErr.String(), "REM_ACCESS_ERR"},
		{WCStatus(5).String(), "WR_FLUSH_ERR"},
		{WCStatus(99).String(), "WCStatus(99)"},
		{QPStateRTS.String(), "RTS"},
		{WRRDMAWriteWithImm.String(), "RDMA_WRITE_WITH_IMM"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{(AccessLocalWrite | AccessRemoteWrite).String(), "LOCAL_WRITE|REMOTE_WRITE"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	c := Completion{WRID: 3, QPN: 17, Status: WCRemAccessErr}
	if err := c.Err(); err == nil || err.Error() != "verbs: completion wr_id 3 on QP 17: REM_ACCESS_ERR" {
		t.Fatalf("Completion.Err = %v", err)
	}
}

// fakeCQ is a CQ whose Poll finds one completion once ready is set or from
// its readyAt-th poll on (never when readyAt is 0), counting polls and
// armings; each arming is also sent on armedCh when it is set.
type fakeCQ struct {
	readyAt int
	ready   atomic.Bool
	spin    time.Duration
	polls   int
	armed   int
	armedCh chan struct{}
	notify  chan struct{}
}

func (c *fakeCQ) Poll(wcs []Completion) (int, error) {
	c.polls++
	if !c.ready.Load() && (c.readyAt == 0 || c.polls < c.readyAt) {
		return 0, nil
	}
	wcs[0] = Completion{WRID: 7}
	return 1, nil
}

func (c *fakeCQ) RequestNotify() error {
	c.armed++
	if c.armedCh != nil {
		c.armedCh <- struct{}{}
	}
	return nil
}

func (c *fakeCQ) Notifications() <-chan struct{}                  { return c.notify }
func (c *fakeCQ) Wait(context.Context, []Completion) (int, error) { return 0, ErrNotSupported }
func (c *fakeCQ) Close() error                                    { return nil }
func (c *fakeCQ) BusyPoll() time.Duration                         { return c.spin }

// TestAwaitBusyPoll: Await polls a BusyPoller before it arms it: a
// completion found while spinning is returned without arming, a ready wake
// ends the spin at once, and a CQ without a spin is armed after one empty
// poll.
func TestAwaitBusyPoll(t *testing.T) {
	wcs := make([]Completion, 4)
	woken := make(chan struct{})
	close(woken)
	tests := []struct {
		name      string
		cq        *fakeCQ
		wake      <-chan struct{}
		wantN     int
		wantArmed int
		wantPolls int
	}{
		{"found while spinning", &fakeCQ{readyAt: 5, spin: time.Hour}, nil, 1, 0, 5},
		{"woken while spinning", &fakeCQ{spin: time.Hour}, woken, 0, 0, 1},
		{"no spin", &fakeCQ{readyAt: 2}, nil, 1, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Await(tt.cq, wcs, tt.wake)
			if err != nil || n != tt.wantN {
				t.Fatalf("Await = %d, %v; want %d, nil", n, err, tt.wantN)
			}
			if tt.cq.armed != tt.wantArmed || tt.cq.polls != tt.wantPolls {
				t.Errorf("armed %d times after %d polls, want %d after %d", tt.cq.armed, tt.cq.polls, tt.wantArmed, tt.wantPolls)
			}
		})
	}
}

// TestAwaitSpinBounded: a spin that finds nothing ends, arms the CQ and
// blocks on its notification (without a bound this test hangs), and the
// completion behind the event is returned.
func TestAwaitSpinBounded(t *testing.T) {
	cq := &fakeCQ{spin: time.Microsecond, armedCh: make(chan struct{}, 1), notify: make(chan struct{}, 1)}
	done := make(chan int)
	go func() {
		n, err := Await(cq, make([]Completion, 4), nil)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	<-cq.armedCh
	cq.ready.Store(true)
	cq.notify <- struct{}{}
	if n := <-done; n != 1 {
		t.Fatalf("Await = %d, want the completion behind the event", n)
	}
	if cq.armed != 1 {
		t.Errorf("armed %d times, want 1", cq.armed)
	}
}

// TestAwaitAllocs: Await allocates nothing, spinning or not.
func TestAwaitAllocs(t *testing.T) {
	wcs := make([]Completion, 4)
	// Without a spin the second poll (after arming) finds the completion,
	// with one the third.
	for _, tc := range []struct {
		spin    time.Duration
		readyAt int
	}{{0, 2}, {time.Hour, 3}} {
		cq := &fakeCQ{spin: tc.spin}
		if a := testing.AllocsPerRun(100, func() {
			cq.polls, cq.readyAt = 0, tc.readyAt
			if n, _ := Await(cq, wcs, nil); n != 1 {
				t.Fatalf("Await = %d", n)
			}
		}); a != 0 {
			t.Errorf("spin %v: %v allocations per Await, want 0", tc.spin, a)
		}
	}
}
