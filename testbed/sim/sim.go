package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// ErrConfig is wrapped by Run's error for a configuration it refuses.
var ErrConfig = errors.New("invalid configuration")

// Defaults of Config's zero fields.
const (
	DefaultDelay = time.Microsecond
	DefaultQueue = 1024
	// DefaultFraming is a physical Ethernet port's: every frame also
	// costs its FCS, preamble and inter-frame gap (netlab.EthernetFraming).
	DefaultFraming = netlab.EthernetFraming
)

// udpFrame is what a link charges a datagram beyond its bytes, before
// framing: the Ethernet, IPv4 and UDP headers.
const udpFrame = 14 + 20 + 8

// Config is one simulated job: a flat switch and Workers workers, each on
// its own link to the switch (one per direction, the same in both); or,
// with Leaves, a two-level tree of switches.
type Config struct {
	// Workers is the job's size (2 … 256, the software switch's bitmap).
	Workers int
	// Jobs is how many such jobs run at once (1 if 0; at most MaxJobs),
	// each with Workers workers of its own, on links of their own, sharing
	// the switches and, in a tree, the leaf–spine links: job k's rank r
	// sits beside job 0's rank r, under the same switch. Report is job 0's;
	// JobTimes every job's.
	Jobs int
	// Leaves, when set, puts the workers under Leaves leaf switches below
	// one spine switch (docs/switch.md "Switch hierarchy"), Workers ÷
	// Leaves each (Workers a multiple of Leaves): rank r on leaf r ÷
	// (Workers ÷ Leaves). Each worker's link goes to its leaf, each leaf
	// has a link of its own to the spine (Uplink…). 0: one flat switch.
	Leaves int
	// UplinkRate, UplinkDelay and UplinkQueue are each leaf–spine link
	// direction's rate, propagation delay and queue, as Rate, Delay and
	// Queue (theirs where 0): a slower uplink models an oversubscribed
	// tier. Loss and Framing are the workers' links'.
	UplinkRate  float64
	UplinkDelay time.Duration
	UplinkQueue int
	// Rate is each link direction's rate in bits per second (> 0).
	Rate float64
	// Delay is each link direction's propagation delay (DefaultDelay if
	// 0): a worker's message is a round trip of twice it, plus
	// serialisation and queueing.
	Delay time.Duration
	// Queue is the most packets waiting at each link's sender behind the
	// one on the wire, drop-tail (DefaultQueue if 0).
	Queue int
	// Framing is the bytes each frame costs the link beyond its Ethernet,
	// IPv4 and UDP headers and the datagram (DefaultFraming if 0;
	// negative: none, as a shaped veth counts).
	Framing int
	// Loss drops that fraction of the packets on every link, both
	// directions, from a generator seeded with Seed. LossOnly "up" or
	// "down" keeps it to one direction of the workers' links (worker →
	// switch or switch → worker; a tree's leaf–spine links still lose
	// both ways), to tell the repairs of the two apart.
	Loss     float64
	LossOnly string
	Seed     uint64
	// Session is the workers' configuration: PacketSize, PacketsPerMessage,
	// QPs, DType and the timers (the engine's defaults where zero). Device,
	// Controller, Rank and Workers are set per worker.
	Session aggregation.Config
	// Elements is each worker's tensor length (4-byte elements).
	Elements int
	// Warmup unmeasured, then Iters (≥ 1) measured all-reduces, each
	// verified.
	Warmup, Iters int
	// Ring, when set, then runs the project's ring all-reduce
	// (aggregation/ring) among the same NICs on the same network: each
	// worker sends to the next through the switch, which a link of the
	// same rate and twice the delay from worker to worker models exactly
	// (a ring sends one flow per up-link and per down-link).
	Ring bool
	// Progress, if set, is called after each verified all-reduce with its
	// number (from 1, warm-up included), the total and its virtual time
	// (the ring's calls continue the count).
	Progress func(n, total int, d time.Duration)
}

// MaxJobs bounds Config.Jobs.
const MaxJobs = 4

