package swswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// ICRCPolicy says which received packets have their ICRC verified.
type ICRCPolicy uint8

const (
	// ICRCVerify verifies every packet: over IPv6 exactly, over IPv4
	// assuming the sender sent Identification 0 with DF, as verbs/soft
	// does (a UDP socket cannot see the real Identification).
	ICRCVerify ICRCPolicy = iota
	// ICRCVerifyIPv6 verifies IPv6 packets only: for IPv4 peers such as
	// rxe, which send hashed non-zero Identifications.
	ICRCVerifyIPv6
)

func (p ICRCPolicy) String() string {
	switch p {
	case ICRCVerify:
		return "verify"
	case ICRCVerifyIPv6:
		return "verify-ipv6"
	}
	return fmt.Sprintf("ICRCPolicy(%d)", uint8(p))
}

// Config configures a Switch.
type Config struct {
	// Addr is the switch's own IP address (IPv4 or IPv6, not unspecified);
	// it listens on Addr, UDP 4791. Workers must be of the same family.
	Addr netip.Addr
	// Port overrides 4791, for benchmarks; results always go to the
	// workers' port 4791.
	Port int
	// Model sizes the switch's tables (pool size, payload, workers). The
	// controller's PoolSize must equal Model.PoolSize (default
	// switchmodel.DefaultPoolSize).
	Model switchmodel.Config
	// BatchSize is the number of datagrams per recvmmsg/sendmmsg (default
	// udp.DefaultBatchSize).
	BatchSize int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF in bytes (default: udp's).
	SocketBuffer int
	// Offload selects UDP GSO/GRO (default udp.OffloadAuto). Results are
	// ordered so that each worker's packets form runs GSO can send whole.
	Offload udp.Offload
	// ICRC selects which requests are verified (default ICRCVerify).
	ICRC ICRCPolicy
	// IngressLoss and EgressLoss drop that fraction of requests and of
	// result packets (0 ≤ p < 1), from generators seeded with Seed: the
	// drop simulator, for tests and demos.
	IngressLoss, EgressLoss float64
	Seed                    uint64
	// Capture, when set, records every datagram in and out (pcap); the
	// caller closes it after the switch.
	Capture *udp.Capture
	// Registry, when set, gets the switch's metrics (swml_switch_…).
	Registry prometheus.Registerer
	// Logger receives job events and I/O errors; nil discards them.
	Logger *slog.Logger
	// Endpoint, when set, is the switch's datagram endpoint (e.g. an
	// in-memory one, verbs/soft/udp/memlink) instead of a socket: the
	// switch takes it over and closes it (also when New fails); Addr and
	// Port come from its LocalAddr, and BatchSize, SocketBuffer, Offload,
	// the losses and Capture are unused.
	Endpoint udp.Endpoint
}

// Switch is the software switch: a RoCEv2 endpoint that runs the switch
// model on every request and sends the results. It implements
// control.Programmer. All methods are safe for concurrent use.
type Switch struct {
	cfg  Config
	log  *slog.Logger
	conn udp.Endpoint

	mu  sync.Mutex // guards the engine (pipeline, tables, counters)
	eng *engine

	sendErrors atomic.Uint64
	closeOnce  sync.Once
	done       chan struct{}
	coll       *collector
}

var _ control.Programmer = (*Switch)(nil)

// New opens the switch's socket and starts serving. Close stops it.
func New(cfg Config) (*Switch, error) {
	if cfg.Endpoint != nil {
		cfg.Addr, cfg.Port = cfg.Endpoint.LocalAddr().Addr(), int(cfg.Endpoint.LocalAddr().Port())
	}
	conn, err := newSwitchEndpoint(&cfg)
	if err != nil {
		if cfg.Endpoint != nil {
			cfg.Endpoint.Close()
		}
		return nil, err
	}
	pipe, err := switchmodel.New(cfg.Model)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("swswitch: %w", err)
	}
	cfg.Model = pipe.Config()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	batch := conn.BatchSize()
	s := &Switch{
		cfg:  cfg,
		log:  log.With("component", "swswitch", "addr", conn.LocalAddr()),
		conn: conn,
		eng:  newEngine(conn.LocalAddr(), cfg.ICRC, pipe, max(4*batch, cfg.Model.MaxWorkers)),
		done: make(chan struct{}),
	}
	if cfg.Registry != nil {
		s.coll = newCollector(s)
		if err := cfg.Registry.Register(s.coll); err != nil {
			conn.Close()
			return nil, fmt.Errorf("swswitch: register metrics: %w", err)
		}
	}
	in := make([]udp.Msg, batch)
	for i := range in {
		in[i] = udp.Msg{Buf: make([]byte, s.eng.bufSz+64), Off: rdma.ICRCHeadroom}
	}
	go s.serve(in)
	return s, nil
}

// newSwitchEndpoint checks cfg and returns cfg.Endpoint or a new socket.
func newSwitchEndpoint(cfg *Config) (udp.Endpoint, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, fmt.Errorf("swswitch: Config.Addr %v: give the switch its own IP address (e.g. 127.0.0.1)", cfg.Addr)
	}
	if cfg.ICRC != ICRCVerify && cfg.ICRC != ICRCVerifyIPv6 {
		return nil, fmt.Errorf("swswitch: unknown %v: use ICRCVerify or ICRCVerifyIPv6", cfg.ICRC)
	}
	cfg.Addr = cfg.Addr.Unmap()
	if cfg.Endpoint != nil {
		return cfg.Endpoint, nil
	}
	conn, err := udp.Listen(udp.Config{
		Addr: cfg.Addr, Port: cfg.Port, BatchSize: cfg.BatchSize, SocketBuffer: cfg.SocketBuffer,
		Capture: cfg.Capture, RecvLoss: cfg.IngressLoss, SendLoss: cfg.EgressLoss, Seed: cfg.Seed, Offload: cfg.Offload,
	})
	if err != nil {
		return nil, fmt.Errorf("swswitch: %w", err)
	}
	return conn, nil
}

