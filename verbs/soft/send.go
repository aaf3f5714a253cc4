package soft

import (
	"fmt"
	"sync"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// txQueue is a device's transmit queue: the packets of posted work requests,
// segmented, with headers and ICRC, waiting for the doorbell. One queue
// serves every QP of the device, so that the packets of several QPs go out
// in one system call, ordered for GSO (udp.Scheduler).
type txQueue struct {
	mu      sync.Mutex
	bufs    [][]byte  // packet buffers, grown to the largest MTU in use
	bufLen  int       // the size new buffers get
	msgs    []udp.Msg // msgs[:n] are queued
	streams []uint32  // the sending QPN of each queued packet
	ends    []bool    // whether each queued packet ends its message
	n       int
	done    []sendDone // signaled work requests completed by the next flush
	sched   udp.Scheduler
}

// sendDone is a send completion held until its packets are sent: a
// completion must not overtake its packets.
type sendDone struct {
	cq *CQ
	wc verbs.Completion
}

// txQueueLen is the most packets queued before the queue is flushed
// without waiting for the doorbell.
func txQueueLen(batch int) int { return max(4*batch, 256) }

func (t *txQueue) init(batch int) {
	n := txQueueLen(batch)
	t.bufs = make([][]byte, n)
	t.msgs = make([]udp.Msg, n)
	t.streams = make([]uint32, n)
	t.ends = make([]bool, n)
}

// reserve makes sure the queue's buffers hold packets of n bytes; the
// buffers are allocated when first used.
func (t *txQueue) reserve(n int) {
	t.mu.Lock()
	t.bufLen = max(t.bufLen, n)
	t.mu.Unlock()
}

// The engine finds the staged path through this interface: a method renamed
// here must fail the build, not silently cost a system call per QP.
var _ verbs.StagedSender = (*QP)(nil)

// PostSend segments and sends each work request before returning (with
// any packets other QPs of the device staged: see PostSendStaged).
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	t := &q.dev.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := q.stage(wrs)
	if ferr := q.dev.flushLocked(); err == nil && ferr != nil {
		err = fmt.Errorf("soft: send on QP %d: %w", q.qpn, ferr)
	}
	return n, err
}

// PostSendStaged is PostSend without the doorbell: the packets of wrs are
// built (PSNs assigned, ICRC sealed) and queued on the device, and are sent
// by the next Doorbell or PostSend of any QP of the device, or when the
// queue fills. Their completions (Signaled) come after they are sent.
// Posting the work requests of several QPs and then ringing the doorbell
// once sends them all in one system call, as few GSO datagrams as possible.
// Safe for concurrent use with the device's other QPs.
func (q *QP) PostSendStaged(wrs []verbs.SendWR) (int, error) {
	t := &q.dev.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	return q.stage(wrs)
}

// Doorbell sends every packet queued on q's device (by any of its QPs).
func (q *QP) Doorbell() error { return q.dev.Doorbell() }

// Doorbell sends every packet queued by PostSendStaged on any QP of d.
func (d *Device) Doorbell() error {
	t := &d.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := d.flushLocked(); err != nil {
		return fmt.Errorf("soft: doorbell on %s: %w", d.name, err)
	}
	return nil
}

