package aggregation

// Inbound flow: how one result comes back to a worker.
//
//  1. The switch, once every worker's contribution to a slot is in, writes
//     the sum to each worker as an RDMA WRITE WITH IMMEDIATE to the
//     receive region the request named (its set and QP). The NIC places
//     it and consumes one posted receive, whose completion drive polls.
//  2. complete (one completion) notes the time: any answer, even a
//     duplicate, shows the switch is there. Its receive was posted by
//     the transmission it answers (send.go, transmit → postRecvs).
//  3. match decides what the result is to the message in flight: its
//     result (whole, or the last of its packets' results with per-packet
//     recovery), one more packet result, or stale (a duplicate answer to
//     a resend, or a message id that is not the one in flight).
//  4. sampleResult feeds the round-trip estimates with the result's time
//     when it surely answers a known transmission (timers.go).
//  5. deliver dequantizes the sum from the receive region into the
//     caller's tensor.
//  6. hearLoss notes the result's loss signal (writes.go), and launch
//     hands the QP its next message (window.go, then send.go), quantized
//     with the maximum exponent this result carried, or parks it until
//     the worker's window has room; a QP with none left is done.
//
// A send completion only says the NIC has put a message on the wire
// (st.queued, which keeps the timers from stacking copies behind it).

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// postRecvs posts a receive on st's QP for each of n answers that a
// transmission about to be sent can bring. Answers that never come (lost)
// leave their receive posted; the queue's capacity (Session.recvDepth)
// bounds those, and a full queue has a receive for every answer still
// possible.
func (s *lane) postRecvs(st *qpState, n int) error {
	n = min(n, s.recvDepth-st.recvs, len(s.eng.scratch.recvWRs))
	if n <= 0 {
		return nil
	}
	wrs := s.eng.scratch.recvWRs[:n]
	for i := range wrs {
		wrs[i] = verbs.RecvWR{ID: wrID(st.index, wrRecv)}
	}
	k, err := st.qp.PostRecv(wrs)
	st.recvs += k
	if err != nil {
		return fmt.Errorf("aggregation: post receive on QP %d: %w", st.index, err)
	}
	return nil
}

// completeAll handles wcs, polled at now, and returns how many QPs
// finished. One clock reading serves the whole poll: its completions were
// all there when it ran, and a reading per completion was a fifth of a
// packet-write call (a message brings a completion per packet).
func (s *lane) completeAll(c *call, wcs []verbs.Completion, now time.Time) (int, error) {
	s.dropOverwritten(wcs)
	finished := 0
	for i := range wcs {
		done, err := s.complete(c, &wcs[i], now)
		if err != nil {
			return finished, err
		}
		if done {
			finished++
		}
	}
	return finished, nil
}

// dropOverwritten withdraws the results in wcs whose bytes a late result
// of another message, later in wcs, overwrote: the NIC had placed both
// before the poll, and a result is read from the receive region when its
// completion is handled, so the later one's bytes would be read as the
// earlier one's. A withdrawn result is as if lost (its HasImm cleared: it
// counts as stale), and the message's resend fetches it again from the
// switch (docs/protocol.md "Buffer layout", late results). A scan from
// the end of the batch, with a mask per QP of the packets overwritten
// after the completion at hand.
func (s *lane) dropOverwritten(wcs []verbs.Completion) {
	bits := s.pktBits
	if bits == 0 {
		return // whole-message resends only: results are read whole, at once
	}
	touched := false
	for i := len(wcs) - 1; i >= 0; i-- {
		wc := &wcs[i]
		st := s.resultQP(wc)
		if st == nil {
			continue
		}
		id := wire.Imm(wc.Imm).MsgID()
		switch {
		case id&wire.PacketMsgIDFlag == 0 && id == st.msg.id:
			if st.overwritten != 0 {
				wc.HasImm = false
			}
		case id&wire.PacketMsgIDFlag == 0:
			if recvRegion(id) == recvRegion(st.msg.id) {
				st.overwritten, touched = ^uint64(0), true
			}
		default:
			k := wire.PacketIndex(id, bits)
			if k >= 64 {
				continue
			}
			if id == wire.PacketMsgID(st.msg.id, k, bits) {
				if st.overwritten&(1<<k) != 0 {
					wc.HasImm = false
				}
			} else if recvRegion(id>>bits) == recvRegion(st.msg.id) {
				st.overwritten |= 1 << k
				touched = true
			}
		}
	}
	if touched {
		for i := range wcs {
			if st := s.resultQP(&wcs[i]); st != nil {
				st.overwritten = 0
			}
		}
	}
}

