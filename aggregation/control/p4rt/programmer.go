package p4rt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// packetSize256 is the payload size the default and test profiles of
// p4/rdma_switch aggregate (64 int32 values per pass). The PAYLOAD_1024
// profile aggregates packetSize1024 (profile.go); P4Info.packetSize tells
// which program a P4Info describes.
const packetSize256 = 256

// Errors a Programmer wraps, for a caller to render its remedy.
var (
	// ErrPoolSize: Config.PoolSize is larger than the program's slot
	// registers (NUM_SLOTS in configuration.p4).
	ErrPoolSize = errors.New("larger than the program's slot count")
	// ErrNotPrimary: another controller holds a higher election id for
	// the device (P4Runtime arbitration).
	ErrNotPrimary = errors.New("not the primary controller")
	// ErrNoPort: a worker's address has no switch port in Config.Ports.
	ErrNoPort = errors.New("no switch port for the worker's address")
)

// Config configures a Programmer.
type Config struct {
	// P4Info of the loaded program (LoadP4Info). Required.
	P4Info *P4Info
	// DeviceID is the P4Runtime device id (Stratum's node id; the SDE's
	// bf_switchd uses 0 or 1). Default 0.
	DeviceID uint64
	// ElectionID (low 64 bits) for arbitration: the highest live id is
	// primary, and only the primary may write. 0 means 1.
	ElectionID uint64
	// DeviceConfig, when non-nil, is pushed with SetForwardingPipelineConfig
	// (VERIFY_AND_COMMIT) together with the P4Info: the target-specific
	// blob (for Stratum on Tofino, its packed bf-p4c output). nil leaves the
	// pipeline already on the switch.
	DeviceConfig []byte
	// SwitchMAC and SwitchIPv4 are the switch's RoCE endpoint (the same as
	// control.Config's): answered to ARP/ping by the data plane and matched
	// as the destination of requests. Required.
	SwitchMAC  net.HardwareAddr
	SwitchIPv4 netip.Addr
	// PoolSize is the controller's slot count; it must fit the program's
	// registers (configuration.p4 NUM_SLOTS). Required.
	PoolSize uint32
	// Ports maps each worker address to the switch port it is cabled to
	// (the multicast replicas' egress ports). A job with a worker missing
	// from it is refused.
	Ports map[netip.Addr]uint32
	// IngressDrop and EgressDrop are the drop simulator's loss
	// probabilities for requests and results (0 ≤ p ≤ 1).
	IngressDrop, EgressDrop float64
	// ClearValues also zeroes the 32 Processor registers of a removed
	// job's slots. Not needed for correctness (a first contribution
	// overwrites), 32× the register writes.
	ClearValues bool
	// LoopbackPorts are pipe 1 ports in loopback that the 1024 B and
	// 16-bit profiles (-DPAYLOAD_1024, -DWIRE_16) send requests through for
	// their consume passes (at most loopbackKeyEntries; profile.go).
	// Required with those profiles' P4Info, refused with the 256 B program's.
	LoopbackPorts []uint32
	// BatchSize bounds the updates of one WriteRequest; 0 means 1024.
	BatchSize int
	// Logger receives job events; nil discards them.
	Logger *slog.Logger
}

// Programmer is a control.Programmer for p4/rdma_switch over P4Runtime.
// Safe for concurrent use.
type Programmer struct {
	cfg      Config
	info     *P4Info
	client   p4v1.P4RuntimeClient
	election *p4v1.Uint128
	log      *slog.Logger

	streamCancel context.CancelFunc
	streamDone   chan struct{}
	closeOnce    sync.Once

	rxSize uint32 // receiver / PSN register entries
	mu     sync.Mutex
	jobs   map[uint32]*installedJob
	qps    spans.Allocator // QP-state register entries [0, rxSize)
	mgids  map[uint32]bool
}

var _ control.Programmer = (*Programmer)(nil)

type installedJob struct {
	job    wire.Job
	mgid   uint32
	qpBase uint32
	qps    spans.Span // [qpBase, qpBase + workers × QPs)
}

