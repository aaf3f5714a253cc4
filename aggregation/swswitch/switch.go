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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/bpf"

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
	// BusyPoll is how long each reader polls its empty socket before it
	// sleeps (udp.Config.BusyPoll; 0: it does not): udp.DefaultBusyPoll
	// for the switch daemon, a process of its own.
	BusyPoll time.Duration
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
	// Cores is the number of cores (goroutines, each with its own
	// pipeline) that process requests (docs/switch.md, "Cores"); 0 means
	// one. With more than one, the switch
	// receives on as many SO_REUSEPORT sockets where the kernel can steer
	// them (udp.ReusePortSteering), else on one.
	Cores int
	// Endpoint, when set, is the switch's datagram endpoint (e.g. an
	// in-memory one, verbs/soft/udp/memlink) instead of a socket: the
	// switch takes it over and closes it (also when New fails); Addr and
	// Port come from its LocalAddr, and BatchSize, SocketBuffer, Offload,
	// the losses and Capture are unused.
	Endpoint udp.Endpoint
	// Upstream, when set, makes the switch a leaf of a switch hierarchy
	// (docs/switch.md "Switch hierarchy"): each job its controller installs
	// joins the spine's job as one worker (JoinUpstream).
	Upstream *UpstreamConfig
}

// Switch is the software switch: a RoCEv2 endpoint that runs the switch
// model on every request and sends the results. It implements
// control.Programmer. All methods are safe for concurrent use.
//
// It runs on Config.Cores cores (docs/switch.md, "Cores"): readers receive
// datagrams (one per socket of a SO_REUSEPORT group, or one on a single
// endpoint), verify their ICRCs and hand each request, in batches, to the
// core that owns its destination QPN (coreTable); each core runs its own
// pipeline under its own mutex and sends its results.
type Switch struct {
	cfg   Config
	log   *slog.Logger
	conns []udp.Endpoint // conns[r] is reader r's; core c sends on conns[c%len(conns)]

	cores []*core
	// table is the core key, replaced whole under jobsMu; readers load it
	// per batch.
	table  atomic.Pointer[coreTable]
	jobsMu sync.Mutex // serialises AddJob and RemoveJob across the cores
	jobs   map[uint32]*wire.Job
	// upstreams holds the receive QPNs of each leaf job (SetUpstream),
	// bound in table beside the job's own.
	upstreams map[uint32][]uint32
	// spine is the spine's controller (Config.Upstream) and links each
	// leaf job's membership of the spine's job (JoinUpstream).
	spine   *control.Client
	linksMu sync.Mutex
	links   map[uint32]*control.Assignment

	// free holds the batches not in a reader's or a core's hands (with more
	// than one core): a reader takes one per core it hands requests to.
	free chan *batch

	// Requests the readers dropped before any core saw them.
	rxPackets, rxICRC, rxMalformed atomic.Uint64

	sendErrors atomic.Uint64
	closeOnce  sync.Once
	done       chan struct{}
	coll       *collector
	// epoch is the origin of the pipelines' clocks (SetClock): the
	// nanoseconds since it, on the monotonic clock, plus one, so that 0
	// stays "no packet".
	epoch time.Time
}

// core is one core's share of the switch: its pipeline (the registers of
// the slots and QPs its QPNs own), flow caches and result buffers.
type core struct {
	mu  sync.Mutex // guards eng (pipeline, tables, counters)
	eng *engine
	in  chan *batch // requests from the readers, in each reader's order
}

// batch is a run of checked requests handed from a reader to a core.
type batch struct {
	msgs []udp.Msg // every Buf allocated; msgs[:n] hold requests
	n    int
}

var (
	_ control.Programmer       = (*Switch)(nil)
	_ control.ActivityReporter = (*Switch)(nil)
	_ control.ProgressReporter = (*Switch)(nil)
)

