package rdma

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Ethernet and IP constants of a RoCEv2 frame.
const (
	EthernetHeaderLen = 14
	EtherTypeIPv4     = 0x0800
	EtherTypeIPv6     = 0x86DD
	ipProtoUDP        = 17
	DefaultTTL        = 64
)

// Encap is the Ethernet / IP / UDP encapsulation of a RoCEv2 packet.
type Encap struct {
	SrcMAC, DstMAC net.HardwareAddr // nil means 00:00:00:00:00:00
	Flow
	TOS       uint8  // IPv4 TOS / IPv6 traffic class (masked in the ICRC)
	TTL       uint8  // hop limit; 0 means DefaultTTL
	FlowLabel uint32 // IPv6
}

// HeaderLen is the length of the Ethernet (if withEthernet), IP and UDP
// headers of e.
func (e *Encap) HeaderLen(withEthernet bool) int {
	n := udpHeaderLen + ipv4HeaderLen
	if !e.Src.Unmap().Is4() {
		n = udpHeaderLen + ipv6HeaderLen
	}
	if withEthernet {
		n += EthernetHeaderLen
	}
	return n
}

// EncodeHeaders writes the encapsulation for a UDP payload of payloadLen
// bytes into b and returns the header length. The IPv4 header checksum is
// computed; the UDP checksum is 0, as rxe and RNICs send it.
func (e *Encap) EncodeHeaders(b []byte, payloadLen int, withEthernet bool) (int, error) {
	hl := e.HeaderLen(withEthernet)
	if len(b) < hl {
		return 0, ErrTruncated
	}
	src, dst := e.Src.Unmap(), e.Dst.Unmap()
	if src.Is4() != dst.Is4() || !src.IsValid() || !dst.IsValid() {
		return 0, fmt.Errorf("rdma: encapsulate %v → %v: addresses must both be IPv4 or both IPv6", e.Src, e.Dst)
	}
	n := 0
	if withEthernet {
		putMAC(b[0:6], e.DstMAC)
		putMAC(b[6:12], e.SrcMAC)
		et := uint16(EtherTypeIPv4)
		if !src.Is4() {
			et = EtherTypeIPv6
		}
		binary.BigEndian.PutUint16(b[12:], et)
		n = EthernetHeaderLen
	}
	ttl := e.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	udpLen := udpHeaderLen + payloadLen
	if src.Is4() {
		ip := b[n : n+ipv4HeaderLen]
		ip[0], ip[1] = 0x45, e.TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], e.IPID)
		var ff uint16
		if e.DF {
			ff = 0x4000
		}
		binary.BigEndian.PutUint16(ip[6:], ff)
		ip[8], ip[9] = ttl, ipProtoUDP
		ip[10], ip[11] = 0, 0
		a4, b4 := src.As4(), dst.As4()
		copy(ip[12:], a4[:])
		copy(ip[16:], b4[:])
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
		n += ipv4HeaderLen
	} else {
		ip := b[n : n+ipv6HeaderLen]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(e.TOS)<<20|e.FlowLabel&0xFFFFF)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = ipProtoUDP, ttl
		a16, b16 := src.As16(), dst.As16()
		copy(ip[8:], a16[:])
		copy(ip[24:], b16[:])
		n += ipv6HeaderLen
	}
	u := b[n : n+udpHeaderLen]
	binary.BigEndian.PutUint16(u[0:], e.SrcPort)
	binary.BigEndian.PutUint16(u[2:], e.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
	return n + udpHeaderLen, nil
}

func putMAC(b []byte, m net.HardwareAddr) {
	if len(m) == 6 {
		copy(b, m)
		return
	}
	clear(b[:6])
}

func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

// Frame is a parsed RoCEv2 frame. IP aliases the buffer from the IP header
// to the end of the ICRC; UDPPayload from the BTH to the end of the ICRC.
type Frame struct {
	Encap
	IP         []byte
	UDPPayload []byte
}

