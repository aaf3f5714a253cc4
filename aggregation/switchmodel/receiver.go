package switchmodel

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// jobEntry is one installed job: its worker table and the per-QP state of the
// receiver (requests) and sender (results), flat and indexed by rank·q + i.
type jobEntry struct {
	id        uint32
	n, q      int
	payload   int  // bytes per packet
	lanes16   bool // int16 lanes (wire.Job.ElementBytes 2), else int32
	notices   bool // wire.Job.GapNotices
	poolBase  uint32
	poolSlots uint32
	workers   []workerEntry // by rank
	rx        []rxState     // RDMAReceiver: per switch QP
	psn       []uint32      // RDMASender: per (worker, QP), the next result PSN
	tx        []txPos       // RDMASender: per (worker, QP), the last result packet sent
	keys      []qpKey       // the table keys this job installed
	up        *upState      // a leaf's upstream (leaf.go), nil on a flat job

	slotsInUse int64
	// ranks[r] counts rank r's packets that matched the job's (source,
	// QPN) keys and stamps the last one: the controller's data-plane
	// liveness signal for workers without a keep-alive stream
	// (p4app-switchML's) and its answer to who a stalled job waits for
	// (JobProgress).
	ranks []rankActivity
}

// rankActivity is one rank's packets and the Pipeline clock at its last.
type rankActivity struct {
	packets uint64
	last    int64
}

type workerEntry struct {
	addr netip.Addr
	rkey uint32
	qpns []uint32 // the worker's QPNs, where results go
}

// rxState is RDMAReceiver's per switch-QP register: the PSN the next MIDDLE
// or LAST must carry and the pool index it will use. valid is false before
// the first FIRST/ONLY and for the rest of a message after a PSN gap.
type rxState struct {
	nextPSN   uint32
	poolIndex wire.PoolIndex
	valid     bool
	// highPSN is the PSN after the newest packet seen on the QP (seen:
	// any). A worker's NIC numbers every packet it sends, resends
	// included, so a packet older than that was overtaken on the way
	// (two CPUs feeding one veth or loopback, a multipath network) or
	// duplicated: it is dropped (DropStalePSN) before it touches a slot.
	// Counting it could add a worker's old contribution into the slot's
	// next round of the same set, after the worker's newer packet for the
	// other set had cleared its bit there (docs/protocol.md, "Reordering").
	highPSN uint32
	seen    bool
}

// qpKey is the receiver's table key: the 16-byte form of the source address
// (IPv4 mapped), as two big-endian words, and the switch QPN the packet is
// addressed to.
type qpKey struct {
	hi, lo uint64
	qpn    uint32
}

func makeKey(a netip.Addr, qpn uint32) qpKey {
	b := a.As16()
	return qpKey{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:]), qpn: qpn}
}

func (k qpKey) addr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.AddrFrom16(b).Unmap()
}

type qpRef struct {
	job      *jobEntry
	idx      int32 // rank·q + i
	rank, qp int32
}

// qpTable is an open-addressing hash table from qpKey to qpRef, rebuilt
// whole on every job change (a control-plane event), so lookups need no
// tombstones and allocate nothing. It is about 3× faster than a Go map with
// a 20-byte key, the largest single cost of a packet.
type qpTable struct {
	mask  uint64
	shift uint // 64 − log2(len(slots))
	slots []qpSlot
	n     int
}

type qpSlot struct {
	key  qpKey
	used bool
	ref  qpRef
}

// hashKey mixes the key with one multiplication (Fibonacci hashing: the
// caller takes the top bits). IPv4 sources differ in the low word.
func hashKey(k *qpKey) uint64 {
	return (k.lo ^ k.hi>>7 ^ uint64(k.qpn)<<40 ^ uint64(k.qpn)) * 0x9E3779B97F4A7C15
}

func (t *qpTable) lookup(k qpKey) (qpRef, bool) {
	if t.n == 0 {
		return qpRef{}, false
	}
	for i := hashKey(&k) >> t.shift; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if !s.used {
			return qpRef{}, false
		}
		if s.key == k {
			return s.ref, true
		}
	}
}

// rebuild fills the table with every QP of jobs, at most half full.
func (t *qpTable) rebuild(jobs map[uint32]*jobEntry) {
	n := 0
	for _, j := range jobs {
		n += len(j.keys)
	}
	size, bits := 16, uint(4)
	for size < 2*n {
		size, bits = size*2, bits+1
	}
	t.slots = make([]qpSlot, size)
	t.mask = uint64(size - 1)
	t.shift = 64 - bits
	t.n = n
	for _, j := range jobs {
		for i, k := range j.keys {
			h := hashKey(&k) >> t.shift
			for t.slots[h].used {
				h = (h + 1) & t.mask
			}
			t.slots[h] = qpSlot{key: k, used: true, ref: qpRef{job: j, idx: int32(i), rank: int32(i / j.q), qp: int32(i % j.q)}}
		}
	}
}

