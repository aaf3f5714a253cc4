package benchmark

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/local"
	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/aggregation/swswitch"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// EmbeddedConfig is a job run entirely in this process (Embedded).
type EmbeddedConfig struct {
	// Workers is the number of workers (at least 2 with Ring).
	Workers int
	// SwitchAddr is the switch's IPv4 address; the workers take the next
	// ones (local.Cluster.WorkerAddrs). Zero: local.DefaultSwitchAddr.
	SwitchAddr netip.Addr
	// Loss drops that fraction of packets at the switch's ingress and at
	// its egress; the ring's packets cross a sending and a receiving NIC
	// that each drop the same fraction, so both algorithms see the same
	// loss per hop.
	Loss float64
	// Offload is the UDP GSO/GRO setting of the switch and the NICs
	// (loopback sockets only).
	Offload udp.Offload
	// Link, when its Rate is set, puts the switch and every worker's NIC
	// on in-memory links of that rate instead of loopback sockets (Link);
	// Loss is then the links' (each worker–switch direction drops Loss,
	// a worker-to-worker pair link, two ports, 1 − (1 − Loss)²), so both
	// algorithms still see Loss per port crossed.
	Link Link
	// Session is every worker's session: QPs, PacketSize,
	// PacketsPerMessage, DType and the rest of aggregation.Config (Device,
	// ControllerAddr, Rank and Workers are set per worker; SessionID
	// defaults to 1).
	Session aggregation.Config
	// Elements is the tensor's length (4-byte elements).
	Elements int
	// Warmup unmeasured and Iters measured all-reduces, per algorithm.
	Warmup, Iters int
	// Ring also runs the ring all-reduce among the same workers over the
	// same NICs (aggregation/ring, message size that of the sessions).
	Ring bool
	// Step, if set, is called after every verified all-reduce, with the
	// algorithm and worker count ("SwitchML, 4 workers", "ring, 4
	// workers"): progress.
	Step func(label string)
	// Phase, if set, is called when a phase starts, before its first
	// all-reduce ends ("starting 4 workers", "SwitchML, 4 workers", "ring,
	// 4 workers"): the first all-reduce of a large job can take a minute.
	Phase func(label string)
}

// EmbeddedResult is what Embedded measured; every result was verified.
// When Embedded fails (an interrupt, a peer timeout), it is what finished
// before: SwitchMLCalls and RingCalls say how far each algorithm got, and
// a summary covers the measured all-reduces that finished.
type EmbeddedResult struct {
	SwitchML Summary
	// CPUUser and CPUSys are this process's CPU time in SwitchML's
	// measured all-reduces (Result.CPUUser, Result.CPUSys): every worker's,
	// its NIC's and the switch's.
	CPUUser, CPUSys time.Duration
	// SwitchMLCalls and RingCalls count the all-reduces that finished and
	// were verified, warm-up included.
	SwitchMLCalls, RingCalls int
	// Packets, Retransmissions and Messages sum the workers' session
	// counters (aggregation.Stats); ResendCauses say why they resent.
	Packets, Retransmissions, Messages uint64
	ResendCauses
	// PacketWriteCalls sums the workers' calls (warm-up included) that
	// sent packet writes (aggregation.Config.Writes).
	PacketWriteCalls uint64
	// SwitchDrops are the switch's drops by reason
	// (switchmodel.DropReason's names).
	SwitchDrops map[string]uint64
	// Ring is the ring's run; nil without EmbeddedConfig.Ring, or when
	// none of its measured all-reduces finished.
	Ring *RingResult
	// Links are the counters of SwitchML's links (worker–switch), zero
	// without EmbeddedConfig.Link.
	Links LinkTotals
}

// RingResult is the ring all-reduce's run. Packets counts everything its
// ranks sent (data, retransmissions and acknowledgements);
// Retransmissions counts data messages resent.
type RingResult struct {
	Summary
	// CPUUser and CPUSys are this process's CPU time in the ring's
	// measured all-reduces.
	CPUUser, CPUSys          time.Duration
	Packets, Retransmissions uint64
	// WindowMessages is the ring's window (ring.Config.Window).
	WindowMessages int
	// Links are the counters of the ring's links (worker to worker),
	// zero without EmbeddedConfig.Link.
	Links LinkTotals
}

