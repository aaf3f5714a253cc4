package soft

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// QP is an unreliable-connected queue pair of a userspace NIC.
type QP struct {
	dev    *Device
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	maxRQ  int

	// Attributes, written by the state transitions (before traffic) and
	// read by the send and receive paths.
	state    atomic.Int32
	access   verbs.Access
	remote   netip.AddrPort
	remoteQP uint32
	mtu      int

	// send side, owned by the PostSend caller
	sendPSN uint32
	flow    rdma.Flow
	icrc    rdma.FlowICRC // ICRC state of the flow to the peer
	bufs    [][]byte
	msgs    []udp.Msg

	// receive queue, filled by PostRecv and consumed by the receive goroutine
	rqMu sync.Mutex
	rq   []verbs.RecvWR
	rqHd int
	rqN  int

	// UC responder state, owned by the receive goroutine
	rx rxState

	closed atomic.Bool
}

// rxState is the UC responder state of one QP (rxe's qp->resp).
type rxState struct {
	expectPSN uint32
	inMessage bool // a FIRST was accepted and its LAST not yet seen
	mr        *MR
	va        uint64 // where the next payload byte goes
	remaining uint32 // bytes of the message still to come
	length    uint32 // the message length (RETH DMA length)
}

var _ verbs.QP = (*QP)(nil)

// CreateUCQP creates a UC QP in RESET.
func (p *PD) CreateUCQP(cfg verbs.QPConfig) (verbs.QP, error) {
	d := p.dev
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	scq, ok1 := cfg.SendCQ.(*CQ)
	rcq, ok2 := cfg.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("soft: create QP: %w: the send and receive CQs must be created by the same soft device", verbs.ErrInvalidArgument)
	}
	if cfg.MaxRecvWR <= 0 {
		cfg.MaxRecvWR = 256
	}
	batch := d.conn.BatchSize()
	q := &QP{dev: d, sendCQ: scq, recvCQ: rcq, maxRQ: cfg.MaxRecvWR, rq: make([]verbs.RecvWR, cfg.MaxRecvWR),
		bufs: make([][]byte, batch), msgs: make([]udp.Msg, batch)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("soft: %s: %w", d.name, verbs.ErrClosed)
	}
	q.qpn = d.nextQPN & rdma.QPNMask
	d.nextQPN++
	d.qps[q.qpn] = q
	return q, nil
}

func (q *QP) QPN() uint32          { return q.qpn }
func (q *QP) State() verbs.QPState { return verbs.QPState(q.state.Load()) }

