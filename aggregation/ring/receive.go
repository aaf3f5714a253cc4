package ring

// Inbound flow: a batch of completions (handle). A data item from the left
// neighbour (onData) is
//
//   - of this call and new: consumed once — added into the tensor during
//     the reduce-scatter, copied during the all-gather — then
//     acknowledged; a length this rank's tensor does not expect fails the
//     call (mismatch);
//   - of this call and seen before, or of the previous call: acknowledged
//     again (its first acknowledgement may have been lost);
//   - of the next call, before this rank's call started: remembered by
//     slot, consumed and acknowledged when the call starts (engine.go,
//     start);
//   - anything else: stray, counted.
//
// An acknowledgement from the right neighbour goes to onAck (ack.go). The
// receives consumed are then reposted, and the fast retransmissions and
// acknowledgements the batch produced are sent.

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// handle processes a batch of completions, then reposts the receives it
// consumed and sends the acknowledgements it owes.
func (rr *Rank) handle(wcs []verbs.Completion, now time.Time) error {
	var nData, nAck int
	for i := range wcs {
		wc := &wcs[i]
		if err := wc.Err(); err != nil {
			return fmt.Errorf("ring: rank %d: %w", rr.rank, err)
		}
		if wc.Opcode != verbs.WCRecvRDMAWithImm {
			continue // a signaled send
		}
		k, epoch := int(wc.Imm&(ringMaxItems-1)), uint8(wc.Imm>>24)
		switch wc.QPN {
		case rr.qpLeft.QPN():
			nData++
			if err := rr.onData(k, epoch, wc.ByteLen, now, false); err != nil {
				return err
			}
		case rr.qpRight.QPN():
			nAck++
			rr.onAck(k, epoch, now)
		}
	}
	if nData > 0 {
		if _, err := rr.qpLeft.PostRecv(rr.e.recvWRs[:nData]); err != nil {
			return fmt.Errorf("ring: rank %d: repost receives: %w", rr.rank, err)
		}
	}
	if nAck > 0 {
		if _, err := rr.qpRight.PostRecv(rr.e.recvWRs[:nAck]); err != nil {
			return fmt.Errorf("ring: rank %d: repost receives: %w", rr.rank, err)
		}
	}
	if err := rr.postData(); err != nil { // fast retransmissions
		return err
	}
	return rr.flushAcks()
}

// onData handles data item k of the given epoch that has landed in receive
// slot k mod Window. deferred is true for an early item replayed by start.
func (rr *Rank) onData(k int, epoch uint8, byteLen uint32, now time.Time, deferred bool) error {
	e := &rr.e
	switch {
	case e.inCall && epoch == e.epoch:
		if k >= e.k {
			return rr.mismatch(k, byteLen)
		}
		if e.recvDone[k] {
			rr.cnt.duplicates.Add(1)
			break
		}
		lo, hi := rr.recvRange(k)
		if !deferred && byteLen != uint32(4*(hi-lo)) {
			return rr.mismatch(k, byteLen)
		}
		src := rr.slot(rr.recvOff, k)[:4*(hi-lo)]
		reduce := k/e.m < rr.size-1
		switch {
		case e.call.f != nil && reduce:
			addFloat32(e.call.f[lo:hi], f32s(src))
		case e.call.f != nil:
			copy(e.call.f[lo:hi], f32s(src))
		case reduce:
			addInt32(e.call.i[lo:hi], i32s(src))
		default:
			copy(e.call.i[lo:hi], i32s(src))
		}
		e.recvDone[k] = true
		e.recvCount++
		e.lastProgress = now
	case (e.inCall && epoch == e.epoch-1) || (!e.inCall && epoch == e.epoch):
		rr.cnt.duplicates.Add(1) // the left neighbour missed our acknowledgement
	case !e.inCall && epoch == e.epoch+1:
		e.pending[k%rr.window] = k + 1 // consumed and acknowledged when our call starts
		return nil
	default:
		rr.cnt.stray.Add(1)
		return nil
	}
	return rr.queueAck(epoch, k)
}

// mismatch is the error of an item whose length, or index, this rank's
// tensor does not expect: the ranks called AllReduce with different
// lengths.
func (rr *Rank) mismatch(k int, byteLen uint32) error {
	return fmt.Errorf("ring: rank %d: message %d from rank %d carries %d bytes, which this rank's tensor of %d elements does not expect: every rank must call AllReduce with a tensor of the same length",
		rr.rank, k, rr.mod(rr.rank-1), byteLen, rr.e.n)
}

// addFloat32 and addInt32 add src into dst, element by element.
func addFloat32(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

func addInt32(dst, src []int32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
