package switchmodel

// The leaf of a switch hierarchy (docs/switch.md "Switch hierarchy"): a job
// with an Upstream is one worker of a spine switch's job. Its workers' slots
// aggregate as on any switch, but a completed slot is not broadcast: it goes
// up to the spine as that worker's write, and the spine's result, when it
// comes down, is what the leaf stores and broadcasts to its workers.
//
//	worker write ─► … NextStep: Broadcast ─► SendUp (one ONLY write to the spine)
//	spine result ─► fromSpine ─► slot := result ─► Broadcast to the leaf's workers
//	                                             (or held for its predecessor: NextResult)
//
// Every slot goes up as a one-packet message (UC RDMA WRITE ONLY), whatever
// the position of its packet in the workers' message: the slots of a
// message complete independently and, under loss, out of order, and a
// multi-packet write to the spine would need them in order (its MIDDLE and
// LAST carry no pool index). The leaf keeps no timer: a worker's resend of
// a slot the leaf completed makes the leaf resend the slot upstream until
// the spine's result is back, then it is answered from that result.

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// Upstream is a leaf job's place in its spine's job: what a worker's
// control.Assignment holds, plus the leaf's own side of the connection.
type Upstream struct {
	// Addr is the spine switch's RoCE address.
	Addr netip.Addr
	// QPNs[i] is the spine's switch QPN that the leaf's QP i writes to;
	// PSNs[i] the PSN its first write carries.
	QPNs, PSNs []uint32
	// PoolBase is the first slot of the spine job's pool range: leaf slot
	// PoolBase(leaf)+k goes up as spine slot PoolBase+k (both jobs have
	// the same QPs and packets per message).
	PoolBase uint32
	// RecvQPNs[i] is the leaf's QPN of QP i, where the spine writes QP i's
	// results; RecvPSNs[i] the PSN the leaf registered for it (the first
	// result's).
	RecvQPNs, RecvPSNs []uint32
}

// ErrUpstream is wrapped by SetUpstream's errors.
var ErrUpstream = errors.New("switchmodel: bad upstream")

// leafSlot is a leaf's state of one (slot, set): the completing packet's
// place in its message (the result down mirrors it, as a flat switch's
// broadcast does) and whether the slot waits for, or holds, the spine's
// result.
type leafSlot struct {
	va      uint64
	len     uint32
	msgID   uint16 // the id the completing packet's result carries (Exponents)
	first   bool
	last    bool
	pending bool // complete at the leaf, sent up, no spine result yet
	done    bool // the spine's result is in the slot
	sent    bool // the result was broadcast down
	held    bool // done, not broadcast: its predecessor's result is not down yet
	// upAt is the clock (SetClock) when the slot last went up, resent
	// whether it went up more than once (its spine result then gives no
	// round-trip sample: upState.rtt).
	upAt   int64
	resent bool
}

// upState is a job's upstream: the spine's side and the leaf's receive
// state per QP.
type upState struct {
	addr     netip.Addr
	qpns     []uint32
	psn      []uint32 // next PSN to send, per QP
	poolBase uint32
	recv     []qpKey // (spine address, leaf QPN) per QP
	high     []uint32
	seen     []bool
	// rtt is the shortest time from a slot's one write up to its spine
	// result (clock units; 0: none measured): a worker's resend of a slot
	// whose write up is younger goes no further (leafStep).
	rtt int64
}

// downRef is where a spine result lands: the job and its QP index.
type downRef struct {
	job *jobEntry
	qp  int
}

