package benchmark

import (
	"testing"
	"time"
)

// TestTimes: a summary's record and one of a median from another rank's
// extremes give the same rates: elements ÷ the median, 32 bits each; the
// summary's mean counts every call.
func TestTimes(t *testing.T) {
	s := Summarize([]time.Duration{3 * time.Second, time.Second, 2 * time.Second, 10 * time.Second}, 4e6)
	want := Times{MedianNs: 3e9, MinNs: 1e9, MaxNs: 10e9, MeanNs: 4e9, ATEPerSec: 4e6 / 3, Gbps: 4e6 / 3 * 32 / 1e9}
	if got := s.Times(); got != want {
		t.Errorf("Summary.Times %+v, want %+v (the mean counts the slow call)", got, want)
	}
	s = Summarize([]time.Duration{3 * time.Second, time.Second, 2 * time.Second}, 4e6)
	want = Times{MedianNs: 2e9, MinNs: 1e9, MaxNs: 3e9, ATEPerSec: 2e6, Gbps: 0.064}
	if got := s.Times(); got != (Times{MedianNs: 2e9, MinNs: 1e9, MaxNs: 3e9, MeanNs: 2e9, ATEPerSec: 2e6, Gbps: 0.064}) {
		t.Errorf("Summary.Times %+v, want %+v with the mean 2 s", got, want)
	}
	if got := TimesOf(2*time.Second, time.Second, 3*time.Second, 4e6); got != want {
		t.Errorf("TimesOf %+v, want %+v", got, want)
	}
	if got := TimesOf(0, 0, 0, 4e6); got != (Times{}) {
		t.Errorf("TimesOf a zero median: %+v, want no rates", got)
	}
	c := ResendCauses{Timeouts: 1, FastRetransmissions: 2, SpuriousRetransmissions: 3, GapNotices: 4, NoticeResends: 5, TailProbes: 6, ResultProbes: 7}
	c.Add(ResendCauses{Timeouts: 10, FastRetransmissions: 20, SpuriousRetransmissions: 30, GapNotices: 40, NoticeResends: 50, TailProbes: 60, ResultProbes: 70})
	if c != (ResendCauses{11, 22, 33, 44, 55, 66, 77}) {
		t.Errorf("ResendCauses.Add: %+v", c)
	}
}