// New becomes primary controller of the device on conn, pushes the
// pipeline if cfg.DeviceConfig is set, and writes the switch address and
// drop probabilities. ctx bounds these steps; the arbitration stream lives
// until Close.
func New(ctx context.Context, conn grpc.ClientConnInterface, cfg Config) (*Programmer, error) {
	if cfg.P4Info == nil {
		return nil, errors.New("p4rt: Config.P4Info is nil: load the P4Info bf-p4c wrote (LoadP4Info)")
	}
	if err := cfg.P4Info.check(); err != nil {
		return nil, fmt.Errorf("p4rt: the P4Info does not match p4/rdma_switch: %w", err)
	}
	if err := checkProfile(&cfg); err != nil {
		return nil, err
	}
	if !cfg.SwitchIPv4.Is4() {
		return nil, fmt.Errorf("p4rt: Config.SwitchIPv4 %v: the Tofino program needs the switch's IPv4 address", cfg.SwitchIPv4)
	}
	if len(cfg.SwitchMAC) != 6 {
		return nil, fmt.Errorf("p4rt: Config.SwitchMAC %v: the Tofino program needs the switch's 48-bit MAC", cfg.SwitchMAC)
	}
	if cfg.PoolSize == 0 {
		return nil, errors.New("p4rt: Config.PoolSize is 0: pass the program's slot count (configuration.p4 NUM_SLOTS)")
	}
	for _, p := range []float64{cfg.IngressDrop, cfg.EgressDrop} {
		if !(p >= 0 && p <= 1) {
			return nil, fmt.Errorf("p4rt: drop probability %v: use 0 to 1", p)
		}
	}
	bitmap, _ := cfg.P4Info.register(registerBitmap)
	if int64(cfg.PoolSize) > int64(bitmap.GetSize()) {
		return nil, fmt.Errorf("p4rt: pool size %d: %w: %d (register %s)", cfg.PoolSize, ErrPoolSize, bitmap.GetSize(), registerBitmap)
	}
	rx, _ := cfg.P4Info.register(registerRxQP)
	if cfg.ElectionID == 0 {
		cfg.ElectionID = 1
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1024
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Programmer{
		cfg:      cfg,
		info:     cfg.P4Info,
		client:   p4v1.NewP4RuntimeClient(conn),
		election: &p4v1.Uint128{High: 0, Low: cfg.ElectionID},
		log:      log.With("component", "p4rt"),
		rxSize:   uint32(rx.GetSize()),
		qps:      spans.New(0, uint32(rx.GetSize())),
		jobs:     map[uint32]*installedJob{},
		mgids:    map[uint32]bool{},
	}
	if err := p.arbitrate(ctx); err != nil {
		return nil, err
	}
	if cfg.DeviceConfig != nil {
		_, err := p.client.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
			DeviceId:   cfg.DeviceID,
			ElectionId: p.election,
			Action:     p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
			Config:     &p4v1.ForwardingPipelineConfig{P4Info: cfg.P4Info.pb, P4DeviceConfig: cfg.DeviceConfig},
		})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("p4rt: SetForwardingPipelineConfig on device %d: %w", cfg.DeviceID, err)
		}
	}
	if err := p.writeDefaults(ctx); err != nil {
		p.Close()
		return nil, err
	}
	if err := p.writeProfile(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// arbitrate opens the StreamChannel and waits to be told we are primary.
func (p *Programmer) arbitrate(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := p.client.StreamChannel(sctx)
	if err != nil {
		cancel()
		return fmt.Errorf("p4rt: open StreamChannel: %w", err)
	}
	req := &p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: p.cfg.DeviceID, ElectionId: p.election,
	}}}
	if err := stream.Send(req); err != nil {
		cancel()
		return fmt.Errorf("p4rt: send arbitration (device %d, election id %d): %w", p.cfg.DeviceID, p.cfg.ElectionID, err)
	}
	first := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reported := false
		for {
			msg, err := stream.Recv()
			if err != nil {
				if !reported {
					first <- fmt.Errorf("p4rt: arbitration stream: %w", err)
				} else if !errors.Is(err, io.EOF) && sctx.Err() == nil {
					p.log.Warn("P4Runtime stream ended", "err", err)
				}
				return
			}
			arb := msg.GetArbitration()
			if arb == nil {
				continue // packet-ins, digests, idle timeouts: not used
			}
			st := arb.GetStatus()
			var e error
			if st.GetCode() != int32(code.Code_OK) {
				e = fmt.Errorf("p4rt: device %d, election id %d: %w: %s", p.cfg.DeviceID, p.cfg.ElectionID, ErrNotPrimary, st.GetMessage())
			}
			if !reported {
				reported = true
				first <- e
			} else if e != nil {
				p.log.Warn("lost primary", "err", e)
			}
		}
	}()
	select {
	case err := <-first:
		if err != nil {
			cancel()
			<-done
			return err
		}
	case <-ctx.Done():
		cancel()
		<-done
		return fmt.Errorf("p4rt: arbitration on device %d: %w", p.cfg.DeviceID, ctx.Err())
	}
	p.streamCancel, p.streamDone = cancel, done
	return nil
}

