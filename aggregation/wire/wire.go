// Package wire is the SwitchML-over-RoCEv2 wire contract between workers and
// the switch: how the RETH rkey carries the pool index and set, how the
// 32-bit immediate carries the message id and block exponents, how switch
// QPNs are encoded for the Tofino program, and the Job description the
// controller hands to a switch backend.
//
// Everything here is a pure function or a plain value; safe for concurrent
// use. The Tofino program (p4/rdma_switch) mirrors these encodings; the
// comments there name the functions below.
package wire

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// PoolIndex is the overloaded RETH rkey of a worker → switch write: bit 0 is
// the set (shadow copy), bits above it are the slot. Packet k of a message
// uses PoolIndex + 2k, i.e. slot + k in the same set.
type PoolIndex uint32

// MakePoolIndex encodes slot and set (0 or 1).
func MakePoolIndex(slot uint32, set uint8) PoolIndex { return PoolIndex(slot<<1 | uint32(set&1)) }

// Slot is the aggregation slot the index names.
func (p PoolIndex) Slot() uint32 { return uint32(p) >> 1 }

// Set is the shadow-copy set, 0 or 1.
func (p PoolIndex) Set() uint8 { return uint8(p & 1) }

// Add returns the pool index of packet k of a message starting at p.
func (p PoolIndex) Add(k int) PoolIndex { return p + PoolIndex(2*k) }

// Imm is the 32-bit immediate of a SwitchML write: [31:16] message id
// (opaque, echoed), [15:8] e0, [7:0] e1 (signed 8-bit block exponents).
// Workers send e0 = the exponent of the next message the QP will send; the
// switch returns the maximum over the workers of each field.
type Imm uint32

// MakeImm packs a message id and two exponents.
func MakeImm(msgID uint16, e0, e1 int8) Imm {
	return Imm(uint32(msgID)<<16 | uint32(uint8(e0))<<8 | uint32(uint8(e1)))
}

func (i Imm) MsgID() uint16 { return uint16(i >> 16) }
func (i Imm) E0() int8      { return int8(uint8(i >> 8)) }
func (i Imm) E1() int8      { return int8(uint8(i)) }

// WithExponents replaces the exponent fields, keeping the message id.
func (i Imm) WithExponents(e0, e1 int8) Imm { return MakeImm(i.MsgID(), e0, e1) }

// Message ids (ext, opaque to the switch, which echoes them). Bit 15 clear:
// a whole message, a 15-bit sequence number (MsgIDMask) that advances per
// message on a QP. Bit 15 set (PacketMsgIDFlag): one packet of a message
// resent alone as a UC WRITE ONLY WITH IMMEDIATE (per-packet loss
// recovery, docs/protocol.md): the low 15−bits bits of the message's id,
// then the packet's index k in the message in bits bits, 2^bits ≥ the
// packets per message. The switch answers such a packet, like any
// one-packet message, with a one-packet result carrying the same id, so a
// worker can tell which packet of which message came back.
const (
	MsgIDMask       = 0x7FFF
	PacketMsgIDFlag = 0x8000
	// MaxPacketIDBits bounds bits: at least 15−MaxPacketIDBits bits of the
	// message id remain to tell a late answer from a current one.
	MaxPacketIDBits = 6
)

// PacketMsgID is the message id of packet k of message msgID.
func PacketMsgID(msgID uint16, k int, bits uint) uint16 {
	return PacketMsgIDFlag | (msgID<<bits)&MsgIDMask | uint16(k)&(1<<bits-1)
}

// PacketIndex is the packet index of a PacketMsgID with the same bits.
func PacketIndex(id uint16, bits uint) int { return int(id & (1<<bits - 1)) }

// Gap notices and tail probes (ext, opt-in per job: Job.GapNotices;
// docs/protocol.md "Gap notices"). A switch that sees a worker's packet
// write arrive with a PSN beyond the next one it expected on that QP knows
// the packets in between were lost on the way up, and tells that worker at
// once with a zero-length UC RDMA WRITE ONLY WITH IMMEDIATE on the QP's
// result stream: the immediate echoes the arriving packet's message id, e0
// holds how many packets were lost just before it (at most MaxNoticeGap),
// e1 is 1 when the arriving packet was a tail probe whose worker's
// contribution is missing from its slot, else 0. A tail probe is a packet
// write without payload after the last packet of a transmission, so that
// the switch sees its PSN; it adds nothing and is never answered with a
// result. A zero-length write moves no bytes (the responder checks no rkey
// for it, IBA C9-88) and one with an immediate consumes one posted
// receive; a notice's completion carries byte length 0, which no result
// has.
const MaxNoticeGap = 127

