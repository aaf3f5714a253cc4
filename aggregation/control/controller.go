package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

const (
	// DefaultAddr is where the controller listens unless told otherwise:
	// loopback only, so that nothing off the host can register or end a job
	// unless the operator says so (docs/security.md "Local only (default)").
	DefaultAddr = "127.0.0.1:50099"
	// DefaultSessionTimeout bounds how long a worker waits in RdmaSession,
	// Barrier or Broadcast for the other workers.
	DefaultSessionTimeout = 30 * time.Second
	// DefaultLivenessTimeout is how long after a job starts each rank has to
	// open its KeepAlive stream (or end the session) before the job is
	// aborted.
	DefaultLivenessTimeout = 30 * time.Second
	// DefaultIdleTimeout ends a job of p4app-switchML workers (which hold
	// no KeepAlive stream) after this long without a packet.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultMaxPendingSessions bounds the sessions waiting for ranks.
	DefaultMaxPendingSessions = 256
	// DefaultMaxWorkers is the most workers of one job: the software
	// switch's default (switchmodel.DefaultMaxWorkers, its bitmap width).
	DefaultMaxWorkers = 256
	// DefaultMaxPendingQPs bounds the QPs all waiting registrations hold
	// together: about 16 MiB of QPNs and PSNs.
	DefaultMaxPendingQPs = 1 << 20
)

// QPNScheme says how the controller picks switch QPNs.
type QPNScheme uint8

const (
	// QPNOpaque gives each QP of a job a random unused QPN from
	// [0x000100, 0x800000), so a job's QPNs cannot be guessed from another
	// job's. The software switch treats QPNs as opaque table keys, so this
	// scales past 32 workers and 512 QPs, and the range never overlaps the
	// Tofino encoding.
	QPNOpaque QPNScheme = iota
	// QPNP4App uses wire.P4AppQPN(rank, i) (0x800000 | rank<<16 | i), the
	// encoding the Tofino program parses: at most 32 workers and 512 QPs, and
	// since every job gets the same QPNs, a worker address can be in one job
	// at a time (the switch keys QPs by source IP and QPN). The Tofino
	// program derives the worker and QP index from these bits, so they
	// cannot be randomized: only the PSNs are.
	QPNP4App
)

func (s QPNScheme) String() string {
	switch s {
	case QPNOpaque:
		return "opaque"
	case QPNP4App:
		return "p4app"
	}
	return fmt.Sprintf("QPNScheme(%d)", uint8(s))
}

// Opaque QPN space; 0 and 1 are the IB special QPs.
const (
	opaqueQPNLo = 0x000100
	opaqueQPNHi = 0x800000
)

