package control

// Registration parsing: one RdmaSession request, checked on its own before
// it meets the other ranks (rendezvous.go). Each part of the request has
// its own function, run in this order; the first part that fails names
// the problem and its fix (docs/control-plane.md "Validation"):
//
//	parseWorkers      num_workers, rank
//	parseQPs          qpns, psns: how many, how wide, no QPN twice
//	parsePacketSize   packet_size_bytes, or p4app's packet_size
//	parseMessageSize  message_size, and the pool slots the job needs
//	parseReduction    dtype, op, wire_bits
//	parseAddress      gid or ipv4, mac
//
// Every count is bounded by what this switch serves before anything is
// sized by it.

import (
	"encoding/binary"
	"math/bits"
	"net"
	"net/netip"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// parseRegistration validates one request on its own, part by part in the
// order of the file's header, and builds the rank's registration and the
// parameters its session must agree on.
func (c *Controller) parseRegistration(req *pb.RdmaSessionRequest) (*registration, sessionParams, error) {
	sid := req.GetSessionId()
	fail := func(err error) (*registration, sessionParams, error) { return nil, sessionParams{}, err }
	n, rank, err := c.parseWorkers(sid, req)
	if err != nil {
		return fail(err)
	}
	q, err := c.parseQPs(sid, req, n, rank)
	if err != nil {
		return fail(err)
	}
	size, err := parsePacketSize(sid, req, rank)
	if err != nil {
		return fail(err)
	}
	msg, err := c.parseMessageSize(sid, req, rank, q, size)
	if err != nil {
		return fail(err)
	}
	dt, eb, err := parseReduction(sid, req, rank, n)
	if err != nil {
		return fail(err)
	}
	addr, mac, err := c.parseAddress(sid, req, rank)
	if err != nil {
		return fail(err)
	}
	reg := &registration{
		rank: rank,
		addr: addr,
		mac:  mac,
		rkey: req.GetRkey(),
		qpns: slices.Clone(req.GetQpns()),
		psns: slices.Clone(req.GetPsns()),

		ignoresIPv4ID:     req.GetIgnoresIpv4Id(),
		needsPacketWrites: req.GetNeedsPacketWrites(),
		gapNotices:        req.GetGapNotices(),
	}
	return reg, sessionParams{numWorkers: n, packetSize: size, messageSize: msg, qps: q, dtype: dt, elementBytes: eb, v6: addr.Is6(),
		tensorBytes: req.GetTensorBytes(), p4app: req.GetPacketSizeBytes() == 0}, nil
}

// invalid is a request's INVALID_ARGUMENT: the message names the session
// first, as every RdmaSession error does.
func invalid(sid uint32, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "session %d: "+format, append([]any{sid}, args...)...)
}

// parseWorkers reads who the caller is: the job's worker count, bounded by
// MaxWorkers before anything is sized by it, and its rank among them.
func (c *Controller) parseWorkers(sid uint32, req *pb.RdmaSessionRequest) (n, rank int, err error) {
	n64 := uint64(req.GetNumWorkers())
	if n64 == 0 {
		return 0, 0, invalid(sid, "num_workers is 0: pass the job's worker count (at least 1)")
	}
	if n64 > uint64(c.cfg.MaxWorkers) {
		return 0, 0, invalid(sid, "num_workers %d: this switch serves at most %d workers per job", n64, c.cfg.MaxWorkers)
	}
	n = int(n64)
	rank = int(req.GetRank())
	if rank >= n {
		return 0, 0, invalid(sid, "rank %d is out of range for %d workers: ranks are 0..%d", rank, n, n-1)
	}
	return c.mapRank(sid, n, rank)
}

