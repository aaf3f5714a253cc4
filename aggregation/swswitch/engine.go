package swswitch

import (
	"net/netip"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// maxHeaders is the most header bytes of a request or result packet: BTH,
// RETH, ImmDt and ICRC.
const maxHeaders = rdma.BTHSize + rdma.RETHSize + rdma.ImmDtSize + rdma.ICRCSize

// engine is one core of the switch without its sockets: it checks a
// received datagram, runs it through its pipeline and appends the result
// datagrams to out. The runtime serialises every call with its core's
// mutex; tests and the fuzz target drive it directly.
type engine struct {
	verifier // for input; the runtime's readers verify with their own
	pipe     *switchmodel.Pipeline
	pkt      rdma.Packet
	md       switchmodel.Metadata

	out   []udp.Msg // out[:nout] are ready to send
	nout  int
	maxN  int // the largest worker count of an installed job
	bufSz int

	// Per-flow ICRC state of the results to each worker.
	outFlows flowCache
	shifts   []*rdma.CRCShift // by payload size, for sealing broadcasts

	// sched orders out[:nout] for GSO (schedule); qpns[i] is the
	// destination QP of out[i], its stream, and ends[i] whether out[i]
	// ends its message.
	sched udp.Scheduler
	qpns  []uint32
	ends  []bool
}

// maxFlows bounds each flow cache; packets of further flows (only possible
// from sources that are no job's workers, or more workers than that) take
// the uncached ICRC path.
const maxFlows = 4096

// flowCache maps a flow's remote end to its FlowICRC. It allocates only
// when it meets a new flow. A broadcast's results go to each of a job's
// workers in turn, so the last few flows used are kept in a small array,
// tried before the map (whose lookup hashes the 32-byte key).
type flowCache struct {
	m      map[netip.AddrPort]int
	flows  []rdma.FlowICRC
	recent [flowRecent]recentFlow
	next   int // the recent entry replaced next
}

// flowRecent is the number of flows a flowCache tries before its map: a
// broadcast to that many workers finds every flow there.
const flowRecent = 16

type recentFlow struct {
	key netip.AddrPort
	id  int // -1: empty
}

// get returns the id of the flow to or from remote (local being the
// switch), creating it if there is room; -1 if not.
func (c *flowCache) get(remote netip.AddrPort, f func() rdma.Flow) int {
	if c.m != nil {
		for i := range c.recent {
			if r := &c.recent[i]; r.id >= 0 && r.key == remote {
				return r.id
			}
		}
	}
	id, ok := c.m[remote]
	if !ok {
		if len(c.flows) >= maxFlows {
			return -1
		}
		if c.m == nil {
			c.m = make(map[netip.AddrPort]int)
			for i := range c.recent {
				c.recent[i].id = -1
			}
		}
		fl := f()
		id = len(c.flows)
		c.flows = append(c.flows, rdma.FlowICRC{})
		c.flows[id].Reset(&fl)
		c.m[remote] = id
	}
	c.recent[c.next] = recentFlow{remote, id}
	c.next = (c.next + 1) % flowRecent
	return id
}

func newEngine(local netip.AddrPort, policy ICRCPolicy, pipe *switchmodel.Pipeline, outCap int) *engine {
	e := &engine{verifier: verifier{local: local, policy: policy}, pipe: pipe}
	e.bufSz = rdma.ICRCHeadroom + pipe.Config().MaxPayload + maxHeaders
	e.grow(outCap)
	return e
}

// grow makes room for n result packets of one batch.
func (e *engine) grow(n int) {
	if n <= len(e.out) {
		return
	}
	out := make([]udp.Msg, n)
	copy(out, e.out)
	for i := len(e.out); i < n; i++ {
		out[i] = udp.Msg{Buf: make([]byte, e.bufSz), Off: rdma.ICRCHeadroom}
	}
	e.out = out
	e.qpns = append(e.qpns, make([]uint32, n-len(e.qpns))...)
	e.ends = append(e.ends, make([]bool, n-len(e.ends))...)
	e.sched.Reserve(n)
}

// room reports whether out can take the results of one more packet.
func (e *engine) room() bool { return len(e.out)-e.nout >= e.maxN }

// input handles the datagram at buf[off:off+n] from src: check, then
// process. It never panics, whatever the bytes or the source; buf[:off]
// must be at least rdma.ICRCHeadroom bytes of scratch. The caller checks
// room first.
func (e *engine) input(src netip.AddrPort, buf []byte, off, n int) {
	if r := e.check(src, buf, off, n); r != switchmodel.NotDropped {
		e.pipe.Counters.Packets++
		e.pipe.Counters.Drops[r]++
		return
	}
	e.process(src, buf[off:off+n])
}

// process runs the checked datagram b from src through the pipeline and
// appends its results. The caller checks room first.
func (e *engine) process(src netip.AddrPort, b []byte) {
	p := e.pipe
	if err := e.pkt.Parse(b); err != nil {
		p.Counters.Packets++
		p.Counters.Drops[switchmodel.DropMalformed]++
		return
	}
	md := &e.md
	p.Process(src.Addr(), &e.pkt, md)
	for {
		e.results(md)
		// A leaf's result may release the next slots of its message
		// (switchmodel.Pipeline.NextResult; maxN counts them).
		if !p.NextResult(md) {
			return
		}
	}
}

// results appends the result packets of md.
func (e *engine) results(md *switchmodel.Metadata) {
	p := e.pipe
	// A broadcast's packets differ only in their headers: the payload's
	// CRC is computed once and combined with each worker's header CRC.
	var shift *rdma.CRCShift
	var payloadCRC uint32
	for d := 0; d < md.Dests(); d++ {
		m := &e.out[e.nout]
		pl, dst, err := p.EncodeResult(md, d, m.Buf[m.Off:])
		if err == switchmodel.ErrOutOfOrder {
			continue // counted by the model; the worker will retransmit
		}
		if err != nil {
			p.Counters.Drops[switchmodel.DropSendError]++
			continue
		}
		m.N = pl
		m.Addr = netip.AddrPortFrom(dst, rdma.UDPPort)
		if shift == nil && md.Dests() > 1 {
			shift, payloadCRC = e.payloadCRC(m.Bytes())
		}
		if err := e.seal(m, pl, shift, payloadCRC); err != nil {
			p.Counters.Drops[switchmodel.DropSendError]++
			continue
		}
		e.nout++
	}
	if md.Notice {
		e.notice(md)
	}
}

// notice appends md's gap notice to the packet's sender
// (switchmodel.Pipeline.EncodeNotice).
func (e *engine) notice(md *switchmodel.Metadata) {
	p := e.pipe
	m := &e.out[e.nout]
	n, dst, err := p.EncodeNotice(md, m.Buf[m.Off:])
	if err != nil {
		return // skipped (counted by the model), or lost on purpose
	}
	m.N = n
	m.Addr = netip.AddrPortFrom(dst, rdma.UDPPort)
	if err := e.seal(m, n, nil, 0); err != nil {
		p.Counters.Drops[switchmodel.DropSendError]++
		return
	}
	e.nout++
}

// verifier checks the ICRC of requests, with per-flow state for each
// worker socket. Each reader of the runtime has its own; not safe for
// concurrent use.
type verifier struct {
	local  netip.AddrPort
	policy ICRCPolicy
	icrc   rdma.ICRC
	flows  flowCache
}

// check returns why the datagram at buf[off:off+n] from src must be
// dropped (DropICRC, DropMalformed), or NotDropped.
func (v *verifier) check(src netip.AddrPort, buf []byte, off, n int) switchmodel.DropReason {
	if !v.verify(src) {
		return switchmodel.NotDropped
	}
	switch err := v.verifyICRC(src, buf, off, n); err {
	case nil:
		return switchmodel.NotDropped
	case rdma.ErrICRC:
		return switchmodel.DropICRC
	default:
		return switchmodel.DropMalformed
	}
}

// verify says whether the ICRC of a datagram from src can and must be
// checked.
func (v *verifier) verify(src netip.AddrPort) bool {
	return v.policy == ICRCVerify || !src.Addr().Unmap().Is4()
}

// verifyICRC checks the ICRC of the request at buf[off:off+n] from src.
func (v *verifier) verifyICRC(src netip.AddrPort, buf []byte, off, n int) error {
	id := v.flows.get(src, func() rdma.Flow {
		return rdma.Flow{Src: src.Addr(), Dst: v.local.Addr(), SrcPort: src.Port(), DstPort: v.local.Port(), DF: true}
	})
	if id < 0 {
		f := rdma.Flow{Src: src.Addr(), Dst: v.local.Addr(), SrcPort: src.Port(), DstPort: v.local.Port(), DF: true}
		if off < rdma.ICRCHeadroom {
			return v.icrc.Verify(&f, buf[off:off+n]) // a lent packet has no headroom
		}
		return v.icrc.VerifyHeadroom(&f, buf[:off+n], off)
	}
	return v.flows.flows[id].Verify(buf[off : off+n])
}

// maxShifts bounds the CRC shift operators kept (one per payload size in
// use; jobs use a handful of packet sizes).
const maxShifts = 8

// payloadCRC returns the CRC of the payload of result packet pkt and the
// operator that shifts a header CRC over it; nil if there is no room for
// another operator (the results are then sealed directly).
func (e *engine) payloadCRC(pkt []byte) (*rdma.CRCShift, uint32) {
	n := len(pkt) - rdma.PacketLen(rdma.BTH(pkt).Opcode(), 0)
	var s *rdma.CRCShift
	for _, c := range e.shifts {
		if c.Len() == n {
			s = c
			break
		}
	}
	if s == nil {
		if len(e.shifts) >= maxShifts || n < 0 {
			return nil, 0
		}
		s = rdma.NewCRCShift(n)
		e.shifts = append(e.shifts, s)
	}
	end := len(pkt) - rdma.ICRCSize
	return s, rdma.UpdateCRC(0, pkt[end-n:end])
}

// seal computes the ICRC of result m (pl bytes, addressed). With shift
// set, the packet's last shift.Len() bytes before the ICRC (its payload)
// have CRC payloadCRC.
func (e *engine) seal(m *udp.Msg, pl int, shift *rdma.CRCShift, payloadCRC uint32) error {
	dst := m.Addr
	id := e.outFlows.get(dst, func() rdma.Flow {
		return rdma.Flow{Src: e.local.Addr(), Dst: dst.Addr(), SrcPort: e.local.Port(), DstPort: dst.Port(), DF: true}
	})
	if id < 0 {
		f := rdma.Flow{Src: e.local.Addr(), Dst: dst.Addr(), SrcPort: e.local.Port(), DstPort: dst.Port(), DF: true}
		return e.icrc.SealHeadroom(&f, m.Buf[:m.Off+pl], m.Off)
	}
	if shift != nil {
		return e.outFlows.flows[id].SealCombined(m.Buf[m.Off:m.Off+pl], payloadCRC, shift)
	}
	return e.outFlows.flows[id].Seal(m.Buf[m.Off : m.Off+pl])
}

// schedule returns out[:nout] reordered so that UDP GSO can send it as few
// datagrams as possible (udp.Scheduler): grouped by destination, and within
// a destination the packets of its QPs merged in rounds of equal size
// (every QP's FIRSTs, then every QP's MIDDLEs, then its LASTs, …), each
// round the size most QPs have at their head. Each (destination, QP) keeps
// its own order, which is all UC needs: its PSNs stay in sequence; and the
// packets that end a result message (LAST, ONLY) keep the order in which
// their slots completed, so a worker's results complete in the order the
// switch completed them (its RACK takes a result that overtakes another
// for evidence of loss). The result is out itself or the scheduler's copy
// (the Msgs share buffers with out), valid until the next call.
func (e *engine) schedule() []udp.Msg {
	out := e.out[:e.nout]
	qpns, ends := e.qpns[:e.nout], e.ends[:e.nout]
	for i := range out {
		bth := rdma.BTH(out[i].Bytes())
		qpns[i], ends[i] = bth.DestQP(), bth.Opcode().IsLast()
	}
	return e.sched.Order(out, qpns, ends)
}
