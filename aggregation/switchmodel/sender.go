package switchmodel

import (
	"errors"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// ErrNoResult is returned by Encode for a decision that sends nothing or a
// destination index out of range; ErrShortBuffer when b cannot hold the
// packet (see Metadata.ResultLen).
var (
	ErrNoResult    = errors.New("switchmodel: no such result packet")
	ErrShortBuffer = errors.New("switchmodel: buffer too short for the result packet")
	// ErrOutOfOrder: the packet would not directly follow the last result
	// packet sent to that worker QP, so it is not sent (and uses no PSN).
	ErrOutOfOrder = errors.New("switchmodel: result packet out of order for this worker QP; skipped")
	// ErrEgressLoss: Config.EgressLoss dropped the encoded result (its PSN
	// is used, as a packet lost after the switch).
	ErrEgressLoss = errors.New("switchmodel: result packet dropped by the egress loss simulator")
)

// txPos is where the result stream to one worker QP stands: the pool index of
// the last packet sent and whether its message is still open (sent FIRST or
// MIDDLE, not yet LAST).
//
// Why: slots of one message complete independently. Without loss they
// complete in packet order (each worker sends in order), but after a
// retransmission a unicast reply for packet 1 can follow a broadcast of
// packet 2 that completed meanwhile. Both use the same per-(worker, QP) PSN
// counter, so the UC receiver sees consecutive PSNs and a correct total
// length and would accept the message with packets swapped. So a MIDDLE or
// LAST is only sent to a worker QP right after the previous packet of the
// same message (pool index − 2); otherwise it is skipped for that worker,
// whose message then stays incomplete, times out and is retransmitted, and
// the completed slots replay the whole message in order (unicast).
//
// And a worker's stream never leaves a message mid-way unless loss forced
// it: a worker whose timer fires while the message's slots are
// still completing (a slow peer, a busy host) resends it, and the unicast
// answers for the slots already complete — the FIRST among them — would cut
// into the broadcast still under way; a UC receiver drops both messages.
// So while a message is open to a worker QP, a unicast FIRST, or a unicast
// MIDDLE/LAST behind the stream's position (pool index below the next
// expected), is skipped and the message stays open: its remaining slots
// complete (every worker that lacks them resends) and are broadcast. A
// MIDDLE/LAST ahead of the position means a slot completed before an
// earlier one, which only loss does: the stream closes as above.
type txPos struct {
	last wire.PoolIndex
	open bool
}

// RDMASender builds the result packets: per destination worker, the BTH
// dest QP is that worker's QPN for the packet's QP index, the PSN comes from
// a per-(worker, QP) counter that starts at the PSN the worker gave, the
// opcode mirrors the request's position in its message (FIRST, MIDDLE,
// LAST/ONLY always WITH IMMEDIATE), the RETH of FIRST/ONLY echoes the
// request's va and length with the worker's real rkey, and the immediate of
// LAST/ONLY is msg_id | max(e0) | max(e1). The ICRC bytes are left zero: the
// runtime seals them (the Tofino program cannot, see docs/switch.md). P4:
// p4/rdma_switch RDMASender.
type RDMASender struct{}

func resultOpcode(first, last bool) rdma.Opcode {
	return rdma.WriteOpcode(rdma.TransportUC, first, last, true)
}

// Encode writes result packet d (0 ≤ d < md.Dests(): rank d for a
// broadcast, the sender for a unicast) as a UDP payload (BTH … ICRC) into
// b[:n] and returns n and the worker's address. It advances that worker QP's
// PSN, so call it exactly once per destination, also for a packet that is
// then lost.
func (RDMASender) Encode(proc *Processor, md *Metadata, d int, b []byte) (n int, dst netip.Addr, err error) {
	var rank int
	switch md.Decision {
	case Broadcast:
		if d < 0 || d >= md.job.n {
			return 0, dst, ErrNoResult
		}
		rank = d
	case Unicast:
		if d != 0 {
			return 0, dst, ErrNoResult
		}
		rank = md.Rank
	default:
		return 0, dst, ErrNoResult
	}
	j := md.job
	op := resultOpcode(md.First, md.Last)
	n = rdma.PacketLen(op, j.payload)
	if len(b) < n {
		return 0, dst, ErrShortBuffer
	}
	w := &j.workers[rank]
	k := rank*j.q + md.QP
	tx := &j.tx[k]
	next := tx.last.Add(1)
	switch {
	case tx.open && md.Decision == Unicast && (md.First || md.PoolIndex < next):
		// An answer to a retransmission while this worker QP's message
		// is still being sent (a spurious resend; the rest of the
		// message follows as the slots complete): not interleaved with
		// it, and the message stays open.
		return 0, dst, ErrOutOfOrder
	case md.First:
	case !tx.open || md.PoolIndex != next:
		tx.open = false
		return 0, dst, ErrOutOfOrder
	}
	tx.last, tx.open = md.PoolIndex, !md.Last
	psn := j.psn[k]
	j.psn[k] = (psn + 1) & rdma.PSNMask
	rdma.BTH(b).Encode(&rdma.BTHFields{
		Opcode: op,
		MigReq: true, // as RNICs and rxe send it
		PKey:   rdma.DefaultPKey,
		DestQP: w.qpns[md.QP],
		PSN:    psn,
	})
	off := rdma.BTHSize
	if md.First {
		rdma.RETH(b[off:]).Encode(&rdma.RETHFields{VA: md.VA, RKey: w.rkey, DMALen: md.Len})
		off += rdma.RETHSize
	}
	if md.Last {
		rdma.ImmDt(b[off:]).Encode(uint32(md.Imm))
		off += rdma.ImmDtSize
	}
	store(b[off:off+j.payload], proc.vector(md.slot, md.set, j.payload))
	off += j.payload
	// Payload sizes are multiples of 8: no pad. ICRC left for the runtime.
	clear(b[off:n])
	return n, w.addr, nil
}

// NoticeLen is the UDP payload length (BTH to ICRC) of a gap notice.
var NoticeLen = rdma.PacketLen(resultOpcode(true, true), 0)

// EncodeNotice writes md's gap notice (wire.GapNotice) into b[:n] and
// returns n and the sender's address: a zero-length WRITE ONLY WITH
// IMMEDIATE to the worker QP that sent the packet, on that QP's result
// stream (its PSN counter), the RETH echoing the packet's address with the
// worker's rkey and length 0. Not while a multi-packet result message is
// open to that QP (ErrOutOfOrder): a one-packet write would cut into it,
// and a UC receiver drops both.
func (RDMASender) EncodeNotice(md *Metadata, b []byte) (n int, dst netip.Addr, err error) {
	if !md.Notice || md.job == nil {
		return 0, dst, ErrNoResult
	}
	if len(b) < NoticeLen {
		return 0, dst, ErrShortBuffer
	}
	j := md.job
	w := &j.workers[md.Rank]
	k := md.Rank*j.q + md.QP
	if j.tx[k].open {
		return 0, dst, ErrOutOfOrder
	}
	psn := j.psn[k]
	j.psn[k] = (psn + 1) & rdma.PSNMask
	rdma.BTH(b).Encode(&rdma.BTHFields{
		Opcode: resultOpcode(true, true),
		MigReq: true,
		PKey:   rdma.DefaultPKey,
		DestQP: w.qpns[md.QP],
		PSN:    psn,
	})
	off := rdma.BTHSize
	rdma.RETH(b[off:]).Encode(&rdma.RETHFields{VA: md.VA, RKey: w.rkey})
	off += rdma.RETHSize
	rdma.ImmDt(b[off:]).Encode(uint32(wire.GapNotice(md.Imm.MsgID(), md.Gap, md.Missing)))
	off += rdma.ImmDtSize
	clear(b[off:NoticeLen])
	return NoticeLen, w.addr, nil
}