// Report is what Run measured: the bench's record (benchmark.Record; its
// times are virtual) and the network's side.
type Report struct {
	benchmark.Record
	RateBps float64 `json:"rate_bps"`
	DelayNs int64   `json:"delay_ns"`
	Queue   int     `json:"queue"`
	Framing int     `json:"framing"`
	Seed    uint64  `json:"seed"`
	// LossOnly is Config.LossOnly: the one direction of the workers'
	// links that lost, absent when both did.
	LossOnly string `json:"loss_only,omitempty"`
	// Leaves and WorkersPerLeaf are the tree's shape (Config.Leaves), the
	// Uplink fields its leaf–spine links'; absent for a flat switch.
	Leaves         int     `json:"leaves,omitempty"`
	WorkersPerLeaf int     `json:"workers_per_leaf,omitempty"`
	UplinkRateBps  float64 `json:"uplink_rate_bps,omitempty"`
	UplinkDelayNs  int64   `json:"uplink_delay_ns,omitempty"`
	UplinkQueue    int     `json:"uplink_queue,omitempty"`
	// CeilingATEPerSec is SwitchML's link-rate ceiling
	// (netlab.LinkCeilingsFramed) and OfCeiling the median's fraction of
	// it; in a tree the lower of the workers' links' and the uplinks',
	// which carry every slot as a one-packet message (Config.ceiling).
	// Efficiency is the computed share of a worker link's bits that are
	// tensor payload at that ceiling, MeasuredEfficiency the median's.
	CeilingATEPerSec   float64 `json:"ceiling_ate_per_s"`
	OfCeiling          float64 `json:"of_ceiling"`
	Efficiency         float64 `json:"efficiency"`
	MeasuredEfficiency float64 `json:"measured_efficiency"`
	// ResultSHA256 is the last result's digest (benchmark.Result): the same
	// for the same inputs, whatever the loss.
	ResultSHA256 string `json:"result_sha256"`
	// LinkLost, QueueDrops and Overflow are the links' drops (uplinks and
	// every job's included): by Loss, at a full link queue, at a full
	// receive queue.
	LinkLost   uint64 `json:"link_lost"`
	QueueDrops uint64 `json:"queue_drops"`
	Overflow   uint64 `json:"overflow"`
	// UpPackets and UpBytes are the packets the workers sent into their
	// links to the switch (a tree's: to their leaf), every call, warm-up
	// included, and their datagrams' bytes (a tail probe counts as a
	// packet, with a tenth of a data packet's bytes); UpWaitNs is their
	// mean wait behind the link's wire: the worker's own queue
	// (memlink.LinkStats).
	UpPackets uint64  `json:"worker_up_packets"`
	UpBytes   uint64  `json:"worker_up_bytes"`
	UpWaitNs  float64 `json:"worker_up_wait_ns"`
	// CPUUserNs and CPUSysNs are the process's real CPU time inside the
	// measured all-reduces (benchmark.Result).
	CPUUserNs int64 `json:"cpu_user_ns"`
	CPUSysNs  int64 `json:"cpu_sys_ns"`
	// Ring is the ring's measurement (Config.Ring), nil without.
	Ring *RingReport `json:"ring,omitempty"`
	// Jobs is Config.Jobs when above 1, and JobTimes then each job's
	// times, job 0's (the Record's) first; absent for one job.
	Jobs     int               `json:"jobs,omitempty"`
	JobTimes []benchmark.Times `json:"job_times,omitempty"`
}

// RingReport is the ring all-reduce's part of a Report: its virtual
// times, its link-rate ceiling (netlab.LinkCeilingsFramed) and SwitchML's
// speed as a multiple of it.
type RingReport struct {
	benchmark.Times
	Retransmissions  uint64  `json:"retransmissions"`
	CeilingATEPerSec float64 `json:"ceiling_ate_per_s"`
	OfCeiling        float64 `json:"of_ceiling"`
	SwitchMLSpeedup  float64 `json:"switchml_speedup"`
}

