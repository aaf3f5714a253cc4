// Package timing holds the loss-recovery timekeeping that
// the SwitchML worker engine (package aggregation) and the ring all-reduce
// (package aggregation/ring) share:
//
//   - Waker, the resettable event an engine goroutine blocks on together
//     with its completion queue (verbs.Await), set at its next timer
//     deadline or when something outside the engine needs it (a new call,
//     a cancelled context, Close);
//   - RTT, RFC 6298's smoothed round-trip time and variation, and the
//     retransmission timeout derived from them within a floor and a ceiling.
//   - WindowMin, the smallest sample of this window and the last (RACK's
//     minimum time to result, the delivery rate's fastest packet);
//   - StandingRTT, the smallest round trip of the last one or two (Copa's
//     RTT_standing), and DeliveryRate, the fastest recent rate of packet
//     results (BBR's bandwidth filter): together they bound a timeout
//     below what the waits for other workers' resends make of the
//     estimate, yet above the queue a new message waits in.
//
// What each engine does with them (RACK, backoff, per-packet recovery)
// stays in that engine.
//
// Concurrency: a Waker's methods are safe for concurrent use (that is its
// purpose: Fire comes from other goroutines). An RTT is owned by
// one goroutine.
package timing