func newJobEntry(job *wire.Job, cfg *Config) (*jobEntry, error) {
	n, q := len(job.Workers), len(job.Workers[0].QPNs)
	if n > cfg.MaxWorkers {
		return nil, fmt.Errorf("switchmodel: add job %d: %w: %d workers, the switch holds %d (Config.MaxWorkers)", job.ID, ErrCapacity, n, cfg.MaxWorkers)
	}
	if job.PacketSize > cfg.MaxPayload || job.PacketSize%8 != 0 {
		return nil, fmt.Errorf("switchmodel: add job %d: %w: packet size %d, the switch holds multiples of 8 up to %d bytes (Config.MaxPayload)", job.ID, ErrCapacity, job.PacketSize, cfg.MaxPayload)
	}
	if uint64(job.PoolBase)+uint64(job.PoolSlots) > uint64(cfg.PoolSize) {
		return nil, fmt.Errorf("switchmodel: add job %d: %w: pool range [%d, %d) exceeds the switch's %d slots (Config.PoolSize)", job.ID, ErrCapacity, job.PoolBase, uint64(job.PoolBase)+uint64(job.PoolSlots), cfg.PoolSize)
	}
	j := &jobEntry{
		id:        job.ID,
		n:         n,
		q:         q,
		payload:   job.PacketSize,
		lanes16:   job.LaneBytes() == 2,
		notices:   job.GapNotices,
		poolBase:  job.PoolBase,
		poolSlots: job.PoolSlots,
		workers:   make([]workerEntry, n),
		rx:        make([]rxState, n*q),
		psn:       make([]uint32, n*q),
		tx:        make([]txPos, n*q),
		keys:      make([]qpKey, 0, n*q),
		ranks:     make([]rankActivity, n),
	}
	seen := make(map[qpKey]struct{}, n*q)
	for r := range job.Workers {
		w := &job.Workers[r]
		j.workers[r] = workerEntry{addr: w.Addr.Unmap(), rkey: w.RKey, qpns: append([]uint32(nil), w.QPNs...)}
		for i := 0; i < q; i++ {
			if w.QPNs[i] > rdma.QPNMask || w.SwitchQPNs[i] > rdma.QPNMask {
				return nil, fmt.Errorf("switchmodel: add job %d: %w: worker %d QP %d: QPN %#x or switch QPN %#x is not 24-bit", job.ID, wire.ErrBadJob, r, i, w.QPNs[i], w.SwitchQPNs[i])
			}
			j.psn[r*q+i] = w.PSNs[i] & rdma.PSNMask
			k := makeKey(w.Addr, w.SwitchQPNs[i])
			if _, dup := seen[k]; dup {
				return nil, fmt.Errorf("switchmodel: add job %d: %w: address %v and switch QPN %#x appear twice", job.ID, wire.ErrBadJob, w.Addr, w.SwitchQPNs[i])
			}
			seen[k] = struct{}{}
			j.keys = append(j.keys, k)
		}
	}
	return j, nil
}

// RDMAReceiver terminates the workers' UC QPs. Its table maps (source
// address, switch QPN) to (job, rank, QP index); its per-QP register
// {next_psn, pool_index} derives each packet's pool index: FIRST/ONLY take it
// from the RETH rkey, MIDDLE/LAST add 2 to the previous one if their PSN is
// the expected one. P4: p4/rdma_switch RDMAReceiver.
type RDMAReceiver struct {
	table qpTable
	keys  map[qpKey]uint32 // the installed keys and their job ids
	jobs  map[uint32]*jobEntry
	clock int64 // Pipeline.SetClock's value
}

func (r *RDMAReceiver) init() {
	r.keys = make(map[qpKey]uint32)
	r.jobs = make(map[uint32]*jobEntry)
	r.table.rebuild(r.jobs)
}

