// Package verbstest is an in-memory implementation of the verbs interfaces
// for unit tests: devices attached to a Network, an in-process "wire" that
// carries whole RDMA WRITE messages between them, with injectable loss.
//
// The fake keeps the semantics the SwitchML worker engine relies on and
// nothing more: zero-based MRs (IOVA 0), UC queue pairs that only accept
// messages from their connected peer (address and QPN), RDMA WRITE and
// WRITE WITH IMMEDIATE (the latter consumes a posted receive WR and produces
// a WCRecvRDMAWithImm completion; with no receive posted the message is
// dropped, as a UC responder does), and completion queues with blocking Wait.
// Messages travel whole: losing a message stands for losing any of its
// packets. PSNs are not modelled.
//
// A test can also attach a message-level Handler at an address (for
// example a switch that cuts each message into its RoCEv2 packets and runs
// them through the switch pipeline) and inject messages with Network.Send.
//
// Concurrency: every method is safe for concurrent use. Messages are
// delivered in FIFO order by one goroutine per Network, which also runs the
// Handlers; Close stops it.
package verbstest

import (
	"context"
	"fmt"
	"golang.org/x/sys/unix"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// Message is one RDMA WRITE (with or without immediate) on the wire.
type Message struct {
	Src    netip.Addr
	SrcQPN uint32
	Dst    netip.Addr
	DstQPN uint32
	// WithImm marks a WRITE WITH IMMEDIATE; Imm is then valid.
	WithImm bool
	Imm     uint32
	RKey    uint32
	VA      uint64
	// Payload is owned by the Network; a Handler must copy what it keeps.
	Payload []byte
}

// Handler receives the messages sent to an attached address. It runs on the
// Network's delivery goroutine and may call Network.Send.
type Handler func(m *Message)

// Stats counts what a Network did.
type Stats struct {
	Sent      uint64 // messages handed to the wire
	Dropped   uint64 // by the Drop function
	Delivered uint64 // into a device's memory or to a Handler
	// Rejected: no such address or QP, wrong peer, bad rkey or range, QP not
	// ready, or no receive WR posted.
	Rejected uint64
}

// Network is an in-memory wire between fake devices and handlers.
type Network struct {
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*Message
	closed   bool
	devices  map[netip.Addr]*Device
	handlers map[netip.Addr]Handler
	drop     func(*Message) bool
	done     chan struct{}

	sent, dropped, delivered, rejected atomic.Uint64
}

// NewNetwork starts a Network; Close it when done.
func NewNetwork() *Network {
	n := &Network{
		devices:  make(map[netip.Addr]*Device),
		handlers: make(map[netip.Addr]Handler),
		done:     make(chan struct{}),
	}
	n.cond = sync.NewCond(&n.mu)
	go n.run()
	return n
}

// SetDrop installs f, called for every message before delivery (on the
// delivery goroutine); returning true loses the message. nil drops nothing.
func (n *Network) SetDrop(f func(*Message) bool) {
	n.mu.Lock()
	n.drop = f
	n.mu.Unlock()
}

// Attach makes h receive every message sent to addr. It fails if a device
// or handler already has addr.
func (n *Network) Attach(addr netip.Addr, h Handler) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.devices[addr] != nil || n.handlers[addr] != nil {
		return fmt.Errorf("verbstest: address %v is in use", addr)
	}
	n.handlers[addr] = h
	return nil
}

// Detach removes the handler at addr.
func (n *Network) Detach(addr netip.Addr) {
	n.mu.Lock()
	delete(n.handlers, addr)
	n.mu.Unlock()
}

// Send queues a copy of m for delivery.
func (n *Network) Send(m Message) {
	m.Payload = append([]byte(nil), m.Payload...)
	n.enqueue(&m)
}

func (n *Network) enqueue(m *Message) {
	n.sent.Add(1)
	n.mu.Lock()
	if !n.closed {
		n.queue = append(n.queue, m)
		n.cond.Signal()
	}
	n.mu.Unlock()
}

