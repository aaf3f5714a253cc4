package timing

import "time"

// deliveryWindow is how many packets a delivery-rate sample spans: eight
// 16-packet messages, so that results read in one batch, or compressed by
// a late poll, do not pass for a link faster than it is.
const deliveryWindow = 128

// DeliveryRate is the fastest recent rate at which packet results come back
// (BBR's bottleneck-bandwidth filter, counted in packets): the shortest
// time per packet over windows of deliveryWindow packets, the least of this
// epoch's and the last one's (an epoch is whatever the caller makes it: a
// call). It is for Drain: the time the packets in flight ahead of a new
// message take to come back at the path's rate, the queueing a timeout must
// cover (docs/protocol.md "Bound"). Counted in packet results, not in
// completed messages: under heavy loss a message waits for the resend of
// its last packet while the others' results keep the path busy, and
// message completions slowed by those waits made the rate — and with it
// the timeout — follow the loss recovery instead of the path. The zero
// value has no sample; owned by one goroutine.
type DeliveryRate struct {
	start time.Time // of the current window
	n     int       // packets in it
	per   WindowMin // shortest time per packet, this epoch and the last
}

// Sample notes that the results of n packets came back now.
func (d *DeliveryRate) Sample(now time.Time, n int) {
	if d.start.IsZero() {
		d.start = now // the window starts with the first result, not counted
		return
	}
	d.n += n
	if d.n < deliveryWindow {
		return
	}
	if span := now.Sub(d.start); span > 0 {
		d.per.Sample(span / time.Duration(d.n))
	}
	d.start, d.n = now, 0
}

// NewEpoch starts the next window of the maximum; the first results of an
// epoch (a call) wait for every worker to join, so no window spans into it.
func (d *DeliveryRate) NewEpoch() {
	d.per.Next()
	d.start, d.n = time.Time{}, 0
}

// PerPacket is the shortest recent time per packet result; 0 before a
// sample.
func (d *DeliveryRate) PerPacket() time.Duration { return d.per.Get() }

// Drain is how long n packets take to come back at that rate; 0 before a
// sample (on loopback, where results come in batches read at one time, it
// stays near 0).
func (d *DeliveryRate) Drain(n int) time.Duration {
	return time.Duration(n) * d.PerPacket()
}