// Addresses: the switch (or the spine) at 10.0.0.1; on a flat switch
// worker w at 10.1.w/256.w%256, w = k·Workers + r for job k's rank r; in a
// tree leaf i at 10.2.i.1 and its workers at the addresses after it
// (local.StartTree), job 0's then job 1's …, at most 256 of them when it
// is the only leaf and 128 otherwise, so that they never reach the next
// leaf's. Never on a socket: memlink's addresses are its own.
var switchAddr = netip.AddrFrom4([4]byte{10, 0, 0, 1})

func flatWorkerAddr(r int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 1, byte(r >> 8), byte(r)})
}

func leafAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, byte(i), 1}) }

// workerAddr is rank r's address (job 0's).
func (cfg *Config) workerAddr(r int) netip.Addr { return cfg.jobWorkerAddr(0, r) }

// jobWorkerAddr is job k's rank r's address: after job k−1's workers, in
// the flat job's range or in its leaf's.
func (cfg *Config) jobWorkerAddr(k, r int) netip.Addr {
	if cfg.Leaves == 0 {
		return flatWorkerAddr(k*cfg.Workers + r)
	}
	per := cfg.Workers / cfg.Leaves
	a := leafAddr(r / per)
	for range k*per + r%per + 1 {
		a = a.Next()
	}
	return a
}

// upstreamOf is rank r's switch: the flat switch, or its leaf.
func (cfg *Config) upstreamOf(r int) netip.Addr {
	if cfg.Leaves == 0 {
		return switchAddr
	}
	return leafAddr(r / (cfg.Workers / cfg.Leaves))
}