// Stats returns the Network's counters.
func (n *Network) Stats() Stats {
	return Stats{Sent: n.sent.Load(), Dropped: n.dropped.Load(), Delivered: n.delivered.Load(), Rejected: n.rejected.Load()}
}

// Close stops delivery; queued messages are discarded. Devices stay usable
// but nothing reaches them any more.
func (n *Network) Close() error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		n.queue = nil
		n.cond.Broadcast()
	}
	n.mu.Unlock()
	<-n.done
	return nil
}

func (n *Network) run() {
	defer close(n.done)
	for {
		n.mu.Lock()
		for len(n.queue) == 0 && !n.closed {
			n.cond.Wait()
		}
		if n.closed {
			n.mu.Unlock()
			return
		}
		m := n.queue[0]
		n.queue[0] = nil
		n.queue = n.queue[1:]
		drop := n.drop
		h := n.handlers[m.Dst]
		d := n.devices[m.Dst]
		n.mu.Unlock()
		switch {
		case drop != nil && drop(m):
			n.dropped.Add(1)
		case h != nil:
			n.delivered.Add(1)
			h(m)
		case d != nil && d.deliver(m):
			n.delivered.Add(1)
		default:
			n.rejected.Add(1)
		}
	}
}

// Device is a fake RDMA device at one address.
type Device struct {
	net  *Network
	addr netip.Addr

	mu      sync.Mutex
	closed  bool
	qps     map[uint32]*QP
	mrs     map[uint32]*MR // by rkey (= lkey)
	nextQPN uint32
	nextKey uint32
}

var _ verbs.Device = (*Device)(nil)

// NewDevice adds a device at addr to the network.
func (n *Network) NewDevice(addr netip.Addr) (*Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.devices[addr] != nil || n.handlers[addr] != nil {
		return nil, fmt.Errorf("verbstest: address %v is in use", addr)
	}
	d := &Device{net: n, addr: addr, qps: make(map[uint32]*QP), mrs: make(map[uint32]*MR), nextQPN: 0x11, nextKey: 0x100}
	n.devices[addr] = d
	return d, nil
}

func (d *Device) Name() string     { return "verbstest:" + d.addr.String() }
func (d *Device) Addr() netip.Addr { return d.addr }

// Close detaches the device from the network: messages to its address are
// rejected from now on, as if the host were gone.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.net.mu.Lock()
	if d.net.devices[d.addr] == d {
		delete(d.net.devices, d.addr)
	}
	d.net.mu.Unlock()
	return nil
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (d *Device) AllocPD() (verbs.PD, error) {
	if d.isClosed() {
		return nil, fmt.Errorf("verbstest: alloc PD on %s: %w", d.Name(), verbs.ErrClosed)
	}
	return &PD{dev: d}, nil
}

func (d *Device) CreateCQ(entries int) (verbs.CQ, error) {
	if entries <= 0 {
		return nil, fmt.Errorf("verbstest: create CQ with %d entries: %w", entries, verbs.ErrInvalidArgument)
	}
	c := new(CQ)
	c.Init(entries)
	return c, nil
}

// deliver applies m to the addressed QP; false if it was rejected.
func (d *Device) deliver(m *Message) bool {
	d.mu.Lock()
	qp := d.qps[m.DstQPN]
	mr := d.mrs[m.RKey]
	closed := d.closed
	d.mu.Unlock()
	if closed || qp == nil || mr == nil {
		return false
	}
	return qp.receive(m, mr)
}

// PD is a fake protection domain.
type PD struct{ dev *Device }

func (p *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if length <= 0 {
		return nil, fmt.Errorf("verbstest: register MR of %d bytes: %w", length, verbs.ErrInvalidArgument)
	}
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbstest: register MR: %w", verbs.ErrClosed)
	}
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("verbstest: mmap %d bytes for an MR: %w", length, err)
	}
	d.nextKey++
	mr := &MR{dev: d, key: d.nextKey, access: access, buf: buf}
	d.mrs[mr.key] = mr
	return mr, nil
}