// parseQPs checks the rank's QPs and returns how many it has: at least
// one, each with a PSN; a job of n ranks with as many QPs each fits
// MaxPendingQPs (and, with Tofino QPNs, the encoding's bounds, which
// drawSwitchQPs relies on); QPNs and PSNs are 24-bit, and no QPN comes
// twice (the switch would answer one QP for the other).
func (c *Controller) parseQPs(sid uint32, req *pb.RdmaSessionRequest, n, rank int) (int, error) {
	q := len(req.GetQpns())
	if q == 0 {
		return 0, invalid(sid, "rank %d sent no QPNs: a worker needs at least one QP", rank)
	}
	if len(req.GetPsns()) != q {
		return 0, invalid(sid, "rank %d sent %d QPNs but %d PSNs: send one PSN per QP", rank, q, len(req.GetPsns()))
	}
	if uint64(n)*uint64(q) > uint64(c.cfg.MaxPendingQPs) {
		return 0, invalid(sid, "%d workers × %d QPs: the controller holds at most %d QPs per job; use fewer QPs", n, q, c.cfg.MaxPendingQPs)
	}
	if c.cfg.QPNScheme == QPNP4App && (n > wire.MaxP4AppWorkers || q > wire.MaxP4AppQPs) {
		return 0, invalid(sid, "%d workers × %d QPs: the Tofino QPN encoding holds %d workers and %d QPs per worker; use fewer, or the software switch", n, q, wire.MaxP4AppWorkers, wire.MaxP4AppQPs)
	}
	seen := make(map[uint32]int, q)
	for i, v := range req.GetQpns() {
		if v > rdma.QPNMask {
			return 0, invalid(sid, "rank %d: QPN %#x of QP %d has more than 24 bits", rank, v, i)
		}
		if first, dup := seen[v]; dup {
			return 0, invalid(sid, "rank %d: QPs %d and %d both have QPN %#x; send each QP's own QPN", rank, first, i, v)
		}
		seen[v] = i
	}
	for i, v := range req.GetPsns() {
		if v > rdma.PSNMask {
			return 0, invalid(sid, "rank %d: PSN %#x of QP %d has more than 24 bits", rank, v, i)
		}
	}
	return q, nil
}

// parsePacketSize is the payload bytes per packet: packet_size_bytes, or,
// from a p4app-switchML worker that does not send it, the packet_size
// enum; either must be a size the switch takes (wire.CheckPacketSize).
func parsePacketSize(sid uint32, req *pb.RdmaSessionRequest, rank int) (int, error) {
	size := int(req.GetPacketSizeBytes())
	if size == 0 {
		switch req.GetPacketSize() {
		case pb.PacketSize_MTU_128:
			size = 128
		case pb.PacketSize_MTU_256:
			size = 256
		case pb.PacketSize_MTU_512:
			size = 512
		case pb.PacketSize_MTU_1024:
			size = 1024
		default:
			return 0, invalid(sid, "rank %d: unknown packet_size %d: use MTU_256, MTU_512, MTU_1024 or packet_size_bytes", rank, req.GetPacketSize())
		}
	}
	if err := wire.CheckPacketSize(size); err != nil {
		return 0, invalid(sid, "rank %d: %v", rank, err)
	}
	return size, nil
}

// parseMessageSize is the bytes per message: a power-of-two multiple of
// the packet size (wire.MessagePackets), and small enough that the job's
// q QPs, one pool slot per packet of a message each, fit the pool.
func (c *Controller) parseMessageSize(sid uint32, req *pb.RdmaSessionRequest, rank, q, size int) (int, error) {
	msg := int(req.GetMessageSize())
	if msg == 0 {
		return 0, invalid(sid, "rank %d: message_size is 0: pass bytes per message, a power-of-two multiple of the packet size (e.g. %d)", rank, 16*size)
	}
	if _, err := wire.MessagePackets(msg, size); err != nil {
		lower := size
		if k := msg / size; k > 1 {
			lower = size << (bits.Len(uint(k)) - 1)
		}
		return 0, invalid(sid, "rank %d: message_size %d is not a power-of-two multiple of the %d-byte packet size (e.g. %d or %d)", rank, msg, size, lower, 2*lower)
	}
	if need := uint64(q) * uint64(msg/size); need > uint64(c.cfg.PoolSize) {
		return 0, invalid(sid, "rank %d: the job needs %d slots (%d QPs × %d packets per message) but the switch's pool has %d; use fewer QPs or smaller messages",
			rank, need, q, msg/size, c.cfg.PoolSize)
	}
	return msg, nil
}