// Embedded runs a whole job in this process on a local cluster: a
// software switch, its controller and cfg.Workers workers, each with its
// own userspace NIC; all-reduces every worker's deterministic input
// cfg.Warmup + cfg.Iters times through the switch, then (cfg.Ring) with
// the ring all-reduce among the same workers, checking every result.
// Everything it opened is closed when it returns, also on an error or when
// ctx ends.
func Embedded(ctx context.Context, cfg EmbeddedConfig) (EmbeddedResult, error) {
	if cfg.Session.SessionID == 0 {
		cfg.Session.SessionID = 1
	}
	ppm := cfg.Session.PacketsPerMessage
	if ppm == 0 {
		_, ppm = aggregation.DefaultGeometry(cfg.Workers)
	}
	packetSize := cfg.Session.PacketSize
	if packetSize == 0 {
		packetSize = aggregation.DefaultPacketSize
	}
	if cfg.Ring && cfg.Workers < 2 {
		return EmbeddedResult{}, fmt.Errorf("benchmark: a ring of %d worker sends nothing: give 2 workers or more, or no ring", cfg.Workers)
	}
	phase := func(label string) {
		if cfg.Phase != nil {
			cfg.Phase(label)
		}
	}
	phase(fmt.Sprintf("starting %d workers", cfg.Workers))
	in, err := NewInputsWire(cfg.Session.DType, cfg.Session.Wire, cfg.Workers, cfg.Elements)
	if err != nil {
		return EmbeddedResult{}, err
	}
	lc := local.Config{
		Switch:  swswitch.Config{Addr: cfg.SwitchAddr, IngressLoss: cfg.Loss, EgressLoss: cfg.Loss, Seed: 1, Offload: cfg.Offload},
		Workers: cfg.Workers,
		NIC:     soft.Config{Offload: cfg.Offload},
	}
	var links *linkNet
	if cfg.Link.Rate > 0 {
		// The switch and the NICs on the links; the controller stays on a
		// loopback TCP port, as the control plane is not what is measured.
		if !lc.Switch.Addr.IsValid() {
			lc.Switch.Addr = local.DefaultSwitchAddr
		}
		workers := make([]netip.Addr, cfg.Workers)
		for r, a := 0, lc.Switch.Addr; r < cfg.Workers; r++ {
			a = a.Next()
			workers[r] = a
		}
		if links, err = newLinkNet(cfg.Link, lc.Switch.Addr, workers, packetSize, cfg.Loss); err != nil {
			return EmbeddedResult{}, err
		}
		if lc.Switch.Endpoint, err = links.mem.Listen(netip.AddrPortFrom(lc.Switch.Addr, 0)); err != nil {
			return EmbeddedResult{}, fmt.Errorf("benchmark: switch at %v: %w", lc.Switch.Addr, err)
		}
		lc.Switch.IngressLoss, lc.Switch.EgressLoss, lc.Workers = 0, 0, 0
	}
	cl, err := local.Start(ctx, lc)
	if err != nil {
		return EmbeddedResult{}, err
	}
	defer cl.Close()
	nics := cl.NICs
	if links != nil {
		if nics, err = links.openNICs(); err != nil {
			return EmbeddedResult{}, err
		}
		defer func() {
			for _, d := range nics {
				d.Close()
			}
		}()
	}

	sessions := make([]*aggregation.Session, cfg.Workers)
	closeSessions := func() {
		for i, s := range sessions {
			if s != nil {
				s.Close()
				sessions[i] = nil
			}
		}
	}
	defer closeSessions()
	err = local.Parallel(cfg.Workers, func(r int) error {
		sc := cfg.Session
		sc.Device, sc.ControllerAddr, sc.Rank, sc.Workers = nics[r], cl.ControllerAddr, r, cfg.Workers
		var err error
		sessions[r], err = aggregation.Open(ctx, sc)
		return err
	})
	if err != nil {
		return EmbeddedResult{}, err
	}
	reducers := make([]AllReducer, cfg.Workers)
	for r, s := range sessions {
		reducers[r] = s
	}
	step := func(label string) func() {
		if cfg.Step == nil {
			return nil
		}
		return func() { cfg.Step(label) }
	}
	// The ring reuses SwitchML's buffers: one set of tensors besides the
	// inputs, as docs/operations.md's memory model counts.
	bufs := new(Buffers)
	label := fmt.Sprintf("SwitchML, %d workers", cfg.Workers)
	phase(label)
	calls := 0
	run, err := Run(ctx, reducers, Config{Inputs: in, Warmup: cfg.Warmup, Iters: cfg.Iters, Bound: QuantizationBound,
		Step: counted(&calls, step(label)), Buffers: bufs, Label: label})
	res := EmbeddedResult{SwitchMLCalls: calls}
	if len(run.Times) > 0 {
		res.SwitchML = Summarize(run.Times, cfg.Elements)
		res.CPUUser, res.CPUSys = run.CPUUser, run.CPUSys
	}
	for _, s := range sessions {
		st := s.Stats()
		res.Packets += st.Packets
		res.Retransmissions += st.Retransmissions
		res.Messages += st.Messages
		res.ResendCauses.Add(CausesOf(&st))
		res.PacketWriteCalls += st.PacketWriteCalls
	}
	sws := cl.Switch.Stats()
	res.SwitchDrops = sws.DropsByReason()
	if links != nil {
		res.Links = links.switchTotals()
	}
	if err != nil {
		return res, err
	}
	closeSessions()
	if !cfg.Ring {
		return res, nil
	}

	devs := nics
	if cfg.Loss > 0 && links == nil {
		// The ring gets the same loss model: NICs at the same addresses
		// that drop cfg.Loss of what they send and of what they receive.
		for _, d := range cl.NICs {
			d.Close()
		}
		if devs, err = cl.OpenNICs(cl.WorkerAddrs(cfg.Workers), soft.Config{Offload: cfg.Offload, RecvLoss: cfg.Loss, SendLoss: cfg.Loss, Seed: 1}); err != nil {
			return res, fmt.Errorf("ring baseline: %w", err)
		}
		defer func() {
			for _, d := range devs {
				d.Close()
			}
		}()
	}
	vdevs := make([]verbs.Device, len(devs))
	for i, d := range devs {
		vdevs[i] = d
	}
	rg, err := ring.New(vdevs, ring.Config{MessageSize: packetSize * ppm, MTU: verbs.MTU(packetSize)})
	if err != nil {
		return res, fmt.Errorf("ring baseline: %w", err)
	}
	defer rg.Close()
	for r := range reducers {
		reducers[r] = rg.Rank(r)
	}
	label = fmt.Sprintf("ring, %d workers", cfg.Workers)
	phase(label)
	run, err = Run(ctx, reducers, Config{Inputs: in, Warmup: cfg.Warmup, Iters: cfg.Iters, Bound: Float32Bound,
		Step: counted(&res.RingCalls, step(label)), Buffers: bufs, Label: label})
	if len(run.Times) > 0 {
		rs := rg.Stats()
		res.Ring = &RingResult{Summary: Summarize(run.Times, cfg.Elements), Packets: rs.Packets, Retransmissions: rs.Retransmissions,
			WindowMessages: rg.Config().Window, CPUUser: run.CPUUser, CPUSys: run.CPUSys}
		if links != nil {
			res.Ring.Links = links.ringTotals()
		}
	}
	if err != nil {
		return res, fmt.Errorf("ring baseline: %w", err)
	}
	return res, nil
}

// counted is a Run step that counts the all-reduces done into n, then
// calls next (if any).
func counted(n *int, next func()) func() {
	return func() {
		*n++
		if next != nil {
			next()
		}
	}
}