// resultQP is the QP of wc when wc is a result with an immediate for the
// lane's message in flight on it, or nil.
func (s *lane) resultQP(wc *verbs.Completion) *qpState {
	if wc.Opcode != verbs.WCRecvRDMAWithImm || !wc.HasImm || wc.Status != verbs.WCSuccess || s.isNotice(wc) {
		return nil
	}
	qi := int(wc.WRID >> 32)
	if qi >= len(s.Session.qps) || s.laneOf(qi) != s.index {
		return nil
	}
	if st := s.Session.qps[qi]; st.msg.busy {
		return st
	}
	return nil
}

// complete handles one completion; done is true when its QP has nothing
// more to send in this call.
func (s *lane) complete(c *call, wc *verbs.Completion, now time.Time) (done bool, err error) {
	qi := int(wc.WRID >> 32)
	// The work request id holds the session's QP index; the lane's CQ
	// completes only the lane's QPs.
	if qi >= len(s.Session.qps) || s.laneOf(qi) != s.index {
		return false, fmt.Errorf("aggregation: %v: completion of unknown work request %#x", s.who(), wc.WRID)
	}
	st := s.Session.qps[qi]
	if wc.Status != verbs.WCSuccess {
		return false, fmt.Errorf("aggregation: %v: QP %d: %w", s.who(), qi, wc.Err())
	}
	if wc.Opcode != verbs.WCRecvRDMAWithImm {
		// A send completed: the NIC has put it on the wire.
		st.queued = max(st.queued-1, 0)
		return false, nil
	}
	st.recvs--
	s.eng.clock.lastResult = now
	if s.isNotice(wc) {
		return false, s.gapNotice(st, wire.Imm(wc.Imm), now)
	}
	r := s.match(st, wc, now)
	if r == resultStale {
		s.stats.stale.Add(1)
		return false, nil
	}
	s.eng.clock.progress = now
	s.delivered(st, r, now)
	if r == resultPacket {
		return false, nil
	}
	s.stats.results.Add(1)
	s.stats.bytesReceived.Add(uint64(s.msgBytes))
	s.sampleResult(st, r, now)
	st.msg.busy = false
	st.msg.joining = false
	if err := s.deliver(c, st); err != nil {
		return false, err
	}
	// The result's immediate is its last packet's (the slot every
	// worker's contribution to which carries one): the same on every
	// worker, however it came back.
	maxE, e1 := wire.Imm(wc.Imm).E0(), wire.Imm(wc.Imm).E1()
	if r == resultPackets {
		maxE, e1 = st.pkts.resE0, st.pkts.resE1
	}
	s.hearLoss(e1)
	more, err := s.launch(c, st, false, maxE, now)
	return !more, err
}

// delivered counts the packet results of r, a result for st back now, for
// the delivery rate, and takes a rate sample over its transmission's round
// trip when the result completes it and surely answers it (sent once:
// Karn).
func (s *lane) delivered(st *qpState, r resultKind, now time.Time) {
	if r == resultWhole {
		s.eng.est.delivery.Deliver(s.cfg.PacketsPerMessage)
	} else {
		s.eng.est.delivery.Deliver(1)
	}
	if r != resultPacket && st.timer.resends == 0 {
		// One sample per transmission, when its last result is back:
		// a message's packet results come back together (a batch, a
		// link's burst), and a sample for each of them made a group of
		// 16 samples one message's burst (packet writes on a shaped
		// link: a tenth of the link's time per packet).
		s.eng.est.delivery.Sample(now, st.timer.xmit, st.timer.delivered)
	}
}