// Config configures a Controller.
type Config struct {
	// Programmer installs and removes jobs on the switch. Required.
	Programmer Programmer
	// SwitchMAC, SwitchIPv4 and SwitchIPv6 are the switch's RoCE endpoint,
	// returned to workers. At least one address is required; IPv4 workers
	// need SwitchIPv4, IPv6 workers SwitchIPv6.
	SwitchMAC  net.HardwareAddr
	SwitchIPv4 netip.Addr
	SwitchIPv6 netip.Addr
	// PoolSize is the number of aggregation slots in the switch (each slot
	// holds one packet's payload in each of its two sets). Required; must
	// match the switch.
	PoolSize uint32
	// SessionTimeout bounds every wait for other workers (RdmaSession,
	// Barrier, Broadcast) and every call into the Programmer; 0 means
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// LivenessTimeout: each rank of a running job must open its KeepAlive
	// stream (or call EndSession) within this time of the job's start, or
	// the job is aborted. 0 means DefaultLivenessTimeout; negative disables
	// the check, for p4app workers that know nothing of KeepAlive (their
	// jobs then end only by EndSession or Close).
	LivenessTimeout time.Duration
	// IdleTimeout: a job of p4app-style workers (RdmaSession without
	// packet_size_bytes; they never open KeepAlive and are exempt from the
	// liveness check) is aborted after this long without a packet reaching
	// its QPs, when the Programmer is an ActivityReporter (the software
	// switch). 0 means DefaultIdleTimeout; negative disables.
	IdleTimeout time.Duration
	// QPNScheme picks switch QPNs: QPNOpaque (software switch, default) or
	// QPNP4App (Tofino).
	QPNScheme QPNScheme
	// Logger receives session and job events; nil discards them.
	Logger *slog.Logger
	// Registry, when set, gets the controller's metrics (swml_controller_…).
	Registry prometheus.Registerer
	// ServerOptions are appended to the gRPC server's options (TLS
	// credentials, interceptors).
	ServerOptions []grpc.ServerOption
	// OperatorToken, when set, is the secret an operator presents as
	// "authorization: Bearer <token>" metadata (OperatorCredentials) to list
	// every job and end any job without its job token. Empty: no operator.
	OperatorToken string
	// AllowAddressMismatch accepts registrations whose RoCE address is not
	// the gRPC caller's address (NAT, a RoCE NIC other than the one that
	// reaches the controller). Off, such a registration is refused with
	// PERMISSION_DENIED: results would go to another host.
	AllowAddressMismatch bool
	// MaxPendingSessions bounds the sessions waiting for their ranks (and
	// the Barrier and Broadcast generations waiting beyond one per running
	// job); a call that would open one more gets RESOURCE_EXHAUSTED. 0
	// means DefaultMaxPendingSessions.
	MaxPendingSessions int
	// MaxPendingQPs bounds the QPs that all waiting registrations hold
	// together, and so the QPs (workers × QPs per worker) of one job: a job
	// with more is refused with INVALID_ARGUMENT, a registration beyond
	// the total with RESOURCE_EXHAUSTED. 0 means DefaultMaxPendingQPs.
	MaxPendingQPs int
	// MaxWorkers bounds num_workers of RdmaSession, Barrier and Broadcast:
	// the most workers one job of this switch can have (the software
	// switch's switchmodel.Config.MaxWorkers). More is INVALID_ARGUMENT. 0
	// means DefaultMaxWorkers; with QPNP4App it is at most
	// wire.MaxP4AppWorkers.
	MaxWorkers int
	// RegistrationToken, when set, is the secret every RdmaSession,
	// Barrier and Broadcast call must present as "authorization: Bearer
	// <token>" metadata (RegistrationCredentials; the operator token is
	// accepted too): without it nobody can create or join a job.
	// p4app-switchML workers send no token, so they cannot use a
	// controller that has one. Empty: anyone who reaches the controller
	// may register.
	RegistrationToken string
	// MaxClientSlots bounds the pool slots one client holds across its
	// running and starting jobs; a client is the caller's verified TLS
	// client certificate, else its IP address (every local caller is one
	// client: 127.0.0.1). Every client with a rank in a job is charged the
	// job's slots. A job that needs more is INVALID_ARGUMENT, one that
	// does not fit beside the client's other jobs RESOURCE_EXHAUSTED. 0
	// means PoolSize (no per-client limit).
	MaxClientSlots uint32
	// Ranks, when Count is set, makes this the controller of a leaf switch
	// in a hierarchy (docs/switch.md "Switch hierarchy"): a job's workers
	// register with their rank among all the job's workers (num_workers
	// the total, so that they quantize for it) and this controller takes
	// ranks First … First+Count−1, as ranks 0 … Count−1 of its switch's
	// job. The Programmer is then an UpstreamJoiner.
	Ranks RankRange
}

// Controller is the SwitchML control plane: the gRPC services Session, Sync
// and Job (see docs/control-plane.md). It groups workers' registrations into
// jobs, allocates each job a pool range and switch QPNs, programs the switch
// through the Programmer, and tears jobs down when they end or a worker
// disappears. All methods are safe for concurrent use.
type Controller struct {
	cfg Config
	log *slog.Logger
	srv *grpc.Server

	closeOnce sync.Once
	closing   chan struct{} // closed by Close: wakes every waiter
	starting  sync.WaitGroup
	metrics   *collector

	mu           sync.Mutex
	closed       bool
	pending      map[uint32]*pendingSession // by session id
	jobs         map[uint32]*job            // by job id
	jobBySession map[uint32]*job
	nextJobID    uint32
	pool         spans.Allocator
	qpnsInUse    map[uint32]struct{}   // QPNOpaque: switch QPNs of running jobs
	p4appAddrs   map[netip.Addr]uint32 // QPNP4App: worker address → job id
	barriers     map[uint32]*syncGen   // by session id
	broadcasts   map[uint32]*syncGen
	pendingQPs   int               // QPs held by the registrations of c.pending
	clientSlots  map[string]uint32 // pool slots charged to each client
	stats        stats
}

// stats are the counters behind the metrics; guarded by Controller.mu.
type stats struct {
	sessionsTotal        uint64
	registrationTimeouts uint64
	syncTimeouts         uint64
	endedByReason        map[string]uint64
}