// Close ends the arbitration stream (the switch keeps its tables).
// Idempotent.
func (p *Programmer) Close() error {
	p.closeOnce.Do(func() {
		if p.streamCancel != nil {
			p.streamCancel()
			<-p.streamDone
		}
	})
	return nil
}

// update is one write with a description of its entity for errors.
type update struct {
	u    *p4v1.Update
	what string
}

func (p *Programmer) writeDefaults(ctx context.Context) error {
	mac := macUint(p.cfg.SwitchMAC)
	ip := ipUint(p.cfg.SwitchIPv4)
	var ups []update
	add := func(table, action string, params []string, vals []uint64, what string) error {
		te, err := p.defaultEntry(table, action, params, vals)
		if err != nil {
			return err
		}
		ups = append(ups, update{&p4v1.Update{Type: p4v1.Update_MODIFY, Entity: tableEntity(te)}, what})
		return nil
	}
	if err := add(tableSwitchAddress, actionSetSwitchAddress, paramsSetSwitchAddress, []uint64{mac, ip},
		fmt.Sprintf("switch address %v %v (%s default action)", p.cfg.SwitchMAC, p.cfg.SwitchIPv4, tableSwitchAddress)); err != nil {
		return err
	}
	if err := add(tableIngressDrop, actionIngressDrop, paramsSetDrop, []uint64{threshold(p.cfg.IngressDrop)},
		fmt.Sprintf("ingress drop probability %v (%s)", p.cfg.IngressDrop, tableIngressDrop)); err != nil {
		return err
	}
	if err := add(tableEgressDrop, actionEgressDrop, paramsSetDrop, []uint64{threshold(p.cfg.EgressDrop)},
		fmt.Sprintf("egress drop probability %v (%s)", p.cfg.EgressDrop, tableEgressDrop)); err != nil {
		return err
	}
	return p.write(ctx, ups)
}

// threshold is p·2^16 clamped to 16 bits (DropSimulator drops when a
// 16-bit random number is below it).
func threshold(prob float64) uint64 {
	return uint64(math.Min(prob*(1<<16), math.MaxUint16))
}

// AddJob installs a job (control.Programmer).
func (p *Programmer) AddJob(ctx context.Context, job *wire.Job) error {
	if job == nil {
		return fmt.Errorf("p4rt: add job: %w: nil job", wire.ErrBadJob)
	}
	if err := p.checkJob(job); err != nil {
		return err
	}
	n, q := len(job.Workers), len(job.Workers[0].QPNs)
	p.mu.Lock()
	if _, ok := p.jobs[job.ID]; ok {
		p.mu.Unlock()
		return fmt.Errorf("p4rt: add job %d: the job is installed", job.ID)
	}
	qps, ok := p.qps.Alloc(uint32(n * q))
	if !ok {
		p.mu.Unlock()
		return fmt.Errorf("p4rt: add job %d: out of QP state entries for %d workers × %d QPs (register %s holds %d); end other jobs", job.ID, n, q, registerRxQP, p.rxSize)
	}
	mgid := p.allocMGID()
	ij := &installedJob{job: job.Clone(), mgid: mgid, qpBase: qps.Base, qps: qps}
	p.jobs[job.ID] = ij
	p.mu.Unlock()

	ups, err := p.jobUpdates(ij)
	if err == nil {
		err = p.write(ctx, ups)
	}
	if err != nil {
		// Best effort: take back whatever got in, then forget the job.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = p.teardown(rctx, ij, true)
		cancel()
		p.mu.Lock()
		p.release(ij)
		p.mu.Unlock()
		return fmt.Errorf("p4rt: add job %d: %w", job.ID, err)
	}
	p.log.Info("job installed", "job", job.ID, "workers", n, "qps", q, "mgid", mgid, "qp_base", qps.Base,
		"pool", fmt.Sprintf("[%d, %d)", job.PoolBase, job.PoolBase+job.PoolSlots))
	return nil
}

