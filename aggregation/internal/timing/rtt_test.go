package timing

import (
	"testing"
	"time"
)

func TestRTTFloorAndCeiling(t *testing.T) {
	const floor, ceil = 10 * time.Millisecond, time.Second
	var e RTT
	if got := e.RTO(floor, ceil); got != floor {
		t.Fatalf("RTO before samples = %v, want the floor %v", got, floor)
	}
	e.Sample(time.Millisecond)
	if got := e.RTO(floor, ceil); got != floor {
		t.Fatalf("RTO after a 1 ms sample = %v, want the floor %v", got, floor)
	}
	for range 20 {
		e.Sample(40 * time.Millisecond)
	}
	if got := e.RTO(floor, ceil); got < 40*time.Millisecond || got > 100*time.Millisecond {
		t.Fatalf("RTO after 40 ms samples = %v, want a little above 40 ms", got)
	}
	for range 20 {
		e.Sample(10 * time.Second)
	}
	if got := e.RTO(floor, ceil); got != ceil {
		t.Fatalf("RTO after 10 s samples = %v, want the ceiling %v", got, ceil)
	}
}

// TestRTTArithmetic checks RFC 6298's update rules step by step.
func TestRTTArithmetic(t *testing.T) {
	ms := time.Millisecond
	var e RTT
	for i, tc := range []struct {
		sample, srtt, rttvar time.Duration
	}{
		{100 * ms, 100 * ms, 50 * ms},                // first: SRTT = R, RTTVAR = R/2
		{60 * ms, 95 * ms, 47500 * time.Microsecond}, // RTTVAR = (3·50 + 40)/4, SRTT = (7·100 + 60)/8
		{95 * ms, 95 * ms, 35625 * time.Microsecond}, // |SRTT − R| = 0: RTTVAR shrinks by a quarter
	} {
		e.Sample(tc.sample)
		if e.SRTT() != tc.srtt || e.RTTVar() != tc.rttvar || e.Samples() != i+1 {
			t.Fatalf("after sample %d (%v): SRTT %v RTTVAR %v samples %d, want %v %v %d",
				i, tc.sample, e.SRTT(), e.RTTVar(), e.Samples(), tc.srtt, tc.rttvar, i+1)
		}
	}
	if got, want := e.RTO(0, time.Hour), 95*ms+4*35625*time.Microsecond; got != want {
		t.Fatalf("RTO = %v, want SRTT + 4·RTTVAR = %v", got, want)
	}
}

// TestRTTZeroSample: a first round trip of 0 (a coarse clock) is a sample
// like any other; the next one is smoothed against it, not taken as first.
func TestRTTZeroSample(t *testing.T) {
	var e RTT
	e.Sample(0)
	e.Sample(80 * time.Millisecond)
	if e.SRTT() != 10*time.Millisecond || e.RTTVar() != 20*time.Millisecond {
		t.Fatalf("SRTT %v RTTVAR %v, want 10ms 20ms", e.SRTT(), e.RTTVar())
	}
}
