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
	cur, prev time.Duration
	start     time.Time // of the bucket cur
}

// Sample folds in a round trip r measured now; span is how long a bucket
// lasts (the caller's smoothed round trip: the window then covers the
// last one to two round trips).
func (s *StandingRTT) Sample(now time.Time, r, span time.Duration) {
	if s.start.IsZero() || now.Sub(s.start) >= span {
		s.prev, s.cur, s.start = s.cur, 0, now
	}
	if s.cur == 0 || r < s.cur {
		s.cur = r
	}
}

// Get is the standing round trip; 0 before any sample.
func (s *StandingRTT) Get() time.Duration {
	if s.prev > 0 && (s.cur == 0 || s.prev < s.cur) {
		return s.prev
	}
	return s.cur
}

// Window is an AIMD congestion window counted in messages, as ATP's and
// TCP NewReno's congestion avoidance: each result adds 1/window (one
// message per round trip), a loss halves it — once per loss episode, so
// that the losses of one burst count once — never below one message nor
// above its ceiling. A decrease that turns out to come from a spurious
// loss (the result of the first transmission came back after all) is
// undone, as TCP does after a spurious retransmission (RFC 3522). The
// caller passes the send times of the messages concerned; the window reads
// no clock. Owned by one goroutine.
type Window struct {
	cwnd, ceil float64
	// episode: losses of messages sent before it belong to the decrease
	// already made.
	episode time.Time
	prior   float64 // the window before the last decrease, 0 once undone
}

// NewWindow returns a window open to its ceiling of n messages.
func NewWindow(n int) Window {
	m := float64(max(n, 1))
	return Window{cwnd: m, ceil: m}
}

// Size is how many messages may be in flight.
func (w *Window) Size() int { return int(w.cwnd) }

// Result opens the window by one message per window of results.
func (w *Window) Result() {
	w.cwnd = min(w.cwnd+1/w.cwnd, w.ceil)
}

// Loss halves the window for a message sent at sent and found lost now,
// unless that loss belongs to the episode of an earlier decrease (the
// message was sent before it). It reports whether the window shrank.
func (w *Window) Loss(sent, now time.Time) bool {
	if sent.Before(w.episode) {
		return false
	}
	w.prior = w.cwnd
	w.cwnd = max(w.cwnd/2, 1)
	w.episode = now
	return true
}

// Spurious undoes the last decrease if a message sent at sent, taken for
// lost, was not: its first transmission's result came back. Messages sent
// before the decrease's episode are what it was made for.
func (w *Window) Spurious(sent time.Time) {
	if w.prior == 0 || !sent.Before(w.episode) {
		return
	}
	w.cwnd = max(w.cwnd, w.prior)
	w.prior = 0
}
