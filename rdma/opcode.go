package rdma

import "fmt"

// Opcode is the BTH opcode: bits [7:5] transport, [4:0] operation.
type Opcode uint8

// Transport prefixes (opcode bits [7:5]).
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
)

// Operations (opcode bits [4:0]); combine with a transport prefix.
const (
	opSendFirst              Opcode = 0x00
	opSendMiddle             Opcode = 0x01
	opSendLast               Opcode = 0x02
	opSendLastWithImmediate  Opcode = 0x03
	opSendOnly               Opcode = 0x04
	opSendOnlyWithImmediate  Opcode = 0x05
	opRDMAWriteFirst         Opcode = 0x06
	opRDMAWriteMiddle        Opcode = 0x07
	opRDMAWriteLast          Opcode = 0x08
	opRDMAWriteLastWithImm   Opcode = 0x09
	opRDMAWriteOnly          Opcode = 0x0A
	opRDMAWriteOnlyWithImm   Opcode = 0x0B
	opRDMAReadRequest        Opcode = 0x0C
	opRDMAReadResponseFirst  Opcode = 0x0D
	opRDMAReadResponseMiddle Opcode = 0x0E
	opRDMAReadResponseLast   Opcode = 0x0F
	opRDMAReadResponseOnly   Opcode = 0x10
	opAcknowledge            Opcode = 0x11
	opAtomicAcknowledge      Opcode = 0x12
	opCompareSwap            Opcode = 0x13
	opFetchAdd               Opcode = 0x14
	opSendLastWithInvalidate Opcode = 0x16
	opSendOnlyWithInvalidate Opcode = 0x17
)

// Every RC and UC opcode by name.
const (
	RCSendFirst              = TransportRC | opSendFirst
	RCSendMiddle             = TransportRC | opSendMiddle
	RCSendLast               = TransportRC | opSendLast
	RCSendLastWithImmediate  = TransportRC | opSendLastWithImmediate
	RCSendOnly               = TransportRC | opSendOnly
	RCSendOnlyWithImmediate  = TransportRC | opSendOnlyWithImmediate
	RCRDMAWriteFirst         = TransportRC | opRDMAWriteFirst
	RCRDMAWriteMiddle        = TransportRC | opRDMAWriteMiddle
	RCRDMAWriteLast          = TransportRC | opRDMAWriteLast
	RCRDMAWriteLastWithImm   = TransportRC | opRDMAWriteLastWithImm
	RCRDMAWriteOnly          = TransportRC | opRDMAWriteOnly
	RCRDMAWriteOnlyWithImm   = TransportRC | opRDMAWriteOnlyWithImm
	RCRDMAReadRequest        = TransportRC | opRDMAReadRequest
	RCRDMAReadResponseFirst  = TransportRC | opRDMAReadResponseFirst
	RCRDMAReadResponseMiddle = TransportRC | opRDMAReadResponseMiddle
	RCRDMAReadResponseLast   = TransportRC | opRDMAReadResponseLast
	RCRDMAReadResponseOnly   = TransportRC | opRDMAReadResponseOnly
	RCAcknowledge            = TransportRC | opAcknowledge
	RCAtomicAcknowledge      = TransportRC | opAtomicAcknowledge
	RCCompareSwap            = TransportRC | opCompareSwap
	RCFetchAdd               = TransportRC | opFetchAdd
	RCSendLastWithInvalidate = TransportRC | opSendLastWithInvalidate
	RCSendOnlyWithInvalidate = TransportRC | opSendOnlyWithInvalidate

	UCSendFirst             = TransportUC | opSendFirst
	UCSendMiddle            = TransportUC | opSendMiddle
	UCSendLast              = TransportUC | opSendLast
	UCSendLastWithImmediate = TransportUC | opSendLastWithImmediate
	UCSendOnly              = TransportUC | opSendOnly
	UCSendOnlyWithImmediate = TransportUC | opSendOnlyWithImmediate
	UCRDMAWriteFirst        = TransportUC | opRDMAWriteFirst
	UCRDMAWriteMiddle       = TransportUC | opRDMAWriteMiddle
	UCRDMAWriteLast         = TransportUC | opRDMAWriteLast
	UCRDMAWriteLastWithImm  = TransportUC | opRDMAWriteLastWithImm
	UCRDMAWriteOnly         = TransportUC | opRDMAWriteOnly
	UCRDMAWriteOnlyWithImm  = TransportUC | opRDMAWriteOnlyWithImm

	// CNP is the RoCEv2 congestion notification packet.
	CNP Opcode = 0x81
)

type opInfo struct {
	name  string
	valid bool
	// extra headers after the BTH, in wire order
	reth, imm, aeth, ieth, atomicETH, atomicAckETH bool
	// position in a multi-packet message
	first, middle, last bool
}

var opTable [256]opInfo