// SetUpstream makes job id a leaf of a spine switch (nil: a flat job
// again). Call it after AddJob and before the job's workers send: slots
// completed before it are broadcast as on a flat switch.
func (p *Pipeline) SetUpstream(id uint32, up *Upstream) error {
	j, ok := p.Receiver.jobs[id]
	if !ok {
		return fmt.Errorf("switchmodel: set upstream of job %d: %w: job not installed", id, ErrUpstream)
	}
	if up == nil {
		j.up = nil
		p.rebuildDown()
		return nil
	}
	if !up.Addr.IsValid() {
		return fmt.Errorf("switchmodel: set upstream of job %d: %w: no spine address", id, ErrUpstream)
	}
	if len(up.QPNs) != j.q || len(up.PSNs) != j.q || len(up.RecvQPNs) != j.q || len(up.RecvPSNs) != j.q {
		return fmt.Errorf("switchmodel: set upstream of job %d: %w: %d QPs, upstream has %d/%d/%d/%d",
			id, ErrUpstream, j.q, len(up.QPNs), len(up.PSNs), len(up.RecvQPNs), len(up.RecvPSNs))
	}
	if uint64(up.PoolBase)+uint64(j.poolSlots) > 1<<30 {
		return fmt.Errorf("switchmodel: set upstream of job %d: %w: spine pool base %d", id, ErrUpstream, up.PoolBase)
	}
	u := &upState{addr: up.Addr.Unmap(), qpns: make([]uint32, j.q), psn: make([]uint32, j.q), poolBase: up.PoolBase,
		recv: make([]qpKey, j.q), high: make([]uint32, j.q), seen: make([]bool, j.q)}
	for i := range j.q {
		if up.QPNs[i] > rdma.QPNMask || up.RecvQPNs[i] > rdma.QPNMask {
			return fmt.Errorf("switchmodel: set upstream of job %d: %w: QP %d: QPN %#x or %#x is not 24-bit", id, ErrUpstream, i, up.QPNs[i], up.RecvQPNs[i])
		}
		u.qpns[i], u.psn[i] = up.QPNs[i], up.PSNs[i]&rdma.PSNMask
		u.recv[i] = makeKey(u.addr, up.RecvQPNs[i])
		u.high[i] = up.RecvPSNs[i] & rdma.PSNMask
		if _, taken := p.Receiver.keys[u.recv[i]]; taken {
			return fmt.Errorf("switchmodel: set upstream of job %d: %w: %v and QPN %#x are a worker's", id, ErrConflict, u.addr, up.RecvQPNs[i])
		}
	}
	for oid, ref := range p.downs {
		if ref.job.id != id && containsKey(u.recv, oid) {
			return fmt.Errorf("switchmodel: set upstream of job %d: %w: QPN %#x from %v is job %d's", id, ErrConflict, oid.qpn, u.addr, ref.job.id)
		}
	}
	if p.leaf == nil {
		p.leaf = make([]leafSlot, int(p.cfg.PoolSize)*2)
	}
	clear(p.leaf[j.poolBase*2 : (j.poolBase+j.poolSlots)*2])
	j.up = u
	p.rebuildDown()
	return nil
}

func containsKey(ks []qpKey, k qpKey) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (p *Pipeline) rebuildDown() {
	p.downs = nil
	for _, j := range p.Receiver.jobs {
		if j.up == nil {
			continue
		}
		if p.downs == nil {
			p.downs = make(map[qpKey]downRef)
		}
		for i, k := range j.up.recv {
			p.downs[k] = downRef{job: j, qp: i}
		}
	}
}

// leafStep turns a leaf job's decision into the hierarchy's: a slot that
// completes goes up instead of out, and so does a resend into a complete
// slot until the spine's result is in.
func (p *Pipeline) leafStep(md *Metadata) {
	s := &p.leaf[md.slot*2+uint32(md.set)]
	if md.FirstContribution {
		*s = leafSlot{}
	}
	now := p.Receiver.clock
	switch md.Decision {
	case Broadcast:
		*s = leafSlot{va: md.VA, len: md.Len, msgID: md.Imm.MsgID(), first: md.First, last: md.Last, pending: true, upAt: now}
		// Every worker contributed to this set, so every worker has the
		// other set's result (docs/protocol.md "Sets and bitmaps"): its
		// state is done with, and cleared now, the other set's next round
		// finds its flags clean (orphan, fromSpine's hold) even if its
		// spine result comes before any worker's packet for this slot.
		p.leaf[md.slot*2+uint32(md.set^1)] = leafSlot{}
		md.Decision = SendUp
	case Unicast:
		switch u := md.job.up; {
		case s.done:
		case u.rtt > 0 && now-s.upAt < u.rtt:
			// The slot's last write up is younger than the spine's
			// round trip: its answer, or its loss, is still to show.
			// The leaf's workers resend a missing result at about the
			// same time, and each resend sent up would put the slot on
			// the leaf–spine link once per worker; the first of them
			// goes, and the result comes down to all.
			md.Decision, md.Reason = Drop, DropRetransmitIncomplete
		default:
			s.upAt, s.resent = now, true
			md.Decision = SendUp
		}
	}
}

