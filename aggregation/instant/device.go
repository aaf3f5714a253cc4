package instant

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// Device is a worker's NIC whose only peer is its Switch: the far end of
// every QP's writes. Safe for concurrent use.
type Device struct {
	sw   *Switch
	addr netip.Addr

	mu      sync.Mutex
	closed  bool
	qps     map[uint32]*QP
	mrs     map[uint32]*MR // by key (lkey = rkey)
	nextQPN uint32
	nextKey uint32
}

var _ verbs.Device = (*Device)(nil)

// NewDevice attaches a worker NIC at addr to the switch.
func (sw *Switch) NewDevice(addr netip.Addr) (*Device, error) {
	if !addr.IsValid() || addr == sw.addr {
		return nil, fmt.Errorf("instant: device at %v: give a valid address other than the switch's", addr)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.devices[addr] != nil {
		return nil, fmt.Errorf("instant: device at %v: address in use", addr)
	}
	d := &Device{sw: sw, addr: addr, qps: make(map[uint32]*QP), mrs: make(map[uint32]*MR), nextQPN: 0x11, nextKey: 0x100}
	sw.devices[addr] = d
	sw.gen.Add(1)
	return d, nil
}

func (d *Device) Name() string     { return "instant:" + d.addr.String() }
func (d *Device) Addr() netip.Addr { return d.addr }

// Close detaches the device from the switch: results for its QPs are
// dropped from now on. Idempotent.
func (d *Device) Close() error {
	d.sw.mu.Lock()
	if d.sw.devices[d.addr] == d {
		delete(d.sw.devices, d.addr)
	}
	d.sw.mu.Unlock()
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.sw.gen.Add(1)
	return nil
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (d *Device) AllocPD() (verbs.PD, error) {
	if d.isClosed() {
		return nil, fmt.Errorf("instant: alloc PD on %s: %w", d.Name(), verbs.ErrClosed)
	}
	return &PD{dev: d}, nil
}

func (d *Device) CreateCQ(entries int) (verbs.CQ, error) {
	if entries <= 0 {
		return nil, fmt.Errorf("instant: create CQ with %d entries: %w", entries, verbs.ErrInvalidArgument)
	}
	c := new(CQ)
	c.Init(entries)
	return c, nil
}

// mr is the MR with key, or nil.
func (d *Device) mr(key uint32) *MR {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mrs[key]
}

// PD is a protection domain of a Device.
type PD struct{ dev *Device }

// AllocMR registers length bytes of zeroed memory (MR: Go memory, which
// only Go code of this process touches).
func (p *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if length <= 0 {
		return nil, fmt.Errorf("instant: register MR of %d bytes: %w", length, verbs.ErrInvalidArgument)
	}
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("instant: register MR on %s: %w", d.Name(), verbs.ErrClosed)
	}
	buf := make([]byte, length)
	d.nextKey++
	mr := &MR{dev: d, key: d.nextKey, access: access, buf: buf}
	d.mrs[mr.key] = mr
	d.sw.gen.Add(1)
	return mr, nil
}

func (p *PD) CreateUCQP(cfg verbs.QPConfig) (verbs.QP, error) {
	send, ok1 := cfg.SendCQ.(*CQ)
	recv, ok2 := cfg.RecvCQ.(*CQ)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("instant: create QP: %w: CQs must come from an instant.Device", verbs.ErrInvalidArgument)
	}
	if cfg.MaxSendWR <= 0 {
		cfg.MaxSendWR = 256
	}
	if cfg.MaxRecvWR <= 0 {
		cfg.MaxRecvWR = 256
	}
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("instant: create QP on %s: %w", d.Name(), verbs.ErrClosed)
	}
	d.nextQPN++
	qp := &QP{dev: d, qpn: d.nextQPN, sendCQ: send, recvCQ: recv, maxSend: cfg.MaxSendWR}
	qp.recv.ids = make([]uint64, cfg.MaxRecvWR, cfg.MaxRecvWR+8) // +8: no other QP's on its last line
	d.qps[qp.qpn] = qp
	d.sw.gen.Add(1)
	return qp, nil
}

