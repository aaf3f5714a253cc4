package rdma

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestOpcodeNames(t *testing.T) {
	tests := []struct {
		op   Opcode
		name string
		reth bool
		imm  bool
	}{
		{UCRDMAWriteFirst, "UC_RDMA_WRITE_FIRST", true, false},
		{UCRDMAWriteMiddle, "UC_RDMA_WRITE_MIDDLE", false, false},
		{UCRDMAWriteLast, "UC_RDMA_WRITE_LAST", false, false},
		{UCRDMAWriteLastWithImm, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", false, true},
		{UCRDMAWriteOnly, "UC_RDMA_WRITE_ONLY", true, false},
		{UCRDMAWriteOnlyWithImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", true, true},
		{RCRDMAReadRequest, "RC_RDMA_READ_REQUEST", true, false},
		{RCAcknowledge, "RC_ACKNOWLEDGE", false, false},
		{UCSendOnlyWithImmediate, "UC_SEND_ONLY_WITH_IMMEDIATE", false, true},
		{CNP, "CNP", false, false},
		{Opcode(0x3F), "Opcode(0x3f)", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.op.String(); got != tt.name {
				t.Errorf("String() = %q", got)
			}
			if tt.op.HasRETH() != tt.reth || tt.op.HasImm() != tt.imm {
				t.Errorf("RETH %v imm %v", tt.op.HasRETH(), tt.op.HasImm())
			}
		})
	}
	if uint8(UCRDMAWriteFirst) != 0x26 || uint8(UCRDMAWriteOnlyWithImm) != 0x2B || uint8(RCAcknowledge) != 0x11 {
		t.Fatal("opcode values differ from the IBTA table")
	}
	if got := WriteOpcode(TransportUC, false, true, true); got != UCRDMAWriteLastWithImm {
		t.Fatalf("WriteOpcode(last, imm) = %v", got)
	}
}

func TestPSNArithmetic(t *testing.T) {
	tests := []struct {
		name string
		a, b uint32
		diff int32
	}{
		{"equal", 5, 5, 0},
		{"ahead", 10, 5, 5},
		{"behind", 5, 10, -5},
		{"wrap ahead", 2, 0xFFFFFE, 4},
		{"wrap behind", 0xFFFFFE, 2, -4},
		{"half", 0x800000, 0, -0x800000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PSNDiff(tt.a, tt.b); got != tt.diff {
				t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.diff)
			}
		})
	}
	if PSNAdd(0xFFFFFF, 1) != 0 || PSNAdd(0, -1) != 0xFFFFFF || PSNAdd(7, 3) != 10 {
		t.Fatal("PSNAdd does not wrap at 2^24")
	}
	if !PSNLess(0xFFFFFF, 0) || PSNLess(0, 0xFFFFFF) {
		t.Fatal("PSNLess across the wrap")
	}
}