// New opens the switch's sockets and starts serving. Close stops it.
func New(cfg Config) (*Switch, error) {
	if cfg.Endpoint != nil {
		cfg.Addr, cfg.Port = cfg.Endpoint.LocalAddr().Addr(), int(cfg.Endpoint.LocalAddr().Port())
	}
	if cfg.Cores == 0 {
		cfg.Cores = defaultCores()
	}
	if cfg.Cores < 1 || cfg.Cores > MaxCores {
		if cfg.Endpoint != nil {
			cfg.Endpoint.Close()
		}
		return nil, fmt.Errorf("swswitch: Config.Cores %d: use 1 to %d (0: one; more than %d is rarely useful)", cfg.Cores, MaxCores, DefaultMaxCores)
	}
	conns, err := newSwitchEndpoints(&cfg)
	if err != nil {
		if cfg.Endpoint != nil {
			cfg.Endpoint.Close()
		}
		return nil, err
	}
	closeConns := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Switch{
		cfg:       cfg,
		log:       log.With("component", "swswitch", "addr", conns[0].LocalAddr()),
		conns:     conns,
		jobs:      make(map[uint32]*wire.Job),
		upstreams: make(map[uint32][]uint32),
		links:     make(map[uint32]*control.Assignment),
		done:      make(chan struct{}),
		epoch:     time.Now(),
	}
	if u := cfg.Upstream; u != nil {
		if u.Leaves < 1 || u.Index < 0 || u.Index >= u.Leaves {
			closeConns()
			return nil, fmt.Errorf("swswitch: leaf %d of %d: %w: need 0 ≤ index < leaves", u.Index, u.Leaves, switchmodel.ErrUpstream)
		}
		if s.spine, err = control.NewClient(u.Client); err != nil {
			closeConns()
			return nil, fmt.Errorf("swswitch: spine controller: %w", err)
		}
	}
	batchSize := conns[0].BatchSize()
	for range cfg.Cores {
		pipe, err := switchmodel.New(cfg.Model)
		if err != nil {
			closeConns()
			return nil, fmt.Errorf("swswitch: %w", err)
		}
		s.cfg.Model = pipe.Config()
		s.cores = append(s.cores, &core{eng: newEngine(conns[0].LocalAddr(), cfg.ICRC, pipe, max(4*batchSize, pipe.Config().MaxWorkers+1))})
	}
	s.table.Store(&coreTable{cores: cfg.Cores, qpns: map[uint32]qpnCore{}})
	if cfg.Registry != nil {
		s.coll = newCollector(s)
		if err := cfg.Registry.Register(s.coll); err != nil {
			closeConns()
			return nil, fmt.Errorf("swswitch: register metrics: %w", err)
		}
	}
	bufSz := s.cores[0].eng.bufSz + 64
	newBatch := func() *batch {
		b := &batch{msgs: make([]udp.Msg, batchSize)}
		for i := range b.msgs {
			b.msgs[i] = udp.Msg{Buf: make([]byte, bufSz), Off: rdma.ICRCHeadroom}
		}
		return b
	}
	var readers, workers sync.WaitGroup
	if cfg.Cores > 1 {
		// Each reader holds one batch it reads into and at most one per
		// core it fills: with that many, some reader can always finish its
		// batch whatever the others hold. The rest queue at the cores.
		nb := len(conns)*(cfg.Cores+1) + 2*cfg.Cores
		s.free = make(chan *batch, nb)
		for range nb - len(conns) {
			s.free <- newBatch()
		}
		for i, c := range s.cores {
			c.in = make(chan *batch, nb)
			workers.Go(func() { s.work(c, conns[i%len(conns)]) })
		}
	}
	for _, conn := range conns {
		readers.Go(func() { s.read(conn, newBatch()) })
	}
	go func() {
		readers.Wait()
		for _, c := range s.cores {
			if c.in != nil {
				close(c.in)
			}
		}
		workers.Wait()
		close(s.done)
	}()
	s.log.Debug("switch started", "cores", cfg.Cores, "readers", len(conns))
	return s, nil
}