func (p *PD) Close() error { return nil }

// MR is a zero-based memory region; its lkey and rkey are equal.
type MR struct {
	dev    *Device
	key    uint32
	access verbs.Access
	buf    []byte

	// closed is set by Close. buf is Go memory (the device is Go code
	// with no DMA engine to keep it from), so a write racing Close lands
	// in memory that stays valid: no lock is taken per request, as none
	// is on a real RNIC's path, and lanes posting from several cores
	// share no lock through their MR.
	closed atomic.Bool
}

func (m *MR) Bytes() []byte        { return m.buf }
func (m *MR) LKey() uint32         { return m.key }
func (m *MR) RKey() uint32         { return m.key }
func (m *MR) IOVA() uint64         { return 0 }
func (m *MR) Access() verbs.Access { return m.access }

// Close deregisters and unmaps the MR. Idempotent.
func (m *MR) Close() error {
	m.dev.mu.Lock()
	delete(m.dev.mrs, m.key)
	m.dev.mu.Unlock()
	m.dev.sw.gen.Add(1)
	m.closed.Store(true)
	return nil
}

// QP is a UC queue pair to the switch. Sends are answered inside
// PostSend (Switch.answer); there is no send queue to fill, so a chain is
// refused only when it is longer than MaxSendWR.
type QP struct {
	dev            *Device
	qpn            uint32
	sendCQ, recvCQ *CQ
	maxSend        int
	state          atomic.Int32 // verbs.QPState

	mu     sync.Mutex // transitions; guards access and rtr
	access verbs.Access
	rtr    verbs.RTRAttr

	// send is PostSend's: the cached path (valid while the switch's gen
	// is path.gen) and the MR of the last local SGE.
	send struct {
		sync.Mutex
		valid bool
		path  path
		src   *MR
	}
	// recv is the receive queue: a ring of posted WR ids.
	recv struct {
		sync.Mutex
		ids     []uint64
		head, n int
	}

	// QPs of different lanes are posted to from different cores.
	_ [64]byte
}

func (q *QP) QPN() uint32          { return q.qpn }
func (q *QP) State() verbs.QPState { return verbs.QPState(q.state.Load()) }

func (q *QP) transition(from, to verbs.QPState, f func()) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.State(); st != from {
		return fmt.Errorf("instant: QP %d %v → %v: %w (QP is %v)", q.qpn, from, to, verbs.ErrInvalidState, st)
	}
	f()
	q.state.Store(int32(to))
	q.dev.sw.gen.Add(1)
	return nil
}

func (q *QP) Init(access verbs.Access) error {
	return q.transition(verbs.QPStateReset, verbs.QPStateInit, func() { q.access = access })
}

func (q *QP) ReadyToReceive(attr verbs.RTRAttr) error {
	if err := attr.MTU.Check(); err != nil {
		return fmt.Errorf("instant: QP %d RTR: %w", q.qpn, err)
	}
	return q.transition(verbs.QPStateInit, verbs.QPStateRTR, func() { q.rtr = attr })
}

func (q *QP) ReadyToSend(uint32) error {
	return q.transition(verbs.QPStateRTR, verbs.QPStateRTS, func() {})
}