func (r *RDMAReceiver) add(j *jobEntry) error {
	if _, ok := r.jobs[j.id]; ok {
		return fmt.Errorf("switchmodel: add job %d: %w: the id is installed", j.id, ErrConflict)
	}
	for _, o := range r.jobs {
		if j.poolBase < o.poolBase+o.poolSlots && o.poolBase < j.poolBase+j.poolSlots {
			return fmt.Errorf("switchmodel: add job %d: %w: pool range [%d, %d) overlaps job %d's [%d, %d)", j.id, ErrConflict, j.poolBase, j.poolBase+j.poolSlots, o.id, o.poolBase, o.poolBase+o.poolSlots)
		}
	}
	for _, k := range j.keys {
		if o, ok := r.keys[k]; ok {
			return fmt.Errorf("switchmodel: add job %d: %w: address %v and switch QPN %#x belong to job %d", j.id, ErrConflict, k.addr(), k.qpn, o)
		}
	}
	for _, k := range j.keys {
		r.keys[k] = j.id
	}
	r.jobs[j.id] = j
	r.table.rebuild(r.jobs)
	return nil
}

func (r *RDMAReceiver) remove(id uint32) *jobEntry {
	j, ok := r.jobs[id]
	if !ok {
		return nil
	}
	for _, k := range j.keys {
		delete(r.keys, k)
	}
	delete(r.jobs, id)
	r.table.rebuild(r.jobs)
	return j
}

// Receive looks the packet's QP up and derives its pool index. It returns
// false with md.Reason set when the packet must be dropped before it touches
// any slot.
func (r *RDMAReceiver) Receive(src netip.Addr, pkt *rdma.Packet, md *Metadata) bool {
	bth := pkt.BTH
	if len(bth) < rdma.BTHSize {
		md.Reason = DropOpcode
		return false
	}
	op := bth.Opcode()
	if op.Transport() != rdma.TransportUC || !op.IsRDMAWrite() {
		md.Reason = DropOpcode
		return false
	}
	ref, ok := r.table.lookup(makeKey(src, bth.DestQP()))
	if !ok {
		md.Reason = DropUnknownQP
		return false
	}
	j := ref.job
	a := &j.ranks[ref.rank]
	a.packets++
	a.last = r.clock
	md.job = j
	md.JobID = j.id
	md.Rank = int(ref.rank)
	md.QP = int(ref.qp)
	md.First, md.Last = op.IsFirst(), op.IsLast()
	st := &j.rx[ref.idx]
	psn := bth.PSN()
	// rx_high_psn runs beside the message state (as in the P4 program): a
	// stale packet still moves the state below, and is dropped after it
	// unless another rule dropped it first.
	stale := st.seen && rdma.PSNLess(psn, st.highPSN)
	var gap uint32
	if !stale {
		if st.seen {
			gap = (psn - st.highPSN) & rdma.PSNMask
		}
		st.seen, st.highPSN = true, (psn+1)&rdma.PSNMask
	}
	if md.First {
		// A new message resets the QP whatever happened before: UC
		// resynchronises on FIRST/ONLY.
		st.valid = true
		st.poolIndex = wire.PoolIndex(pkt.RETH.RKey())
		md.VA, md.Len = pkt.RETH.VA(), pkt.RETH.DMALen()
	} else {
		if !st.valid || psn != st.nextPSN {
			st.valid = false
			md.Reason = DropPSN
			return false
		}
		st.poolIndex += 2
	}
	st.nextPSN = (psn + 1) & rdma.PSNMask
	if len(pkt.Payload) != j.payload {
		if !j.notices || !md.First || !md.Last || len(pkt.Payload) != 0 || pkt.ImmDt == nil ||
			wire.Imm(pkt.ImmDt.Imm()).MsgID()&wire.PacketMsgIDFlag == 0 {
			// The message cannot be aggregated slot for slot any more.
			st.valid = false
			md.Reason = DropLength
			return false
		}
		// A tail probe (wire.GapNotice): it shows its PSN, and its
		// worker's contribution or its absence (Pipeline.Process).
		md.TailProbe = true
	}
	pi := st.poolIndex
	slot := pi.Slot()
	if slot-j.poolBase >= j.poolSlots || slot < j.poolBase {
		st.valid = false
		md.Reason = DropPoolRange
		return false
	}
	if stale {
		md.Reason = DropStalePSN
		return false
	}
	md.PoolIndex, md.slot, md.set = pi, slot, pi.Set()
	if pkt.ImmDt != nil {
		md.HasImm = true
		md.Imm = wire.Imm(pkt.ImmDt.Imm())
		// A packet write after a PSN gap: the packets in between were
		// lost on the way here, and the job's workers take gap notices
		// (wire.GapNotice). Only for packet writes, whose results are
		// one-packet writes too: a notice never cuts into a multi-packet
		// result message (RDMASender.EncodeNotice checks that as well).
		md.Notice = gap != 0 && j.notices && md.First && md.Last && md.Imm.MsgID()&wire.PacketMsgIDFlag != 0
		md.Gap = gap
	}
	return true
}
