package aggregation

// Outbound flow: how one message leaves a worker.
//
//  1. A QP is handed its next tensor message: at the start of a call
//     (drive's start: round 0 first, sendExponents, carrying the call's
//     length and the first look-ahead exponent) or
//     when its previous message's result came back (receive.go,
//     complete → launch). launch parks it while the worker's window is
//     full; parked messages leave in the call's order as results free
//     room (window.go: launch, releaseParked).
//  2. sendNext quantizes the message's elements into the QP's staging
//     region of the registered buffer, with the scale the switch's
//     maximum exponent for it gives (the look-ahead of the previous
//     message on this QP), and notes the look-ahead exponent of the QP's
//     next message.
//  3. post gives it the QP's next set and message id and builds its work
//     request: one RDMA WRITE WITH IMMEDIATE of the whole message to the
//     switch (message writes), or one per packet (packet writes;
//     writes.go, chooseWrites), and carries the loss signal (lossSignal).
//     It starts the message's timer (rto.go, startTimer).
//  4. transmit stages the work requests on the QP (verbs.StagedSender):
//     the NIC builds the packets but does not send them yet.
//  5. At the end of the engine's pass, ringDoorbell sends everything
//     staged by every QP in one system call (drive, step 4).
//
// A resend (timers.go, resendUpTo: on evidence, rack.go, or on a timeout,
// rto.go) re-enters at step 4 with the same work request, so the switch
// sees an identical message.

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// sendExponents starts a call on st with round 0: a message of zeros but
// for the call's length (calltensor.go, every type) and, for a float call,
// the look-ahead exponent of the QP's first tensor message.
func (s *lane) sendExponents(c *call, st *qpState, now time.Time) error {
	buf := s.mr.Bytes()[st.sendOff : st.sendOff+uint64(s.msgBytes)]
	clear(buf)
	putLengthHeader(buf, c.n, s.cfg.Wire)
	st.msg.cur = -1
	return s.post(st, c.exponent(st.next), now)
}

// sendNext sends the QP's next tensor message, quantized with the maximum
// exponent maxE the switch returned for it; false if the QP is done.
func (s *lane) sendNext(c *call, st *qpState, maxE int8, now time.Time) (bool, error) {
	j := st.next
	if j >= c.msgs {
		return false, nil
	}
	lo, hi := c.span(j)
	buf := s.mr.Bytes()[st.sendOff : st.sendOff+uint64(s.msgBytes)]
	sc, err := c.codec.scale(s.cfg.Workers, maxE)
	if err != nil {
		return false, fmt.Errorf("aggregation: %v: %w", s.who(), err)
	}
	if err := c.codec.quantize(c, buf, lo, hi, sc); err != nil {
		return false, fmt.Errorf("aggregation: AllReduce: tensor changed during the call: %w", err)
	}
	st.msg.scale = sc
	e0 := c.codec.lookAhead(c, j+s.cfg.QPs)
	// The last message of a tensor is padded with zeros: the switch adds
	// whole packets, and zeros change no sum.
	clear(buf[s.cfg.elementBytes()*(hi-lo):])
	st.msg.cur = j
	st.next = j + s.cfg.QPs // every worker sends message j on QP j mod QPs
	return true, s.post(st, e0, now)
}

// post sends a new message from st's staging region: next set, next
// message id, look-ahead exponent e0, and the loss signal e1.
func (s *lane) post(st *qpState, e0 int8, now time.Time) error {
	m := &st.msg
	m.set ^= 1
	m.id = (m.id + 1) & wire.MsgIDMask
	m.e0, m.e1 = e0, s.lossSignal()
	m.busy = true
	m.wr[0] = verbs.SendWR{
		ID:         wrID(st.index, wrSend),
		Opcode:     verbs.WRRDMAWriteWithImm,
		Local:      verbs.SGE{Addr: st.sendOff, Length: uint32(s.msgBytes), LKey: s.mr.LKey()},
		RemoteAddr: s.recvOff(m.id, st.index),
		RKey:       uint32(st.pool | wire.PoolIndex(m.set)),
		Imm:        uint32(wire.MakeImm(m.id, e0, m.e1)),
		Signaled:   true,
	}
	if st.pkts.n > 0 {
		clear(st.pkts.got)
		st.pkts.n = 0
	}
	st.pkts.first, st.pkts.resent, st.pkts.dup, st.pkts.evFrom, st.pkts.noticeFrom = time.Time{}, 0, false, time.Time{}, time.Time{}
	st.pkts.sendAll()
	st.pkts.transmitted()
	s.startTimer(st, now)
	s.stats.messages.Add(1)
	if s.pktWrites {
		return s.transmitPackets(st, false)
	}
	return s.transmit(st, m.wr[:], s.cfg.PacketsPerMessage, s.msgBytes)
}