// RemoveJob deletes a job's entries and clears its registers
// (control.Programmer); an unknown id is not an error.
func (p *Programmer) RemoveJob(ctx context.Context, jobID uint32) error {
	p.mu.Lock()
	ij, ok := p.jobs[jobID]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	err := p.teardown(ctx, ij, false)
	p.mu.Lock()
	p.release(ij)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("p4rt: remove job %d: %w", jobID, err)
	}
	p.log.Info("job removed", "job", jobID)
	return nil
}

// release forgets an installed job and frees its QP-state entries and
// multicast group. Holds mu. A job already released (two RemoveJob calls at
// once, or a RemoveJob during a failing AddJob) is left alone: its
// entries and group may belong to a newer job by now.
func (p *Programmer) release(ij *installedJob) {
	if p.jobs[ij.job.ID] != ij {
		return
	}
	delete(p.jobs, ij.job.ID)
	delete(p.mgids, ij.mgid)
	p.qps.Free(ij.qps)
}

func (p *Programmer) checkJob(job *wire.Job) error {
	if err := job.Validate(); err != nil {
		return fmt.Errorf("p4rt: add job: %w", err)
	}
	if w := p.elementBytes(); job.LaneBytes() != w {
		// The Processors' registers add lanes of one width (configuration.p4
		// WIRE_16; docs/p4.md "16-bit profile").
		return fmt.Errorf("p4rt: add job %d: %d-bit elements: the %s program sums %d-bit lanes: %w",
			job.ID, 8*job.LaneBytes(), p.info.profile(), 8*w, wire.ErrElementWidth)
	}
	if size := p.packetSize(); job.PacketSize != size {
		return fmt.Errorf("p4rt: add job %d: %w: packet size %d: the loaded Tofino program aggregates %d B payloads (p4/build.sh builds 256 B in build/p4/default and 1024 B in build/p4/payload1024); run the job with %d B packets or load the other build", job.ID, wire.ErrBadJob, job.PacketSize, size, size)
	}
	if job.DType != wire.Float32 && job.DType != wire.Int32 {
		return fmt.Errorf("p4rt: add job %d: %w: dtype %v", job.ID, wire.ErrBadJob, job.DType)
	}
	if len(job.Workers) > wire.MaxP4AppWorkers {
		return fmt.Errorf("p4rt: add job %d: %w: %d workers; the Tofino program holds %d", job.ID, wire.ErrBadJob, len(job.Workers), wire.MaxP4AppWorkers)
	}
	if uint64(job.PoolBase)+uint64(job.PoolSlots) > uint64(p.cfg.PoolSize) {
		return fmt.Errorf("p4rt: add job %d: %w: pool range [%d, %d) exceeds the switch's %d slots", job.ID, wire.ErrBadJob, job.PoolBase, uint64(job.PoolBase)+uint64(job.PoolSlots), p.cfg.PoolSize)
	}
	for r, w := range job.Workers {
		if !w.Addr.Unmap().Is4() {
			return fmt.Errorf("p4rt: add job %d: %w: worker %d address %v: the Tofino program is IPv4 only", job.ID, wire.ErrBadJob, r, w.Addr)
		}
		if len(w.MAC) != 6 {
			return fmt.Errorf("p4rt: add job %d: %w: worker %d has no 48-bit MAC (%v); the switch writes it into results", job.ID, wire.ErrBadJob, r, w.MAC)
		}
		if _, ok := p.cfg.Ports[w.Addr.Unmap()]; !ok {
			return fmt.Errorf("p4rt: add job %d: worker %d (%v): %w", job.ID, r, w.Addr.Unmap(), ErrNoPort)
		}
		for i, sq := range w.SwitchQPNs {
			want, err := wire.P4AppQPN(r, i)
			if err != nil {
				return fmt.Errorf("p4rt: add job %d: %w: %v", job.ID, wire.ErrBadJob, err)
			}
			if sq != want {
				return fmt.Errorf("p4rt: add job %d: %w: worker %d QP %d has switch QPN %#x, the Tofino program needs %#x (run the controller with QPNScheme QPNP4App)", job.ID, wire.ErrBadJob, r, i, sq, want)
			}
			if w.QPNs[i] > rdma.QPNMask || w.PSNs[i] > rdma.PSNMask {
				return fmt.Errorf("p4rt: add job %d: %w: worker %d QP %d: QPN %#x or PSN %#x is not 24-bit", job.ID, wire.ErrBadJob, r, i, w.QPNs[i], w.PSNs[i])
			}
		}
	}
	return nil
}

