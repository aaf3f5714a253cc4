package switchmodel

import (
	"encoding/binary"
)

// Processor holds, per (slot, set), the vector being summed: int32 lanes,
// or int16 lanes for a job of the 16-bit wire (wire.Job.ElementBytes 2,
// docs/wire-format.md "Payload"). The first contribution overwrites it,
// later ones add lane by lane with wrapping (two's complement modulo 2^32
// or 2^16, as the Tofino ALU), a retransmission only reads. P4:
// p4/rdma_switch Processor (one register action per 4-byte lane).
//
// Vectors are kept as 64-bit words holding the lanes in wire order: the
// word loaded big-endian from payload bytes [8k, 8k+8) has element 2k in its
// high half and 2k+1 in its low half (int32 lanes), or elements 4k … 4k+3
// from the high quarter down (int16 lanes), so a packet is summed with one
// load, one byte swap and a lane-wise add per 8 bytes, and written back the
// same way. Loading and storing do not depend on the lane width; only the
// add does.
type Processor struct {
	stride int      // words per (slot, set)
	vec    []uint64 // [(slot·2 + set)·stride + k]
}

func (p *Processor) init(pool uint32, maxPayload int) {
	p.stride = maxPayload / 8
	p.vec = make([]uint64, int(pool)*2*p.stride)
}

func (p *Processor) clear(lo, hi uint32) {
	clear(p.vec[int(lo)*2*p.stride : int(hi)*2*p.stride])
}

// vector returns the words of (slot, set) for a payload of n bytes.
func (p *Processor) vector(slot uint32, set uint8, n int) []uint64 {
	base := (int(slot)*2 + int(set)) * p.stride
	return p.vec[base : base+n/8]
}

// Process adds payload (big-endian int32, the job's packet size) into the
// packet's slot.
func (p *Processor) Process(payload []byte, md *Metadata) {
	if md.Retransmission {
		return
	}
	v := p.vector(md.slot, md.set, len(payload))
	switch {
	case md.FirstContribution:
		load(v, payload)
	case md.job.lanes16:
		accumulate16(v, payload)
	default:
		accumulate(v, payload)
	}
}

// Values returns element i of the (slot, set) vector (for tests).
func (p *Processor) Value(slot uint32, set uint8, i int) int32 {
	w := p.vec[(int(slot)*2+int(set))*p.stride+i/2]
	if i&1 == 0 {
		return int32(w >> 32)
	}
	return int32(w)
}

// Value16 returns int16 element i of the (slot, set) vector of a 16-bit
// job (for tests).
func (p *Processor) Value16(slot uint32, set uint8, i int) int16 {
	w := p.vec[(int(slot)*2+int(set))*p.stride+i/4]
	return int16(w >> (16 * (3 - i&3)))
}

const (
	laneHigh   = 0x8000_0000_8000_0000
	laneHigh16 = 0x8000_8000_8000_8000
)

// add2 adds two pairs of int32 lanes with wrapping and no carry between
// lanes: the low 31 bits of each lane cannot carry out of the lane, and the
// top bit is the sum's parity.
func add2(a, b uint64) uint64 {
	return ((a &^ laneHigh) + (b &^ laneHigh)) ^ ((a ^ b) & laneHigh)
}

// add4 adds four int16 lanes with wrapping and no carry between lanes, as
// add2 does for int32 lanes.
func add4(a, b uint64) uint64 {
	return ((a &^ laneHigh16) + (b &^ laneHigh16)) ^ ((a ^ b) & laneHigh16)
}

func loadGeneric(v []uint64, b []byte) {
	b = b[:len(v)*8]
	for k := range v {
		v[k] = binary.BigEndian.Uint64(b[8*k:])
	}
}

func accumulateGeneric(v []uint64, b []byte) {
	b = b[:len(v)*8]
	for k := range v {
		v[k] = add2(v[k], binary.BigEndian.Uint64(b[8*k:]))
	}
}

func accumulate16Generic(v []uint64, b []byte) {
	b = b[:len(v)*8]
	for k := range v {
		v[k] = add4(v[k], binary.BigEndian.Uint64(b[8*k:]))
	}
}

func storeGeneric(b []byte, v []uint64) {
	b = b[:len(v)*8]
	for k, w := range v {
		binary.BigEndian.PutUint64(b[8*k:], w)
	}
}

// NextStep turns the controls' flags into a decision: a new contribution
// that is not the last is consumed, the last one is broadcast, a
// retransmission into a completed slot is answered to its sender alone, one
// into an incomplete slot is dropped. P4: p4/rdma_switch NextStep.
type NextStep struct{}

// Decide sets md.Decision (and md.Reason for a drop).
func (NextStep) Decide(md *Metadata) {
	switch {
	case md.Retransmission && md.Complete:
		md.Decision = Unicast
	case md.Retransmission:
		md.Decision = Drop
		md.Reason = DropRetransmitIncomplete
	case md.LastContribution:
		md.Decision = Broadcast
	default:
		md.Decision = Consume
	}
}