func (cfg *Config) withDefaults() error {
	if cfg.Delay == 0 {
		cfg.Delay = DefaultDelay
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.UplinkRate == 0 {
		cfg.UplinkRate = cfg.Rate
	}
	if cfg.UplinkDelay == 0 {
		cfg.UplinkDelay = cfg.Delay
	}
	if cfg.UplinkQueue == 0 {
		cfg.UplinkQueue = cfg.Queue
	}
	switch {
	case cfg.Framing == 0:
		cfg.Framing = DefaultFraming
	case cfg.Framing < 0:
		cfg.Framing = 0
	}
	s := &cfg.Session
	if s.PacketSize == 0 {
		s.PacketSize = aggregation.DefaultPacketSize
	}
	qps, ppm := aggregation.DefaultGeometry(cfg.Workers)
	if s.PacketsPerMessage == 0 {
		s.PacketsPerMessage = ppm
	}
	if s.QPs == 0 {
		s.QPs = qps
	}
	if s.SessionID == 0 {
		s.SessionID = 1
	}
	if cfg.Jobs == 0 {
		cfg.Jobs = 1
	}
	switch {
	case cfg.Jobs < 1 || cfg.Jobs > MaxJobs:
		return fmt.Errorf("sim: %d jobs, not 1 to %d: %w", cfg.Jobs, MaxJobs, ErrConfig)
	case cfg.Jobs > 1 && cfg.Ring:
		return fmt.Errorf("sim: the ring runs one job: %d jobs with Ring: %w", cfg.Jobs, ErrConfig)
	case cfg.Jobs > 1 && cfg.Leaves > 0 && cfg.Jobs*(cfg.Workers/max(cfg.Leaves, 1)) > 127:
		return fmt.Errorf("sim: %d jobs of %d workers a leaf: a leaf's range holds 127 workers: %w", cfg.Jobs, cfg.Workers/cfg.Leaves, ErrConfig)
	case cfg.Workers < 2 || cfg.Workers > 256:
		return fmt.Errorf("sim: %d workers, not 2 to 256: %w", cfg.Workers, ErrConfig)
	case cfg.Rate <= 0:
		return fmt.Errorf("sim: link rate %g bit/s, not above 0: %w", cfg.Rate, ErrConfig)
	case cfg.Elements < 1 || cfg.Iters < 1 || cfg.Warmup < 0:
		return fmt.Errorf("sim: %d elements, %d iterations, %d warm-up, not ≥ 1, 1, 0: %w", cfg.Elements, cfg.Iters, cfg.Warmup, ErrConfig)
	case cfg.Delay < 0 || cfg.Queue < 0:
		return fmt.Errorf("sim: delay %v, queue %d, negative: %w", cfg.Delay, cfg.Queue, ErrConfig)
	case cfg.Leaves < 0 || cfg.Leaves > 0 && cfg.Workers%cfg.Leaves != 0:
		return fmt.Errorf("sim: %d workers under %d leaves: not a whole number per leaf: %w", cfg.Workers, cfg.Leaves, ErrConfig)
	case cfg.Session.Wire != 0 && cfg.Session.Wire != 32:
		return fmt.Errorf("sim: a %d-bit wire: the simulator's ceilings and result check are the 32-bit wire's (the bench runs the 16-bit wire): %w", cfg.Session.Wire, ErrConfig)
	case cfg.LossOnly != "" && cfg.LossOnly != "up" && cfg.LossOnly != "down":
		return fmt.Errorf("sim: loss only %q: give up (worker to switch), down (switch to worker) or nothing (both): %w", cfg.LossOnly, ErrConfig)
	case cfg.UplinkRate < 0 || cfg.UplinkDelay < 0 || cfg.UplinkQueue < 0:
		return fmt.Errorf("sim: uplink rate %g bit/s, delay %v, queue %d, negative: %w", cfg.UplinkRate, cfg.UplinkDelay, cfg.UplinkQueue, ErrConfig)
	}
	return nil
}

// Run builds the network, the switch, its controller and the workers, runs
// the verified all-reduces and tears everything down. Inside a
// testing/synctest bubble its times are the bubble's virtual time (the
// package's purpose); outside one they are real, and the links pace real
// goroutines.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if err := cfg.withDefaults(); err != nil {
		return Report{}, err
	}
	s := cfg.Session
	// Every packet in flight towards an endpoint holds a slot of its
	// receive queue: the switch's must hold every worker's window, a
	// leaf's its workers' and the spine's results, and a datagram is at
	// most a packet with its RoCE headers. A window counts twice: under
	// loss, packet writes may resend a packet whose first copy is still
	// on its way (a tail resent when its results stopped coming at their
	// pace).
	window := 2 * s.QPs * s.PacketsPerMessage
	link := memlink.LinkConfig{Rate: cfg.Rate, Overhead: udpFrame + cfg.Framing, Queue: cfg.Queue, Delay: cfg.Delay, Loss: cfg.Loss}
	// Links between workers (the ring's) pass the switch: twice the delay.
	peer := link
	peer.Delay *= 2
	recvQueue := cfg.Jobs*cfg.Workers*window + cfg.Queue
	if cfg.Leaves > 0 {
		recvQueue = cfg.Jobs*(cfg.Workers+1)*window + max(cfg.Queue, cfg.UplinkQueue)
	}
	nw, err := memlink.New(memlink.Config{
		Link:        peer,
		Seed:        cfg.Seed,
		SourceOrder: true,
		MaxDatagram: s.PacketSize + rdma.BTHSize + rdma.RETHSize + rdma.ImmDtSize + rdma.ICRCSize,
		RecvQueue:   recvQueue,
	})
	if err != nil {
		return Report{}, fmt.Errorf("sim: network: %w", err)
	}
	up, down := link, link
	switch cfg.LossOnly {
	case "up":
		down.Loss = 0
	case "down":
		up.Loss = 0
	}
	for k := range cfg.Jobs {
		for r := range cfg.Workers {
			a, sw := cfg.jobWorkerAddr(k, r), cfg.upstreamOf(r)
			if err := errors.Join(nw.SetLink(a, sw, up), nw.SetLink(sw, a, down)); err != nil {
				return Report{}, fmt.Errorf("sim: job %d worker %d link: %w", k, r, err)
			}
		}
	}
	if err := cfg.setTreeLinks(nw, link); err != nil {
		return Report{}, err
	}
	// The controllers' gRPC runs over in-memory listeners: a goroutine
	// blocked on a socket would stop a bubble's clock for good.
	var (
		devs []*soft.Device
		lis  []*bufconn.Listener // the flat switch's controller's, or leaf i's
	)
	if cfg.Leaves == 0 {
		cl, l, d, err := cfg.startFlat(ctx, nw)
		if err != nil {
			return Report{}, err
		}
		defer cl.Close()
		defer func() {
			for _, d := range d {
				d.Close()
			}
		}()
		devs, lis = d, []*bufconn.Listener{l}
	} else {
		tr, l, err := cfg.startTree(ctx, nw)
		if err != nil {
			return Report{}, err
		}
		defer tr.Close()
		// The tree opened job 0's NICs; the other jobs' sit beside them.
		more, err := cfg.openNICs(nw, 1, nil)
		defer func() {
			for _, d := range more {
				d.Close()
			}
		}()
		if err != nil {
			return Report{}, err
		}
		devs, lis = append(slices.Clip(tr.NICs), more...), l
	}
	// Rank r registers with ctls[r*len(ctls)/cfg.Workers]: its leaf's
	// controller, or the flat switch's.
	ctls := make([]*control.Client, len(lis))
	defer func() {
		for _, c := range ctls {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i, l := range lis {
		if ctls[i], err = dialMemory(l); err != nil {
			return Report{}, fmt.Errorf("sim: %w", err)
		}
	}
	ins := make([]*benchmark.Inputs, cfg.Jobs)
	for k := range ins {
		if ins[k], err = benchmark.NewInputs(s.DType, cfg.Workers, cfg.Elements); err != nil {
			return Report{}, err
		}
	}
	in := ins[0]
	// all[k·Workers + r] is job k's rank r; job 0's are sessions.
	all := make([]*aggregation.Session, cfg.Jobs*cfg.Workers)
	sessions := all[:cfg.Workers]
	defer func() {
		for _, ss := range all {
			if ss == nil {
				continue
			}
			if err != nil {
				// The run already failed with err, the error reported; the
				// abort only ends the others' calls at once.
				_ = ss.Abort(err.Error())
				continue
			}
			ss.Close()
		}
	}()
	if err := local.Parallel(len(all), func(i int) error {
		k, r := i/cfg.Workers, i%cfg.Workers
		sc := s
		sc.SessionID += uint32(k)
		sc.Device, sc.Controller, sc.Rank, sc.Workers = devs[i], ctls[r*len(ctls)/cfg.Workers], r, cfg.Workers
		var err error
		all[i], err = aggregation.Open(ctx, sc)
		return err
	}); err != nil {
		return Report{}, fmt.Errorf("sim: open: %w", err)
	}
	total, done := cfg.Warmup+cfg.Iters, 0
	if cfg.Ring {
		total *= 2
	}
	// Every job runs its calls at once; job 0's give the progress.
	results := make([]benchmark.Result, cfg.Jobs)
	if err := local.Parallel(cfg.Jobs, func(k int) error {
		reducers := make([]benchmark.AllReducer, cfg.Workers)
		for r := range reducers {
			reducers[r] = all[k*cfg.Workers+r]
		}
		var last time.Duration
		bc := benchmark.Config{
			Inputs: ins[k], Warmup: cfg.Warmup, Iters: cfg.Iters, Bound: benchmark.QuantizationBound,
			Label: fmt.Sprintf("%d workers", cfg.Workers),
		}
		if cfg.Jobs > 1 {
			bc.Label = fmt.Sprintf("job %d of %d, %d workers", k+1, cfg.Jobs, cfg.Workers)
		}
		if k == 0 {
			bc.Observe = func(d time.Duration) { last = d }
			bc.Step = func() {
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, total, last)
				}
			}
		}
		var err error
		results[k], err = benchmark.Run(ctx, reducers, bc)
		return err
	}); err != nil {
		return Report{}, fmt.Errorf("sim: %w", err)
	}
	res := results[0]
	rep = cfg.report(res, sessions, nw)
	if cfg.Jobs > 1 {
		rep.Jobs = cfg.Jobs
		for _, r := range results {
			rep.JobTimes = append(rep.JobTimes, benchmark.Summarize(r.Times, cfg.Elements).Times())
		}
	}
	if !cfg.Ring {
		return rep, nil
	}
	for i, ss := range sessions {
		ss.Close()
		sessions[i] = nil
	}
	if rep.Ring, err = cfg.runRing(ctx, devs, in, total, &done); err != nil {
		return Report{}, err
	}
	rep.Ring.SwitchMLSpeedup = rep.ATEPerSec / rep.Ring.ATEPerSec
	return rep, nil
}