// jobUpdates builds a job's writes in install order: per-QP registers,
// sender tables, multicast group, receive table.
func (p *Programmer) jobUpdates(ij *installedJob) ([]update, error) {
	job := &ij.job
	q := len(job.Workers[0].QPNs)
	var regs, sender, recv []update
	for r, w := range job.Workers {
		for i := 0; i < q; i++ {
			idx := int64(ij.qpBase) + int64(r*q+i)
			e, err := p.registerEntry(registerRxQP, idx, invalidPSN, 0)
			if err != nil {
				return nil, err
			}
			regs = append(regs, update{modify(registerEntity(e)), fmt.Sprintf("%s[%d] (worker %d QP %d)", registerRxQP, idx, r, i)})
			e, err = p.registerEntry(registerRxHighPSN, idx, 0)
			if err != nil {
				return nil, err
			}
			regs = append(regs, update{modify(registerEntity(e)), fmt.Sprintf("%s[%d] (worker %d QP %d)", registerRxHighPSN, idx, r, i)})
			e, err = p.registerEntry(registerTxPos, idx, txClosed)
			if err != nil {
				return nil, err
			}
			regs = append(regs, update{modify(registerEntity(e)), fmt.Sprintf("%s[%d] (worker %d QP %d)", registerTxPos, idx, r, i)})
			e, err = p.registerEntry(registerPSN, idx, uint64(w.PSNs[i]))
			if err != nil {
				return nil, err
			}
			regs = append(regs, update{modify(registerEntity(e)), fmt.Sprintf("%s[%d] = PSN %#x (worker %d QP %d)", registerPSN, idx, w.PSNs[i], r, i)})
			te, err := p.tableEntry(tableWorkerQP, []match{{fieldMGID, uint64(ij.mgid), 0}, {fieldDestRank, uint64(r), 0}, {fieldQPIndex, uint64(i), 0}}, 0,
				actionSetWorkerQP, paramsSetWorkerQP, []uint64{uint64(w.QPNs[i]), uint64(idx)})
			if err != nil {
				return nil, err
			}
			sender = append(sender, update{insert(tableEntity(te)), fmt.Sprintf("%s entry (job %d worker %d QP %d → QPN %#x)", tableWorkerQP, job.ID, r, i, w.QPNs[i])})
		}
		te, err := p.tableEntry(tableWorker, []match{{fieldMGID, uint64(ij.mgid), 0}, {fieldDestRank, uint64(r), 0}}, 0,
			actionSetWorker, paramsSetWorker, []uint64{macUint(w.MAC), ipUint(w.Addr), uint64(w.RKey)})
		if err != nil {
			return nil, err
		}
		sender = append(sender, update{insert(tableEntity(te)), fmt.Sprintf("%s entry (job %d worker %d %v %v)", tableWorker, job.ID, r, w.MAC, w.Addr)})
		prefix, _ := wire.P4AppQPN(r, 0)
		te, err = p.tableEntry(tableReceiveQP, []match{{fieldSrcAddr, ipUint(w.Addr), 0}, {fieldDstAddr, ipUint(p.cfg.SwitchIPv4), 0}, {fieldDstQP, uint64(prefix), qpnRankMask}}, 1,
			actionSetQP, paramsSetQP, []uint64{uint64(r), 1 << uint(r), uint64(len(job.Workers)), uint64(q), uint64(ij.qpBase) + uint64(r*q), 2 * uint64(job.PoolBase), 2 * (uint64(job.PoolBase) + uint64(job.PoolSlots)), uint64(ij.mgid)})
		if err != nil {
			return nil, err
		}
		recv = append(recv, update{insert(tableEntity(te)), fmt.Sprintf("%s entry (job %d worker %d %v, QPN %#x/%#x)", tableReceiveQP, job.ID, r, w.Addr, prefix, qpnRankMask)})
	}
	ups := append(regs, sender...)
	ups = append(ups, update{insert(p.multicastEntity(ij)), fmt.Sprintf("multicast group %d (job %d, %d replicas)", ij.mgid, job.ID, len(job.Workers))})
	return append(ups, recv...), nil
}