// GapNotice is the immediate of a gap notice: gap packets were lost just
// before the packet with message id msgID, and missing says that packet
// was a tail probe whose worker's contribution its slot lacks.
func GapNotice(msgID uint16, gap uint32, missing bool) Imm {
	var e1 int8
	if missing {
		e1 = 1
	}
	return MakeImm(msgID, int8(min(gap, MaxNoticeGap)), e1)
}

// ResultProbe is e1 of a result probe: a tail probe (a packet write
// without payload) that asks for its slot's result. The switch answers it
// like a resend of the packet — with the result when the slot is complete,
// with nothing while it is not — and, like any tail probe, with a notice
// when the worker's contribution is missing. A worker sends one instead of
// a resend when its only evidence is a result that is late, which at scale
// is mostly another worker's repair delaying the slot.
const ResultProbe int8 = 2

// Gap is the lost packets a gap notice's immediate counts.
func (i Imm) Gap() int { return int(uint8(i.E0())) }

// Missing says a gap notice answers a tail probe whose worker's
// contribution its slot lacks.
func (i Imm) Missing() bool { return i.E1() == 1 }

// P4AppQPN is the switch QPN p4app-switchML (and our Tofino program) assigns
// to QP i of worker rank: 0x800000 | rank<<16 | i, 5 rank bits and 9 QP bits.
func P4AppQPN(rank, i int) (uint32, error) {
	if rank < 0 || rank >= MaxP4AppWorkers || i < 0 || i >= MaxP4AppQPs {
		return 0, fmt.Errorf("wire: rank %d, QP %d: the Tofino QPN encoding holds %d workers × %d QPs", rank, i, MaxP4AppWorkers, MaxP4AppQPs)
	}
	return 0x800000 | uint32(rank)<<16 | uint32(i), nil
}

// P4AppQPNDecode splits a P4AppQPN; ok is false if qpn is not of that form.
func P4AppQPNDecode(qpn uint32) (rank, i int, ok bool) {
	if qpn&0xE00000 != 0x800000 || qpn&0x00FE00 != 0 {
		return 0, 0, false
	}
	return int(qpn>>16) & 0x1F, int(qpn & 0x1FF), true
}

const (
	MaxP4AppWorkers = 32
	MaxP4AppQPs     = 512
)

// DType is the element type of a job's tensors.
type DType uint8