func (p *PD) CreateUCQP(cfg verbs.QPConfig) (verbs.QP, error) {
	send, ok1 := cfg.SendCQ.(*CQ)
	recv, ok2 := cfg.RecvCQ.(*CQ)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("verbstest: create QP: %w: CQs must come from verbstest", verbs.ErrInvalidArgument)
	}
	if cfg.MaxRecvWR <= 0 {
		cfg.MaxRecvWR = 256
	}
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbstest: create QP: %w", verbs.ErrClosed)
	}
	d.nextQPN++
	qp := &QP{dev: d, qpn: d.nextQPN, sendCQ: send, recvCQ: recv, maxRecv: cfg.MaxRecvWR}
	d.qps[qp.qpn] = qp
	return qp, nil
}

func (p *PD) Close() error { return nil }

// MR is a fake zero-based memory region on the Go heap. Its lkey and rkey
// are equal.
//
// Like a real NIC's (and verbs/soft's) registered memory, the buffer lives
// outside the Go heap (anonymous mmap): the fake NIC writes it from its own
// goroutine as a NIC would by DMA, and RDMA allows a remote write to land
// while the owner reads the same bytes (a duplicate result of a retransmitted
// message) — the race detector sees Go-heap memory only, as it cannot see DMA.
type MR struct {
	dev    *Device
	key    uint32
	access verbs.Access
	buf    []byte

	mu     sync.RWMutex // held (read) by incoming writes, (write) by Close
	closed bool
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
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return unix.Munmap(m.buf)
}

// QP is a fake UC queue pair.
type QP struct {
	dev            *Device
	qpn            uint32
	sendCQ, recvCQ *CQ
	maxRecv        int

	mu     sync.Mutex
	state  verbs.QPState
	access verbs.Access
	rtr    verbs.RTRAttr
	recvs  []verbs.RecvWR
}

func (q *QP) QPN() uint32 { return q.qpn }

func (q *QP) State() verbs.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *QP) transition(from, to verbs.QPState, f func()) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != from {
		return fmt.Errorf("verbstest: QP %d %v → %v: %w (QP is %v)", q.qpn, from, to, verbs.ErrInvalidState, q.state)
	}
	f()
	q.state = to
	return nil
}

func (q *QP) Init(access verbs.Access) error {
	return q.transition(verbs.QPStateReset, verbs.QPStateInit, func() { q.access = access })
}

func (q *QP) ReadyToReceive(attr verbs.RTRAttr) error {
	if err := attr.MTU.Check(); err != nil {
		return fmt.Errorf("verbstest: QP %d RTR: %w", q.qpn, err)
	}
	return q.transition(verbs.QPStateInit, verbs.QPStateRTR, func() { q.rtr = attr })
}

func (q *QP) ReadyToSend(uint32) error {
	return q.transition(verbs.QPStateRTR, verbs.QPStateRTS, func() {})
}

