package aggregation

// Gap notices and tail probes (docs/protocol.md "Gap notices"). Only the
// switch knows whose contribution a slot is missing. It keeps each worker
// QP's PSN high-water mark, and a packet write that arrives beyond it
// shows that the packets in between were lost on the way up; with the
// job's notices on (control.Assignment.GapNotices) it tells the worker at
// once: a zero-length WRITE ONLY WITH IMMEDIATE on the QP's result stream,
// the immediate echoing the arriving packet's id and the gap
// (wire.GapNotice). The worker resends those packets at once, where before
// it learnt of the loss the way every other worker of the slot did, from
// the results of later packets and a reordering window later.
//
// A packet that nothing follows on its QP shows no gap: the last of a
// message, or a resend. While the job sees loss, a tail probe follows each
// transmission's last packet: the same packet write without payload, which
// the switch never answers with a result, only with a notice when it
// arrives after a gap or finds its worker's contribution missing from the
// slot.

import (
	"math/bits"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// isNotice reports whether wc is a gap notice: a receive with an
// immediate and no bytes, which no result is.
func (s *lane) isNotice(wc *verbs.Completion) bool {
	return s.notices && wc.ByteLen == 0 && wc.HasImm
}

// gapNotice handles a gap notice for st's QP, back at now: the packets it
// names lost (noticeLost) are resent at once. The receive it consumed is
// posted again.
func (s *lane) gapNotice(st *qpState, imm wire.Imm, now time.Time) error {
	s.stats.gapNotices.Add(1)
	if err := s.postRecvs(st, 1); err != nil {
		return err
	}
	lost := s.noticeLost(st, imm, now)
	if lost == 0 {
		return nil
	}
	s.eng.lossFound++
	return s.resendPackets(st, now, lost)
}

// noticeLost is the bitmap of st's packets that the notice imm names lost,
// or 0: the packets the latest transmission of the message in flight sent
// just before the named one, as many as the notice's gap, whose results
// are missing — and when the notice answers the tail probe of the named
// packet (Missing), that packet, which the gap counts then. A notice of
// another message or of a packet the latest transmission did not send
// names nothing, nor does a gap notice back sooner than half a minimum
// time to result after a resend (it answers an earlier transmission).
func (s *lane) noticeLost(st *qpState, imm wire.Imm, now time.Time) uint64 {
	nb, id := s.pktBits, imm.MsgID()
	p := &st.pkts
	if !st.msg.busy || !s.pktWrites || nb == 0 || id&wire.PacketMsgIDFlag == 0 || len(p.got) != 1 {
		return 0
	}
	k := wire.PacketIndex(id, nb)
	if k >= p.ppm || id != wire.PacketMsgID(st.msg.id, k, nb) || !p.inSent(k) {
		return 0
	}
	var lost uint64
	gap, i := imm.Gap(), k-1
	switch {
	case imm.Missing():
		// One tail probe per transmission, so one such notice: no
		// earlier transmission's can come after it.
		i, gap = k, max(gap, 1)
	case now.Before(p.noticeFrom):
		return 0
	}
	for ; i >= 0 && gap > 0; i-- {
		if !p.inSent(i) {
			continue
		}
		gap--
		if p.got[0]&(1<<i) == 0 {
			lost |= 1 << i
		}
	}
	return lost
}

// resendPackets resends the packets of st's message in lost (one word: a
// message of packet writes has at most 64 packets) as its latest
// transmission, and restarts its timer.
func (s *lane) resendPackets(st *qpState, now time.Time, lost uint64) error {
	s.restartTimer(st, now)
	s.stats.retransmissions.Add(1)
	st.pkts.sent[0] = lost
	st.pkts.resendAt(now, s.eng.est.rack.minRTT())
	s.stats.noticeResends.Add(uint64(bits.OnesCount64(lost)))
	return s.transmitResend(st)
}
