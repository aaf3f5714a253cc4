package rdma

import (
	"encoding/hex"
	"net/netip"
	"testing"
)

func FuzzPacketParse(f *testing.F) {
	for _, op := range []Opcode{UCRDMAWriteFirst, UCRDMAWriteMiddle, UCRDMAWriteOnlyWithImm, RCAcknowledge, CNP} {
		b := make([]byte, PacketLen(op, 16))
		pf := PacketFields{BTH: BTHFields{Opcode: op}}
		pf.Encode(b, 16)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Parse(b); err != nil {
			return
		}
		// Accessors must be in bounds after a successful parse.
		_ = p.BTH.Opcode().String()
		_, _, _ = p.BTH.DestQP(), p.BTH.PSN(), p.BTH.PadCount()
		if p.RETH != nil {
			_, _, _ = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		}
		if p.ImmDt != nil {
			_ = p.ImmDt.Imm()
		}
		if p.AETH != nil {
			_, _ = p.AETH.Syndrome(), p.AETH.MSN()
		}
		if BTHSize+p.BTH.Opcode().HeadersLen()+len(p.Payload)+len(p.Pad)+ICRCSize != len(b) {
			t.Fatalf("lengths do not add up: %d", len(b))
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	cnp, _ := hex.DecodeString(cnpFrameHex)
	f.Add(cnp, true)
	f.Add(cnp[EthernetHeaderLen:], false)
	e := Encap{Flow: Flow{Src: netip.MustParseAddr("fd00::2"), Dst: netip.MustParseAddr("fd00::3"), DstPort: UDPPort}}
	v6 := make([]byte, e.HeaderLen(true)+PacketLen(UCRDMAWriteOnly, 8))
	e.EncodeHeaders(v6, PacketLen(UCRDMAWriteOnly, 8), true)
	f.Add(v6, true)
	f.Fuzz(func(t *testing.T, b []byte, eth bool) {
		fr, err := ParseFrame(b, eth)
		if err != nil {
			return
		}
		var h ICRC
		h.Frame(fr.IP)
		h.Datagram(&fr.Flow, fr.UDPPayload)
		var p Packet
		p.Parse(fr.UDPPayload)
	})
}

func FuzzICRCFrame(f *testing.F) {
	cnp, _ := hex.DecodeString(cnpFrameHex)
	f.Add(cnp[EthernetHeaderLen:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var h ICRC
		h.Frame(b)
	})
}