// ParseFrame parses b as Ethernet (if withEthernet) / IPv4 or IPv6 / UDP and
// checks that it is a RoCEv2 datagram (UDP destination port 4791). It does not
// parse the transport headers: use Packet.Parse on UDPPayload. It never
// panics. MAC fields alias b.
func ParseFrame(b []byte, withEthernet bool) (Frame, error) {
	var f Frame
	if withEthernet {
		if len(b) < EthernetHeaderLen {
			return f, ErrTruncated
		}
		f.DstMAC = net.HardwareAddr(b[0:6:6])
		f.SrcMAC = net.HardwareAddr(b[6:12:12])
		et := binary.BigEndian.Uint16(b[12:])
		b = b[EthernetHeaderLen:]
		if len(b) < 1 {
			return f, ErrTruncated
		}
		if (et == EtherTypeIPv4) != (b[0]>>4 == 4) || (et != EtherTypeIPv4 && et != EtherTypeIPv6) {
			return f, fmt.Errorf("%w: ethertype %#04x", ErrNotRoCEv2, et)
		}
	}
	if len(b) < 1 {
		return f, ErrTruncated
	}
	var udp []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < ipv4HeaderLen {
			return f, ErrTruncated
		}
		if b[0]&0x0F != 5 {
			return f, fmt.Errorf("%w: IPv4 header with options (IHL %d)", ErrNotRoCEv2, b[0]&0x0F)
		}
		if b[9] != ipProtoUDP {
			return f, fmt.Errorf("%w: IP protocol %d", ErrNotRoCEv2, b[9])
		}
		tl := int(binary.BigEndian.Uint16(b[2:]))
		if tl < ipv4HeaderLen || tl > len(b) {
			return f, ErrTruncated
		}
		if ff := binary.BigEndian.Uint16(b[6:]); ff&0x3FFF != 0 {
			return f, fmt.Errorf("%w: fragmented IPv4", ErrNotRoCEv2)
		}
		b = b[:tl]
		f.TOS = b[1]
		f.IPID = binary.BigEndian.Uint16(b[4:])
		f.DF = b[6]&0x40 != 0
		f.TTL = b[8]
		f.Src = netip.AddrFrom4([4]byte(b[12:16]))
		f.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		udp = b[ipv4HeaderLen:]
	case 6:
		if len(b) < ipv6HeaderLen {
			return f, ErrTruncated
		}
		if b[6] != ipProtoUDP {
			return f, fmt.Errorf("%w: IPv6 next header %d", ErrNotRoCEv2, b[6])
		}
		pl := int(binary.BigEndian.Uint16(b[4:]))
		if ipv6HeaderLen+pl > len(b) {
			return f, ErrTruncated
		}
		b = b[:ipv6HeaderLen+pl]
		v := binary.BigEndian.Uint32(b[0:])
		f.TOS = uint8(v >> 20)
		f.FlowLabel = v & 0xFFFFF
		f.TTL = b[7]
		f.Src = netip.AddrFrom16([16]byte(b[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		udp = b[ipv6HeaderLen:]
	default:
		return f, ErrBadVersion
	}
	if len(udp) < udpHeaderLen {
		return f, ErrTruncated
	}
	ul := int(binary.BigEndian.Uint16(udp[4:]))
	if ul < udpHeaderLen || ul > len(udp) {
		return f, ErrTruncated
	}
	f.SrcPort = binary.BigEndian.Uint16(udp[0:])
	f.DstPort = binary.BigEndian.Uint16(udp[2:])
	if f.DstPort != UDPPort {
		return f, fmt.Errorf("%w: UDP destination port %d", ErrNotRoCEv2, f.DstPort)
	}
	f.UDPPayload = udp[udpHeaderLen:ul]
	f.IP = b[:len(b)-len(udp)+ul]
	return f, nil
}