// Addr is the switch's RoCEv2 endpoint.
func (s *Switch) Addr() netip.AddrPort { return s.conn.LocalAddr() }

// Config returns the configuration in effect (defaults filled in).
func (s *Switch) Config() Config { return s.cfg }

func (s *Switch) serve(in []udp.Msg) {
	defer close(s.done)
	e := s.eng
	for {
		n, err := s.conn.ReadBatch(in)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("receive failed", "err", err)
			continue
		}
		for i := 0; i < n; {
			s.mu.Lock()
			for ; i < n && e.room(); i++ {
				m := &in[i]
				e.input(m.Addr, m.Buf, m.Off, m.N)
			}
			out := e.schedule()
			e.nout = 0
			s.mu.Unlock()
			// The result buffers are only touched by this goroutine, so
			// they can be sent without the lock.
			if len(out) > 0 {
				if sent, err := s.conn.WriteBatch(out); err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					s.sendErrors.Add(uint64(len(out) - sent))
					s.log.Warn("send failed", "err", err)
				}
			}
		}
	}
}

// AddJob installs a job (control.Programmer): its workers' addresses must be
// of the switch's address family.
func (s *Switch) AddJob(ctx context.Context, job *wire.Job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if job != nil {
		for _, w := range job.Workers {
			if w.Addr.IsValid() && w.Addr.Unmap().Is4() != s.cfg.Addr.Is4() {
				return fmt.Errorf("swswitch: add job %d: %w: worker %d address %v is not of the switch's family (%v)", job.ID, wire.ErrBadJob, w.Rank, w.Addr, s.cfg.Addr)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.eng.pipe.AddJob(job); err != nil {
		return fmt.Errorf("swswitch: %w", err)
	}
	s.eng.maxN = max(s.eng.maxN, len(job.Workers))
	if g, ok := s.conn.(udp.GSOPeers); ok {
		// Workers whose NIC cannot see the IPv4 Identification get their
		// result bursts as GSO datagrams (wire.Worker.IgnoresIPv4ID); the
		// latest job of an address decides.
		for _, w := range job.Workers {
			g.AllowGSO(w.Addr, w.IgnoresIPv4ID)
		}
	}
	s.log.Info("job added", "job", job.ID, "workers", len(job.Workers), "qps", len(job.Workers[0].QPNs),
		"pool", fmt.Sprintf("[%d, %d)", job.PoolBase, job.PoolBase+job.PoolSlots), "packet", job.PacketSize)
	return nil
}

// RemoveJob removes a job and clears its slots (control.Programmer); an
// unknown id is not an error.
func (s *Switch) RemoveJob(ctx context.Context, jobID uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eng.pipe.RemoveJob(jobID)
	s.log.Info("job removed", "job", jobID)
	return nil
}

// JobPackets is the number of packets that reached job id's QPs since it
// was added (control.ActivityReporter); false if no such job is installed.
func (s *Switch) JobPackets(jobID uint32) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.pipe.JobPackets(jobID)
}

// Stats are the switch's counters.
type Stats struct {
	PacketsIn, BytesIn   uint64 // datagrams received (before ingress loss)
	PacketsOut, BytesOut uint64 // datagrams sent (after egress loss)
	// Kernel datagrams and system calls that carried those packets: with
	// UDP GSO/GRO one datagram holds a run of packets.
	DatagramsIn, RecvCalls  uint64
	DatagramsOut, SendCalls uint64
	Model                   switchmodel.Counters
	SlotsInUse              int64  // (slot, set) pairs holding a partial sum
	SlotsAllocated          uint64 // slots owned by installed jobs
	PoolSize                uint32
	Jobs                    int
}

// Drops returns the count for one reason.
func (s *Stats) Drops(r switchmodel.DropReason) uint64 { return s.Model.Drops[r] }

// Stats returns a snapshot of the counters.
func (s *Switch) Stats() Stats {
	cs := s.conn.Stats()
	s.mu.Lock()
	p := s.eng.pipe
	st := Stats{
		Model:          p.Counters,
		SlotsInUse:     p.SlotsInUse(),
		SlotsAllocated: p.SlotsAllocated(),
		PoolSize:       s.cfg.Model.PoolSize,
		Jobs:           p.Jobs(),
	}
	s.mu.Unlock()
	st.PacketsIn, st.BytesIn = cs.RxPackets, cs.RxBytes
	st.PacketsOut, st.BytesOut = cs.TxPackets, cs.TxBytes
	st.DatagramsIn, st.RecvCalls = cs.RxDatagrams, cs.RxCalls
	st.DatagramsOut, st.SendCalls = cs.TxDatagrams, cs.TxCalls
	st.Model.Drops[switchmodel.DropIngressLoss] += cs.RxLossDropped
	st.Model.Drops[switchmodel.DropEgressLoss] += cs.TxLossDropped
	st.Model.Drops[switchmodel.DropMalformed] += cs.RxTruncated
	st.Model.Drops[switchmodel.DropSendError] += s.sendErrors.Load()
	return st
}

// Close stops the switch and waits for its goroutine; it unregisters the
// metrics. Idempotent.
func (s *Switch) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.conn.Close()
		<-s.done
		if s.coll != nil {
			s.cfg.Registry.Unregister(s.coll)
		}
	})
	return err
}