// newSwitchEndpoints checks cfg and returns cfg.Endpoint or new sockets: a
// SO_REUSEPORT group of cfg.Cores steered by the reader key where the
// kernel has it (udp.ReusePortSteering), else one socket.
func newSwitchEndpoints(cfg *Config) ([]udp.Endpoint, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, fmt.Errorf("swswitch: Config.Addr %v: give the switch its own IP address (e.g. 127.0.0.1)", cfg.Addr)
	}
	if cfg.ICRC != ICRCVerify && cfg.ICRC != ICRCVerifyIPv6 {
		return nil, fmt.Errorf("swswitch: unknown %v: use ICRCVerify or ICRCVerifyIPv6", cfg.ICRC)
	}
	cfg.Addr = cfg.Addr.Unmap()
	if cfg.Endpoint != nil {
		return []udp.Endpoint{cfg.Endpoint}, nil
	}
	ucfg := udp.Config{
		Addr: cfg.Addr, Port: cfg.Port, BatchSize: cfg.BatchSize, SocketBuffer: cfg.SocketBuffer,
		Capture: cfg.Capture, RecvLoss: cfg.IngressLoss, SendLoss: cfg.EgressLoss, Seed: cfg.Seed, Offload: cfg.Offload,
		BusyPoll: cfg.BusyPoll,
	}
	if cfg.Cores > 1 && udp.ReusePortSteering() {
		prog, err := bpf.Assemble(readerProgram(cfg.Cores, cfg.Addr.Is6(), skfNetOff))
		if err != nil {
			return nil, fmt.Errorf("swswitch: assemble steering program: %w", err)
		}
		group, err := udp.ListenGroup(ucfg, cfg.Cores, prog)
		if err != nil {
			return nil, fmt.Errorf("swswitch: %w", err)
		}
		conns := make([]udp.Endpoint, len(group))
		for i, c := range group {
			conns[i] = c
		}
		return conns, nil
	}
	conn, err := udp.Listen(ucfg)
	if err != nil {
		return nil, fmt.Errorf("swswitch: %w", err)
	}
	return []udp.Endpoint{conn}, nil
}

// Addr is the switch's RoCEv2 endpoint.
func (s *Switch) Addr() netip.AddrPort { return s.conns[0].LocalAddr() }

// Config returns the configuration in effect (defaults filled in).
func (s *Switch) Config() Config { return s.cfg }

// Readers is the number of goroutines receiving: Config.Cores with a
// SO_REUSEPORT group, 1 on a single endpoint.
func (s *Switch) Readers() int { return len(s.conns) }

// read receives from conn into b until conn closes. It drops requests whose
// ICRC fails, and hands the others to their cores: with one core it runs
// them itself, else in batches, in arrival order. With one core, on an
// endpoint that lends its receive memory (udp.Lender: a GRO socket), the
// requests are read where the kernel put them and run before the next
// read; with more, each is copied into a batch buffer that travels to its
// core.
func (s *Switch) read(conn udp.Endpoint, b *batch) {
	v := verifier{local: conn.LocalAddr(), policy: s.cfg.ICRC}
	out := make([]*batch, len(s.cores))
	read := conn.ReadBatch
	var own []udp.Msg
	if l, ok := conn.(udp.Lender); ok && len(s.cores) == 1 {
		read = l.ReadLent
		own = append(own, b.msgs...)
	}
	for {
		if own != nil {
			copy(b.msgs, own)
		}
		n, err := read(b.msgs)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("receive failed", "err", err)
			continue
		}
		table := s.table.Load()
		kept := 0
		for i := range n {
			m := &b.msgs[i]
			switch v.check(m.Addr, m.Buf, m.Off, m.N) {
			case switchmodel.NotDropped:
			case switchmodel.DropICRC:
				s.rxPackets.Add(1)
				s.rxICRC.Add(1)
				continue
			default:
				s.rxPackets.Add(1)
				s.rxMalformed.Add(1)
				continue
			}
			if len(s.cores) == 1 {
				b.msgs[kept], b.msgs[i] = b.msgs[i], b.msgs[kept]
				kept++
				continue
			}
			// The request moves into its core's batch, whose spare buffer
			// takes its place here.
			c := table.coreOfPacket(m.Bytes())
			o := out[c]
			if o == nil {
				o = <-s.free
				o.n = 0
				out[c] = o
			}
			o.msgs[o.n], *m = *m, o.msgs[o.n]
			o.n++
		}
		if len(s.cores) == 1 {
			if !s.run(s.cores[0], conn, b.msgs[:kept]) {
				return
			}
			continue
		}
		for c, o := range out {
			if o != nil {
				s.cores[c].in <- o
				out[c] = nil
			}
		}
	}
}

// work runs the batches handed to c and sends the results on conn.
func (s *Switch) work(c *core, conn udp.Endpoint) {
	closed := false
	for b := range c.in {
		if !closed {
			closed = !s.run(c, conn, b.msgs[:b.n])
		}
		s.free <- b
	}
}

