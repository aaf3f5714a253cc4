package soft

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
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

	// send side, guarded by the device's transmit queue lock (dev.tx.mu)
	sendPSN uint32
	flow    rdma.Flow
	icrc    rdma.FlowICRC // ICRC state of the flow to the peer

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
	q := &QP{dev: d, sendCQ: scq, recvCQ: rcq, maxRQ: cfg.MaxRecvWR, rq: make([]verbs.RecvWR, cfg.MaxRecvWR)}
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
	q.dev.tx.reserve(rdma.PacketLen(rdma.UCRDMAWriteOnlyWithImm, q.mtu))
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
