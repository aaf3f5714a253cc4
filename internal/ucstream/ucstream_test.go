package ucstream

import (
	"net/netip"
	"testing"

	"github.com/swml-rdma/swml-rdma/rdma"
)

func packet(t *testing.T, first, last bool, qpn, psn uint32) []byte {
	t.Helper()
	op := rdma.WriteOpcode(rdma.TransportUC, first, last, last)
	f := rdma.PacketFields{BTH: rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpn, PSN: psn}, RETH: rdma.RETHFields{DMALen: 256}}
	b := make([]byte, rdma.PacketLen(op, 64))
	if _, err := f.Encode(b, 64); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestChecker(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	type pkt struct {
		dst         netip.Addr
		first, last bool
		qpn, psn    uint32
	}
	for _, tc := range []struct {
		name   string
		pkts   []pkt
		breaks int
	}{
		{"messages", []pkt{{a, true, false, 1, 7}, {a, false, false, 1, 8}, {a, false, true, 1, 9}, {a, true, true, 1, 10}}, 0},
		{"streams apart", []pkt{{a, true, false, 1, 7}, {b, true, false, 1, 3}, {a, true, false, 2, 0}, {b, false, true, 1, 4}, {a, false, true, 1, 8}, {a, false, true, 2, 1}}, 0},
		{"first cuts in", []pkt{{a, true, false, 1, 7}, {a, true, false, 1, 8}, {a, false, true, 1, 9}}, 1},
		{"only cuts in", []pkt{{a, true, false, 1, 7}, {a, true, true, 1, 8}}, 1},
		{"middle alone", []pkt{{a, true, true, 1, 7}, {a, false, false, 1, 8}}, 1},
		{"psn gap", []pkt{{a, true, false, 1, 7}, {a, false, true, 1, 9}}, 1},
		{"psn wraps", []pkt{{a, true, false, 1, rdma.PSNMask}, {a, false, true, 1, 0}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Checker
			for _, p := range tc.pkts {
				c.Observe(p.dst, packet(t, p.first, p.last, p.qpn, p.psn))
			}
			if c.NumBreaks() != tc.breaks || c.Packets != len(tc.pkts) {
				t.Fatalf("%d breaks in %d packets, want %d: %q", c.NumBreaks(), c.Packets, tc.breaks, c.Breaks)
			}
		})
	}
}
