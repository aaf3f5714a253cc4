package instant

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// DropReason says why the switch did not answer a request.
type DropReason uint8

const (
	// DropOpcode: a plain RDMA WRITE. SwitchML workers send WRITE WITH
	// IMMEDIATE only; the immediate carries the message id and exponents
	// the result echoes (wire.Imm).
	DropOpcode DropReason = iota
	// DropUnknownQP: no job has the QP's switch QPN and source address.
	DropUnknownQP
	// DropLength: the payload is not a whole number of the job's packets.
	DropLength
	// DropPoolRange: a packet's slot (the rkey's pool index) lies outside
	// the job's pool range.
	DropPoolRange
	// DropNoReceiver: the worker's QP, MR or range cannot take the
	// result (the QP is not ready or not connected to this switch QPN,
	// the rkey is unknown or lacks remote write, the va is out of range).
	DropNoReceiver
	// DropNoRecvWR: the worker QP has no receive posted, so a UC
	// responder drops the WRITE WITH IMMEDIATE.
	DropNoRecvWR

	numDropReasons = iota
)

var dropReasonNames = [numDropReasons]string{"opcode", "unknown_qp", "length", "pool_range", "no_receiver", "no_recv_wr"}

func (r DropReason) String() string {
	if r < numDropReasons {
		return dropReasonNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", uint8(r))
}

// Stats count what a Switch did.
type Stats struct {
	// Requests are the WRITEs workers posted to the switch; Results the
	// answers written back.
	Requests, Results uint64
	Drops             [numDropReasons]uint64
}

// Dropped is the number of requests dropped for any reason.
func (s Stats) Dropped() uint64 {
	var n uint64
	for _, d := range s.Drops {
		n += d
	}
	return n
}

// ErrWorkers is wrapped by AddJob's error for a job of more than one
// worker.
var ErrWorkers = errors.New("the instant switch serves one-worker jobs")

// Switch is the instant switch: the control.Programmer its controller
// installs jobs through, and the far end of its Devices' QPs. Safe for
// concurrent use.
type Switch struct {
	addr netip.Addr
	// gen changes with every job, device, QP state and MR: QPs cache the
	// way to their results (path) and check it against gen.
	gen atomic.Uint64

	mu      sync.Mutex
	jobs    map[uint32]*wire.Job
	routes  map[uint32]route // by switch QPN
	devices map[netip.Addr]*Device

	// counts are the request and result counters, one cache line per
	// shard of QPs (path.counts): lanes of a session posting on their own
	// cores bump their own.
	counts [countShards]countShard
	drops  [numDropReasons]atomic.Uint64
}

// countShards is how many counter shards a switch has (QPN mod it).
const countShards = 16

type countShard struct {
	requests, results atomic.Uint64
	_                 [112]byte // whatever the alignment, no two shards share a line
}

// route is a switch QPN's job and QP index.
type route struct {
	job   *wire.Job
	index int
}

// NewSwitch makes a switch at addr, the address workers' QPs connect to
// (the controller's switch address).
func NewSwitch(addr netip.Addr) (*Switch, error) {
	if !addr.IsValid() {
		return nil, errors.New("instant: switch address is not valid")
	}
	return &Switch{addr: addr, jobs: make(map[uint32]*wire.Job), routes: make(map[uint32]route), devices: make(map[netip.Addr]*Device)}, nil
}

// Addr is the switch's address.
func (sw *Switch) Addr() netip.Addr { return sw.addr }

// AddJob installs a one-worker job (control.Programmer).
func (sw *Switch) AddJob(_ context.Context, j *wire.Job) error {
	if err := j.Validate(); err != nil {
		return fmt.Errorf("instant: add job: %w", err)
	}
	if len(j.Workers) != 1 {
		return fmt.Errorf("instant: add job %d of %d workers: %w (Workers: 1)", j.ID, len(j.Workers), ErrWorkers)
	}
	c := j.Clone()
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.jobs[j.ID] != nil {
		return fmt.Errorf("instant: add job %d: already installed", j.ID)
	}
	for _, q := range c.Workers[0].SwitchQPNs {
		if _, ok := sw.routes[q]; ok {
			return fmt.Errorf("instant: add job %d: switch QPN %#x is in use", j.ID, q)
		}
	}
	sw.jobs[j.ID] = &c
	for i, q := range c.Workers[0].SwitchQPNs {
		sw.routes[q] = route{job: &c, index: i}
	}
	sw.gen.Add(1)
	return nil
}

// RemoveJob removes a job (control.Programmer); an unknown job is not an
// error.
func (sw *Switch) RemoveJob(_ context.Context, id uint32) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	j := sw.jobs[id]
	if j == nil {
		return nil
	}
	for _, q := range j.Workers[0].SwitchQPNs {
		delete(sw.routes, q)
	}
	delete(sw.jobs, id)
	sw.gen.Add(1)
	return nil
}