// qpnRankMask selects the wire.P4AppQPN prefix and rank bits.
const qpnRankMask = 0xFFFE00

// invalidPSN as a receiver QP's next_psn marks it invalid: no message in
// progress, every MIDDLE/LAST dropped until a FIRST/ONLY (types.p4
// INVALID_PSN; no 24-bit PSN equals it).
const invalidPSN = 0xFFFFFFFF

// txClosed as a sender QP's tx_pos: no result message open to that worker
// QP, so the next result packet must be a FIRST/ONLY (types.p4 TX_CLOSED).
const txClosed = 0xFFFFFFFF

// exponentUnset is int8(-128) as the register's 8 bits (EXPONENT_UNSET).
const exponentUnset = 0x80

func (p *Programmer) multicastEntity(ij *installedJob) *p4v1.Entity {
	g := &p4v1.MulticastGroupEntry{MulticastGroupId: ij.mgid}
	for r, w := range ij.job.Workers {
		g.Replicas = append(g.Replicas, &p4v1.Replica{
			PortKind: &p4v1.Replica_EgressPort{EgressPort: p.cfg.Ports[w.Addr.Unmap()]},
			Instance: uint32(r), // egress_rid = rank (RDMASender)
		})
	}
	return &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
		Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: g},
	}}}
}

