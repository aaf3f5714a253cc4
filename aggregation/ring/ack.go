package ring

// Acknowledgements. A rank acknowledges every copy of an item it received,
// once it has consumed the item, with a zero-length WRITE WITH IMMEDIATE
// to the left neighbour carrying the item's immediate (queueAck,
// flushAcks). An acknowledgement from the right (onAck) marks its item
// delivered: the window slides, the round trip is sampled if the item was
// sent once (Karn), and the items sent before it that are still
// unacknowledged are resent after ringFastRetransmit such
// acknowledgements (fast retransmit).

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// ringFastRetransmit: an item is resent at once when this many items
// sent after it were acknowledged (it or its acknowledgement was lost:
// the path is FIFO); TCP's duplicate-ack threshold.
const ringFastRetransmit = 3

// queueAck queues the acknowledgement of item k of epoch (the immediate
// the item came with), flushing when the batch is full.
func (rr *Rank) queueAck(epoch uint8, k int) error {
	e := &rr.e
	e.ackWRs = append(e.ackWRs, verbs.SendWR{
		ID:       uint64(k),
		Opcode:   verbs.WRRDMAWriteWithImm,
		Local:    verbs.SGE{LKey: rr.mr.LKey()},
		RKey:     rr.leftRKey,
		Imm:      rr.imm(epoch, k),
		Signaled: rr.signaled(),
	})
	rr.cnt.acks.Add(1)
	rr.cnt.packets.Add(1)
	if len(e.ackWRs) == cap(e.ackWRs) {
		return rr.flushAcks()
	}
	return nil
}

// flushAcks posts the queued acknowledgements on the left QP.
func (rr *Rank) flushAcks() error {
	e := &rr.e
	if len(e.ackWRs) == 0 {
		return nil
	}
	_, err := rr.qpLeft.PostSend(e.ackWRs)
	e.ackWRs = e.ackWRs[:0]
	if err != nil {
		return fmt.Errorf("ring: rank %d: acknowledge to rank %d: %w", rr.rank, rr.mod(rr.rank-1), err)
	}
	return nil
}

// onAck handles the acknowledgement of item k of epoch; one that matches
// no unacknowledged item sent in this call is stray.
func (rr *Rank) onAck(k int, epoch uint8, now time.Time) {
	e := &rr.e
	if !e.inCall || epoch != e.epoch || k >= e.sendNext || e.acked[k] {
		rr.cnt.stray.Add(1)
		return
	}
	e.acked[k] = true
	e.lastProgress = now
	f := &e.flight[k%rr.window]
	if !f.resent {
		rr.sampleRTT(now.Sub(f.sent))
	}
	// Items transmitted before k and still unacknowledged were lost, or
	// their acknowledgements were (FIFO path); resend after a few such
	// acknowledgements, as TCP does after three duplicate ACKs.
	for j := e.sendBase; j < k; j++ {
		if g := &e.flight[j%rr.window]; !e.acked[j] && g.seq < f.seq {
			if g.later++; g.later >= ringFastRetransmit {
				rr.retransmit(j, now)
			}
		}
	}
	rr.advance()
}