// Reasons a job ended, the label values of swml_controller_sessions_ended_total.
const (
	endReasonEnd       = "end"              // every rank called EndSession
	endReasonAbort     = "abort"            // a rank called EndSession with abort
	endReasonKeepAlive = "keepalive_lost"   // a rank's KeepAlive stream closed
	endReasonLiveness  = "liveness_timeout" // a rank never opened KeepAlive
	endReasonIdle      = "idle"             // a p4app job saw no packet for IdleTimeout
	endReasonReplaced  = "replaced"         // a new p4app job's rank 0 registered
	endReasonShutdown  = "shutdown"         // Close
	endReasonUpstream  = "upstream_lost"    // a leaf's spine job ended first
)

var endReasons = []string{endReasonEnd, endReasonAbort, endReasonKeepAlive, endReasonLiveness, endReasonIdle, endReasonReplaced, endReasonShutdown, endReasonUpstream}

// SetSwitchAddr sets SwitchIPv4 or SwitchIPv6, whichever is a's family
// (an IPv4-mapped IPv6 address is IPv4).
func (c *Config) SetSwitchAddr(a netip.Addr) {
	if a = a.Unmap(); a.Is4() {
		c.SwitchIPv4 = a
	} else {
		c.SwitchIPv6 = a
	}
}

// New checks cfg and builds a Controller; call Serve to accept workers.
func New(cfg Config) (*Controller, error) {
	if cfg.Programmer == nil {
		return nil, errors.New("control: Config.Programmer is nil: pass the switch backend to program")
	}
	if !cfg.SwitchIPv4.IsValid() && !cfg.SwitchIPv6.IsValid() {
		return nil, errors.New("control: the switch has no address: set Config.SwitchIPv4 and/or SwitchIPv6 (the switch's RoCE endpoint workers write to)")
	}
	if cfg.SwitchIPv4.IsValid() && !cfg.SwitchIPv4.Is4() {
		return nil, fmt.Errorf("control: Config.SwitchIPv4 %v is not an IPv4 address", cfg.SwitchIPv4)
	}
	if cfg.SwitchIPv6.IsValid() && (!cfg.SwitchIPv6.Is6() || cfg.SwitchIPv6.Is4In6()) {
		return nil, fmt.Errorf("control: Config.SwitchIPv6 %v is not an IPv6 address", cfg.SwitchIPv6)
	}
	if len(cfg.SwitchMAC) != 0 && len(cfg.SwitchMAC) != 6 {
		return nil, fmt.Errorf("control: Config.SwitchMAC %v is not a 48-bit MAC", cfg.SwitchMAC)
	}
	if cfg.PoolSize == 0 || cfg.PoolSize >= 1<<31 {
		return nil, fmt.Errorf("control: Config.PoolSize %d: pass the switch's slot count (1 to 2^31-1)", cfg.PoolSize)
	}
	if cfg.QPNScheme != QPNOpaque && cfg.QPNScheme != QPNP4App {
		return nil, fmt.Errorf("control: unknown %v: use QPNOpaque (software switch) or QPNP4App (Tofino)", cfg.QPNScheme)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxPendingSessions <= 0 {
		cfg.MaxPendingSessions = DefaultMaxPendingSessions
	}
	if cfg.MaxPendingQPs <= 0 {
		cfg.MaxPendingQPs = DefaultMaxPendingQPs
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	if cfg.QPNScheme == QPNP4App {
		cfg.MaxWorkers = min(cfg.MaxWorkers, wire.MaxP4AppWorkers)
	}
	if cfg.MaxClientSlots == 0 || cfg.MaxClientSlots > cfg.PoolSize {
		cfg.MaxClientSlots = cfg.PoolSize
	}
	if cfg.LivenessTimeout == 0 {
		cfg.LivenessTimeout = DefaultLivenessTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{
		cfg:          cfg,
		log:          log.With("component", "controller"),
		closing:      make(chan struct{}),
		pending:      make(map[uint32]*pendingSession),
		jobs:         make(map[uint32]*job),
		jobBySession: make(map[uint32]*job),
		nextJobID:    1,
		pool:         spans.New(0, cfg.PoolSize),
		qpnsInUse:    make(map[uint32]struct{}),
		p4appAddrs:   make(map[netip.Addr]uint32),
		barriers:     make(map[uint32]*syncGen),
		broadcasts:   make(map[uint32]*syncGen),
		clientSlots:  make(map[string]uint32),
		stats:        stats{endedByReason: make(map[string]uint64)},
	}
	if cfg.Registry != nil {
		c.metrics = newCollector(c)
		if err := cfg.Registry.Register(c.metrics); err != nil {
			return nil, fmt.Errorf("control: register metrics: %w", err)
		}
	}
	opts := append([]grpc.ServerOption{
		// Ping idle workers so a KeepAlive stream to a crashed host ends
		// within ~15 s instead of the kernel's TCP timeout.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, cfg.ServerOptions...)
	c.srv = grpc.NewServer(opts...)
	pb.RegisterSessionServer(c.srv, sessionService{c: c})
	pb.RegisterSyncServer(c.srv, syncService{c: c})
	pb.RegisterJobServer(c.srv, jobService{c: c})
	return c, nil
}

// Serve accepts workers on lis until Close; like grpc.Server.Serve it
// returns nil after Close and an error if lis fails.
func (c *Controller) Serve(lis net.Listener) error {
	if err := c.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("control: serve on %v: %w", lis.Addr(), err)
	}
	return nil
}

// Close stops the controller: waiting registrations and sync calls fail
// with UNAVAILABLE, every running job is aborted (KeepAlive streams get
// ENDED, the switch's tables are cleared through RemoveJob), then the gRPC
// server stops, waiting at most SessionTimeout for calls in flight.
// Idempotent; always returns nil.
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		close(c.closing)
		c.mu.Unlock()
		c.starting.Wait() // jobs being installed land in c.jobs first
		c.mu.Lock()
		jobs := make([]*job, 0, len(c.jobs))
		for _, j := range c.jobs {
			jobs = append(jobs, j)
		}
		c.mu.Unlock()
		for _, j := range jobs {
			c.endJob(j, true, "the controller is shutting down", endReasonShutdown)
		}
		stopped := make(chan struct{})
		go func() { c.srv.GracefulStop(); close(stopped) }()
		t := time.NewTimer(c.cfg.SessionTimeout)
		defer t.Stop()
		select {
		case <-stopped:
		case <-t.C:
			c.srv.Stop()
			<-stopped
		}
		if c.metrics != nil {
			c.cfg.Registry.Unregister(c.metrics)
		}
	})
	return nil
}

// JobInfo describes a running job.
type JobInfo struct {
	Job         wire.Job // a copy; Workers[r].SwitchQPNs are rank r's switch QPNs
	SessionID   uint32
	MessageSize int
	TensorBytes uint64 // as registered; 0: not declared
	EndedRanks  []int  // ranks that called EndSession
}

// Jobs returns the running jobs, ordered by job id.
func (c *Controller) Jobs() []JobInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]JobInfo, 0, len(c.jobs))
	for _, j := range c.jobs {
		out = append(out, j.info())
	}
	sortJobInfos(out)
	return out
}