// resultKind is what a received result is to the message in flight.
type resultKind int

const (
	resultStale   resultKind = iota // not an answer to the message in flight
	resultPacket                    // one more of its packet results, more to come
	resultWhole                     // its whole result
	resultPackets                   // the last of its packet results
)

// match classifies wc's result for st's message in flight and records a
// packet result.
func (s *lane) match(st *qpState, wc *verbs.Completion, now time.Time) resultKind {
	if !wc.HasImm {
		return resultStale
	}
	id := wire.Imm(wc.Imm).MsgID()
	if !st.msg.busy {
		if id&wire.PacketMsgIDFlag != 0 && s.pktBits > 0 {
			s.spuriousDup(st, id, wire.PacketIndex(id, s.pktBits))
		}
		return resultStale
	}
	if id&wire.PacketMsgIDFlag == 0 {
		// A whole-message result; another id is a duplicate answer to a
		// retransmission of a message whose result this worker used.
		if id != st.msg.id {
			s.overwritten(st, id, 0, s.cfg.PacketsPerMessage)
			return resultStale
		}
		return resultWhole
	}
	// One packet of the message, answered alone (per-packet recovery):
	// the message is complete when all of them are.
	bits, ppm := s.pktBits, s.cfg.PacketsPerMessage
	if bits == 0 {
		return resultStale
	}
	k := wire.PacketIndex(id, bits)
	p := &st.pkts
	if k >= ppm {
		return resultStale
	}
	if id != wire.PacketMsgID(st.msg.id, k, bits) {
		s.spuriousDup(st, id, k)
		s.overwritten(st, id>>bits, k, k+1)
		return resultStale
	}
	if p.got[k>>6]&(1<<(k&63)) != 0 {
		// The same bytes again: an answer to a resend of a slot that
		// was complete (timers.go, dupResult).
		if k < 64 && p.resent&(1<<k) != 0 {
			p.dup = true
		}
		return resultStale
	}
	p.record(k, now, st.timer.xmit)
	if p.n == 1 && st.timer.resends == 0 {
		p.first = now
	}
	if k == ppm-1 {
		p.resE0, p.resE1 = wire.Imm(wc.Imm).E0(), wire.Imm(wc.Imm).E1()
	}
	if p.n < ppm {
		return resultPacket
	}
	return resultPackets
}

// overwritten handles a late result of another message (stale), msgID
// (whole-message id bits), that the NIC has already placed where its
// request pointed: packets [lo, hi) of the receive region of msgID. When
// that is the region of st's message in flight, the packet results of
// that message already back were overwritten with another message's sums:
// they are taken back, and the message's resend fetches them again from
// the switch, which still holds them (docs/protocol.md "Buffer layout",
// late results). A late result in another region, or a duplicate of one
// of this message's own packet results (the same bytes), changes nothing.
func (s *lane) overwritten(st *qpState, msgID uint16, lo, hi int) {
	if recvRegion(msgID) != recvRegion(st.msg.id) || s.pktBits == 0 {
		return
	}
	for k := lo; k < hi; k++ {
		st.pkts.forget(k)
	}
}

// deliver dequantizes (or decodes) st's result into the caller's tensor.
// Round 0 delivers nothing: its result carries the call's length, checked
// to be the same on every worker (calltensor.go).
func (s *lane) deliver(c *call, st *qpState) error {
	off := s.recvOff(st.msg.id, st.index)
	if st.msg.cur < 0 {
		return s.checkLengthHeader(s.mr.Bytes()[off:off+s.lengthHeaderSize()], c.n)
	}
	lo, hi := c.span(st.msg.cur)
	c.codec.dequantize(c, lo, hi, s.mr.Bytes()[off:off+uint64(s.cfg.elementBytes()*(hi-lo))], st.msg.scale)
	return nil
}