// transmit posts wrs (packets packets, bytes bytes of payload in all) on
// st's QP: staged, if the QP can (verbs.StagedSender), for the pass's
// doorbell. The receives for the answers it can bring are posted first.
func (s *lane) transmit(st *qpState, wrs []verbs.SendWR, packets, bytes int) error {
	answers := len(wrs)
	if s.pktBits > 0 {
		// With per-packet recovery every packet's slot can complete on
		// its own (by another worker's packet resend) and answer alone.
		answers = packets
	}
	if err := s.postRecvs(st, answers); err != nil {
		return err
	}
	var err error
	if ss, ok := st.qp.(verbs.StagedSender); ok {
		_, err = ss.PostSendStaged(wrs)
		s.eng.doorbell = ss
	} else {
		_, err = st.qp.PostSend(wrs)
	}
	if err != nil {
		return fmt.Errorf("aggregation: %v: send on QP %d: %w", s.who(), st.index, err)
	}
	for i := range wrs {
		if wrs[i].Signaled {
			st.queued++
		}
	}
	s.stats.packets.Add(uint64(packets))
	s.stats.bytesSent.Add(uint64(bytes))
	return nil
}

// transmitPackets sends the packets of st's latest transmission
// (pktResults.sent: all of them, or a resend's) each as a one-packet WRITE
// ONLY WITH IMMEDIATE: packet k goes to pool index pool+2k with the packet
// message id of k, lands at its own offset of the receive region, and is
// answered by a one-packet result. While the job sees loss and takes gap
// notices, a tail probe follows them (notice.go). With probes, each packet
// goes as a result probe instead, without its payload (rack.go,
// probeUpTo), and no tail probe follows. Only the last work request is
// signaled: its completion stands for all of them (st.queued counts one).
func (s *lane) transmitPackets(st *qpState, probes bool) error {
	ps, e1 := s.cfg.PacketSize, st.msg.e1
	if probes {
		ps, e1 = 0, wire.ResultProbe
	}
	m := &st.msg
	recv := s.recvOff(m.id, st.index)
	p := &st.pkts
	wrs := s.eng.scratch.pktWRs[:0]
	last := -1
	for k := range s.cfg.PacketsPerMessage {
		if !p.inSent(k) {
			continue
		}
		wrs = append(wrs, s.packetWR(st, recv, k, ps, e1))
		last = k
	}
	n := len(wrs)
	switch {
	case probes:
		s.stats.resultProbes.Add(uint64(n))
	case last >= 0 && s.notices && s.pktWrites && s.adapt.lossy():
		// The switch sees the tail probe's PSN: the loss of the last
		// packet, or of any before it, comes back as a notice. Without
		// loss it would only cost a packet per message.
		wrs = append(wrs, s.packetWR(st, recv, last, 0, e1))
		s.stats.tailProbes.Add(1)
	}
	s.eng.scratch.pktWRs = wrs
	if len(wrs) == 0 {
		return nil
	}
	wrs[len(wrs)-1].Signaled = true
	return s.transmit(st, wrs, len(wrs), n*ps)
}

// packetWR is the work request of packet k of st's message in flight, n
// bytes of it (0: a tail or result probe), its receive region at recv,
// with e1 in its immediate.
func (s *lane) packetWR(st *qpState, recv uint64, k, n int, e1 int8) verbs.SendWR {
	m := &st.msg
	off := uint64(k * s.cfg.PacketSize)
	return verbs.SendWR{
		ID:         wrID(st.index, wrSend),
		Opcode:     verbs.WRRDMAWriteWithImm,
		Local:      verbs.SGE{Addr: st.sendOff + off, Length: uint32(n), LKey: s.mr.LKey()},
		RemoteAddr: recv + off,
		RKey:       uint32(st.pool.Add(k) | wire.PoolIndex(m.set)),
		Imm:        uint32(wire.MakeImm(wire.PacketMsgID(m.id, k, s.pktBits), m.e0, e1)),
	}
}

// ringDoorbell sends the messages staged since the last call.
func (s *lane) ringDoorbell() error {
	d := s.eng.doorbell
	if d == nil {
		return nil
	}
	s.eng.doorbell = nil
	if err := d.Doorbell(); err != nil {
		return fmt.Errorf("aggregation: %v: send: %w", s.who(), err)
	}
	return nil
}