// Stats returns the switch's counters.
func (sw *Switch) Stats() Stats {
	var s Stats
	for i := range sw.counts {
		s.Requests += sw.counts[i].requests.Load()
		s.Results += sw.counts[i].results.Load()
	}
	for i := range s.Drops {
		s.Drops[i] = sw.drops[i].Load()
	}
	return s
}

func (sw *Switch) drop(r DropReason) { sw.drops[r].Add(1) }

// path is a QP's cached way from its requests to their results, valid
// while the switch's gen is unchanged: the job and QP index its switch
// QPN routes to, and the worker QP and MR results go to.
type path struct {
	gen    uint64
	job    *wire.Job // nil: no job routes the QP's requests
	index  int
	dst    *QP // nil: results cannot land (reason)
	dstMR  *MR
	reason DropReason // why, when job or dst is nil
	counts *countShard
}

// resolve builds q's path. Lock order: Switch.mu, then Device.mu, then
// QP.mu.
func (sw *Switch) resolve(q *QP) path {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	p := path{gen: sw.gen.Load(), reason: DropUnknownQP, counts: &sw.counts[q.qpn%countShards]}
	q.mu.Lock()
	rtr := q.rtr
	q.mu.Unlock()
	if rtr.RemoteAddr != sw.addr {
		return p
	}
	r, ok := sw.routes[rtr.RemoteQPN]
	if !ok || r.job.Workers[0].Addr != q.dev.addr {
		return p
	}
	p.job, p.index, p.reason = r.job, r.index, DropNoReceiver
	w := &r.job.Workers[0]
	d := sw.devices[w.Addr]
	if d == nil {
		return p
	}
	d.mu.Lock()
	dst, mr := d.qps[w.QPNs[r.index]], d.mrs[w.RKey]
	d.mu.Unlock()
	if dst == nil || mr == nil || mr.access&verbs.AccessRemoteWrite == 0 {
		return p
	}
	// A UC responder takes writes from its connected peer only.
	dst.mu.Lock()
	ok = dst.rtr.RemoteAddr == sw.addr && dst.rtr.RemoteQPN == rtr.RemoteQPN && dst.access&verbs.AccessRemoteWrite != 0
	dst.mu.Unlock()
	if ok {
		p.dst, p.dstMR = dst, mr
	}
	return p
}

// answer is the switch's work for one request, run in the poster's
// PostSend: wr is its work request, payload its bytes in src (an MR the
// poster holds). A one-worker job's slot completes with this
// request, so its result is the payload and the immediate (the maximum of
// one worker's exponents is its own), written back at the request's va
// as the switch pipeline's RDMASender would.
func (sw *Switch) answer(p *path, wr *verbs.SendWR, payload []byte) {
	p.counts.requests.Add(1)
	if wr.Opcode != verbs.WRRDMAWriteWithImm {
		sw.drop(DropOpcode)
		return
	}
	j := p.job
	if j == nil {
		sw.drop(p.reason)
		return
	}
	if len(payload) == 0 || len(payload)%j.PacketSize != 0 {
		sw.drop(DropLength)
		return
	}
	// Packet k of the message names slot+k: every slot of the message
	// must lie in the job's pool (switchmodel's RDMAReceiver checks each
	// packet; a message with one slot out is cut short there).
	slot := wire.PoolIndex(wr.RKey).Slot()
	if slot < j.PoolBase || uint64(slot-j.PoolBase)+uint64(len(payload)/j.PacketSize) > uint64(j.PoolSlots) {
		sw.drop(DropPoolRange)
		return
	}
	if p.dst == nil {
		sw.drop(p.reason)
		return
	}
	if r, ok := p.dst.deliver(p.dstMR, wr.RemoteAddr, wr.Imm, payload); !ok {
		sw.drop(r)
		return
	}
	p.counts.results.Add(1)
}
