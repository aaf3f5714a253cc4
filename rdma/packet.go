package rdma

import "fmt"

// Packet is a parsed RoCEv2 transport packet: the UDP payload from the BTH to
// the ICRC. Views are nil when the opcode has no such header; they alias the
// parsed buffer. A Packet can be reused: Parse overwrites every field.
type Packet struct {
	BTH     BTH
	RETH    RETH
	ImmDt   ImmDt
	AETH    AETH
	Payload []byte // without pad bytes
	// Pad are the 0–3 pad bytes between the payload and the ICRC.
	Pad  []byte
	ICRC uint32
}

// Parse validates b (a UDP payload: BTH … payload … ICRC) once and sets the
// views. It never panics; errors are ErrTruncated, ErrBadOpcode,
// ErrBadVersion or ErrBadPadCount.
func (p *Packet) Parse(b []byte) error {
	*p = Packet{}
	if len(b) < BTHSize+ICRCSize {
		return ErrTruncated
	}
	bth := BTH(b[:BTHSize])
	op := bth.Opcode()
	if !op.Valid() {
		return ErrBadOpcode
	}
	if bth.TVer() != 0 {
		return ErrBadVersion
	}
	info := &opTable[op]
	n := BTHSize
	end := len(b) - ICRCSize
	if n+op.HeadersLen() > end {
		return ErrTruncated
	}
	if info.reth {
		p.RETH = RETH(b[n : n+RETHSize])
		n += RETHSize
	}
	if info.aeth {
		p.AETH = AETH(b[n : n+AETHSize])
		n += AETHSize
	}
	if info.atomicAckETH {
		n += AtomicAckETHSize
	}
	if info.atomicETH {
		n += AtomicETHSize
	}
	if info.imm {
		p.ImmDt = ImmDt(b[n : n+ImmDtSize])
		n += ImmDtSize
	}
	if info.ieth {
		n += ImmDtSize
	}
	pad := bth.PadCount()
	if n+pad > end {
		return ErrBadPadCount
	}
	p.BTH = bth
	p.Payload = b[n : end-pad]
	p.Pad = b[end-pad : end]
	p.ICRC = StoredICRC(b)
	return nil
}

// PacketFields describe a packet to build: the BTH (its PadCount is derived
// from the payload length), and the RETH / immediate when the opcode has them.
type PacketFields struct {
	BTH  BTHFields
	RETH RETHFields
	Imm  uint32
	AETH AETHFields
}

// PacketLen returns the UDP payload length of a packet with opcode op and n
// payload bytes: headers, payload, pad and ICRC.
func PacketLen(op Opcode, n int) int {
	return BTHSize + op.HeadersLen() + n + padFor(n) + ICRCSize
}

func padFor(n int) int { return (4 - n&3) & 3 }

// Encode writes the headers of f into b and returns the offset where the
// payload of n bytes goes. The caller copies the payload to b[off:off+n] and
// then calls Finish (or ICRC.Seal) with the whole packet b[:PacketLen(op, n)].
func (f *PacketFields) Encode(b []byte, n int) (off int, err error) {
	op := f.BTH.Opcode
	if !op.Valid() {
		return 0, fmt.Errorf("%w: %v", ErrBadOpcode, op)
	}
	total := PacketLen(op, n)
	if len(b) < total {
		return 0, ErrTruncated
	}
	info := &opTable[op]
	bf := f.BTH
	bf.PadCount = padFor(n)
	BTH(b).Encode(&bf)
	off = BTHSize
	if info.reth {
		RETH(b[off:]).Encode(&f.RETH)
		off += RETHSize
	}
	if info.aeth {
		AETH(b[off:]).Encode(&f.AETH)
		off += AETHSize
	}
	if info.atomicAckETH {
		clear(b[off : off+AtomicAckETHSize])
		off += AtomicAckETHSize
	}
	if info.atomicETH {
		clear(b[off : off+AtomicETHSize])
		off += AtomicETHSize
	}
	if info.imm || info.ieth {
		ImmDt(b[off:]).Encode(f.Imm)
		off += ImmDtSize
	}
	clear(b[off+n : total-ICRCSize]) // pad bytes are zero
	return off, nil
}
