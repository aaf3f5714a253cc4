package ring

// Outbound flow: how an item leaves a rank.
//
//  1. fill takes the next item while the window has room (item k waits
//     for the acknowledgement of item k−Window, whose slots it reuses) and
//     its data is there (item k ≥ M waits for item k−M from the left); an
//     item with no elements counts as acknowledged at once.
//  2. Its elements are copied into its send slot, its flight record and
//     timer start, and dataWR builds its RDMA WRITE WITH IMMEDIATE into
//     the right neighbour's receive slot.
//  3. postData posts the batch on the right QP (new items, and the
//     retransmissions of rto.go and ack.go).
//
// advance slides the window's base past the acknowledged items.

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// fill sends new items while the window and the dependencies allow.
func (rr *Rank) fill(now time.Time) error {
	e := &rr.e
	for e.sendNext < e.k && e.sendNext < e.sendBase+rr.window {
		k := e.sendNext
		if k >= e.m && !e.recvDone[k-e.m] {
			break
		}
		lo, hi := rr.sendRange(k)
		e.sendNext++
		if lo == hi {
			e.acked[k] = true
			rr.advance()
			continue
		}
		dst := rr.slot(0, k)
		if e.call.f != nil {
			copy(f32s(dst), e.call.f[lo:hi])
		} else {
			copy(i32s(dst), e.call.i[lo:hi])
		}
		length := uint32(4 * (hi - lo))
		f := &e.flight[k%rr.window]
		e.txSeq++
		*f = ringFlight{k: k, length: length, sent: now, seq: e.txSeq, deadline: now.Add(e.rto)}
		e.nextTimer = timing.Earlier(e.nextTimer, f.deadline)
		e.sendWRs = append(e.sendWRs, rr.dataWR(k, length))
		rr.cnt.messages.Add(1)
	}
	return rr.postData()
}

// advance slides the window's base past the acknowledged items.
func (rr *Rank) advance() {
	e := &rr.e
	for e.sendBase < e.sendNext && e.acked[e.sendBase] {
		e.sendBase++
	}
}

// dataWR is item k's write: length bytes of its send slot into the right
// neighbour's receive slot, numbered by its immediate.
func (rr *Rank) dataWR(k int, length uint32) verbs.SendWR {
	slot := uint64((k % rr.window) * rr.msgBytes)
	rr.cnt.packets.Add(uint64(max(ceilDiv(int(length), int(rr.cfg.MTU)), 1)))
	return verbs.SendWR{
		ID:         uint64(k),
		Opcode:     verbs.WRRDMAWriteWithImm,
		Local:      verbs.SGE{Addr: slot, Length: length, LKey: rr.mr.LKey()},
		RemoteAddr: rr.recvOff + slot,
		RKey:       rr.rightRKey,
		Imm:        rr.imm(rr.e.epoch, k),
		Signaled:   rr.signaled(),
	}
}

// signaled requests a send completion now and then, so that a hardware send
// queue of unsignaled requests gets reclaimed.
func (rr *Rank) signaled() bool {
	rr.e.signal++
	if rr.e.signal >= rr.window {
		rr.e.signal = 0
		return true
	}
	return false
}

// postData posts the queued data writes on the right QP.
func (rr *Rank) postData() error {
	e := &rr.e
	if len(e.sendWRs) == 0 {
		return nil
	}
	_, err := rr.qpRight.PostSend(e.sendWRs)
	e.sendWRs = e.sendWRs[:0]
	if err != nil {
		return fmt.Errorf("ring: rank %d: send to rank %d: %w", rr.rank, rr.mod(rr.rank+1), err)
	}
	return nil
}