// encodeUp writes the upstream write of md's slot: one WRITE ONLY to the
// spine's QPN of the packet's QP index, the rkey and the va the spine's
// pool index of the slot (the spine echoes the va of the write that
// completed its slot in the result to every leaf, which is how each finds
// its slot: the same for all leaves, as a worker's va is the same on every
// worker), the payload the leaf's
// partial sum and the immediate its exponent record (e0 and e1 −128, the
// identity of the spine's maxima, when none of the leaf's packets for the
// slot carried an immediate).
func (p *Pipeline) encodeUp(md *Metadata, b []byte) (int, netip.Addr, error) {
	j := md.job
	u := j.up
	st := p.Exponents.imm[md.slot*2+uint32(md.set)]
	op := resultOpcode(true, true)
	n := rdma.PacketLen(op, j.payload)
	if len(b) < n {
		return 0, netip.Addr{}, ErrShortBuffer
	}
	psn := u.psn[md.QP]
	u.psn[md.QP] = (psn + 1) & rdma.PSNMask
	rdma.BTH(b).Encode(&rdma.BTHFields{Opcode: op, MigReq: true, PKey: rdma.DefaultPKey, DestQP: u.qpns[md.QP], PSN: psn})
	off := rdma.BTHSize
	spine := wire.MakePoolIndex(u.poolBase+(md.slot-j.poolBase), md.set)
	rdma.RETH(b[off:]).Encode(&rdma.RETHFields{VA: uint64(spine), RKey: uint32(spine), DMALen: uint32(j.payload)})
	off += rdma.RETHSize
	rdma.ImmDt(b[off:]).Encode(uint32(wire.MakeImm(st.msgID, st.e0, st.e1)))
	off += rdma.ImmDtSize
	store(b[off:off+j.payload], p.Processor.vector(md.slot, md.set, j.payload))
	off += j.payload
	clear(b[off:n])
	return n, u.addr, nil
}

// fromSpine takes a packet from a spine (src, dest QPN one of a leaf job's
// receive QPNs): the result of one slot. A new result overwrites the slot's
// partial sum and exponents and is broadcast to the leaf's workers as the
// flat switch broadcasts a completed slot; anything else is dropped.
func (p *Pipeline) fromSpine(ref downRef, pkt *rdma.Packet, md *Metadata) {
	j, u := ref.job, ref.job.up
	md.job, md.JobID, md.QP = j, j.id, ref.qp
	op := pkt.BTH.Opcode()
	if !op.IsFirst() || !op.IsLast() || pkt.ImmDt == nil || pkt.RETH == nil {
		md.Reason = DropOpcode // the spine answers a WRITE ONLY with an ONLY with immediate
		return
	}
	psn := pkt.BTH.PSN()
	if u.seen[ref.qp] && rdma.PSNLess(psn, u.high[ref.qp]) {
		md.Reason = DropStalePSN // a late copy could land in the slot's next round
		return
	}
	u.seen[ref.qp], u.high[ref.qp] = true, (psn+1)&rdma.PSNMask
	if len(pkt.Payload) != j.payload {
		md.Reason = DropLength
		return
	}
	// The va is the spine's pool index of the slot (encodeUp).
	ppm := j.poolSlots / uint32(j.q)
	va := pkt.RETH.VA()
	spine := wire.PoolIndex(va)
	lo := u.poolBase + uint32(ref.qp)*ppm
	if va>>31 != 0 || spine.Slot() < lo || spine.Slot() >= lo+ppm {
		md.Reason = DropPoolRange
		return
	}
	pi := wire.MakePoolIndex(spine.Slot()-u.poolBase+j.poolBase, spine.Set())
	md.PoolIndex, md.slot, md.set = pi, pi.Slot(), pi.Set()
	s := &p.leaf[md.slot*2+uint32(md.set)]
	if !s.pending {
		md.Reason = DropUpstreamDuplicate
		return
	}
	s.pending, s.done = false, true
	if rtt := p.Receiver.clock - s.upAt; !s.resent && rtt > 0 && (u.rtt == 0 || rtt < u.rtt) {
		u.rtt = rtt
	}
	load(p.Processor.vector(md.slot, md.set, j.payload), pkt.Payload)
	// The spine's exponent maxima; the message id stays the leaf's: the
	// spine's is that of whichever leaf's write completed its slot, which
	// may name the whole message where this leaf's completing packet was
	// one packet resent alone (wire.PacketMsgID), or the reverse.
	imm := wire.Imm(pkt.ImmDt.Imm())
	e := &p.Exponents.imm[md.slot*2+uint32(md.set)]
	e.e0, e.e1 = imm.E0(), imm.E1()
	md.Complete = true
	// A worker's MIDDLE or LAST can name the first slot of a QP's range
	// (a FIRST to the range's last slot before it): it has no predecessor.
	if k := (md.slot - j.poolBase) % ppm; !s.first && k > 0 && !p.leaf[(md.slot-1)*2+uint32(md.set)].sent {
		// A MIDDLE or LAST whose predecessor's result is not down yet
		// (the spine completes slots in the order their writes reach
		// it, and one may have been lost and resent). Broadcast now,
		// RDMASender would withhold it from every worker, and the
		// predecessor's FIRST, broadcast later, would open a result
		// message that nothing completes. It follows its predecessor
		// (NextResult), as on a flat switch, where the slots of a
		// message complete in order. The predecessor's flags are this
		// round's: the worker whose MIDDLE or LAST completed this slot
		// sent the predecessor's packet first, and that reset them.
		s.held = true
		md.Decision = Consume
		return
	}
	if p.orphan(j, md, s) {
		s.sent = true
		md.Decision = Consume
		return
	}
	p.broadcastDown(md, s)
}

