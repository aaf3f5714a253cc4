package udp

import "fmt"

// Offload selects the kernel's UDP segmentation offloads.
//
// GSO (UDP_SEGMENT) hands the kernel a run of equal-size packets to one
// address (the last may be shorter) as one datagram, which it cuts into the
// same packets; GRO (UDP_GRO) lets the kernel deliver such a run as one
// datagram with its segment size. On loopback a GSO datagram sent to a GRO
// socket is never cut at all, so most per-packet kernel work disappears.
// The packets themselves are the same bytes as without offload.
//
// One caveat decides OffloadAuto: when the kernel cuts an IPv4 GSO datagram
// (on its way out of a real interface, or into a socket without GRO), it
// numbers the segments' IPv4 Identification 0, 1, 2, … where a plain send
// gives every packet 0. The RoCEv2 ICRC covers the Identification, so a
// receiver that can see it (rxe, a real RNIC) would reject all but the
// first segment. Over IPv6 there is no Identification, and on loopback only
// UDP sockets receive, which cannot see it either. Neither can a peer that
// reads RoCEv2 from a UDP socket on a real link (the software switch, the
// userspace NIC), and the Tofino program never parses the ICRC: such peers
// are declared one by one with Conn.AllowGSO (GSOPeers).
type Offload uint8

const (
	// OffloadAuto receives with GRO when the kernel supports it, and sends
	// with GSO when the kernel supports it and the local address is IPv6
	// or loopback, or the peer was declared with AllowGSO (see Offload).
	// Otherwise plain recvmmsg/sendmmsg.
	OffloadAuto Offload = iota
	// OffloadOff uses plain recvmmsg/sendmmsg.
	OffloadOff
	// OffloadOn uses GSO and GRO whatever the address family; Listen fails
	// with an error wrapping verbs.ErrNotSupported if the kernel has
	// neither. For tests and for peers known to ignore the IPv4
	// Identification.
	OffloadOn
)

func (o Offload) String() string {
	switch o {
	case OffloadAuto:
		return "auto"
	case OffloadOff:
		return "off"
	case OffloadOn:
		return "on"
	}
	return fmt.Sprintf("Offload(%d)", uint8(o))
}

// DefaultSocketBuffer is SO_RCVBUF/SO_SNDBUF when Config.SocketBuffer is 0.
const DefaultSocketBuffer = 4 << 20
