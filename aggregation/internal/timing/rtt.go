package timing

import "time"

// RTT is RFC 6298's smoothed round-trip time (SRTT) and round-trip time
// variation (RTTVAR), fed by the caller with round trips of messages sent
// once (Karn's rule: a retransmitted message's round trip is ambiguous).
// The zero value has no sample. Owned by one goroutine.
type RTT struct {
	srtt, rttvar time.Duration
	samples      int
}

// Sample folds one round trip in (RFC 6298 section 2: α = 1/8, β = 1/4;
// the first sample sets SRTT = R, RTTVAR = R/2).
func (e *RTT) Sample(r time.Duration) {
	if e.samples == 0 {
		e.srtt, e.rttvar = r, r/2
	} else {
		d := e.srtt - r
		if d < 0 {
			d = -d
		}
		e.rttvar = (3*e.rttvar + d) / 4
		e.srtt = (7*e.srtt + r) / 8
	}
	e.samples++
}

// Samples is how many round trips were folded in.
func (e *RTT) Samples() int { return e.samples }

// SRTT and RTTVar are the current estimates (0 before any sample).
func (e *RTT) SRTT() time.Duration   { return e.srtt }
func (e *RTT) RTTVar() time.Duration { return e.rttvar }

// RTO is SRTT + 4·RTTVAR within [floor, ceil]; floor before any sample.
// The floor plays RFC 6298's minimum RTO (an engine on an idle loopback
// keeps its configured timeout; on a loaded machine the timeout grows
// instead of firing spuriously), the ceiling its maximum.
func (e *RTT) RTO(floor, ceil time.Duration) time.Duration {
	if e.samples == 0 {
		return floor
	}
	return min(max(e.srtt+4*e.rttvar, floor), ceil)
}
