package timing

import "time"

// deliveryMinPackets is the fewest packet results a delivery-rate sample
// must span: two 16-packet messages, the fewest a worker's window keeps
// in flight (aggregation.Config.QueueDelay). A round trip that short can
// fall inside the burst a shaped link's token bucket lets through, or a
// batch read late; the grouping (deliveryGroup) averages those out. A
// worker with fewer packets in flight takes no samples, and its Drain
// stays 0.
const deliveryMinPackets = 32

// deliveryGroup is how many consecutive samples the filter averages
// before it takes the fastest: results that come back together, each
// sample spanning its own round trip, so a group spans about two. One
// sample's round trip can still fall inside a burst a shaped link lets
// through at once (its token bucket) and pass for a link several times
// faster than it is; averaged over a group, the burst is diluted to
// within a small margin of the link's rate.
const deliveryGroup = 16

// DeliveryRate is the fastest recent rate at which packet results come back
// (BBR's bottleneck-bandwidth filter, counted in packets). Each sample is
// BBR's: when the result of a transmission comes back, the packet results
// delivered since that transmission left, over the time it took — the
// delivery rate over the transmission's own round trip. The filter keeps
// the shortest time per packet among groups of deliveryGroup consecutive
// samples (their packets over their spans), this epoch's and the last
// one's (an epoch is whatever the caller makes it: a call); a group that
// is not full waits for the next epoch's samples.
//
// A sample spans a round trip, not a count of results: results timed by
// when they were read would take a batch read at once, or a link's burst,
// for a link many times faster than it is, and Drain would come out far
// below the time the packets in flight take to come back.
//
// It is for Drain: the time the packets in flight ahead of a new message
// take to come back at the path's rate, the queueing a timeout must cover
// (docs/protocol.md "Loss recovery, step by step": Bound, Delivery rate).
// Counted in packet results, not in completed messages: under heavy loss a
// message waits for the resend of its last packet while the others'
// results keep the path busy. The zero value has no sample; owned by one
// goroutine.
type DeliveryRate struct {
	delivered int64 // packet results so far
	// The samples of the current group: how many, and their packets and
	// spans summed.
	k    int
	n    int64
	span time.Duration
	per  WindowMin // shortest time per packet of a group, this epoch and the last
}

// Delivered is the count of packet results so far; a transmission is
// stamped with it when it leaves, for Sample.
func (d *DeliveryRate) Delivered() int64 { return d.delivered }

// Deliver counts the results of n packets, back now.
func (d *DeliveryRate) Deliver(n int) { d.delivered += int64(n) }

// Sample takes a rate sample from the result, back now, of a transmission
// that left at xmit when Delivered was at (call it after Deliver). Only
// for a transmission the result surely answers (sent once: Karn's rule).
func (d *DeliveryRate) Sample(now, xmit time.Time, at int64) {
	n := d.delivered - at
	span := now.Sub(xmit)
	if n < deliveryMinPackets || span <= 0 {
		return
	}
	d.k++
	d.n += n
	d.span += span
	if d.k < deliveryGroup {
		return
	}
	d.per.Sample(d.span / time.Duration(d.n))
	d.k, d.n, d.span = 0, 0, 0
}

// NewEpoch starts the next window of the maximum.
func (d *DeliveryRate) NewEpoch() { d.per.Next() }

// PerPacket is the shortest recent time per packet result; 0 before a
// sample.
func (d *DeliveryRate) PerPacket() time.Duration { return d.per.Get() }

// Drain is how long n packets take to come back at that rate; 0 before a
// sample.
func (d *DeliveryRate) Drain(n int) time.Duration {
	return time.Duration(n) * d.PerPacket()
}
