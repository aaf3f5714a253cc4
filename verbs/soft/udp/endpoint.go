package udp

import "net/netip"

// Endpoint is the datagram seam of the userspace NIC (verbs/soft) and the
// software switch (aggregation/swswitch): batch-first I/O on caller-owned
// buffers, as wireguard-go's conn.Bind. *Conn is the real one (a UDP
// socket with recvmmsg/sendmmsg and GSO/GRO); verbs/soft/udp/memlink is an
// in-memory one whose links can delay, rate-limit, queue, drop and reorder,
// so tests run the real NIC and the real switch without sockets.
//
// ReadBatch blocks until at least one datagram is there and stores up to
// len(msgs) of them, one packet per Msg, at Buf[Off:] (N and Addr set; a
// datagram longer than its buffer is counted in Stats.RxTruncated and
// dropped); it returns net.ErrClosed after Close, and must be called from
// one goroutine at a time. WriteBatch sends Buf[Off:Off+N] of each Msg to
// its Addr and returns how many it handed on (a datagram the network then
// loses counts as sent); it may be called from several goroutines, and
// neither call keeps a reference to msgs after returning. BatchSize is the
// most datagrams one call moves at once (callers size their batches by it).
// Stats, LocalAddr and Close are safe at any time; Close is idempotent.
type Endpoint interface {
	ReadBatch(msgs []Msg) (int, error)
	WriteBatch(msgs []Msg) (int, error)
	LocalAddr() netip.AddrPort
	BatchSize() int
	Stats() Stats
	Close() error
}

var _ Endpoint = (*Conn)(nil)

// GSOPeers is implemented by endpoints that can send UDP GSO datagrams
// (*Conn): AllowGSO(peer, true) declares that peer cannot see or does not
// check the IPv4 Identification, so GSO is safe towards it over IPv4 too
// (see Offload). The software switch declares the workers whose NIC said
// so at registration, and a worker's userspace NIC declares its switch.
type GSOPeers interface {
	AllowGSO(peer netip.Addr, ok bool)
}

var _ GSOPeers = (*Conn)(nil)

// Lender is implemented by endpoints that receive into memory of their own
// and can hand a packet over where it lies instead of copying it into the
// caller's buffer: a *Conn with GRO, whose 64 KiB datagrams are split into
// packets. ReadLent is ReadBatch, except that a Msg may come back lent:
// its Buf replaced by a slice of the endpoint's memory holding exactly
// that packet (Off 0, so no headroom in front of it). The caller may read
// and write a lent packet until its next ReadBatch or ReadLent call on the
// endpoint and must not keep it beyond that; a Msg that was not lent is
// filled as ReadBatch fills it. Lent or not, the Bufs of msgs are the
// endpoint's to replace: a caller that passes buffers of its own puts
// them back before the next call. Without the copy, a received packet's
// payload is copied once in user space, into its destination (a memory
// region, a switch register), as a NIC's DMA does.
type Lender interface {
	ReadLent(msgs []Msg) (int, error)
}
