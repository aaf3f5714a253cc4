package ring

// The retransmission timer, for the losses a fast retransmit cannot see:
// the last items of a call, a lost retransmission. The timeout follows the
// measured round trip as TCP's does (RFC 6298, sampleRTT), never below
// RetransmitTimeout; an expiry resends the oldest unacknowledged item and
// doubles the timeout, up to MaxRetransmitTimeout (timers).

import (
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
)

// timers handles the retransmission timers: the oldest unacknowledged item
// whose timer expired is resent and the timeout doubles until the next
// clean round-trip sample; the other unacknowledged items' timers restart
// (they most likely just wait behind it; a real loss among them is
// repaired by the fast retransmit as acknowledgements arrive), except that
// an item whose own timer has expired rtoRestarts times is resent too.
//
// Why the exception (found with `bench --loss 0.05`): when the
// window has stalled, no new item is sent, so no clean sample comes and the
// timeout stays at its maximum; resending one item per expiry then needed
// a second per lost item and a rank went its whole PeerTimeout without
// progress while its neighbour waited for several lost messages.
func (rr *Rank) timers(now time.Time) error {
	e := &rr.e
	e.nextTimer = now.Add(time.Hour)
	expired := false
	for k := e.sendBase; k < e.sendNext; k++ {
		if e.acked[k] {
			continue
		}
		f := &e.flight[k%rr.window]
		due := !now.Before(f.deadline)
		switch {
		case due && !expired:
			expired = true
			e.rto = min(2*e.rto, rr.cfg.MaxRetransmitTimeout)
			rr.retransmit(k, now)
		case due && f.restarts >= rtoRestarts:
			rr.retransmit(k, now)
		case expired:
			if due {
				f.restarts++
			}
			f.deadline = timing.Later(f.deadline, now.Add(e.rto))
		}
		e.nextTimer = timing.Earlier(e.nextTimer, f.deadline)
	}
	return rr.postData()
}

// rtoRestarts is how many times an item's expired timer may be restarted
// behind an older item's before it is resent as well.
const rtoRestarts = 1

// retransmit queues item k again (rr.postData sends it).
func (rr *Rank) retransmit(k int, now time.Time) {
	e := &rr.e
	f := &e.flight[k%rr.window]
	e.txSeq++
	f.sent, f.seq, f.later, f.resent, f.deadline, f.restarts = now, e.txSeq, 0, true, now.Add(e.rto), 0
	e.nextTimer = timing.Earlier(e.nextTimer, f.deadline)
	e.sendWRs = append(e.sendWRs, rr.dataWR(k, f.length))
	rr.cnt.retransmissions.Add(1)
}

// sampleRTT updates the smoothed round trip (RFC 6298) and the timeout of
// items sent from now on; it never goes below RetransmitTimeout, so on an
// idle loopback the configured value holds and on a loaded machine the
// timeout grows instead of firing spuriously.
func (rr *Rank) sampleRTT(rtt time.Duration) {
	e := &rr.e
	e.rtt.Sample(rtt)
	e.rto = e.rtt.RTO(rr.cfg.RetransmitTimeout, rr.cfg.MaxRetransmitTimeout)
}