// run processes checked requests on core c and sends their results on
// conn; false once conn is closed.
func (s *Switch) run(c *core, conn udp.Endpoint, msgs []udp.Msg) bool {
	e := c.eng
	// One clock reading stamps the batch's packets (the pipeline's
	// per-rank last packet, JobProgress).
	now := int64(time.Since(s.epoch)) + 1
	for i := 0; i < len(msgs); {
		c.mu.Lock()
		e.pipe.SetClock(now)
		for ; i < len(msgs) && e.room(); i++ {
			m := &msgs[i]
			e.process(m.Addr, m.Bytes())
		}
		out := e.schedule()
		e.nout = 0
		c.mu.Unlock()
		// The result buffers are only touched by the goroutine that runs
		// the core, so they can be sent without the lock.
		if len(out) > 0 {
			if sent, err := conn.WriteBatch(out); err != nil {
				if errors.Is(err, net.ErrClosed) {
					return false
				}
				s.sendErrors.Add(uint64(len(out) - sent))
				s.log.Warn("send failed", "err", err)
			}
		}
	}
	return true
}

// AddJob installs a job (control.Programmer): its workers' addresses must be
// of the switch's address family. Every core's pipeline gets it, and its
// QPNs are bound to cores (coreTable.withJob) before it returns, so its
// workers' first packets already reach their cores.
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
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	// The first core validates the job against everything installed;
	// the others hold the same jobs and cannot refuse it.
	var table *coreTable
	for i, c := range s.cores {
		c.mu.Lock()
		err := c.eng.pipe.AddJob(job)
		if err == nil {
			// A broadcast and, with gap notices, a notice to the sender.
			c.eng.maxN = max(c.eng.maxN, len(job.Workers)+1)
		}
		c.mu.Unlock()
		if err != nil {
			if i > 0 {
				s.removeFromCores(job.ID, i)
			}
			return fmt.Errorf("swswitch: %w", err)
		}
		if i == 0 {
			if table, err = s.table.Load().withJob(job); err != nil {
				s.removeFromCores(job.ID, 1)
				return err
			}
		}
	}
	s.table.Store(table)
	c := job.Clone()
	s.jobs[job.ID] = &c
	for _, conn := range s.conns {
		if g, ok := conn.(udp.GSOPeers); ok {
			// Workers whose NIC cannot see the IPv4 Identification get
			// their result bursts as GSO datagrams
			// (wire.Worker.IgnoresIPv4ID); the latest job of an address
			// decides.
			for _, w := range job.Workers {
				g.AllowGSO(w.Addr, w.IgnoresIPv4ID)
			}
		}
	}
	s.log.Info("job added", "job", job.ID, "workers", len(job.Workers), "qps", len(job.Workers[0].QPNs),
		"pool", fmt.Sprintf("[%d, %d)", job.PoolBase, job.PoolBase+job.PoolSlots), "packet", job.PacketSize,
		"element_bits", 8*job.LaneBytes())
	return nil
}

// removeFromCores removes job id from the pipelines of cores[:n].
func (s *Switch) removeFromCores(id uint32, n int) {
	for _, c := range s.cores[:n] {
		c.mu.Lock()
		c.eng.pipe.RemoveJob(id)
		c.mu.Unlock()
	}
}

// RemoveJob removes a job and clears its slots (control.Programmer); an
// unknown id is not an error.
func (s *Switch) RemoveJob(ctx context.Context, jobID uint32) error {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	s.removeFromCores(jobID, len(s.cores))
	s.leaveSpine(ctx, jobID, false, "")
	if job, ok := s.jobs[jobID]; ok {
		delete(s.jobs, jobID)
		t := s.table.Load().withoutJob(job)
		if recv := s.upstreams[jobID]; recv != nil {
			delete(s.upstreams, jobID)
			t = t.withoutQPNs(recv)
		}
		s.table.Store(t)
	}
	s.log.Info("job removed", "job", jobID)
	return nil
}

// JobPackets is the number of packets that reached job id's QPs since it
// was added (control.ActivityReporter); false if no such job is installed.
func (s *Switch) JobPackets(jobID uint32) (uint64, bool) {
	var sum uint64
	for _, c := range s.cores {
		c.mu.Lock()
		n, ok := c.eng.pipe.JobPackets(jobID)
		c.mu.Unlock()
		if !ok {
			return 0, false
		}
		sum += n
	}
	return sum, true
}

