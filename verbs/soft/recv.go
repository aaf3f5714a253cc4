package soft

import (
	"net/netip"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// maxDatagram bounds a received RoCEv2 datagram: a 4096-byte MTU packet with
// every header is far below it.
const maxDatagram = 4096 + 256

// receive is the device's receive goroutine. On an endpoint that lends its
// receive memory (udp.Lender: a GRO socket) a packet is read where the
// kernel put it, and its payload copied once, into the MR; msgs' own
// buffers serve an endpoint that does not lend.
func (d *Device) receive() {
	defer close(d.rxDone)
	batch := d.conn.BatchSize()
	msgs := make([]udp.Msg, batch)
	const stride = rdma.ICRCHeadroom + maxDatagram
	store := make([]byte, batch*stride)
	for i := range msgs {
		msgs[i] = udp.Msg{Buf: store[i*stride : (i+1)*stride], Off: rdma.ICRCHeadroom}
	}
	read := d.conn.ReadBatch
	var own []udp.Msg
	if l, ok := d.conn.(udp.Lender); ok {
		read = l.ReadLent
		own = append(own, msgs...)
	}
	var h rxICRC
	var pkt rdma.Packet
	for {
		if own != nil {
			copy(msgs, own)
		}
		n, err := read(msgs)
		if err != nil {
			if errClosedConn(err) || d.closing.Load() {
				return
			}
			continue
		}
		d.handleBatch(&h, &pkt, msgs[:n])
		d.rxWakes.flush()
		d.rxHandled.Add(uint64(n))
	}
}

// maxRxFlows bounds the receive ICRC cache; packets from further sources
// take the uncached path.
const maxRxFlows = 1024

// rxICRC verifies received ICRCs, with the pseudo-header CRC cached per
// source (rdma.FlowICRC): a packet costs one CRC pass over its own bytes.
// Owned by the receive goroutine.
type rxICRC struct {
	h       rdma.ICRC
	flows   map[netip.AddrPort]*rdma.FlowICRC
	lastSrc netip.AddrPort
	last    *rdma.FlowICRC
}

func (r *rxICRC) verify(d *Device, m *udp.Msg) error {
	src := m.Addr
	if r.last == nil || src != r.lastSrc {
		fh := r.flows[src]
		if fh == nil {
			f := rdma.Flow{Src: src.Addr(), Dst: d.Addr(), SrcPort: src.Port(), DstPort: d.conn.LocalAddr().Port(), DF: true}
			if len(r.flows) >= maxRxFlows {
				if m.Off < rdma.ICRCHeadroom {
					return r.h.Verify(&f, m.Bytes()) // a lent packet has no headroom
				}
				return r.h.VerifyHeadroom(&f, m.Buf[:m.Off+m.N], m.Off)
			}
			if r.flows == nil {
				r.flows = make(map[netip.AddrPort]*rdma.FlowICRC)
			}
			fh = new(rdma.FlowICRC)
			fh.Reset(&f)
			r.flows[src] = fh
		}
		r.lastSrc, r.last = src, fh
	}
	return r.last.Verify(m.Bytes())
}

// handleBatch handles a batch of received datagrams under one read lock
// of the device (QPs and MRs cannot go away meanwhile), and counts them
// once: a lock and counter updates per packet would bounce their cache
// lines between this goroutine and the posting ones.
func (d *Device) handleBatch(h *rxICRC, p *rdma.Packet, msgs []udp.Msg) {
	var bytes uint64
	d.mu.RLock()
	for i := range msgs {
		bytes += uint64(msgs[i].N)
		d.handle(h, p, &msgs[i])
	}
	d.mu.RUnlock()
	d.cnt.rxPackets.Add(uint64(len(msgs)))
	d.cnt.rxBytes.Add(bytes)
}

// handle handles one received datagram; the caller holds d.mu (read).
func (d *Device) handle(h *rxICRC, p *rdma.Packet, m *udp.Msg) {
	payload := m.Bytes()
	c := &d.cnt
	if err := p.Parse(payload); err != nil {
		c.rxMalformed.Add(1)
		return
	}
	src := m.Addr.Addr()
	if d.cfg.ICRC == ICRCVerify || (d.cfg.ICRC == ICRCIgnoreIPv4 && !src.Is4()) {
		if err := h.verify(d, m); err != nil {
			c.rxBadICRC.Add(1)
			return
		}
	}
	op := p.BTH.Opcode()
	if op.Transport() != rdma.TransportUC || !op.IsRDMAWrite() {
		c.rxUnsupported.Add(1)
		return
	}
	q := d.qps[p.BTH.DestQP()]
	if q == nil {
		c.rxUnknownQP.Add(1)
		return
	}
	if st := q.State(); st != verbs.QPStateRTR && st != verbs.QPStateRTS {
		c.rxUnknownQP.Add(1)
		return
	}
	if src != q.remote.Addr() {
		c.rxBadSource.Add(1)
		return
	}
	q.receiveWrite(p, op)
}

// receiveWrite applies the UC responder rules of the IBA (which Linux rxe
// follows except for one: rxe drops a FIRST/ONLY that arrives while a WRITE
// is partial, see verbs.UCTruncation) to one RDMA
// WRITE packet of q. The caller holds d.mu (read), so MRs cannot go away.
func (q *QP) receiveWrite(p *rdma.Packet, op rdma.Opcode) {
	d := q.dev
	c := &d.cnt
	rx := &q.rx
	psn := p.BTH.PSN()
	n := uint32(len(p.Payload))
	if op.IsFirst() {
		// FIRST/ONLY start a message at any PSN, abandoning a partial one.
		rx.inMessage = false
		reth := p.RETH
		if op.IsLast() && n == 0 && reth.DMALen() == 0 {
			// A zero-length write moves nothing: no rkey or range is
			// checked (IBA C9-88, as rxe does); with an immediate it
			// still consumes a receive (a switch's gap notice).
			*rx = rxState{expectPSN: rdma.PSNAdd(psn, 1)}
			q.completeWrite(p, op, 0)
			return
		}
		mr := d.lookupMR(reth.RKey())
		if mr == nil || mr.access&verbs.AccessRemoteWrite == 0 || q.access&verbs.AccessRemoteWrite == 0 {
			c.rxBadRKey.Add(1)
			rx.expectPSN = rdma.PSNAdd(psn, 1)
			return
		}
		va, length := reth.VA(), reth.DMALen()
		if va+uint64(length) > uint64(len(mr.buf)) || va+uint64(length) < va {
			c.rxBadRange.Add(1)
			rx.expectPSN = rdma.PSNAdd(psn, 1)
			return
		}
		if (op.IsLast() && n != length) || (!op.IsLast() && (int(n) != q.mtu || n >= length)) {
			c.rxBadRange.Add(1)
			rx.expectPSN = rdma.PSNAdd(psn, 1)
			return
		}
		*rx = rxState{expectPSN: rdma.PSNAdd(psn, 1), inMessage: !op.IsLast(), mr: mr, va: va, remaining: length, length: length}
	} else {
		if !rx.inMessage || psn != rx.expectPSN {
			// A gap or a MIDDLE/LAST without its FIRST: drop the rest of
			// the message.
			rx.inMessage = false
			c.rxSequence.Add(1)
			return
		}
		if (op.IsLast() && n != rx.remaining) || (!op.IsLast() && (int(n) != q.mtu || n >= rx.remaining)) {
			rx.inMessage = false
			c.rxBadRange.Add(1)
			return
		}
		rx.expectPSN = rdma.PSNAdd(psn, 1)
		if op.IsLast() {
			rx.inMessage = false
		}
	}
	q.completeWrite(p, op, n)
}

// completeWrite places the n payload bytes of p at the receive state's
// address and, for the last packet of a message, counts it and completes a
// receive for its immediate. A packet with an immediate consumes a posted
// receive, and one that finds none is dropped before its payload is
// placed, as rxe does (its responder checks the receive queue before it
// writes): a late result no receive waits for must not overwrite memory
// unseen.
func (q *QP) completeWrite(p *rdma.Packet, op rdma.Opcode, n uint32) {
	c, rx := &q.dev.cnt, &q.rx
	var wr verbs.RecvWR
	if op.IsLast() && op.HasImm() {
		var ok bool
		if wr, ok = q.popRecv(); !ok {
			rx.inMessage = false
			c.rxNoRecvWR.Add(1)
			return
		}
	}
	if n > 0 {
		copy(rx.mr.buf[rx.va:], p.Payload)
		rx.va += uint64(n)
		rx.remaining -= n
	}
	if !op.IsLast() {
		return
	}
	c.rxMessages.Add(1)
	if !op.HasImm() {
		return
	}
	if q.recvCQ.add(&verbs.Completion{WRID: wr.ID, Opcode: verbs.WCRecvRDMAWithImm, QPN: q.qpn,
		ByteLen: rx.length, Imm: p.ImmDt.Imm(), HasImm: true}) {
		q.dev.rxWakes.add(q.recvCQ)
	}
}

// rxWakes are the CQs the receive goroutine added completions to while
// handling a batch of datagrams: it wakes each once when the batch is done
// instead of once per completion. A batch of one-packet results (packet
// writes) would otherwise wake the worker's engine for each packet, which
// then polls one completion, sleeps and is woken again. Owned by the
// receive goroutine.
type rxWakes struct{ cqs []*CQ }

func (w *rxWakes) add(cq *CQ) {
	if n := len(w.cqs); n > 0 && w.cqs[n-1] == cq {
		return
	}
	for _, c := range w.cqs {
		if c == cq {
			return
		}
	}
	w.cqs = append(w.cqs, cq)
}

func (w *rxWakes) flush() {
	for i, c := range w.cqs {
		c.Wake()
		w.cqs[i] = nil
	}
	w.cqs = w.cqs[:0]
}