// teardown deletes a job's entries (receive table first, so no packet
// enters the job while the rest goes) and clears its registers. With
// ignoreMissing, NOT_FOUND answers (entries that never got in) are fine.
func (p *Programmer) teardown(ctx context.Context, ij *installedJob, ignoreMissing bool) error {
	ups, err := p.jobUpdates(ij)
	if err != nil {
		return err
	}
	var dels []update
	for i := len(ups) - 1; i >= 0; i-- {
		u := ups[i]
		if u.u.GetType() != p4v1.Update_INSERT {
			continue
		}
		dels = append(dels, update{&p4v1.Update{Type: p4v1.Update_DELETE, Entity: u.u.GetEntity()}, u.what})
	}
	var errs []error
	for _, d := range dels {
		// One by one, so one missing entry does not hide the others.
		if err := p.write(ctx, []update{d}); err != nil {
			if ignoreMissing && isNotFound(err) {
				continue
			}
			errs = append(errs, err)
		}
	}
	clears, err := p.clearUpdates(ij)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := p.write(ctx, clears); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// clearUpdates zeroes the job's slot registers (BitmapChecker,
// WorkersCounter, Exponents, optionally Processor) and its QP state.
func (p *Programmer) clearUpdates(ij *installedJob) ([]update, error) {
	job := &ij.job
	var ups []update
	add := func(reg string, idx int64, vals ...uint64) error {
		e, err := p.registerEntry(reg, idx, vals...)
		if err != nil {
			return err
		}
		ups = append(ups, update{modify(registerEntity(e)), fmt.Sprintf("clear %s[%d] (job %d)", reg, idx, job.ID)})
		return nil
	}
	for s := job.PoolBase; s < job.PoolBase+job.PoolSlots; s++ {
		if err := add(registerBitmap, int64(s), 0, 0); err != nil {
			return nil, err
		}
		for set := int64(0); set < 2; set++ {
			pi := int64(s)*2 + set // wire.MakePoolIndex(s, set)
			for _, r := range []struct {
				name string
				v    uint64
			}{{registerMissing, 0}, {registerMaxE0, exponentUnset}, {registerMaxE1, exponentUnset}, {registerMsgID, 0}} {
				if err := add(r.name, pi, r.v); err != nil {
					return nil, err
				}
			}
			if p.cfg.ClearValues {
				for k := 0; k < numProcessors; k++ {
					if err := add(registerProcessor(k), pi, 0, 0); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	nq := len(job.Workers) * len(job.Workers[0].QPNs)
	for i := 0; i < nq; i++ {
		idx := int64(ij.qpBase) + int64(i)
		if err := add(registerRxQP, idx, invalidPSN, 0); err != nil {
			return nil, err
		}
		if err := add(registerRxHighPSN, idx, 0); err != nil {
			return nil, err
		}
		if err := add(registerTxPos, idx, txClosed); err != nil {
			return nil, err
		}
		if err := add(registerPSN, idx, 0); err != nil {
			return nil, err
		}
	}
	return ups, nil
}

// write sends ups in batches; a failure names the first entity the switch
// refused.
func (p *Programmer) write(ctx context.Context, ups []update) error {
	for len(ups) > 0 {
		n := min(len(ups), p.cfg.BatchSize)
		batch := ups[:n]
		ups = ups[n:]
		req := &p4v1.WriteRequest{DeviceId: p.cfg.DeviceID, ElectionId: p.election, Atomicity: p4v1.WriteRequest_CONTINUE_ON_ERROR}
		for _, u := range batch {
			req.Updates = append(req.Updates, u.u)
		}
		if _, err := p.client.Write(ctx, req); err != nil {
			return describeWriteError(err, batch)
		}
	}
	return nil
}

// WriteError is a refused write: the entity and the switch's answer.
type WriteError struct {
	Entity string // e.g. "Ingress.rdma_receiver.receive_qp entry (job 1 worker 2 …)"
	Code   code.Code
	Msg    string
	Err    error // the gRPC error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("write %s: %s: %s", e.Entity, e.Code, e.Msg)
}

func (e *WriteError) Unwrap() error { return e.Err }

// describeWriteError maps a Write error to the updates that failed, using
// the per-update p4.v1.Error details P4Runtime servers attach.
func describeWriteError(err error, batch []update) error {
	st, _ := status.FromError(err)
	var errs []error
	i := 0
	for _, d := range st.Details() {
		pe, ok := d.(*p4v1.Error)
		if !ok {
			continue
		}
		if pe.GetCanonicalCode() != int32(code.Code_OK) && i < len(batch) {
			errs = append(errs, &WriteError{Entity: batch[i].what, Code: code.Code(pe.GetCanonicalCode()), Msg: pe.GetMessage(), Err: err})
		}
		i++
	}
	if len(errs) == 0 {
		what := batch[0].what
		if len(batch) > 1 {
			what = fmt.Sprintf("%s … (%d updates)", what, len(batch))
		}
		return &WriteError{Entity: what, Code: code.Code(st.Code()), Msg: st.Message(), Err: err}
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool {
	var we *WriteError
	if !errors.As(err, &we) {
		return false
	}
	return we.Code == code.Code_NOT_FOUND
}

// readCounters reads the NextStep, not-SwitchML and RDMASender result counters:
// name → packet count per index (decision code, switchmodel.DropReason
// code, or 0 = result sent / 1 = skipped out of order).
func (p *Programmer) readCounters(ctx context.Context) (map[string][]uint64, error) {
	out := map[string][]uint64{}
	for _, name := range []string{counterDecisions, counterDrops, counterNotSwitch, counterResults} {
		c, err := p.info.counter(name)
		if err != nil {
			return nil, err
		}
		rc, err := p.client.Read(ctx, &p4v1.ReadRequest{DeviceId: p.cfg.DeviceID, Entities: []*p4v1.Entity{{
			Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: c.GetPreamble().GetId()}},
		}}})
		if err != nil {
			return nil, fmt.Errorf("p4rt: read counter %s: %w", name, err)
		}
		vals := make([]uint64, c.GetSize())
		for {
			resp, err := rc.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("p4rt: read counter %s: %w", name, err)
			}
			for _, e := range resp.GetEntities() {
				ce := e.GetCounterEntry()
				if i := ce.GetIndex().GetIndex(); i >= 0 && i < int64(len(vals)) {
					vals[i] = uint64(ce.GetData().GetPacketCount())
				}
			}
		}
		out[name] = vals
	}
	return out, nil
}

// allocMGID returns the lowest free multicast group id ≥ 1. Holds mu.
func (p *Programmer) allocMGID() uint32 {
	for id := uint32(1); ; id++ {
		if !p.mgids[id] {
			p.mgids[id] = true
			return id
		}
	}
}

// jobIDs returns the installed job ids, sorted.
func (p *Programmer) jobIDs() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]uint32, 0, len(p.jobs))
	for id := range p.jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
