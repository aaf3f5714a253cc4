package soft

import (
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// TestRxICRCUncached: with the flow cache full, a packet from a new source
// is verified without the cache, in place with headroom in front of it or,
// lent by a GRO socket (udp.Lender, Off 0), in two passes; either way a
// good ICRC passes and a corrupted one fails, and the packet's bytes are
// left as they were.
func TestRxICRCUncached(t *testing.T) {
	n, err := memlink.New(memlink.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr("127.11.9.1"), 0))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{Endpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var h rxICRC
	h.flows = make(map[netip.AddrPort]*rdma.FlowICRC, maxRxFlows)
	for i := range maxRxFlows {
		h.flows[netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), rdma.UDPPort)] = new(rdma.FlowICRC)
	}
	src := netip.AddrPortFrom(netip.MustParseAddr("127.11.9.2"), rdma.UDPPort)
	pf := rdma.PacketFields{BTH: rdma.BTHFields{Opcode: rdma.UCRDMAWriteOnlyWithImm, PKey: rdma.DefaultPKey, DestQP: 17},
		RETH: rdma.RETHFields{DMALen: 1000}, Imm: 7}
	pkt := make([]byte, rdma.PacketLen(pf.BTH.Opcode, 1000))
	off, err := pf.Encode(pkt, 1000)
	if err != nil {
		t.Fatal(err)
	}
	fill(pkt[off:len(pkt)-rdma.ICRCSize], 3)
	f := rdma.Flow{Src: src.Addr(), Dst: d.Addr(), SrcPort: src.Port(), DstPort: d.LocalAddrPort().Port(), DF: true}
	var seal rdma.ICRC
	if err := seal.Seal(&f, pkt); err != nil {
		t.Fatal(err)
	}
	for _, headroom := range []int{0, rdma.ICRCHeadroom} {
		for _, corrupt := range []bool{false, true} {
			buf := make([]byte, headroom+len(pkt))
			copy(buf[headroom:], pkt)
			if corrupt {
				buf[headroom+off] ^= 1
			}
			want := append([]byte(nil), buf[headroom:]...)
			m := udp.Msg{Buf: buf, Off: headroom, N: len(pkt), Addr: src}
			err := h.verify(d, &m)
			if (err != nil) != corrupt {
				t.Errorf("headroom %d, corrupt %v: verify = %v", headroom, corrupt, err)
			}
			if string(m.Bytes()) != string(want) {
				t.Errorf("headroom %d, corrupt %v: the packet changed", headroom, corrupt)
			}
		}
	}
	if len(h.flows) != maxRxFlows {
		t.Errorf("the cache grew to %d flows past its %d", len(h.flows), maxRxFlows)
	}
}