func (q *QP) transition(from, to verbs.QPState) error {
	if q.closed.Load() {
		return fmt.Errorf("soft: QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	if s := q.State(); s != from {
		return fmt.Errorf("soft: QP %d: move to %v from %v: %w (must be %v)", q.qpn, to, s, verbs.ErrInvalidState, from)
	}
	return nil
}

// Init moves RESET → INIT.
func (q *QP) Init(access verbs.Access) error {
	if err := q.transition(verbs.QPStateReset, verbs.QPStateInit); err != nil {
		return err
	}
	q.access = access
	q.state.Store(int32(verbs.QPStateInit))
	return nil
}

// ReadyToReceive moves INIT → RTR.
func (q *QP) ReadyToReceive(a verbs.RTRAttr) error {
	if err := q.transition(verbs.QPStateInit, verbs.QPStateRTR); err != nil {
		return err
	}
	if err := a.MTU.Check(); err != nil {
		return fmt.Errorf("soft: QP %d: %w", q.qpn, err)
	}
	ra := a.RemoteAddr.Unmap()
	if !ra.IsValid() || ra.Is4() != q.dev.Addr().Is4() {
		return fmt.Errorf("soft: QP %d: remote address %v: %w: it must be an %s address like the NIC's own %v",
			q.qpn, a.RemoteAddr, verbs.ErrInvalidArgument, family(q.dev.Addr()), q.dev.Addr())
	}
	if a.RemoteQPN > rdma.QPNMask {
		return fmt.Errorf("soft: QP %d: remote QPN %#x: %w: QPNs are 24-bit", q.qpn, a.RemoteQPN, verbs.ErrInvalidArgument)
	}
	q.remote = netip.AddrPortFrom(ra, q.dev.peer)
	q.remoteQP = a.RemoteQPN
	q.mtu = int(a.MTU)
	q.rx = rxState{expectPSN: a.RecvPSN & rdma.PSNMask}
	q.flow = rdma.Flow{Src: q.dev.Addr(), Dst: ra, SrcPort: q.dev.conn.LocalAddr().Port(), DstPort: q.dev.peer, DF: true}
	q.icrc.Reset(&q.flow)
	for i := range q.bufs {
		q.bufs[i] = make([]byte, rdma.PacketLen(rdma.UCRDMAWriteOnlyWithImm, q.mtu))
	}
	q.state.Store(int32(verbs.QPStateRTR))
	return nil
}

func family(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// ReadyToSend moves RTR → RTS.
func (q *QP) ReadyToSend(sendPSN uint32) error {
	if err := q.transition(verbs.QPStateRTR, verbs.QPStateRTS); err != nil {
		return err
	}
	q.sendPSN = sendPSN & rdma.PSNMask
	q.state.Store(int32(verbs.QPStateRTS))
	return nil
}

// PostSend segments and sends each work request before returning.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	if q.closed.Load() || q.dev.closing.Load() {
		return 0, fmt.Errorf("soft: post send on QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	if s := q.State(); s != verbs.QPStateRTS {
		return 0, fmt.Errorf("soft: post send on QP %d in state %v: %w (connect it to RTS first)", q.qpn, s, verbs.ErrInvalidState)
	}
	nb := 0
	for i := range wrs {
		if err := q.sendOne(&wrs[i], &nb); err != nil {
			return i, err
		}
	}
	if err := q.flush(&nb); err != nil {
		return len(wrs), err
	}
	return len(wrs), nil
}

func (q *QP) sendOne(wr *verbs.SendWR, nb *int) error {
	if wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMAWriteWithImm {
		return fmt.Errorf("soft: post send on QP %d: opcode %v: %w: UC QPs here support RDMA_WRITE and RDMA_WRITE_WITH_IMM", q.qpn, wr.Opcode, verbs.ErrNotSupported)
	}
	d := q.dev
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
	for k := 0; k < npk; k++ {
		chunk := src[min(k*q.mtu, len(src)):min((k+1)*q.mtu, len(src))]
		pf.BTH.Opcode = rdma.WriteOpcode(rdma.TransportUC, k == 0, k == npk-1, withImm)
		pf.BTH.PSN = q.sendPSN
		q.sendPSN = rdma.PSNAdd(q.sendPSN, 1)
		pkt := q.bufs[*nb][:rdma.PacketLen(pf.BTH.Opcode, len(chunk))]
		off, err := pf.Encode(pkt, len(chunk))
		if err != nil {
			return err
		}
		copy(pkt[off:], chunk)
		if err := q.icrc.Seal(pkt); err != nil {
			return err
		}
		q.msgs[*nb] = udp.Msg{Buf: pkt, N: len(pkt), Addr: q.remote}
		*nb++
		d.cnt.txBytes.Add(uint64(len(pkt)))
		if *nb == len(q.bufs) {
			if err := q.flush(nb); err != nil {
				return err
			}
		}
	}
	d.cnt.txPackets.Add(uint64(npk))
	d.cnt.txMessages.Add(1)
	if wr.Signaled {
		if *nb > 0 {
			// The completion must not overtake the packets.
			if err := q.flush(nb); err != nil {
				return err
			}
		}
		q.sendCQ.push(&verbs.Completion{WRID: wr.ID, Opcode: verbs.WCRDMAWrite, QPN: q.qpn, ByteLen: uint32(length)})
	}
	return nil
}

func (q *QP) flush(nb *int) error {
	if *nb == 0 {
		return nil
	}
	_, err := q.dev.conn.WriteBatch(q.msgs[:*nb])
	*nb = 0
	if err != nil {
		return fmt.Errorf("soft: send on QP %d: %w", q.qpn, err)
	}
	return nil
}

// PostRecv queues receive work requests.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.closed.Load() {
		return 0, fmt.Errorf("soft: post recv on QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	for i := range wrs {
		if q.rqN == len(q.rq) {
			return i, fmt.Errorf("soft: post recv on QP %d: %w: %d receives outstanding (MaxRecvWR)", q.qpn, verbs.ErrQueueFull, q.rqN)
		}
		q.rq[(q.rqHd+q.rqN)%len(q.rq)] = wrs[i]
		q.rqN++
	}
	return len(wrs), nil
}

func (q *QP) popRecv() (verbs.RecvWR, bool) {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.rqN == 0 {
		return verbs.RecvWR{}, false
	}
	wr := q.rq[q.rqHd]
	q.rqHd = (q.rqHd + 1) % len(q.rq)
	q.rqN--
	return wr, true
}

// Close destroys the QP; packets for it are then dropped as unknown.
// Idempotent.
func (q *QP) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.state.Store(int32(verbs.QPStateError))
	d := q.dev
	d.mu.Lock()
	delete(d.qps, q.qpn)
	d.mu.Unlock()
	return nil
}
