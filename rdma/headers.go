package rdma

import (
	"encoding/binary"
	"errors"
)

// Header sizes in bytes.
const (
	BTHSize          = 12
	RETHSize         = 16
	ImmDtSize        = 4
	AETHSize         = 4
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
	ICRCSize         = 4

	// UDPPort is the IANA RoCEv2 destination port.
	UDPPort = 4791
	// DefaultPKey is the default partition key.
	DefaultPKey = 0xFFFF
)

// Sentinel errors of the parsers; wrapped with detail where helpful.
var (
	ErrTruncated   = errors.New("rdma: packet truncated")
	ErrBadOpcode   = errors.New("rdma: unsupported opcode")
	ErrBadVersion  = errors.New("rdma: unsupported header version")
	ErrICRC        = errors.New("rdma: ICRC mismatch")
	ErrNotRoCEv2   = errors.New("rdma: not a RoCEv2 packet")
	ErrBadPadCount = errors.New("rdma: pad count exceeds payload")
)

// BTH is the 12-byte Base Transport Header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |        Partition Key          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  Resv6    |           Destination QP                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   Resv7     |           Packet Sequence Number              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type BTH []byte

const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthResv8a = 4
	bthDestQP = 5
	bthAck    = 8
	bthPSN    = 9
)

func (b BTH) Opcode() Opcode       { return Opcode(b[bthOpcode]) }
func (b BTH) SolicitedEvent() bool { return b[bthFlags]&0x80 != 0 }
func (b BTH) MigReq() bool         { return b[bthFlags]&0x40 != 0 }
func (b BTH) PadCount() int        { return int(b[bthFlags]>>4) & 3 }
func (b BTH) TVer() uint8          { return b[bthFlags] & 0x0F }
func (b BTH) PKey() uint16         { return binary.BigEndian.Uint16(b[bthPKey:]) }
func (b BTH) FECN() bool           { return b[bthResv8a]&0x80 != 0 }
func (b BTH) BECN() bool           { return b[bthResv8a]&0x40 != 0 }
func (b BTH) DestQP() uint32       { return get24(b[bthDestQP:]) }
func (b BTH) AckReq() bool         { return b[bthAck]&0x80 != 0 }
func (b BTH) PSN() uint32          { return get24(b[bthPSN:]) }

// SetDestQP and SetPSN rewrite fields in place (used by the switch).
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthDestQP:], qpn) }
func (b BTH) SetPSN(psn uint32)    { put24(b[bthPSN:], psn) }
func (b BTH) SetOpcode(o Opcode)   { b[bthOpcode] = uint8(o) }

// BTHFields are the values Encode writes into a BTH.
type BTHFields struct {
	Opcode         Opcode
	SolicitedEvent bool
	MigReq         bool
	PadCount       int
	TVer           uint8 // 0
	PKey           uint16
	FECN, BECN     bool
	DestQP         uint32
	AckReq         bool
	PSN            uint32
}

// Encode writes f into b (len(b) ≥ BTHSize).
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHSize-1]
	b[bthOpcode] = uint8(f.Opcode)
	fl := uint8(f.PadCount&3)<<4 | f.TVer&0x0F
	if f.SolicitedEvent {
		fl |= 0x80
	}
	if f.MigReq {
		fl |= 0x40
	}
	b[bthFlags] = fl
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	var r uint8
	if f.FECN {
		r |= 0x80
	}
	if f.BECN {
		r |= 0x40
	}
	b[bthResv8a] = r
	put24(b[bthDestQP:], f.DestQP)
	var a uint8
	if f.AckReq {
		a = 0x80
	}
	b[bthAck] = a
	put24(b[bthPSN:], f.PSN)
}

// RETH is the 16-byte RDMA Extended Transport Header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address [63:32]                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address [31:0]                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Remote Key                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        DMA Length                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// In SwitchML requests the Remote Key is overloaded as the pool index
// (aggregation/wire.PoolIndex).
type RETH []byte

func (r RETH) VA() uint64       { return binary.BigEndian.Uint64(r[0:]) }
func (r RETH) RKey() uint32     { return binary.BigEndian.Uint32(r[8:]) }
func (r RETH) DMALen() uint32   { return binary.BigEndian.Uint32(r[12:]) }
func (r RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// RETHFields are the values Encode writes into a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// Encode writes f into r (len(r) ≥ RETHSize).
func (r RETH) Encode(f *RETHFields) {
	_ = r[RETHSize-1]
	binary.BigEndian.PutUint64(r[0:], f.VA)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], f.DMALen)
}

// ImmDt is the 4-byte Immediate Data header, big-endian on the wire. In
// SwitchML it carries aggregation/wire.Imm (message id and exponents).
type ImmDt []byte

func (i ImmDt) Imm() uint32     { return binary.BigEndian.Uint32(i) }
func (i ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }
func (i ImmDt) Encode(v uint32) { binary.BigEndian.PutUint32(i, v) }

// AETH is the 4-byte ACK Extended Transport Header: syndrome and 24-bit MSN.
type AETH []byte

func (a AETH) Syndrome() uint8 { return a[0] }
func (a AETH) MSN() uint32     { return get24(a[1:]) }

// AETHFields are the values Encode writes into an AETH.
type AETHFields struct {
	Syndrome uint8
	MSN      uint32
}

// Encode writes f into a (len(a) ≥ AETHSize).
func (a AETH) Encode(f *AETHFields) {
	_ = a[AETHSize-1]
	a[0] = f.Syndrome
	put24(a[1:], f.MSN)
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