// SendsGapNotices says the software switch sends gap notices to the
// workers of a job that asked for them (control.GapNoticer,
// wire.GapNotice).
func (s *Switch) SendsGapNotices() bool { return true }

// JobOrderGroups is the core that completes the slots of each of job id's
// QP indices (control.OrderReporter): results of one core's QPs leave in
// the order it completes them, results of different cores overtake each
// other (docs/switch.md "Cores").
func (s *Switch) JobOrderGroups(jobID uint32) ([]uint32, bool) {
	s.jobsMu.Lock()
	j := s.jobs[jobID]
	s.jobsMu.Unlock()
	if j == nil {
		return nil, false
	}
	t := s.table.Load()
	var g []uint32
	if len(j.Workers) > 0 {
		g = make([]uint32, len(j.Workers[0].SwitchQPNs))
		for i, qpn := range j.Workers[0].SwitchQPNs {
			g[i] = uint32(t.coreOf(qpn))
		}
	}
	return g, true
}

// JobProgress reads job id's slots and its workers' packet counts on every
// core (control.ProgressReporter).
func (s *Switch) JobProgress(_ context.Context, jobID uint32) (control.JobProgress, error) {
	out := control.JobProgress{Activity: true}
	var last []int64
	for _, c := range s.cores {
		c.mu.Lock()
		pr, ok := c.eng.pipe.JobProgress(jobID)
		c.mu.Unlock()
		if !ok {
			return control.JobProgress{}, fmt.Errorf("swswitch: progress of job %d: %w", jobID, control.ErrJobNotInstalled)
		}
		if out.Ranks == nil {
			out.Ranks = make([]control.RankProgress, len(pr.Ranks))
			last = make([]int64, len(pr.Ranks))
		}
		out.Aggregating += pr.Aggregating
		for r, rp := range pr.Ranks {
			o := &out.Ranks[r]
			o.Missing += rp.Missing
			o.Packets += rp.Packets
			last[r] = max(last[r], rp.LastPacket)
		}
	}
	for r, t := range last {
		if t > 0 {
			out.Ranks[r].LastPacket = s.epoch.Add(time.Duration(t - 1))
		}
	}
	return out, nil
}

// Stats are the switch's counters.
type Stats struct {
	PacketsIn, BytesIn   uint64 // datagrams received (before ingress loss)
	PacketsOut, BytesOut uint64 // datagrams sent (after egress loss)
	// Kernel datagrams and system calls that carried those packets: with
	// UDP GSO/GRO one datagram holds a run of packets.
	DatagramsIn, RecvCalls  uint64
	DatagramsOut, SendCalls uint64
	// Reads that found a socket empty and polled it (Config.BusyPoll):
	// PollHits ended with a datagram, PollMisses slept after all.
	PollHits, PollMisses uint64
	Model                switchmodel.Counters
	SlotsInUse           int64  // (slot, set) pairs holding a partial sum
	SlotsAllocated       uint64 // slots owned by installed jobs
	PoolSize             uint32
	Jobs                 int
	// CorePackets[c] is the requests core c's pipeline processed (its
	// Model.Packets): how evenly the core key spreads the load.
	CorePackets []uint64
}

// Drops returns the count for one reason.
func (s *Stats) Drops(r switchmodel.DropReason) uint64 { return s.Model.Drops[r] }

// DropsByReason is every drop counter by its reason's name (the reason
// label of swml_switch_drops_total, docs/metrics.md), zeros included.
func (s *Stats) DropsByReason() map[string]uint64 {
	m := make(map[string]uint64, switchmodel.NumDropReasons-1)
	for r := switchmodel.DropReason(1); r < switchmodel.NumDropReasons; r++ {
		m[r.String()] = s.Model.Drops[r]
	}
	return m
}