func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.mu.Lock()
	state, rtr := q.state, q.rtr
	q.mu.Unlock()
	if q.dev.isClosed() {
		return 0, fmt.Errorf("verbstest: post send on QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	if state != verbs.QPStateRTS {
		return 0, fmt.Errorf("verbstest: post send on QP %d: %w (QP is %v)", q.qpn, verbs.ErrInvalidState, state)
	}
	for i := range wrs {
		wr := &wrs[i]
		if wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMAWriteWithImm {
			return i, fmt.Errorf("verbstest: post send on QP %d: %w: opcode %v (only RDMA writes)", q.qpn, verbs.ErrInvalidArgument, wr.Opcode)
		}
		q.dev.mu.Lock()
		mr := q.dev.mrs[wr.Local.LKey]
		q.dev.mu.Unlock()
		if mr == nil || wr.Local.Addr+uint64(wr.Local.Length) > uint64(len(mr.buf)) {
			return i, fmt.Errorf("verbstest: post send on QP %d: %w: SGE [%d, +%d) lkey %#x", q.qpn, verbs.ErrInvalidArgument, wr.Local.Addr, wr.Local.Length, wr.Local.LKey)
		}
		m := &Message{
			Src: q.dev.addr, SrcQPN: q.qpn, Dst: rtr.RemoteAddr, DstQPN: rtr.RemoteQPN,
			WithImm: wr.Opcode == verbs.WRRDMAWriteWithImm, Imm: wr.Imm,
			RKey: wr.RKey, VA: wr.RemoteAddr,
			Payload: append([]byte(nil), mr.buf[wr.Local.Addr:wr.Local.Addr+uint64(wr.Local.Length)]...),
		}
		q.dev.net.enqueue(m)
		if wr.Signaled {
			q.sendCQ.Push(&verbs.Completion{WRID: wr.ID, Opcode: verbs.WCRDMAWrite, QPN: q.qpn, ByteLen: wr.Local.Length})
		}
	}
	return len(wrs), nil
}

func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.dev.isClosed() {
		return 0, fmt.Errorf("verbstest: post recv on QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == verbs.QPStateReset || q.state == verbs.QPStateError {
		return 0, fmt.Errorf("verbstest: post recv on QP %d: %w (QP is %v)", q.qpn, verbs.ErrInvalidState, q.state)
	}
	for i, wr := range wrs {
		if len(q.recvs) >= q.maxRecv {
			return i, fmt.Errorf("verbstest: post recv on QP %d: %w", q.qpn, verbs.ErrQueueFull)
		}
		q.recvs = append(q.recvs, wr)
	}
	return len(wrs), nil
}

// receive applies an incoming write; the caller looked up mr by rkey.
func (q *QP) receive(m *Message, mr *MR) bool {
	q.mu.Lock()
	ok := (q.state == verbs.QPStateRTR || q.state == verbs.QPStateRTS) &&
		q.rtr.RemoteAddr == m.Src && q.rtr.RemoteQPN == m.SrcQPN &&
		q.access&verbs.AccessRemoteWrite != 0 && mr.access&verbs.AccessRemoteWrite != 0 &&
		m.VA+uint64(len(m.Payload)) <= uint64(len(mr.buf)) &&
		(!m.WithImm || len(q.recvs) > 0)
	var wr verbs.RecvWR
	if ok && m.WithImm {
		wr = q.recvs[0]
		q.recvs = q.recvs[1:]
	}
	q.mu.Unlock()
	if !ok {
		return false
	}
	// The copy happens before the completion is pushed under the CQ's lock:
	// whoever polls the completion sees the bytes.
	mr.mu.RLock()
	if mr.closed {
		mr.mu.RUnlock()
		return false
	}
	copy(mr.buf[m.VA:], m.Payload)
	mr.mu.RUnlock()
	if m.WithImm {
		q.recvCQ.Push(&verbs.Completion{WRID: wr.ID, Opcode: verbs.WCRecvRDMAWithImm, QPN: q.qpn, ByteLen: uint32(len(m.Payload)), Imm: m.Imm, HasImm: true})
	}
	return true
}

func (q *QP) Close() error {
	q.dev.mu.Lock()
	delete(q.dev.qps, q.qpn)
	q.dev.mu.Unlock()
	q.mu.Lock()
	q.state = verbs.QPStateError
	q.mu.Unlock()
	return nil
}

// CQ is a fake completion queue (verbs.CQRing). Completions beyond its
// capacity are lost and reported by Poll (a real CQ overrun puts the QPs
// in error; tests size CQs generously).
type CQ struct{ verbs.CQRing }

func (c *CQ) Wait(ctx context.Context, wcs []verbs.Completion) (int, error) {
	return verbs.Wait(ctx, c, wcs)
}
