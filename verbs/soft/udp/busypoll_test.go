package udp

import (
	"testing"
	"time"
)

func TestBusyPollerBacksOff(t *testing.T) {
	if b := newBusyPoller(0); b.due() {
		t.Fatal("BusyPoll 0 polls")
	}
	if b := newBusyPoller(-time.Second); b.due() {
		t.Fatal("negative BusyPoll polls")
	}
	b := newBusyPoller(time.Millisecond)
	for i := range 3 {
		if !b.due() {
			t.Fatalf("read %d does not poll before any miss", i)
		}
		b.done(true)
	}
	b.done(false)
	for i := range busyPollBackoff {
		if b.due() {
			t.Fatalf("read %d after a fruitless poll polls; the next %d must sleep at once", i, busyPollBackoff)
		}
	}
	if !b.due() {
		t.Fatalf("read %d after a fruitless poll does not poll", busyPollBackoff)
	}
}

func TestBusyPollOrDefault(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{{0, DefaultBusyPoll}, {-1, 0}, {time.Millisecond, time.Millisecond}} {
		if got := BusyPollOrDefault(tc.in); got != tc.want {
			t.Errorf("BusyPollOrDefault(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
