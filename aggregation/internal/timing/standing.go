package timing

import "time"

// StandingRTT is the smallest round trip seen over the last span or two
// (Copa's RTT_standing): the delay every message of the current window
// meets, queueing included, without the outliers of a single message (one
// that waited for another worker's resend). A timeout bounded by a
// multiple of it still covers a standing queue; a bound by the all-time
// minimum fires at every message once a queue builds up. The zero value
// has no sample; owned by one goroutine.
type StandingRTT struct {
	min   WindowMin // this bucket's and the last one's
	start time.Time // of the current bucket
}

// Sample folds in a round trip r measured now; span is how long a bucket
// lasts (the caller's smoothed round trip: the window then covers the
// last one to two round trips).
func (s *StandingRTT) Sample(now time.Time, r, span time.Duration) {
	if s.start.IsZero() || now.Sub(s.start) >= span {
		s.min.Next()
		s.start = now
	}
	s.min.Sample(r)
}

// Get is the standing round trip; 0 before any sample.
func (s *StandingRTT) Get() time.Duration { return s.min.Get() }