// PostSend hands each work request to the switch, which answers it before
// the next one is looked at: a signaled request's completion, then the
// result's, are in the CQs when PostSend returns.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	if st := q.State(); st != verbs.QPStateRTS {
		return 0, fmt.Errorf("instant: post send on QP %d: %w (QP is %v)", q.qpn, verbs.ErrInvalidState, st)
	}
	if len(wrs) > q.maxSend {
		return 0, fmt.Errorf("instant: post %d sends on QP %d: %w (%d WRs)", len(wrs), q.qpn, verbs.ErrQueueFull, q.maxSend)
	}
	sw := q.dev.sw
	q.send.Lock()
	defer q.send.Unlock()
	if g := sw.gen.Load(); !q.send.valid || q.send.path.gen != g {
		q.send.path, q.send.src, q.send.valid = sw.resolve(q), nil, true
	}
	for i := range wrs {
		wr := &wrs[i]
		if wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMAWriteWithImm {
			return i, fmt.Errorf("instant: post send on QP %d: %w: opcode %v (only RDMA writes)", q.qpn, verbs.ErrInvalidArgument, wr.Opcode)
		}
		src := q.send.src
		if src == nil || src.key != wr.Local.LKey {
			if src = q.dev.mr(wr.Local.LKey); src == nil {
				return i, fmt.Errorf("instant: post send on QP %d: %w: lkey %#x", q.qpn, verbs.ErrInvalidArgument, wr.Local.LKey)
			}
			q.send.src = src
		}
		if src.closed.Load() || wr.Local.Addr+uint64(wr.Local.Length) > uint64(len(src.buf)) {
			return i, fmt.Errorf("instant: post send on QP %d: %w: SGE [%d, +%d) lkey %#x", q.qpn, verbs.ErrInvalidArgument, wr.Local.Addr, wr.Local.Length, wr.Local.LKey)
		}
		// The request's completion, then the switch's answer: a NIC
		// completes a UC send when it is on the wire, before any
		// result can come back.
		if wr.Signaled {
			q.sendCQ.Push(&verbs.Completion{WRID: wr.ID, Opcode: verbs.WCRDMAWrite, QPN: q.qpn, ByteLen: wr.Local.Length})
		}
		sw.answer(&q.send.path, wr, src.buf[wr.Local.Addr:wr.Local.Addr+uint64(wr.Local.Length)])
	}
	return len(wrs), nil
}

func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if st := q.State(); st == verbs.QPStateReset || st == verbs.QPStateError {
		return 0, fmt.Errorf("instant: post recv on QP %d: %w (QP is %v)", q.qpn, verbs.ErrInvalidState, st)
	}
	r := &q.recv
	r.Lock()
	defer r.Unlock()
	for i := range wrs {
		if r.n == len(r.ids) {
			return i, fmt.Errorf("instant: post recv on QP %d: %w", q.qpn, verbs.ErrQueueFull)
		}
		r.ids[(r.head+r.n)%len(r.ids)] = wrs[i].ID
		r.n++
	}
	return len(wrs), nil
}

// deliver lands a result of payload at va of mr with immediate imm, as a
// UC responder takes a WRITE WITH IMMEDIATE: it consumes a posted receive
// and completes it.
func (q *QP) deliver(mr *MR, va uint64, imm uint32, payload []byte) (DropReason, bool) {
	if st := q.State(); st != verbs.QPStateRTR && st != verbs.QPStateRTS {
		return DropNoReceiver, false
	}
	if mr.closed.Load() || va+uint64(len(payload)) > uint64(len(mr.buf)) {
		return DropNoReceiver, false
	}
	r := &q.recv
	r.Lock()
	if r.n == 0 {
		r.Unlock()
		return DropNoRecvWR, false
	}
	id := r.ids[r.head]
	r.head = (r.head + 1) % len(r.ids)
	r.n--
	r.Unlock()
	// The bytes land before the completion is pushed under the CQ's lock:
	// whoever polls the completion sees them.
	copy(mr.buf[va:], payload)
	q.recvCQ.Push(&verbs.Completion{WRID: id, Opcode: verbs.WCRecvRDMAWithImm, QPN: q.qpn, ByteLen: uint32(len(payload)), Imm: imm, HasImm: true})
	return 0, true
}

// Close moves the QP to ERROR and detaches it from its device.
func (q *QP) Close() error {
	q.dev.mu.Lock()
	delete(q.dev.qps, q.qpn)
	q.dev.mu.Unlock()
	q.mu.Lock()
	q.state.Store(int32(verbs.QPStateError))
	q.mu.Unlock()
	q.dev.sw.gen.Add(1)
	return nil
}

// CQ is a completion queue (verbs.CQRing). A completion that finds it
// full is lost and reported by Poll (a real CQ overrun puts its QPs in
// error; the engine sizes its CQ for every completion it can have).
type CQ struct{ verbs.CQRing }

func (c *CQ) Wait(ctx context.Context, wcs []verbs.Completion) (int, error) {
	return verbs.Wait(ctx, c, wcs)
}
