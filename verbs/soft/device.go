package soft

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// ICRCPolicy says which received packets have their ICRC verified.
type ICRCPolicy int

const (
	// ICRCVerify verifies every packet: over IPv6 exactly, over IPv4
	// assuming the sender used Identification 0 with DF, as our NICs, the
	// software switch and any sender through an unconnected UDP socket with
	// IP_PMTUDISC_DO do. Packets from rxe over IPv4 carry another
	// Identification, which a UDP socket cannot see: use ICRCIgnoreIPv4.
	ICRCVerify ICRCPolicy = iota
	// ICRCIgnoreIPv4 verifies over IPv6 only.
	ICRCIgnoreIPv4
	// ICRCIgnore verifies nothing (like a NIC with ICRC checking disabled,
	// as behind a Tofino that forwards stale ICRCs).
	ICRCIgnore
)

// Config configures a userspace NIC.
type Config struct {
	// Addr is the local IP the NIC binds (UDP 4791) and sends from; its
	// RoCEv2 GID. Several NICs on one host need distinct addresses.
	Addr netip.Addr
	// Port is the local UDP port (default 4791); PeerPort the port peers
	// listen on (default 4791).
	Port, PeerPort int
	// BatchSize is the most packets per system call (default 64).
	BatchSize int
	// ICRC selects which received packets are verified.
	ICRC ICRCPolicy
	// Capture records every packet sent and received (pcap).
	Capture *udp.Capture
	// RecvLoss and SendLoss inject seeded packet loss (tests, demos).
	RecvLoss, SendLoss float64
	Seed               uint64
	// SocketBuffer is the socket buffer size in bytes (default 4 MiB).
	SocketBuffer int
	// Offload selects UDP GSO/GRO (default udp.OffloadAuto: GRO when the
	// kernel has it, GSO over IPv6 or loopback and to peers declared with
	// AllowGSO; see udp.Offload for why not to others over IPv4 on a real
	// link). The packets are the same either way.
	Offload udp.Offload
	// GROBuffers is the number of 64 KiB GRO receive buffers (default
	// DefaultGROBuffers; udp.Config.GROBuffers).
	GROBuffers int
	// BusyPoll is how long the receive goroutine polls an empty socket
	// before it sleeps (udp.Config.BusyPoll; 0: it does not):
	// udp.DefaultBusyPoll for a worker process's NIC.
	BusyPoll time.Duration
	// Endpoint, when set, is the NIC's datagram endpoint (e.g. an
	// in-memory one, verbs/soft/udp/memlink) instead of a socket: the NIC
	// takes it over and closes it; Addr and Port come from its LocalAddr
	// and the socket's settings above (BatchSize to GROBuffers) are unused.
	Endpoint udp.Endpoint
}

// DefaultGROBuffers is a NIC's GRO receive buffers: 4 × 64 KiB. A NIC's
// traffic comes from few flows (the switch's results, a ring neighbour),
// which GRO coalesces into datagrams of up to 64 packets, so 4 hold several
// receive batches; the software switch, which hears every worker, keeps the
// socket layer's 16. This is most of a NIC's memory (docs/operations.md,
// "Memory"): 256 KiB instead of 1 MiB per worker.
const DefaultGROBuffers = 4

// Stats are the NIC's counters.
type Stats struct {
	TxPackets, TxBytes, TxMessages uint64
	RxPackets, RxBytes, RxMessages uint64
	// Drops by reason.
	RxMalformed   uint64 // not a parsable RoCEv2 packet
	RxBadICRC     uint64
	RxUnsupported uint64 // opcode this NIC does not implement (RC, SEND)
	RxUnknownQP   uint64 // no such QP, or not in RTR/RTS
	RxBadSource   uint64 // source IP is not the QP's peer
	RxSequence    uint64 // PSN gap or opcode out of sequence (rest of message dropped)
	RxBadRKey     uint64 // unknown rkey or MR without remote write access
	RxBadRange    uint64 // va/length outside the MR, or length mismatch
	RxNoRecvWR    uint64 // WRITE WITH IMMEDIATE with no posted receive
	CQOverrun     uint64 // completions lost to a full CQ
	Socket        udp.Stats
}

type counters struct {
	txPackets, txBytes, txMessages                     atomic.Uint64
	rxPackets, rxBytes, rxMessages                     atomic.Uint64
	rxMalformed, rxBadICRC, rxUnsupported, rxUnknownQP atomic.Uint64
	rxBadSource, rxSequence, rxBadRKey, rxBadRange     atomic.Uint64
	rxNoRecvWR, cqOverrun                              atomic.Uint64
}