func init() {
	ops := []struct {
		op   Opcode
		name string
		info opInfo
	}{
		{opSendFirst, "SEND_FIRST", opInfo{first: true}},
		{opSendMiddle, "SEND_MIDDLE", opInfo{middle: true}},
		{opSendLast, "SEND_LAST", opInfo{last: true}},
		{opSendLastWithImmediate, "SEND_LAST_WITH_IMMEDIATE", opInfo{imm: true, last: true}},
		{opSendOnly, "SEND_ONLY", opInfo{first: true, last: true}},
		{opSendOnlyWithImmediate, "SEND_ONLY_WITH_IMMEDIATE", opInfo{imm: true, first: true, last: true}},
		{opRDMAWriteFirst, "RDMA_WRITE_FIRST", opInfo{reth: true, first: true}},
		{opRDMAWriteMiddle, "RDMA_WRITE_MIDDLE", opInfo{middle: true}},
		{opRDMAWriteLast, "RDMA_WRITE_LAST", opInfo{last: true}},
		{opRDMAWriteLastWithImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", opInfo{imm: true, last: true}},
		{opRDMAWriteOnly, "RDMA_WRITE_ONLY", opInfo{reth: true, first: true, last: true}},
		{opRDMAWriteOnlyWithImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", opInfo{reth: true, imm: true, first: true, last: true}},
	}
	rcOnly := []struct {
		op   Opcode
		name string
		info opInfo
	}{
		{opRDMAReadRequest, "RDMA_READ_REQUEST", opInfo{reth: true, first: true, last: true}},
		{opRDMAReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", opInfo{aeth: true, first: true}},
		{opRDMAReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", opInfo{middle: true}},
		{opRDMAReadResponseLast, "RDMA_READ_RESPONSE_LAST", opInfo{aeth: true, last: true}},
		{opRDMAReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", opInfo{aeth: true, first: true, last: true}},
		{opAcknowledge, "ACKNOWLEDGE", opInfo{aeth: true, first: true, last: true}},
		{opAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", opInfo{aeth: true, atomicAckETH: true, first: true, last: true}},
		{opCompareSwap, "COMPARE_SWAP", opInfo{atomicETH: true, first: true, last: true}},
		{opFetchAdd, "FETCH_ADD", opInfo{atomicETH: true, first: true, last: true}},
		{opSendLastWithInvalidate, "SEND_LAST_WITH_INVALIDATE", opInfo{ieth: true, last: true}},
		{opSendOnlyWithInvalidate, "SEND_ONLY_WITH_INVALIDATE", opInfo{ieth: true, first: true, last: true}},
	}
	for _, o := range ops {
		for _, t := range []struct {
			p Opcode
			n string
		}{{TransportRC, "RC_"}, {TransportUC, "UC_"}} {
			i := o.info
			i.valid = true
			i.name = t.n + o.name
			opTable[t.p|o.op] = i
		}
	}
	for _, o := range rcOnly {
		i := o.info
		i.valid = true
		i.name = "RC_" + o.name
		opTable[TransportRC|o.op] = i
	}
	opTable[CNP] = opInfo{valid: true, name: "CNP", first: true, last: true}
}

// String returns the IBTA name with its transport ("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE").
func (o Opcode) String() string {
	if i := &opTable[o]; i.valid {
		return i.name
	}
	return fmt.Sprintf("Opcode(%#02x)", uint8(o))
}

// Valid reports whether o is an RC or UC opcode, or CNP, that this package
// can parse.
func (o Opcode) Valid() bool { return opTable[o].valid }

// Transport returns the transport prefix (TransportRC, TransportUC, …).
func (o Opcode) Transport() Opcode { return o & 0xE0 }

// HasRETH reports whether a RETH follows the BTH.
func (o Opcode) HasRETH() bool { return opTable[o].reth }

// HasImm reports whether an ImmDt is present.
func (o Opcode) HasImm() bool { return opTable[o].imm }

// HasAETH reports whether an AETH is present.
func (o Opcode) HasAETH() bool { return opTable[o].aeth }

// IsFirst reports whether o starts a message (FIRST or ONLY).
func (o Opcode) IsFirst() bool { return opTable[o].first }

// IsLast reports whether o ends a message (LAST or ONLY).
func (o Opcode) IsLast() bool { return opTable[o].last }

// IsMiddle reports whether o is a MIDDLE packet.
func (o Opcode) IsMiddle() bool { return opTable[o].middle }

// IsRDMAWrite reports whether o is one of the RC or UC RDMA WRITE opcodes.
func (o Opcode) IsRDMAWrite() bool {
	t := o.Transport()
	op := o & 0x1F
	return (t == TransportRC || t == TransportUC) && op >= opRDMAWriteFirst && op <= opRDMAWriteOnlyWithImm
}

// HeadersLen is the length of the extension headers after the BTH.
func (o Opcode) HeadersLen() int {
	i := &opTable[o]
	n := 0
	if i.reth {
		n += RETHSize
	}
	if i.imm || i.ieth {
		n += ImmDtSize
	}
	if i.aeth {
		n += AETHSize
	}
	if i.atomicETH {
		n += AtomicETHSize
	}
	if i.atomicAckETH {
		n += AtomicAckETHSize
	}
	return n
}

// WriteOpcode returns the UC RDMA WRITE opcode for a packet at a position in
// a message: first/last flags, with or without immediate on the last packet.
func WriteOpcode(transport Opcode, first, last, withImm bool) Opcode {
	var op Opcode
	switch {
	case first && last && withImm:
		op = opRDMAWriteOnlyWithImm
	case first && last:
		op = opRDMAWriteOnly
	case first:
		op = opRDMAWriteFirst
	case last && withImm:
		op = opRDMAWriteLastWithImm
	case last:
		op = opRDMAWriteLast
	default:
		op = opRDMAWriteMiddle
	}
	return transport | op
}