// orphan says whether the broadcast of s, md's slot, would open (FIRST) or
// continue (MIDDLE) a result message whose next slot went down already,
// as a WRITE ONLY (a one-packet resend completed it at the leaf): nothing
// would complete the message, and while it stays open RDMASender withholds
// the answers to the workers' one-packet resends. A flat switch cannot get
// there (the slots of a message complete in order unless one-packet resends
// complete them, whose results are WRITE ONLYs); the leaf, whose slots
// complete at the spine in the order their writes get there, can. Such a
// result is not broadcast: each worker's resend of the packet is answered
// alone, as a WRITE ONLY.
func (p *Pipeline) orphan(j *jobEntry, md *Metadata, s *leafSlot) bool {
	ppm := j.poolSlots / uint32(j.q)
	return !s.last && (md.slot-j.poolBase)%ppm != ppm-1 && p.leaf[(md.slot+1)*2+uint32(md.set)].sent
}

// broadcastDown makes md the broadcast of the leaf slot s's result to the
// leaf's workers, in the place in its message and with the message id of
// the packet that completed it at the leaf, as a flat switch's broadcast
// mirrors that packet, and the spine's exponent maxima.
func (p *Pipeline) broadcastDown(md *Metadata, s *leafSlot) {
	st := p.Exponents.imm[md.slot*2+uint32(md.set)]
	md.First, md.Last, md.VA, md.Len = s.first, s.last, s.va, s.len
	md.HasImm, md.Imm = true, wire.MakeImm(s.msgID, st.e0, st.e1)
	md.Decision = Broadcast
	s.sent, s.held = true, false
}

// NextResult refills md, a Broadcast just encoded, with the broadcast of
// the next slot of its message if that slot's result was held for it
// (fromSpine), and reports whether it did; the runtime encodes that one
// too, and asks again.
func (p *Pipeline) NextResult(md *Metadata) bool {
	j := md.job
	if md.Decision != Broadcast || j == nil || j.up == nil || md.Last {
		return false
	}
	ppm := j.poolSlots / uint32(j.q)
	if (md.slot-j.poolBase)%ppm == ppm-1 {
		return false
	}
	s := &p.leaf[(md.slot+1)*2+uint32(md.set)]
	if !s.held {
		return false
	}
	md.PoolIndex = md.PoolIndex.Add(1)
	md.slot++
	if p.orphan(j, md, s) {
		s.sent, s.held = true, false
		return false
	}
	p.broadcastDown(md, s)
	p.Counters.Completed++
	return true
}
