package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
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
// its own link to the switch (one per direction, the same in both).
type Config struct {
	// Workers is the job's size (2 … 256, the software switch's bitmap).
	Workers int
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
	// directions, from a generator seeded with Seed.
	Loss float64
	Seed uint64
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

// Report is what Run measured: the bench's record (benchmark.Record; its
// times are virtual) and the network's side.
type Report struct {
	benchmark.Record
	RateBps float64 `json:"rate_bps"`
	DelayNs int64   `json:"delay_ns"`
	Queue   int     `json:"queue"`
	Framing int     `json:"framing"`
	Seed    uint64  `json:"seed"`
	// CeilingATEPerSec is SwitchML's link-rate ceiling
	// (netlab.LinkCeilingsFramed) and OfCeiling the median's fraction of
	// it. Efficiency is the computed share of the link's bits that are
	// tensor payload, MeasuredEfficiency the median's.
	CeilingATEPerSec   float64 `json:"ceiling_ate_per_s"`
	OfCeiling          float64 `json:"of_ceiling"`
	Efficiency         float64 `json:"efficiency"`
	MeasuredEfficiency float64 `json:"measured_efficiency"`
	// ResultSHA256 is the last result's digest (benchmark.Result): the same
	// for the same inputs, whatever the loss.
	ResultSHA256 string `json:"result_sha256"`
	// LinkLost, QueueDrops and Overflow are the links' drops: by Loss, at
	// a full link queue, at a full receive queue.
	LinkLost   uint64 `json:"link_lost"`
	QueueDrops uint64 `json:"queue_drops"`
	Overflow   uint64 `json:"overflow"`
	// CPUUserNs and CPUSysNs are the process's real CPU time inside the
	// measured all-reduces (benchmark.Result).
	CPUUserNs int64 `json:"cpu_user_ns"`
	CPUSysNs  int64 `json:"cpu_sys_ns"`
	// Ring is the ring's measurement (Config.Ring), nil without.
	Ring *RingReport `json:"ring,omitempty"`
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

// Addresses: the switch at 10.0.0.1, worker r at 10.1.r/256.r%256 (never
// on a socket: memlink's addresses are its own).
var switchAddr = netip.AddrFrom4([4]byte{10, 0, 0, 1})

func workerAddr(r int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 1, byte(r >> 8), byte(r)})
}

