package switchmodel

import (
	"math"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// Exponents holds, per (slot, set), the immediate the result will carry: the
// message id (the id of the request's immediate, if it has one: a
// retransmission gets its own id back; otherwise the last one stored) and
// the maxima of e0 and e1 over the contributions that
// carried an immediate (LAST/ONLY packets). The first contribution
// overwrites, later ones take the maximum, a retransmission reads. P4:
// p4/rdma_switch Exponents.
type Exponents struct {
	imm []expState // [slot·2 + set]
}

type expState struct {
	msgID  uint16
	e0, e1 int8
}

// unset is the state before any immediate: the smallest exponents, so the
// first real one wins the maximum.
var unset = expState{e0: math.MinInt8, e1: math.MinInt8}

func (e *Exponents) init(pool uint32) {
	e.imm = make([]expState, int(pool)*2)
}

func (e *Exponents) clear(lo, hi uint32) {
	s := e.imm[lo*2 : hi*2]
	for i := range s {
		s[i] = unset
	}
}

// Update folds md.Imm into the slot and leaves the result's immediate in
// md.Imm.
func (e *Exponents) Update(md *Metadata) {
	st := &e.imm[md.slot*2+uint32(md.set)]
	if !md.Retransmission {
		if md.FirstContribution {
			*st = unset
		}
		if md.HasImm {
			st.msgID = md.Imm.MsgID()
			st.e0 = max(st.e0, md.Imm.E0())
			st.e1 = max(st.e1, md.Imm.E1())
		}
	}
	id := st.msgID
	if md.HasImm {
		// A result echoes the id of the request that asked for it: for a
		// retransmission that is its own id, which may name a single
		// packet of the message (per-packet recovery, wire.PacketMsgID).
		id = md.Imm.MsgID()
	}
	md.Imm = wire.MakeImm(id, st.e0, st.e1)
}