// errClosed is what waiters get when Close interrupts them.
func errClosed() error {
	return status.Error(codes.Unavailable, "the controller is shutting down; restart it and start the job again")
}

// The services embed the Unimplemented… types so an RPC added to the proto
// answers UNIMPLEMENTED instead of breaking the build.
type (
	sessionService struct {
		pb.UnimplementedSessionServer
		c *Controller
	}
	syncService struct {
		pb.UnimplementedSyncServer
		c *Controller
	}
	jobService struct {
		pb.UnimplementedJobServer
		c *Controller
	}
)

func (s sessionService) RdmaSession(ctx context.Context, req *pb.RdmaSessionRequest) (*pb.RdmaSessionResponse, error) {
	return s.c.rdmaSession(ctx, req)
}

func (sessionService) UdpSession(context.Context, *pb.UdpSessionRequest) (*pb.UdpSessionResponse, error) {
	return nil, status.Error(codes.Unimplemented, "UdpSession is not supported: swml-rdma workers speak RoCEv2; call RdmaSession (p4app-switchML's DPDK/UDP worker path is not implemented)")
}

func (s syncService) Barrier(ctx context.Context, req *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	return s.c.barrier(ctx, req)
}

func (s syncService) Broadcast(ctx context.Context, req *pb.BroadcastRequest) (*pb.BroadcastResponse, error) {
	return s.c.broadcast(ctx, req)
}

func (s jobService) EndSession(ctx context.Context, req *pb.EndSessionRequest) (*pb.EndSessionResponse, error) {
	return s.c.endSession(ctx, req)
}

func (s jobService) KeepAlive(req *pb.KeepAliveRequest, stream grpc.ServerStreamingServer[pb.JobEvent]) error {
	return s.c.keepAlive(req, stream)
}

func (s jobService) ListJobs(ctx context.Context, req *pb.ListJobsRequest) (*pb.ListJobsResponse, error) {
	return s.c.listJobs(ctx, req), nil
}

func (s jobService) WaitingFor(ctx context.Context, req *pb.WaitingForRequest) (*pb.WaitingForResponse, error) {
	return s.c.waitingFor(ctx, req)
}