func (cfg *Config) withDefaults() error {
	if cfg.Delay == 0 {
		cfg.Delay = DefaultDelay
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
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
	if s.PacketsPerMessage == 0 {
		s.PacketsPerMessage = aggregation.DefaultPacketsPerMessage
	}
	if s.QPs == 0 {
		s.QPs = aggregation.DefaultQPs
	}
	if s.SessionID == 0 {
		s.SessionID = 1
	}
	switch {
	case cfg.Workers < 2 || cfg.Workers > 256:
		return fmt.Errorf("sim: %d workers, not 2 to 256: %w", cfg.Workers, ErrConfig)
	case cfg.Rate <= 0:
		return fmt.Errorf("sim: link rate %g bit/s, not above 0: %w", cfg.Rate, ErrConfig)
	case cfg.Elements < 1 || cfg.Iters < 1 || cfg.Warmup < 0:
		return fmt.Errorf("sim: %d elements, %d iterations, %d warm-up, not ≥ 1, 1, 0: %w", cfg.Elements, cfg.Iters, cfg.Warmup, ErrConfig)
	case cfg.Delay < 0 || cfg.Queue < 0:
		return fmt.Errorf("sim: delay %v, queue %d, negative: %w", cfg.Delay, cfg.Queue, ErrConfig)
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
	// receive queue: the switch's must hold every worker's window, and a
	// datagram is at most a packet with its RoCE headers.
	window := s.QPs * s.PacketsPerMessage
	link := memlink.LinkConfig{Rate: cfg.Rate, Overhead: udpFrame + cfg.Framing, Queue: cfg.Queue, Delay: cfg.Delay, Loss: cfg.Loss}
	// Links between workers (the ring's) pass the switch: twice the delay.
	peer := link
	peer.Delay *= 2
	nw, err := memlink.New(memlink.Config{
		Link:        peer,
		Seed:        cfg.Seed,
		SourceOrder: true,
		MaxDatagram: s.PacketSize + rdma.BTHSize + rdma.RETHSize + rdma.ImmDtSize + rdma.ICRCSize,
		RecvQueue:   cfg.Workers*window + cfg.Queue,
	})
	if err != nil {
		return Report{}, fmt.Errorf("sim: network: %w", err)
	}
	swEP, err := nw.Listen(netip.AddrPortFrom(switchAddr, 0))
	if err != nil {
		return Report{}, fmt.Errorf("sim: switch endpoint: %w", err)
	}
	// The controller's gRPC runs over an in-memory listener: a goroutine
	// blocked on a socket would stop a bubble's clock for good.
	lis := bufconn.Listen(1 << 20)
	cl, err := local.Start(ctx, local.Config{
		Switch:             swswitch.Config{Addr: switchAddr, Endpoint: swEP},
		Controller:         control.Config{AllowAddressMismatch: true},
		ControllerListener: lis,
	})
	if err != nil {
		return Report{}, fmt.Errorf("sim: %w", err)
	}
	defer cl.Close()
	ctl, err := control.Dial("passthrough:///sim",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Report{}, fmt.Errorf("sim: %w", err)
	}
	defer ctl.Close()

	devs := make([]*soft.Device, cfg.Workers)
	defer func() {
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}()
	for r := range devs {
		a := workerAddr(r)
		if err := errors.Join(nw.SetLink(a, switchAddr, link), nw.SetLink(switchAddr, a, link)); err != nil {
			return Report{}, fmt.Errorf("sim: worker %d link: %w", r, err)
		}
		ep, err := nw.Listen(netip.AddrPortFrom(a, 0))
		if err != nil {
			return Report{}, fmt.Errorf("sim: worker %d endpoint: %w", r, err)
		}
		if devs[r], err = soft.Open(soft.Config{Endpoint: ep}); err != nil {
			ep.Close()
			return Report{}, fmt.Errorf("sim: worker %d NIC: %w", r, err)
		}
	}
	in, err := benchmark.NewInputs(s.DType, cfg.Workers, cfg.Elements)
	if err != nil {
		return Report{}, err
	}
	sessions := make([]*aggregation.Session, cfg.Workers)
	defer func() {
		for _, ss := range sessions {
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
	if err := local.Parallel(cfg.Workers, func(r int) error {
		sc := s
		sc.Device, sc.Controller, sc.Rank, sc.Workers = devs[r], ctl, r, cfg.Workers
		var err error
		sessions[r], err = aggregation.Open(ctx, sc)
		return err
	}); err != nil {
		return Report{}, fmt.Errorf("sim: open: %w", err)
	}
	reducers := make([]benchmark.AllReducer, cfg.Workers)
	for r, ss := range sessions {
		reducers[r] = ss
	}
	total, done := cfg.Warmup+cfg.Iters, 0
	if cfg.Ring {
		total *= 2
	}
	var last time.Duration
	res, err := benchmark.Run(ctx, reducers, benchmark.Config{
		Inputs: in, Warmup: cfg.Warmup, Iters: cfg.Iters, Bound: benchmark.QuantizationBound,
		Label:   fmt.Sprintf("%d workers", cfg.Workers),
		Observe: func(d time.Duration) { last = d },
		Step: func() {
			done++
			if cfg.Progress != nil {
				cfg.Progress(done, total, last)
			}
		},
	})
	if err != nil {
		return Report{}, fmt.Errorf("sim: %w", err)
	}
	rep = cfg.report(res, sessions, nw)
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
		RateBps: cfg.Rate, DelayNs: int64(cfg.Delay), Queue: cfg.Queue, Framing: cfg.Framing, Seed: cfg.Seed,
		ResultSHA256: res.ResultSHA256, CPUUserNs: int64(res.CPUUser), CPUSysNs: int64(res.CPUSys),
	}
	for _, ss := range sessions {
		st := ss.Stats()
		rep.Packets += st.Packets
		rep.Retransmissions += st.Retransmissions
		rep.PacketWriteCalls += st.PacketWriteCalls
		rep.ResendCauses.Add(benchmark.ResendCauses{Timeouts: st.Timeouts, FastRetransmissions: st.FastRetransmissions,
			SpuriousRetransmissions: st.SpuriousRetransmissions})
	}
	for r := range cfg.Workers {
		for _, ls := range []memlink.LinkStats{nw.LinkStats(workerAddr(r), switchAddr), nw.LinkStats(switchAddr, workerAddr(r))} {
			rep.LinkLost += ls.Lost
			rep.QueueDrops += ls.QueueDrops
			rep.Overflow += ls.Overflow
		}
	}
	c := netlab.LinkCeilingsFramed(cfg.Rate, cfg.Workers, s.PacketSize, msg, cfg.Framing)
	rep.CeilingATEPerSec = c.SwitchML
	rep.Efficiency = c.SwitchML * 32 / cfg.Rate
	rep.MeasuredEfficiency = sum.ATEPerSec * 32 / cfg.Rate
	if c.SwitchML > 0 {
		rep.OfCeiling = sum.ATEPerSec / c.SwitchML
	}
	return rep
}
