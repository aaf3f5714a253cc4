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

// engine is the switch without its socket: it checks a received datagram,
// runs it through the model and appends the result datagrams to out. The
// runtime serialises every call with its mutex; tests and the fuzz target
// drive it directly.
type engine struct {
	local  netip.AddrPort
	policy ICRCPolicy
	pipe   *switchmodel.Pipeline
	icrc   rdma.ICRC
	pkt    rdma.Packet
	md     switchmodel.Metadata

	out   []udp.Msg // out[:nout] are ready to send
	nout  int
	maxN  int // the largest worker count of an installed job
	bufSz int
}

func newEngine(local netip.AddrPort, policy ICRCPolicy, pipe *switchmodel.Pipeline, outCap int) *engine {
	e := &engine{local: local, policy: policy, pipe: pipe}
	e.bufSz = rdma.ICRCHeadroom + pipe.Config().MaxPayload + maxHeaders
	e.out = make([]udp.Msg, outCap)
	for i := range e.out {
		e.out[i] = udp.Msg{Buf: make([]byte, e.bufSz), Off: rdma.ICRCHeadroom}
	}
	return e
}

// room reports whether out can take the results of one more packet.
func (e *engine) room() bool { return len(e.out)-e.nout >= e.maxN }

// input handles the datagram at buf[off:off+n] from src. It never panics,
// whatever the bytes or the source; buf[:off] must be at least
// rdma.ICRCHeadroom bytes of scratch. The caller checks room first.
func (e *engine) input(src netip.AddrPort, buf []byte, off, n int) {
	p := e.pipe
	b := buf[off : off+n]
	if e.verify(src) {
		f := rdma.Flow{Src: src.Addr(), Dst: e.local.Addr(), SrcPort: src.Port(), DstPort: e.local.Port(), DF: true}
		if err := e.icrc.VerifyHeadroom(&f, buf[:off+n], off); err != nil {
			p.Counters.Packets++
			if err == rdma.ErrICRC {
				p.Counters.Drops[switchmodel.DropICRC]++
			} else {
				p.Counters.Drops[switchmodel.DropMalformed]++
			}
			return
		}
	}
	if err := e.pkt.Parse(b); err != nil {
		p.Counters.Packets++
		p.Counters.Drops[switchmodel.DropMalformed]++
		return
	}
	md := &e.md
	p.Process(src.Addr(), &e.pkt, md)
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
		f := rdma.Flow{Src: e.local.Addr(), Dst: dst, SrcPort: e.local.Port(), DstPort: rdma.UDPPort, DF: true}
		if err := e.icrc.SealHeadroom(&f, m.Buf[:m.Off+pl], m.Off); err != nil {
			p.Counters.Drops[switchmodel.DropSendError]++
			continue
		}
		e.nout++
	}
}

// verify says whether the ICRC of a datagram from src can and must be
// checked.
func (e *engine) verify(src netip.AddrPort) bool {
	return e.policy == ICRCVerify || !src.Addr().Unmap().Is4()
}
