package rdma

import (
	"net/netip"
)

// GID is a 128-bit RoCE global identifier. A RoCEv2 GID is the IP address of
// the netdev: IPv6 as is, IPv4 as an IPv4-mapped IPv6 address (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address of a RoCEv2 GID, unmapped for IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats g like the kernel's sysfs gids files (eight colon-separated
// groups of four hex digits).
func (g GID) String() string {
	const hex = "0123456789abcdef"
	var b [39]byte
	n := 0
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b[n] = ':'
			n++
		}
		b[n], b[n+1], b[n+2], b[n+3] = hex[g[i]>>4], hex[g[i]&15], hex[g[i+1]>>4], hex[g[i+1]&15]
		n += 4
	}
	return string(b[:n])
}

// ParseGID parses a GID in the sysfs form or any IPv6 textual form.
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return GID{}, err
	}
	return GID(a.As16()), nil
}