func TestPacketRoundTrip(t *testing.T) {
	for _, op := range []Opcode{UCRDMAWriteFirst, UCRDMAWriteMiddle, UCRDMAWriteLast, UCRDMAWriteLastWithImm,
		UCRDMAWriteOnly, UCRDMAWriteOnlyWithImm, RCAcknowledge, RCSendOnly, RCCompareSwap, RCAtomicAcknowledge, RCSendOnlyWithInvalidate} {
		for _, n := range []int{0, 1, 3, 4, 255, 1024} {
			pf := PacketFields{
				BTH:  BTHFields{Opcode: op, SolicitedEvent: true, PKey: 0xFFFF, DestQP: 0xABCDEF, AckReq: true, PSN: 0xFFFFFE, BECN: true},
				RETH: RETHFields{VA: 0x1122334455667788, RKey: 0xdeadbeef, DMALen: 4096},
				Imm:  0x01020304,
				AETH: AETHFields{Syndrome: 0x1F, MSN: 0x123456},
			}
			buf := make([]byte, PacketLen(op, n))
			off, err := pf.Encode(buf, n)
			if err != nil {
				t.Fatal(err)
			}
			payload := bytes.Repeat([]byte{0xA5}, n)
			copy(buf[off:], payload)
			var p Packet
			if err := p.Parse(buf); err != nil {
				t.Fatalf("%v/%d: %v", op, n, err)
			}
			b := p.BTH
			if b.Opcode() != op || !b.SolicitedEvent() || b.PKey() != 0xFFFF || b.DestQP() != 0xABCDEF || !b.AckReq() || b.PSN() != 0xFFFFFE || !b.BECN() || b.FECN() || b.PadCount() != padFor(n) {
				t.Errorf("%v/%d: BTH mismatch % x", op, n, []byte(b))
			}
			if op.HasRETH() != (p.RETH != nil) || op.HasImm() != (p.ImmDt != nil) || op.HasAETH() != (p.AETH != nil) {
				t.Errorf("%v: views RETH %v Imm %v AETH %v", op, p.RETH != nil, p.ImmDt != nil, p.AETH != nil)
			}
			if p.RETH != nil && (p.RETH.VA() != pf.RETH.VA || p.RETH.RKey() != pf.RETH.RKey || p.RETH.DMALen() != pf.RETH.DMALen) {
				t.Errorf("%v: RETH mismatch", op)
			}
			if p.ImmDt != nil && p.ImmDt.Imm() != pf.Imm {
				t.Errorf("%v: imm %#x", op, p.ImmDt.Imm())
			}
			if p.AETH != nil && (p.AETH.Syndrome() != 0x1F || p.AETH.MSN() != 0x123456) {
				t.Errorf("%v: AETH mismatch", op)
			}
			if !bytes.Equal(p.Payload, payload) {
				t.Errorf("%v/%d: payload %d bytes", op, n, len(p.Payload))
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	good := make([]byte, PacketLen(UCRDMAWriteOnlyWithImm, 8))
	pf := PacketFields{BTH: BTHFields{Opcode: UCRDMAWriteOnlyWithImm}}
	pf.Encode(good, 8)
	tests := []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrTruncated},
		{"short", func(b []byte) []byte { return b[:BTHSize+2] }, ErrTruncated},
		{"no room for RETH", func(b []byte) []byte { return b[:BTHSize+8+ICRCSize] }, ErrTruncated},
		{"bad opcode", func(b []byte) []byte { b[0] = 0x3F; return b }, ErrBadOpcode},
		{"bad tver", func(b []byte) []byte { b[1] |= 0x01; return b }, ErrBadVersion},
		{"pad beyond payload", func(b []byte) []byte {
			b = b[:BTHSize+RETHSize+ImmDtSize+1+ICRCSize]
			b[1] |= 0x30
			return b
		}, ErrBadPadCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			b := tt.mod(append([]byte(nil), good...))
			if err := p.Parse(b); !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFrameRoundTripIPv4(t *testing.T) {
	e := Encap{SrcMAC: []byte{2, 0, 0, 0, 0, 2}, DstMAC: []byte{2, 0, 0, 0, 0, 1},
		Flow: Flow{Src: netip.MustParseAddr("127.0.0.2"), Dst: netip.MustParseAddr("127.0.0.1"), SrcPort: 4791, DstPort: 4791, DF: true}}
	pl := make([]byte, PacketLen(UCRDMAWriteMiddle, 256))
	pf := PacketFields{BTH: BTHFields{Opcode: UCRDMAWriteMiddle, DestQP: 17, PSN: 3}}
	pf.Encode(pl, 256)
	var h ICRC
	h.Seal(&e.Flow, pl)
	frame := make([]byte, e.HeaderLen(true)+len(pl))
	n, err := e.EncodeHeaders(frame, len(pl), true)
	if err != nil {
		t.Fatal(err)
	}
	copy(frame[n:], pl)
	f, err := ParseFrame(frame, true)
	if err != nil {
		t.Fatal(err)
	}
	if f.Src != e.Src || f.Dst != e.Dst || !f.DF || f.IPID != 0 || f.TTL != DefaultTTL || !bytes.Equal(f.UDPPayload, pl) {
		t.Fatalf("frame mismatch: %+v", f.Encap)
	}
	if ipv4Checksum(frame[EthernetHeaderLen:EthernetHeaderLen+20]) != 0 {
		t.Fatal("IPv4 header checksum does not verify")
	}
	if c, _ := h.Frame(f.IP); c != StoredICRC(frame) {
		t.Fatal("Frame ICRC differs from the Datagram ICRC")
	}
	if _, err := ParseFrame(frame[:30], true); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated frame: %v", err)
	}
	bad := append([]byte(nil), frame...)
	bad[EthernetHeaderLen+20+2] = 0x13 // UDP dst port 4791 → 5047
	if _, err := ParseFrame(bad, true); !errors.Is(err, ErrNotRoCEv2) {
		t.Fatalf("wrong port: %v", err)
	}
}

func TestParseAllocs(t *testing.T) {
	e := Encap{Flow: Flow{Src: netip.MustParseAddr("127.0.0.2"), Dst: netip.MustParseAddr("127.0.0.1"), SrcPort: 4791, DstPort: 4791}}
	pl := make([]byte, PacketLen(UCRDMAWriteOnlyWithImm, 1024))
	pf := PacketFields{BTH: BTHFields{Opcode: UCRDMAWriteOnlyWithImm}}
	frame := make([]byte, e.HeaderLen(true)+len(pl))
	var p Packet
	if n := testing.AllocsPerRun(100, func() {
		pf.Encode(pl, 1024)
		hl, _ := e.EncodeHeaders(frame, len(pl), true)
		copy(frame[hl:], pl)
		f, _ := ParseFrame(frame, true)
		p.Parse(f.UDPPayload)
	}); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}

func TestGID(t *testing.T) {
	g := GIDFromAddr(netip.MustParseAddr("10.0.0.1"))
	if g.String() != "0000:0000:0000:0000:0000:ffff:0a00:0001" {
		t.Fatalf("GID string %s", g)
	}
	if g.Addr() != netip.MustParseAddr("10.0.0.1") {
		t.Fatal("GID.Addr does not unmap")
	}
	p, err := ParseGID(g.String())
	if err != nil || p != g {
		t.Fatalf("ParseGID: %v %v", p, err)
	}
}