// startFlat starts the flat switch and its controller, serving on an
// in-memory listener, and opens the workers' NICs; nothing is left running
// on an error.
func (cfg *Config) startFlat(ctx context.Context, nw *memlink.Network) (_ *local.Cluster, _ *bufconn.Listener, devs []*soft.Device, err error) {
	swEP, err := nw.Listen(netip.AddrPortFrom(switchAddr, 0))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sim: switch endpoint: %w", err)
	}
	lis := bufconn.Listen(1 << 20)
	cl, err := local.Start(ctx, local.Config{
		Switch:             swswitch.Config{Addr: switchAddr, Endpoint: swEP},
		Controller:         control.Config{AllowAddressMismatch: true},
		ControllerListener: lis,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sim: %w", err)
	}
	defer func() {
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			cl.Close()
		}
	}()
	if devs, err = cfg.openNICs(nw, 0, devs); err != nil {
		return nil, nil, devs, err
	}
	return cl, lis, devs, nil
}

// openNICs appends to devs the NICs of the workers of jobs from, from+1, …
// (job k's rank r at k·Workers + r of the whole); on an error devs holds
// those it opened.
func (cfg *Config) openNICs(nw *memlink.Network, from int, devs []*soft.Device) ([]*soft.Device, error) {
	for k := from; k < cfg.Jobs; k++ {
		for r := range cfg.Workers {
			ep, err := nw.Listen(netip.AddrPortFrom(cfg.jobWorkerAddr(k, r), 0))
			if err != nil {
				return devs, fmt.Errorf("sim: job %d worker %d endpoint: %w", k, r, err)
			}
			d, err := soft.Open(soft.Config{Endpoint: ep})
			if err != nil {
				ep.Close()
				return devs, fmt.Errorf("sim: job %d worker %d NIC: %w", k, r, err)
			}
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// startTree starts the spine, the leaves and the workers' NICs
// (local.StartTree) with every controller on an in-memory listener and
// each leaf dialling the spine's over it; lis[i] is leaf i's.
func (cfg *Config) startTree(ctx context.Context, nw *memlink.Network) (*local.Tree, []*bufconn.Listener, error) {
	spine := bufconn.Listen(1 << 20)
	lis := make([]*bufconn.Listener, cfg.Leaves)
	tr, err := local.StartTree(ctx, local.TreeConfig{
		Leaves: cfg.Leaves, WorkersPerLeaf: cfg.Workers / cfg.Leaves,
		SpineAddr: switchAddr, LeafAddr: leafAddr, Memory: nw,
		SpineListener: spine,
		LeafListener: func(i int) net.Listener {
			lis[i] = bufconn.Listen(1 << 20)
			return lis[i]
		},
		SpineClient: control.ClientConfig{Addr: "passthrough:///spine", DialOptions: []grpc.DialOption{memoryDialer(spine)}},
		Controller:  control.Config{AllowAddressMismatch: true},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	return tr, lis, nil
}

// setTreeLinks gives each leaf–spine pair its links, both directions, and
// each pair of ring neighbours on different leaves a link through the
// spine: the slower of the two tiers' rates and the delay of the four
// hops. A ring's flow from a leaf's last worker to the next leaf's first
// is the only one on that leaf's uplink (its acknowledgements the only
// ones on the downlink), so this models the ring as the flat case does
// (Config.Ring). A flat job has none.
func (cfg *Config) setTreeLinks(nw *memlink.Network, link memlink.LinkConfig) error {
	if cfg.Leaves == 0 {
		return nil
	}
	up := link
	up.Rate, up.Delay, up.Queue = cfg.UplinkRate, cfg.UplinkDelay, cfg.UplinkQueue
	for i := range cfg.Leaves {
		if err := errors.Join(nw.SetLink(leafAddr(i), switchAddr, up), nw.SetLink(switchAddr, leafAddr(i), up)); err != nil {
			return fmt.Errorf("sim: leaf %d uplink: %w", i, err)
		}
	}
	if cfg.Leaves == 1 {
		return nil
	}
	cross := link
	cross.Rate, cross.Delay = min(cfg.Rate, cfg.UplinkRate), 2*cfg.Delay+2*cfg.UplinkDelay
	per := cfg.Workers / cfg.Leaves
	for i := range cfg.Leaves {
		last, next := cfg.workerAddr((i+1)*per-1), cfg.workerAddr((i+1)*per%cfg.Workers)
		if err := errors.Join(nw.SetLink(last, next, cross), nw.SetLink(next, last, cross)); err != nil {
			return fmt.Errorf("sim: ring link from leaf %d: %w", i, err)
		}
	}
	return nil
}

// memoryDialer dials lis: grpc's dialer for an in-memory listener.
func memoryDialer(lis *bufconn.Listener) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
}

// dialMemory is a plaintext controller client over lis.
func dialMemory(lis *bufconn.Listener) (*control.Client, error) {
	return control.Dial("passthrough:///sim", memoryDialer(lis), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// runRing runs the ring all-reduce on the job's NICs and inputs; done
// counts the calls for Progress.
func (cfg *Config) runRing(ctx context.Context, devs []*soft.Device, in *benchmark.Inputs, total int, done *int) (*RingReport, error) {
	s := cfg.Session
	msg := s.PacketSize * s.PacketsPerMessage
	vdevs := make([]verbs.Device, len(devs))
	for i, d := range devs {
		vdevs[i] = d
	}
	rg, err := ring.New(vdevs, ring.Config{MessageSize: msg, MTU: verbs.MTU(s.PacketSize)})
	if err != nil {
		return nil, fmt.Errorf("sim: ring: %w", err)
	}
	defer rg.Close()
	reducers := make([]benchmark.AllReducer, len(devs))
	for r := range reducers {
		reducers[r] = rg.Rank(r)
	}
	var last time.Duration
	res, err := benchmark.Run(ctx, reducers, benchmark.Config{
		Inputs: in, Warmup: cfg.Warmup, Iters: cfg.Iters, Bound: benchmark.Float32Bound,
		Label:   fmt.Sprintf("ring, %d workers", cfg.Workers),
		Observe: func(d time.Duration) { last = d },
		Step: func() {
			*done++
			if cfg.Progress != nil {
				cfg.Progress(*done, total, last)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sim: ring: %w", err)
	}
	sum := benchmark.Summarize(res.Times, cfg.Elements)
	c := netlab.LinkCeilingsFramed(cfg.Rate, cfg.Workers, s.PacketSize, msg, cfg.Framing)
	rr := &RingReport{Times: sum.Times(), Retransmissions: rg.Stats().Retransmissions, CeilingATEPerSec: c.Ring}
	if c.Ring > 0 {
		rr.OfCeiling = sum.ATEPerSec / c.Ring
	}
	return rr, nil
}

// report fills the Report of a run that passed its checks.
func (cfg *Config) report(res benchmark.Result, sessions []*aggregation.Session, nw *memlink.Network) Report {
	s := cfg.Session
	msg := s.PacketSize * s.PacketsPerMessage
	sum := benchmark.Summarize(res.Times, cfg.Elements)
	rep := Report{
		Record: benchmark.Record{
			Workers: cfg.Workers, DType: s.DType.String(), TensorBytes: 4 * cfg.Elements, Elements: cfg.Elements,
			Iters: cfg.Iters, Warmup: cfg.Warmup, PacketSize: s.PacketSize, MessageSize: msg, QPs: s.QPs,
			Loss: cfg.Loss, Times: sum.Times(), Verified: true, Writes: s.Writes.String(),
		},
		RateBps: cfg.Rate, DelayNs: int64(cfg.Delay), Queue: cfg.Queue, Framing: cfg.Framing, Seed: cfg.Seed, LossOnly: cfg.LossOnly,
		ResultSHA256: res.ResultSHA256, CPUUserNs: int64(res.CPUUser), CPUSysNs: int64(res.CPUSys),
	}
	for _, ss := range sessions {
		st := ss.Stats()
		rep.Packets += st.Packets
		rep.Retransmissions += st.Retransmissions
		rep.PacketWriteCalls += st.PacketWriteCalls
		rep.ResendCauses.Add(benchmark.CausesOf(&st))
	}
	if cfg.Leaves > 0 {
		rep.Leaves, rep.WorkersPerLeaf = cfg.Leaves, cfg.Workers/cfg.Leaves
		rep.UplinkRateBps, rep.UplinkDelayNs, rep.UplinkQueue = cfg.UplinkRate, int64(cfg.UplinkDelay), cfg.UplinkQueue
	}
	var pairs [][2]netip.Addr
	for i := range cfg.Jobs * cfg.Workers {
		k, r := i/cfg.Workers, i%cfg.Workers
		pairs = append(pairs, [2]netip.Addr{cfg.jobWorkerAddr(k, r), cfg.upstreamOf(r)})
	}
	for i := range cfg.Leaves {
		pairs = append(pairs, [2]netip.Addr{leafAddr(i), switchAddr})
	}
	var upWait time.Duration
	for i, p := range pairs {
		if i < cfg.Jobs*cfg.Workers {
			up := nw.LinkStats(p[0], p[1])
			rep.UpPackets += up.Packets
			rep.UpBytes += up.Bytes
			upWait += up.Wait
		}
		for _, ls := range []memlink.LinkStats{nw.LinkStats(p[0], p[1]), nw.LinkStats(p[1], p[0])} {
			rep.LinkLost += ls.Lost
			rep.QueueDrops += ls.QueueDrops
			rep.Overflow += ls.Overflow
		}
	}
	if rep.UpPackets > 0 {
		rep.UpWaitNs = float64(upWait) / float64(rep.UpPackets)
	}
	rep.CeilingATEPerSec = cfg.ceiling()
	rep.Efficiency = rep.CeilingATEPerSec * 32 / cfg.Rate
	rep.MeasuredEfficiency = sum.ATEPerSec * 32 / cfg.Rate
	if rep.CeilingATEPerSec > 0 {
		rep.OfCeiling = sum.ATEPerSec / rep.CeilingATEPerSec
	}
	return rep
}

// ceiling is SwitchML's link-rate ceiling in ATE/s
// (netlab.LinkCeilingsFramed): the workers' links', and in a tree also
// the uplinks', where each slot goes up, and its result comes down, as a
// one-packet message with a RETH and an immediate (docs/switch.md "Switch
// hierarchy"): the lower of the two.
func (cfg *Config) ceiling() float64 {
	s := cfg.Session
	c := netlab.LinkCeilingsFramed(cfg.Rate, cfg.Workers, s.PacketSize, s.PacketSize*s.PacketsPerMessage, cfg.Framing).SwitchML
	if cfg.Leaves > 0 {
		// The jobs share the uplinks: each has its share of their rate.
		c = min(c, netlab.LinkCeilingsFramed(cfg.UplinkRate/float64(cfg.Jobs), cfg.Workers, s.PacketSize, s.PacketSize, cfg.Framing).SwitchML)
	}
	return c
}