func (q *QP) stage(wrs []verbs.SendWR) (int, error) {
	if q.closed.Load() || q.dev.closing.Load() {
		return 0, fmt.Errorf("soft: post send on QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	if s := q.State(); s != verbs.QPStateRTS {
		return 0, fmt.Errorf("soft: post send on QP %d in state %v: %w (connect it to RTS first)", q.qpn, s, verbs.ErrInvalidState)
	}
	for i := range wrs {
		if err := q.sendOne(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// sendOne segments wr into the transmit queue. The caller holds d.tx.mu.
func (q *QP) sendOne(wr *verbs.SendWR) error {
	if wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMAWriteWithImm {
		return fmt.Errorf("soft: post send on QP %d: opcode %v: %w: UC QPs here support RDMA_WRITE and RDMA_WRITE_WITH_IMM", q.qpn, wr.Opcode, verbs.ErrNotSupported)
	}
	d := q.dev
	t := &d.tx
	d.mu.RLock()
	mr := d.lookupMR(wr.Local.LKey)
	d.mu.RUnlock()
	if mr == nil {
		return fmt.Errorf("soft: post send wr_id %d on QP %d: lkey %#x: %w: no such MR on %s", wr.ID, q.qpn, wr.Local.LKey, verbs.ErrInvalidArgument, d.name)
	}
	length := uint64(wr.Local.Length)
	if wr.Local.Addr+length > uint64(len(mr.buf)) || wr.Local.Addr+length < wr.Local.Addr {
		return fmt.Errorf("soft: post send wr_id %d on QP %d: local range [%d, %d) outside the %d-byte MR: %w", wr.ID, q.qpn, wr.Local.Addr, wr.Local.Addr+length, len(mr.buf), verbs.ErrInvalidArgument)
	}
	src := mr.buf[wr.Local.Addr : wr.Local.Addr+length]
	withImm := wr.Opcode == verbs.WRRDMAWriteWithImm
	npk := 1
	if len(src) > 0 {
		npk = (len(src) + q.mtu - 1) / q.mtu
	}
	pf := rdma.PacketFields{
		BTH:  rdma.BTHFields{PKey: rdma.DefaultPKey, DestQP: q.remoteQP},
		RETH: rdma.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: uint32(length)},
		Imm:  wr.Imm,
	}
	var bytes uint64
	for k := 0; k < npk; k++ {
		if t.n == len(t.msgs) {
			if err := d.flushLocked(); err != nil {
				return fmt.Errorf("soft: send on QP %d: %w", q.qpn, err)
			}
		}
		chunk := src[min(k*q.mtu, len(src)):min((k+1)*q.mtu, len(src))]
		pf.BTH.Opcode = rdma.WriteOpcode(rdma.TransportUC, k == 0, k == npk-1, withImm)
		pf.BTH.PSN = q.sendPSN
		q.sendPSN = rdma.PSNAdd(q.sendPSN, 1)
		plen := rdma.PacketLen(pf.BTH.Opcode, len(chunk))
		buf := t.bufs[t.n]
		if len(buf) < plen {
			buf = make([]byte, max(plen, t.bufLen))
			t.bufs[t.n] = buf
		}
		pkt := buf[:plen]
		off, err := pf.Encode(pkt, len(chunk))
		if err != nil {
			return err
		}
		copy(pkt[off:], chunk)
		if err := q.icrc.Seal(pkt); err != nil {
			return err
		}
		t.msgs[t.n] = udp.Msg{Buf: pkt, N: len(pkt), Addr: q.remote}
		t.streams[t.n] = q.qpn
		t.ends[t.n] = k == npk-1
		t.n++
		bytes += uint64(len(pkt))
	}
	d.cnt.txBytes.Add(bytes)
	d.cnt.txPackets.Add(uint64(npk))
	d.cnt.txMessages.Add(1)
	if wr.Signaled {
		t.done = append(t.done, sendDone{cq: q.sendCQ, wc: verbs.Completion{WRID: wr.ID, Opcode: verbs.WCRDMAWrite, QPN: q.qpn, ByteLen: uint32(length)}})
	}
	return nil
}

// flushLocked sends the queued packets, then delivers the completions of
// the work requests they carried. The caller holds d.tx.mu.
func (d *Device) flushLocked() error {
	t := &d.tx
	var err error
	if t.n > 0 {
		out := t.sched.Order(t.msgs[:t.n], t.streams[:t.n], t.ends[:t.n])
		_, err = d.conn.WriteBatch(out)
		t.n = 0
	}
	for i := range t.done {
		t.done[i].cq.push(&t.done[i].wc)
	}
	t.done = t.done[:0]
	return err
}