// Device is a userspace RoCEv2 NIC. It implements verbs.Device.
type Device struct {
	cfg  Config
	conn udp.Endpoint
	name string
	peer uint16

	mu      sync.RWMutex // guards qps, mrs and closed
	qps     map[uint32]*QP
	mrs     map[uint32]*MR // by key (lkey == rkey)
	nextQPN uint32
	nextKey uint32
	closed  bool

	tx     txQueue // send path of every QP
	cnt    counters
	rxDone chan struct{}
	// rxHandled counts datagrams the receive goroutine has finished with
	// (tests wait on it).
	rxHandled atomic.Uint64
	rxWakes   rxWakes       // owned by the receive goroutine
	done      chan struct{} // closed by Close: wakes CQ waiters
	closing   atomic.Bool
}

var (
	_ verbs.Device    = (*Device)(nil)
	_ verbs.UDPDevice = (*Device)(nil)
)

// Open binds the NIC to cfg.Addr and starts its receive goroutine.
func Open(cfg Config) (*Device, error) {
	if cfg.PeerPort == 0 {
		cfg.PeerPort = rdma.UDPPort
	}
	conn := cfg.Endpoint
	if conn == nil {
		c, err := udp.Listen(udp.Config{
			Addr: cfg.Addr, Port: cfg.Port, BatchSize: cfg.BatchSize, SocketBuffer: cfg.SocketBuffer,
			Capture: cfg.Capture, RecvLoss: cfg.RecvLoss, SendLoss: cfg.SendLoss, Seed: cfg.Seed, Offload: cfg.Offload,
			GROBuffers: cmp.Or(cfg.GROBuffers, DefaultGROBuffers), BusyPoll: cfg.BusyPoll,
		})
		if err != nil {
			return nil, fmt.Errorf("soft: open NIC: %w", err)
		}
		conn = c
	}
	cfg.Addr, cfg.Port = conn.LocalAddr().Addr(), int(conn.LocalAddr().Port())
	d := &Device{
		cfg: cfg, conn: conn, name: "soft:" + cfg.Addr.Unmap().String(), peer: uint16(cfg.PeerPort),
		qps: make(map[uint32]*QP), mrs: make(map[uint32]*MR),
		nextQPN: 17, nextKey: 1, rxDone: make(chan struct{}), done: make(chan struct{}),
	}
	d.tx.init(conn.BatchSize())
	go d.receive()
	return d, nil
}

func (d *Device) Name() string     { return d.name }
func (d *Device) Addr() netip.Addr { return d.conn.LocalAddr().Addr() }

// AllowGSO lets the NIC send UDP GSO datagrams to peer over IPv4 too
// (verbs.UDPDevice): peer does not check the IPv4 Identification. A no-op
// on an endpoint without GSO (an in-memory link).
func (d *Device) AllowGSO(peer netip.Addr) {
	if g, ok := d.conn.(udp.GSOPeers); ok {
		g.AllowGSO(peer, true)
	}
}
func (d *Device) LocalAddrPort() netip.AddrPort { return d.conn.LocalAddr() }

// Stats returns a snapshot of the counters.
func (d *Device) Stats() Stats {
	c := &d.cnt
	return Stats{
		TxPackets: c.txPackets.Load(), TxBytes: c.txBytes.Load(), TxMessages: c.txMessages.Load(),
		RxPackets: c.rxPackets.Load(), RxBytes: c.rxBytes.Load(), RxMessages: c.rxMessages.Load(),
		RxMalformed: c.rxMalformed.Load(), RxBadICRC: c.rxBadICRC.Load(), RxUnsupported: c.rxUnsupported.Load(),
		RxUnknownQP: c.rxUnknownQP.Load(), RxBadSource: c.rxBadSource.Load(), RxSequence: c.rxSequence.Load(),
		RxBadRKey: c.rxBadRKey.Load(), RxBadRange: c.rxBadRange.Load(), RxNoRecvWR: c.rxNoRecvWR.Load(),
		CQOverrun: c.cqOverrun.Load(), Socket: d.conn.Stats(),
	}
}

// Close stops the receive goroutine and closes the socket. Objects created
// from the device stop working. Idempotent.
func (d *Device) Close() error {
	if d.closing.Swap(true) {
		return nil
	}
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	close(d.done)
	err := d.conn.Close()
	<-d.rxDone
	return err
}

func (d *Device) checkOpen() error {
	if d.closing.Load() {
		return fmt.Errorf("soft: %s: %w", d.name, verbs.ErrClosed)
	}
	return nil
}

// AllocPD returns a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	return &PD{dev: d}, nil
}

// CreateCQ creates a completion queue holding up to entries completions.
func (d *Device) CreateCQ(entries int) (verbs.CQ, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if entries <= 0 {
		return nil, fmt.Errorf("soft: create CQ with %d entries: %w", entries, verbs.ErrInvalidArgument)
	}
	return newCQ(d, entries), nil
}

// errClosedConn reports whether err is the socket being closed.
func errClosedConn(err error) bool { return errors.Is(err, net.ErrClosed) }
