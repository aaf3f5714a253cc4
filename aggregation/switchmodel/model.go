package switchmodel

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// Defaults of Config.
const (
	DefaultPoolSize   = 4096
	DefaultMaxPayload = 4096
	DefaultMaxWorkers = 256
)

// Config sizes the switch's state arrays, as the table and register sizes of
// the Tofino program do.
type Config struct {
	// PoolSize is the number of aggregation slots; every job's pool range
	// must lie in [0, PoolSize). 0 means DefaultPoolSize. The controller's
	// PoolSize must be the same.
	PoolSize uint32
	// MaxPayload is the largest packet payload (bytes) a job may use; each
	// slot holds MaxPayload bytes per set. 0 means DefaultMaxPayload.
	MaxPayload int
	// MaxWorkers bounds the workers of one job (the bitmap width). 0 means
	// DefaultMaxWorkers.
	MaxWorkers int
	// IngressLoss and EgressLoss, when set, are the drop simulator where
	// the Tofino program has it (docs/p4.md R18): IngressLoss is asked for
	// each request RDMAReceiver accepted, after the receiver's PSN state
	// moved, and true drops the request as DropIngressLoss (the slot misses
	// the contribution, the rest of the message is not cut short);
	// EgressLoss is asked for each result RDMASender encoded, and true drops
	// it as DropEgressLoss. Nil: no loss in the model. The software switch
	// leaves both nil and drops at its sockets, before the model (the
	// difference docs/p4.md R18 states); tests inject the program's source.
	IngressLoss, EgressLoss func() bool
}

func (c *Config) fill() error {
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxWorkers == 0 {
		c.MaxWorkers = DefaultMaxWorkers
	}
	if c.PoolSize >= 1<<30 {
		return fmt.Errorf("switchmodel: Config.PoolSize %d: at most 2^30-1 slots (pool indices are 31-bit)", c.PoolSize)
	}
	if c.MaxPayload < 8 || c.MaxPayload%8 != 0 || c.MaxPayload > 1<<16 {
		return fmt.Errorf("switchmodel: Config.MaxPayload %d: use a multiple of 8 bytes up to 65536 (e.g. 4096)", c.MaxPayload)
	}
	if c.MaxWorkers < 1 || c.MaxWorkers > 1<<16 {
		return fmt.Errorf("switchmodel: Config.MaxWorkers %d: use 1 to 65536", c.MaxWorkers)
	}
	return nil
}

// Errors of AddJob, wrapped with detail.
var (
	// ErrConflict: the job's id, pool range or (worker address, switch
	// QPN) pairs collide with an installed job.
	ErrConflict = errors.New("switchmodel: job conflicts with an installed job")
	// ErrCapacity: the job does not fit the switch's Config.
	ErrCapacity = errors.New("switchmodel: job exceeds the switch's capacity")
)

// Decision is what NextStep decides for a packet.
type Decision uint8

const (
	// Drop: the packet is discarded; Metadata.Reason says why.
	Drop Decision = iota
	// Consume: a new contribution that is not the last one of its slot; it
	// was aggregated and nothing is sent.
	Consume
	// Broadcast: the last contribution completed the slot; the result goes
	// to every worker of the job.
	Broadcast
	// Unicast: a retransmission into a completed slot; the result goes back
	// to the sender alone.
	Unicast
	// SendUp: a leaf job's slot is complete (or a worker resent into it
	// before the spine's result came back): the leaf's partial sum goes to
	// the spine as one write (SetUpstream, docs/switch.md "Switch
	// hierarchy").
	SendUp
)