// parseReduction is the element type and its width on the wire
// (wire_bits: 0 or 32 = int32 lanes, 16 = int16 lanes, returned as
// wire.Job.ElementBytes); the switch only sums. int32 needs 32-bit lanes,
// and the 16-bit wire's headroom holds wire.MaxWire16Workers workers
// (docs/wire-format.md "Payload").
func parseReduction(sid uint32, req *pb.RdmaSessionRequest, rank, n int) (wire.DType, uint8, error) {
	var dt wire.DType
	switch req.GetDtype() {
	case pb.DataType_DATA_TYPE_FLOAT32:
		dt = wire.Float32
	case pb.DataType_DATA_TYPE_INT32:
		dt = wire.Int32
	default:
		return 0, 0, invalid(sid, "rank %d: unknown dtype %d: use DATA_TYPE_FLOAT32 or DATA_TYPE_INT32", rank, req.GetDtype())
	}
	if req.GetOp() != pb.ReduceOp_REDUCE_OP_SUM {
		return 0, 0, invalid(sid, "rank %d: unknown op %d: the switch only sums (REDUCE_OP_SUM)", rank, req.GetOp())
	}
	switch bits := req.GetWireBits(); bits {
	case 0, 32:
		return dt, 4, nil
	case 16:
		if dt == wire.Int32 {
			return 0, 0, invalid(sid, "rank %d: wire_bits 16 with DATA_TYPE_INT32: int32 needs the 32-bit wire", rank)
		}
		if n > wire.MaxWire16Workers {
			return 0, 0, invalid(sid, "%d workers: the 16-bit wire holds at most %d workers; use the 32-bit wire", n, wire.MaxWire16Workers)
		}
		return dt, 2, nil
	default:
		return 0, 0, invalid(sid, "rank %d: wire_bits %d: the wire carries 32-bit or 16-bit elements", rank, bits)
	}
}

// parseAddress is where the switch sends the rank's results: its RoCE
// address (gid, or ipv4 as p4app-switchML workers send it), of a family
// the switch has an address of (checkFamily), and its MAC.
func (c *Controller) parseAddress(sid uint32, req *pb.RdmaSessionRequest, rank int) (netip.Addr, net.HardwareAddr, error) {
	var addr netip.Addr
	switch gid := req.GetGid(); {
	case len(gid) == 16:
		addr = netip.AddrFrom16([16]byte(gid)).Unmap()
	case len(gid) != 0:
		return netip.Addr{}, nil, invalid(sid, "rank %d: gid has %d bytes; a RoCEv2 GID is 16 bytes", rank, len(gid))
	case req.GetIpv4() != 0:
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], req.GetIpv4())
		addr = netip.AddrFrom4(b)
	default:
		return netip.Addr{}, nil, invalid(sid, "rank %d sent no address: set ipv4 (field 5) or gid (field 100) to the worker NIC's address", rank)
	}
	if addr.IsUnspecified() {
		return netip.Addr{}, nil, invalid(sid, "rank %d: address %v is unspecified; pass the worker NIC's address", rank, addr)
	}
	if err := c.checkFamily(sid, rank, addr); err != nil {
		return netip.Addr{}, nil, err
	}
	if req.GetMac()>>48 != 0 {
		return netip.Addr{}, nil, invalid(sid, "rank %d: mac %#x has more than 48 bits", rank, req.GetMac())
	}
	return addr, macFromUint64(req.GetMac()), nil
}

// checkFamily: the switch answers a rank from its own address of the
// rank's family, so it needs one. FAILED_PRECONDITION: the request is
// fine, the switch is not set up for it.
func (c *Controller) checkFamily(sid uint32, rank int, addr netip.Addr) error {
	if addr.Is6() && !c.cfg.SwitchIPv6.IsValid() {
		return status.Errorf(codes.FailedPrecondition,
			"session %d: rank %d registered IPv6 address %v but the switch has no IPv6 address; give the switch one or use IPv4 workers", sid, rank, addr)
	}
	if !addr.Is6() && !c.cfg.SwitchIPv4.IsValid() {
		return status.Errorf(codes.FailedPrecondition,
			"session %d: rank %d registered IPv4 address %v but the switch has no IPv4 address; give the switch one or use IPv6 workers", sid, rank, addr)
	}
	return nil
}

// macFromUint64 and macToUint64 convert between a MAC and the wire's
// encoding of one: the low 48 bits of a uint64, as p4app-switchML sends it.
func macFromUint64(v uint64) net.HardwareAddr {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return net.HardwareAddr(slices.Clone(b[2:]))
}

func macToUint64(m net.HardwareAddr) uint64 {
	if len(m) != 6 {
		return 0
	}
	var b [8]byte
	copy(b[2:], m)
	return binary.BigEndian.Uint64(b[:])
}