// Totals are the switch's counters as a report writes them: what the
// switch daemon prints when it stops, as a table or as JSON (docs/operations.md
// "Shutdown"), and what the network lab reads of it.
type Totals struct {
	PacketsIn       uint64 `json:"packets_in"`
	BytesIn         uint64 `json:"bytes_in"`
	PacketsOut      uint64 `json:"packets_out"`
	BytesOut        uint64 `json:"bytes_out"`
	Aggregated      uint64 `json:"aggregated"`
	SlotsCompleted  uint64 `json:"slots_completed"`
	Retransmissions uint64 `json:"retransmissions"`
	Unicasts        uint64 `json:"unicasts"`
	ResultsSkipped  uint64 `json:"results_skipped"`
	// UpstreamWrites and SpineResults count a leaf's writes to its spine
	// and the spine's results it took (docs/switch.md "Switch hierarchy").
	UpstreamWrites uint64 `json:"upstream_writes,omitempty"`
	SpineResults   uint64 `json:"spine_results,omitempty"`
	// GapNotices counts the gap notices sent (docs/protocol.md "Gap
	// notices").
	GapNotices uint64 `json:"gap_notices"`
	// Drops is DropsByReason.
	Drops map[string]uint64 `json:"drops"`
}

// Totals is s as a report writes it.
func (s *Stats) Totals() Totals {
	return Totals{PacketsIn: s.PacketsIn, BytesIn: s.BytesIn, PacketsOut: s.PacketsOut, BytesOut: s.BytesOut,
		Aggregated: s.Model.Aggregated, SlotsCompleted: s.Model.Completed, Retransmissions: s.Model.Retransmissions,
		Unicasts: s.Model.Unicasts, ResultsSkipped: s.Model.ResultsSkipped,
		UpstreamWrites: s.Model.UpstreamWrites, SpineResults: s.Model.SpineResults, GapNotices: s.Model.GapNotices, Drops: s.DropsByReason()}
}

// Stats returns a snapshot of the counters.
func (s *Switch) Stats() Stats {
	st := Stats{PoolSize: s.cfg.Model.PoolSize, CorePackets: make([]uint64, len(s.cores))}
	for i, c := range s.cores {
		c.mu.Lock()
		p := c.eng.pipe
		m := &p.Counters
		st.CorePackets[i] = m.Packets
		st.Model.Packets += m.Packets
		st.Model.Aggregated += m.Aggregated
		st.Model.Retransmissions += m.Retransmissions
		st.Model.Completed += m.Completed
		st.Model.Unicasts += m.Unicasts
		st.Model.ResultPackets += m.ResultPackets
		st.Model.ResultsSkipped += m.ResultsSkipped
		st.Model.UpstreamWrites += m.UpstreamWrites
		st.Model.SpineResults += m.SpineResults
		st.Model.GapNotices += m.GapNotices
		for r := range m.Drops {
			st.Model.Drops[r] += m.Drops[r]
		}
		st.SlotsInUse += p.SlotsInUse()
		if i == 0 {
			st.SlotsAllocated, st.Jobs = p.SlotsAllocated(), p.Jobs()
		}
		c.mu.Unlock()
	}
	st.Model.Packets += s.rxPackets.Load()
	st.Model.Drops[switchmodel.DropICRC] += s.rxICRC.Load()
	st.Model.Drops[switchmodel.DropMalformed] += s.rxMalformed.Load()
	for _, conn := range s.conns {
		cs := conn.Stats()
		st.PacketsIn += cs.RxPackets
		st.BytesIn += cs.RxBytes
		st.PacketsOut += cs.TxPackets
		st.BytesOut += cs.TxBytes
		st.DatagramsIn += cs.RxDatagrams
		st.RecvCalls += cs.RxCalls
		st.DatagramsOut += cs.TxDatagrams
		st.SendCalls += cs.TxCalls
		st.PollHits += cs.RxPollHits
		st.PollMisses += cs.RxPollMisses
		st.Model.Drops[switchmodel.DropIngressLoss] += cs.RxLossDropped
		st.Model.Drops[switchmodel.DropEgressLoss] += cs.TxLossDropped
		st.Model.Drops[switchmodel.DropMalformed] += cs.RxTruncated
	}
	st.Model.Drops[switchmodel.DropSendError] += s.sendErrors.Load()
	return st
}

// Close stops the switch and waits for its goroutines; it unregisters the
// metrics. Idempotent.
func (s *Switch) Close() error {
	var err error
	s.closeOnce.Do(func() {
		for _, c := range s.conns {
			if cerr := c.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		<-s.done
		if s.spine != nil {
			// Leaves the spine's jobs still held: the spine's controller
			// aborts them, and so every leaf's.
			_ = s.spine.Close()
		}
		if s.coll != nil {
			s.cfg.Registry.Unregister(s.coll)
		}
	})
	return err
}
