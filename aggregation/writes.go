package aggregation

// Message writes and packet writes (Config.Writes): how a message goes on
// the wire, chosen per call. A message write (one multi-packet UC WRITE)
// costs the least CPU, but with UC one lost packet loses the whole
// message; packet writes (one WRITE ONLY WITH IMMEDIATE per packet) lose
// one packet per lost packet. AdaptiveWrites sends message writes while
// the job sees no loss and packet writes after a call that saw some, and
// every worker decides alike through the loss signal e1 (docs/protocol.md
// "Message writes and packet writes (`Config.Writes`, `--writes`)").

import "sync/atomic"

// adaptState is AdaptiveWrites' memory: what the running call has seen of
// loss, and how many calls in a row have sent packet writes.
//
// Every worker of a job must decide alike, or a call mixes message writes
// and packet writes, and a slot completed by a one-packet write is then
// broadcast as a WRITE ONLY into the other workers' open multi-packet
// result messages, which a UC receiver that follows the IBA drops (rxe
// wedges the QP). Each worker's own view of loss differs, so they agree
// through the switch, without a message of their own: a worker that has
// seen loss in a call sets e1 = 1 in the immediates of the messages it
// sends afterwards (lossSignal), the switch returns max(e1) over the
// contributions of each slot, and every worker receives the same results,
// so the OR of e1 over a call's results (heard) is the same on every
// worker, and so is the next call's choice (chooseWrites).
//
// It belongs to the session, not to a lane: the lanes of a worker are one
// worker to the job, and which QPs a lane drives is this worker's own
// business (Config.Threads), so the choice and the signal must not depend
// on it. signal and heard are set by any lane during a call; the other
// fields change only between calls (chooseWrites, under Session.mu).
type adaptState struct {
	msgs    int         // the call's messages
	signal  atomic.Bool // this worker has seen loss in the call: e1 = 1 from now on
	heard   atomic.Bool // a result of the call carried e1 ≠ 0
	pktRuns int         // calls in a row that sent packet writes
	// probeEvery is how many packet-write calls come before a probe with
	// message writes (0: probeMessageWrites); probing: the call running
	// (or the last one) is such a probe.
	probeEvery int
	probing    bool
	// opening: the session's first call, which sends packet writes.
	opening bool
	// lastHeard: a result of the call before carried e1 ≠ 0.
	lastHeard bool
}

// lossy says whether this call or the one before saw loss (adaptState);
// the window steps aside while it does (window).
func (a *adaptState) lossy() bool { return a.signal.Load() || a.heard.Load() || a.lastHeard }

const (
	// lossyFastRetransmits: a worker has seen loss in a call once RACK
	// found one message in this many of the call's messages lost, on
	// evidence only loss makes (fastRetransmit). Far
	// above what reordering alone makes RACK find without loss, so that
	// only loss switches the job to packet writes.
	lossyFastRetransmits = 64
	// probeMessageWrites: in a run of packet-write calls, after this many
	// calls one goes back to message writes to see whether the loss is
	// over. Each probe that hears loss doubles the run before the next,
	// up to maxProbeInterval calls; a clean one ends the run.
	probeMessageWrites = 16
	// maxProbeInterval bounds the run of packet-write calls between
	// probes. Under lasting loss a probe costs far more than a call with
	// packet writes — with message writes a slot's result comes back only
	// if none of its n+1 messages lost a packet of its 16, so at 32
	// workers and 1 % loss a probe took 60–250× a packet-write call
	// (docs/benchmarks.md "Loss at 64 workers") — and at this interval the
	// probes cost a few percent; a network whose loss has ended goes back
	// to message writes within this many calls.
	maxProbeInterval = 1024
	// e1Loss is the immediate's e1 of a message sent after its worker saw
	// loss in the call (0 otherwise, as p4app-switchML's workers send).
	e1Loss int8 = 1
)

// chooseWrites decides whether the call starting now sends packet writes
// (Config.Writes) and starts the call's loss signal (adaptState).
// AdaptiveWrites: message writes cost the least CPU and are the right
// choice without loss; the session's first call sends packet writes (it
// knows nothing of the loss yet); after a call whose results said some
// worker saw loss, the next ones send packet writes, and after
// probeMessageWrites of them one tries message writes again; a probe that
// hears loss doubles the run before the next (up to maxProbeInterval).
// Every worker of the job hears the same results and counts the same
// calls, so all decide alike.
func (s *Session) chooseWrites(msgs int) bool {
	a := &s.adapt
	lossy := a.heard.Load()
	a.msgs, a.lastHeard = msgs, lossy
	for _, l := range s.lanes {
		l.eng.lossFound = 0
	}
	a.signal.Store(false)
	a.heard.Store(false)
	if s.pktBits == 0 {
		return false
	}
	switch s.cfg.Writes {
	case PacketWrites:
		return true
	case MessageWrites:
		return false
	}
	if a.probeEvery == 0 {
		// The session's first call: packet writes, whatever the network.
		// Nothing is known of its loss yet, and message writes are the
		// costly guess: under loss a slot's result comes back only if
		// none of the n+1 messages that carry it lost a packet, so the
		// first call of 32 workers at 1 % loss took seconds where the
		// calls after it took a millisecond (docs/benchmarks.md "Loss at
		// 64 workers"); packet writes cost a loss-free network a few
		// percent, once.
		a.probeEvery, a.opening = probeMessageWrites, true
		return true
	}
	if a.opening {
		// After the first call: message writes unless it heard loss,
		// then the run of packet writes goes on as after any lossy call.
		a.opening = false
		if !lossy {
			return false
		}
	}
	if !s.pktWrites {
		// The last call sent message writes: a probe, or a call of a
		// loss-free run.
		switch {
		case !lossy:
			a.probeEvery = probeMessageWrites
		case a.probing:
			a.probeEvery = min(2*a.probeEvery, maxProbeInterval)
		}
		a.probing, a.pktRuns = false, 0
		return lossy
	}
	// Packet writes lose little to loss, and RACK's count under them
	// says little about it: probe with message writes now and then.
	a.pktRuns++
	a.probing = a.pktRuns >= a.probeEvery
	return !a.probing
}

// lossSignal is the e1 of a message sent now (adaptState): e1Loss once
// RACK found one in lossyFastRetransmits of the call's messages lost.
//
// Each lane judges its own share of the call's messages by its own count:
// summing every lane's count for each message would read lines other
// cores write. Any lane's finding is the worker's (a.signal).
func (s *lane) lossSignal() int8 {
	a := &s.adapt
	found := s.eng.lossFound * lossyFastRetransmits * uint64(len(s.lanes))
	if !a.signal.Load() && found >= uint64(max(a.msgs, 1)) {
		a.signal.Store(true)
	}
	if a.signal.Load() {
		return e1Loss
	}
	return 0
}

// hearLoss notes the e1 of a result the engine used (adaptState). The
// result's immediate is its last packet's, which every worker's
// contribution reaches, so every worker hears the same.
func (s *Session) hearLoss(e1 int8) {
	if e1 > 0 {
		s.adapt.heard.Store(true)
	}
}