func (d Decision) String() string {
	switch d {
	case Drop:
		return "drop"
	case Consume:
		return "consume"
	case Broadcast:
		return "broadcast"
	case Unicast:
		return "unicast"
	case SendUp:
		return "upstream"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// DropReason says why a packet was dropped. The model sets the reasons up to
// DropRetransmitIncomplete; the software switch runtime uses the others.
type DropReason uint8

const (
	NotDropped DropReason = iota
	// DropOpcode: not a UC RDMA WRITE (FIRST, MIDDLE, LAST, ONLY, with or
	// without immediate).
	DropOpcode
	// DropUnknownQP: no job has this (source address, destination QPN).
	DropUnknownQP
	// DropLength: the payload is not the job's packet size.
	DropLength
	// DropPSN: a MIDDLE or LAST whose PSN is not the expected one, or any
	// later packet of that message.
	DropPSN
	// DropPoolRange: the pool index lies outside the job's pool range.
	DropPoolRange
	// DropRetransmitIncomplete: a retransmission into a slot that is still
	// aggregating (the result will be broadcast when it completes).
	DropRetransmitIncomplete
	// DropMalformed: the runtime could not parse the packet.
	DropMalformed
	// DropICRC: the runtime found a bad ICRC.
	DropICRC
	// DropIngressLoss and DropEgressLoss: the runtime's drop simulator.
	DropIngressLoss
	DropEgressLoss
	// DropSendError: the runtime failed to send a result.
	DropSendError
	// DropStalePSN: a packet whose PSN is older than one already received
	// on its QP (reordered or duplicated on the way): counting it could
	// add an old contribution into a newer round of its slot. Set by the
	// model (RDMAReceiver); last only to keep the codes above.
	DropStalePSN
	// DropUpstreamDuplicate: a spine's result for a leaf slot that does
	// not wait for one (a second answer to the leaf's resends, or a late
	// one): the slot already holds it, or has moved on.
	DropUpstreamDuplicate
	// DropTailProbe: a tail probe (wire.GapNotice) whose sender's
	// contribution is in its slot; DropTailProbeMissing: one whose
	// sender's contribution its slot lacks, and the sender gets a notice.
	DropTailProbe
	DropTailProbeMissing

	NumDropReasons = iota
)

var dropReasonNames = [NumDropReasons]string{
	NotDropped:               "none",
	DropOpcode:               "opcode",
	DropUnknownQP:            "unknown_qp",
	DropLength:               "length",
	DropPSN:                  "psn",
	DropPoolRange:            "pool_range",
	DropRetransmitIncomplete: "retransmit_incomplete",
	DropMalformed:            "malformed",
	DropICRC:                 "icrc",
	DropIngressLoss:          "ingress_loss",
	DropEgressLoss:           "egress_loss",
	DropSendError:            "send_error",
	DropStalePSN:             "stale_psn",
	DropUpstreamDuplicate:    "upstream_duplicate",
	DropTailProbe:            "tail_probe",
	DropTailProbeMissing:     "tail_probe_missing",
}

// String is the reason's metric label value ("unknown_qp").
func (r DropReason) String() string {
	if int(r) < len(dropReasonNames) {
		return dropReasonNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", uint8(r))
}

// Counters are the model's event counts since New. Plain integers: read them
// from the goroutine that runs the pipeline (or under its lock).
type Counters struct {
	Packets         uint64 // packets given to Process
	Aggregated      uint64 // new contributions added into a slot
	Retransmissions uint64 // retransmissions seen (any slot state)
	Completed       uint64 // slots completed (broadcast decisions)
	Unicasts        uint64 // retransmissions answered to the sender alone
	ResultPackets   uint64 // result packets written by RDMASender
	ResultsSkipped  uint64 // result packets not sent to a worker QP: out of order (ErrOutOfOrder)
	UpstreamWrites  uint64 // a leaf's writes to its spine (SendUp decisions encoded)
	SpineResults    uint64 // a leaf's slots completed by a spine's result
	GapNotices      uint64 // gap notices written (EncodeNotice)
	TailProbes      uint64 // tail probes received (wire.GapNotice)
	ResultProbes    uint64 // tail probes among them that asked for the result (wire.ResultProbe)
	Drops           [NumDropReasons]uint64
}

// Metadata is what the controls pass along one packet's way through the
// pipeline, like the P4 program's ig_md. Process overwrites every field; the
// RDMASender reads it to build the results. The references it holds into the
// switch state are valid until the next call that changes that state
// (Process, AddJob, RemoveJob).
type Metadata struct {
	Decision Decision
	Reason   DropReason

	// RDMAReceiver
	JobID     uint32
	Rank      int // the sender's rank
	QP        int // the QP index within the worker
	PoolIndex wire.PoolIndex
	First     bool   // the packet starts a message (FIRST/ONLY)
	Last      bool   // the packet ends a message (LAST/ONLY)
	VA        uint64 // RETH of FIRST/ONLY, echoed in the result
	Len       uint32
	HasImm    bool
	Imm       wire.Imm // request immediate; after Exponents the result's
	// Notice: the packet is a packet write that arrived after a PSN gap
	// of Gap packets on its QP, or a tail probe whose sender's
	// contribution the slot lacks (Missing), and its job takes gap
	// notices: besides its decision, a notice goes to its sender
	// (EncodeNotice).
	Notice    bool
	Gap       uint32
	TailProbe bool // a packet write without payload (wire.GapNotice)
	Missing   bool

	// BitmapChecker
	Retransmission bool
	// WorkersCounter
	FirstContribution bool
	LastContribution  bool
	Complete          bool // the slot's set has all contributions

	job  *jobEntry
	slot uint32 // the slot of PoolIndex
	set  uint8
}

// Slot returns the slot of the packet's pool index.
func (m *Metadata) Slot() uint32 { return m.slot }

// Set returns the set (0 or 1) of the packet's pool index.
func (m *Metadata) Set() uint8 { return m.set }

// Dests is the number of result packets the decision asks for: the job's
// worker count for Broadcast, 1 for Unicast and SendUp, 0 otherwise.
func (m *Metadata) Dests() int {
	switch m.Decision {
	case Broadcast:
		return m.job.n
	case Unicast, SendUp:
		return 1
	}
	return 0
}

// ResultLen is the UDP payload length (BTH to ICRC) of each result packet.
func (m *Metadata) ResultLen() int {
	if m.job == nil {
		return 0
	}
	if m.Decision == SendUp {
		return rdma.PacketLen(resultOpcode(true, true), m.job.payload)
	}
	return rdma.PacketLen(resultOpcode(m.First, m.Last), m.job.payload)
}

// Pipeline is the switch: the seven controls over shared metadata, run in
// the order of docs/switch.md "Pipeline" by Process. Not safe for concurrent use: one goroutine
// runs Process and the table updates, or callers serialise them.
type Pipeline struct {
	cfg Config

	Receiver   RDMAReceiver
	Bitmap     BitmapChecker
	Counter    WorkersCounter
	Exponents  Exponents
	Processor  Processor
	NextStep   NextStep
	Sender     RDMASender
	Counters   Counters
	slotsInUse int64 // (slot, set) pairs aggregating, all jobs

	// The leaves' state (leaf.go): per (slot, set) of the pool, allocated
	// by the first SetUpstream; and the spines' (address, QPN) pairs that
	// carry results down.
	leaf  []leafSlot
	downs map[qpKey]downRef
}

// New allocates a pipeline's state arrays for cfg. Large arrays come from
// the OS zeroed, so untouched slots cost no resident memory.
func New(cfg Config) (*Pipeline, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg}
	p.Receiver.init()
	p.Bitmap.init(cfg.PoolSize, cfg.MaxWorkers)
	p.Counter.init(cfg.PoolSize)
	p.Exponents.init(cfg.PoolSize)
	p.Processor.init(cfg.PoolSize, cfg.MaxPayload)
	return p, nil
}

// Config returns the configuration in effect (defaults filled in).
func (p *Pipeline) Config() Config { return p.cfg }

// SlotsInUse is the number of (slot, set) pairs holding a partial
// aggregation.
func (p *Pipeline) SlotsInUse() int64 { return p.slotsInUse }

// SlotsAllocated is the number of slots owned by installed jobs.
func (p *Pipeline) SlotsAllocated() uint64 {
	var n uint64
	for _, j := range p.Receiver.jobs {
		n += uint64(j.poolSlots)
	}
	return n
}

// Jobs is the number of installed jobs.
func (p *Pipeline) Jobs() int { return len(p.Receiver.jobs) }

// JobPackets is the number of packets that matched job id's QPs since
// AddJob; false if the job is not installed.
func (p *Pipeline) JobPackets(id uint32) (uint64, bool) {
	j, ok := p.Receiver.jobs[id]
	if !ok {
		return 0, false
	}
	var n uint64
	for _, a := range j.ranks {
		n += a.packets
	}
	return n, true
}

// AddJob installs a job from the controller's description (copied): its
// (worker address, switch QPN) pairs, pool range, worker table and PSNs. The
// job's slots start empty.
func (p *Pipeline) AddJob(job *wire.Job) error {
	if job == nil {
		return fmt.Errorf("switchmodel: add job: %w: nil job", wire.ErrBadJob)
	}
	if err := job.Validate(); err != nil {
		return fmt.Errorf("switchmodel: add job: %w", err)
	}
	j, err := newJobEntry(job, &p.cfg)
	if err != nil {
		return err
	}
	if err := p.Receiver.add(j); err != nil {
		return err
	}
	p.clearSlots(j)
	return nil
}

// RemoveJob removes a job and clears its slots; an unknown id is not an
// error.
func (p *Pipeline) RemoveJob(id uint32) {
	j := p.Receiver.remove(id)
	if j == nil {
		return
	}
	if j.up != nil {
		p.rebuildDown()
	}
	p.clearSlots(j)
	p.slotsInUse -= j.slotsInUse
	j.slotsInUse = 0
}

func (p *Pipeline) clearSlots(j *jobEntry) {
	lo, hi := j.poolBase, j.poolBase+j.poolSlots
	p.Bitmap.clear(lo, hi)
	p.Counter.clear(lo, hi)
	p.Exponents.clear(lo, hi)
	p.Processor.clear(lo, hi)
	if p.leaf != nil {
		clear(p.leaf[lo*2 : hi*2])
	}
}

// Process runs one parsed packet from source address src through the
// controls and fills md. It never panics on a packet that rdma.Packet.Parse
// accepted, and allocates nothing.
func (p *Pipeline) Process(src netip.Addr, pkt *rdma.Packet, md *Metadata) {
	*md = Metadata{}
	p.Counters.Packets++
	if !p.Receiver.Receive(src, pkt, md) {
		if md.Reason == DropUnknownQP && p.downs != nil {
			if ref, ok := p.downs[makeKey(src, pkt.BTH.DestQP())]; ok {
				*md = Metadata{}
				p.fromSpine(ref, pkt, md)
				switch md.Decision {
				case Broadcast:
					p.Counters.Completed++
					fallthrough
				case Consume:
					p.Counters.SpineResults++
					return
				}
			}
		}
		p.drop(md)
		return
	}
	if p.cfg.IngressLoss != nil && p.cfg.IngressLoss() {
		md.Reason = DropIngressLoss
		p.drop(md)
		return
	}
	if md.TailProbe {
		// A tail probe adds nothing and wants no result: its PSN has
		// done its work (RDMAReceiver), and its sender hears whether its
		// contribution is missing.
		// A result probe (wire.ResultProbe) asks for its slot's result
		// as well.
		p.Counters.TailProbes++
		asks := md.HasImm && md.Imm.E1() == wire.ResultProbe
		if asks {
			p.Counters.ResultProbes++
		}
		md.Reason = DropTailProbe
		if p.Bitmap.Bitmap(md.slot, md.set, md.Rank)&(1<<(md.Rank&63)) == 0 {
			md.Notice, md.Missing = true, true
			md.Reason = DropTailProbeMissing
			p.drop(md)
			return
		}
		if !asks {
			p.drop(md)
			return
		}
		// The worker's bit is set, so the controls below see a
		// retransmission: answered with a whole packet's result when
		// the slot is complete, dropped while it is not.
		md.Reason, md.Len = NotDropped, uint32(md.job.payload)
	}
	p.Bitmap.Check(md)
	p.Counter.Count(md)
	p.Exponents.Update(md)
	p.Processor.Process(pkt.Payload, md)
	p.NextStep.Decide(md)
	j := md.job
	if j.up != nil {
		p.leafStep(md)
	}
	if md.Retransmission {
		p.Counters.Retransmissions++
	} else {
		p.Counters.Aggregated++
		if j.n > 1 {
			if md.FirstContribution {
				p.slotsInUse++
				j.slotsInUse++
			} else if md.LastContribution {
				p.slotsInUse--
				j.slotsInUse--
			}
		}
	}
	switch md.Decision {
	case Drop:
		p.drop(md)
	case Broadcast:
		p.Counters.Completed++
	case Unicast:
		p.Counters.Unicasts++
	}
}

func (p *Pipeline) drop(md *Metadata) {
	md.Decision = Drop
	p.Counters.Drops[md.Reason]++
}

// EncodeResult writes result packet d (0 ≤ d < md.Dests()) of a Broadcast or
// Unicast decision into b and returns its length and destination (see
// RDMASender.Encode), or a leaf's write to its spine for a SendUp
// decision (d 0).
func (p *Pipeline) EncodeResult(md *Metadata, d int, b []byte) (int, netip.Addr, error) {
	var (
		n   int
		dst netip.Addr
		err error
	)
	switch {
	case md.Decision != SendUp:
		n, dst, err = p.Sender.Encode(&p.Processor, md, d, b)
	case d != 0:
		return 0, netip.Addr{}, ErrNoResult
	default:
		n, dst, err = p.encodeUp(md, b)
	}
	if err == nil && p.cfg.EgressLoss != nil && p.cfg.EgressLoss() {
		p.Counters.Drops[DropEgressLoss]++
		return 0, netip.Addr{}, ErrEgressLoss
	}
	switch {
	case err == nil && md.Decision == SendUp:
		p.Counters.UpstreamWrites++
	case err == nil:
		p.Counters.ResultPackets++
	case err == ErrOutOfOrder:
		p.Counters.ResultsSkipped++
	}
	return n, dst, err
}

// EncodeNotice writes the gap notice of md (md.Notice) to the packet's
// sender into b and returns its length and destination (see
// RDMASender.EncodeNotice). ErrNoResult when md asks for none.
func (p *Pipeline) EncodeNotice(md *Metadata, b []byte) (int, netip.Addr, error) {
	n, dst, err := p.Sender.EncodeNotice(md, b)
	if err == nil && p.cfg.EgressLoss != nil && p.cfg.EgressLoss() {
		p.Counters.Drops[DropEgressLoss]++
		return 0, netip.Addr{}, ErrEgressLoss
	}
	switch err {
	case nil:
		p.Counters.GapNotices++
	case ErrOutOfOrder:
		p.Counters.ResultsSkipped++
	}
	return n, dst, err
}