const (
	Float32 DType = iota // quantized to int32 with block floating point
	Int32                // exact
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int32:
		return "int32"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// ParseDType accepts "float32" and "int32".
func ParseDType(s string) (DType, error) {
	switch s {
	case "float32", "f32":
		return Float32, nil
	case "int32", "i32":
		return Int32, nil
	}
	return 0, fmt.Errorf("dtype %q: use float32 or int32", s)
}

// PacketSizes are the payload sizes the software switch supports; the Tofino
// program supports 256 (and 1024 with recirculation, see docs/p4.md).
var PacketSizes = []int{256, 512, 1024, 2048, 4096}

// CheckPacketSize returns an error naming the supported sizes.
func CheckPacketSize(n int) error {
	for _, s := range PacketSizes {
		if n == s {
			return nil
		}
	}
	return fmt.Errorf("packet size %d: supported payload sizes are 256, 512, 1024, 2048 and 4096 bytes", n)
}

// Worker is one worker of a job as the switch must know it.
type Worker struct {
	Rank int
	Addr netip.Addr       // the worker NIC's IP (RoCEv2 GID)
	MAC  net.HardwareAddr // the worker NIC's MAC (for the Tofino program)
	RKey uint32           // rkey of the worker's zero-based receive MR
	// QPNs are the worker's QPNs, index i = QP i; results for QP i go there.
	QPNs []uint32
	// PSNs are the first PSNs the switch uses towards each worker QP.
	PSNs []uint32
	// SwitchQPNs are the switch QPNs the worker's QP i writes to.
	SwitchQPNs []uint32
	// IgnoresIPv4ID: the worker's NIC cannot see the IPv4 Identification
	// of the packets it receives (a userspace NIC on a UDP socket), so a
	// software switch may send it UDP GSO datagrams (udp.GSOPeers). The
	// Tofino program ignores it.
	IgnoresIPv4ID bool
}

// Job is a session as the controller hands it to a switch backend.
type Job struct {
	ID         uint32
	DType      DType
	PacketSize int // payload bytes per packet
	// ElementBytes is the width of one payload element (docs/wire-format.md
	// "Payload"): 0 or 4 = big-endian int32 lanes, 2 = big-endian int16
	// lanes summed with 16-bit wrapping adds. Lanes reports it as 2 or 4.
	ElementBytes uint8
	// Pool: the job owns slots [PoolBase, PoolBase+PoolSlots); pool indices
	// (rkeys) outside that range are dropped.
	PoolBase  uint32
	PoolSlots uint32
	Workers   []Worker // index = rank
	// GapNotices: every worker of the job takes gap notices (see
	// GapNotice); a switch that can sends one to a worker whose packet
	// write arrives after a PSN gap. The Tofino program sends none.
	GapNotices bool
}

// Clone returns a deep copy of j: no slice of the copy shares memory with
// j, so a switch backend may keep the copy while the controller goes on
// changing (or reusing) its own.
func (j *Job) Clone() Job {
	c := *j
	c.Workers = make([]Worker, len(j.Workers))
	for i, w := range j.Workers {
		w.MAC = slices.Clone(w.MAC)
		w.QPNs = slices.Clone(w.QPNs)
		w.PSNs = slices.Clone(w.PSNs)
		w.SwitchQPNs = slices.Clone(w.SwitchQPNs)
		c.Workers[i] = w
	}
	return c
}

// LaneBytes is the job's element width on the wire, 2 or 4 bytes
// (ElementBytes, with 0 meaning 4).
func (j *Job) LaneBytes() int {
	if j.ElementBytes == 0 {
		return 4
	}
	return int(j.ElementBytes)
}

// MaxWire16Workers is the most workers of a 16-bit-wire job: each worker's
// int16 input keeps ⌈log2 n⌉ bits of headroom so that the sum of n inputs
// cannot wrap (docs/quantization.md), which leaves at least one bit of
// magnitude at n = 2^14.
const MaxWire16Workers = 1 << 14

// ErrBadJob is wrapped by Validate.
var ErrBadJob = errors.New("invalid job")

// ErrElementWidth is wrapped by a switch backend's AddJob when it cannot
// aggregate the job's element width (Job.ElementBytes): the Tofino program
// without a 16-bit profile refuses a 16-bit job.
var ErrElementWidth = errors.New("element width not supported by the switch")

// Validate checks the job's internal consistency.
func (j *Job) Validate() error {
	if len(j.Workers) == 0 {
		return fmt.Errorf("job %d: %w: no workers", j.ID, ErrBadJob)
	}
	if err := CheckPacketSize(j.PacketSize); err != nil {
		return fmt.Errorf("job %d: %w: %v", j.ID, ErrBadJob, err)
	}
	if j.PoolSlots == 0 {
		return fmt.Errorf("job %d: %w: empty pool", j.ID, ErrBadJob)
	}
	switch j.ElementBytes {
	case 0, 4:
	case 2:
		if j.DType == Int32 {
			return fmt.Errorf("job %d: %w: int32 needs 4-byte elements, not 2", j.ID, ErrBadJob)
		}
		if len(j.Workers) > MaxWire16Workers {
			return fmt.Errorf("job %d: %w: %d workers; the 16-bit wire holds %d", j.ID, ErrBadJob, len(j.Workers), MaxWire16Workers)
		}
	default:
		return fmt.Errorf("job %d: %w: element width %d bytes; the wire has 2 or 4", j.ID, ErrBadJob, j.ElementBytes)
	}
	q := len(j.Workers[0].QPNs)
	for r, w := range j.Workers {
		if w.Rank != r {
			return fmt.Errorf("job %d: %w: worker at index %d has rank %d", j.ID, ErrBadJob, r, w.Rank)
		}
		if !w.Addr.IsValid() {
			return fmt.Errorf("job %d: %w: worker %d has no address", j.ID, ErrBadJob, r)
		}
		if len(w.QPNs) != q || len(w.PSNs) != q || len(w.SwitchQPNs) != q || q == 0 {
			return fmt.Errorf("job %d: %w: worker %d has %d QPNs, %d PSNs, %d switch QPNs; every worker needs the same non-zero count", j.ID, ErrBadJob, r, len(w.QPNs), len(w.PSNs), len(w.SwitchQPNs))
		}
	}
	return nil
}
