package rdma

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
)

// The ICRC is CRC-32 (IEEE) over
//
//	8 × 0xFF ‖ IP header (masked) ‖ UDP header (checksum = 0xFFFF) ‖
//	BTH (byte 4 = 0xFF) ‖ extension headers ‖ payload ‖ pad
//
// with the masked IP fields set to all ones (IPv4: TOS, TTL, header checksum;
// IPv6: traffic class, flow label, hop limit). The result is appended
// little-endian (the byte order crc32 produces when the value is stored LE).
// The IPv4 Identification is covered, which is why a sender must know it.

const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	// icrcPrefixMax: 8 ones + IPv6 + UDP + BTH.
	icrcPrefixMax = 8 + ipv6HeaderLen + udpHeaderLen + BTHSize
)

// ICRC computes and verifies RoCEv2 invariant CRCs without allocating. The
// zero value is ready to use. It holds scratch space for the masked headers,
// so one ICRC must not be used by two goroutines at once.
type ICRC struct {
	scratch [icrcPrefixMax]byte
}

// Frame returns the ICRC of a RoCEv2 packet that starts at its IP header
// (IPv4 without options, or IPv6 without extension headers) and ends with the
// 4 ICRC bytes, which are not covered.
func (h *ICRC) Frame(ip []byte) (uint32, error) {
	if len(ip) < 1 {
		return 0, ErrTruncated
	}
	var ipLen int
	switch ip[0] >> 4 {
	case 4:
		ipLen = ipv4HeaderLen
		if ip[0]&0x0F != 5 {
			return 0, ErrBadVersion
		}
	case 6:
		ipLen = ipv6HeaderLen
	default:
		return 0, ErrBadVersion
	}
	if len(ip) < ipLen+udpHeaderLen+BTHSize+ICRCSize {
		return 0, ErrTruncated
	}
	s := h.scratch[:8+ipLen+udpHeaderLen+BTHSize]
	for i := 0; i < 8; i++ {
		s[i] = 0xFF
	}
	copy(s[8:], ip[:ipLen+udpHeaderLen+BTHSize])
	maskIP(s[8 : 8+ipLen])
	u := s[8+ipLen:]
	u[6], u[7] = 0xFF, 0xFF
	u[udpHeaderLen+bthResv8a] = 0xFF
	c := UpdateCRC(0, s)
	return UpdateCRC(c, ip[ipLen+udpHeaderLen+BTHSize:len(ip)-ICRCSize]), nil
}

func maskIP(ip []byte) {
	if ip[0]>>4 == 4 {
		ip[1] = 0xFF                // TOS
		ip[8] = 0xFF                // TTL
		ip[10], ip[11] = 0xFF, 0xFF // header checksum
		return
	}
	ip[0] |= 0x0F                          // traffic class (high nibble)
	ip[1], ip[2], ip[3] = 0xFF, 0xFF, 0xFF // traffic class (low nibble), flow label
	ip[7] = 0xFF                           // hop limit
}

// Flow is what a UDP socket knows of a received or sent RoCEv2 datagram: the
// addresses and ports, and for IPv4 the Identification and DF flag, which the
// ICRC covers. A plain UDP socket cannot see a received packet's IPv4 ID; an
// unconnected socket with IP_PMTUDISC_DO sends ID 0 with DF set.
type Flow struct {
	Src, Dst         netip.Addr // both IPv4 or both IPv6 (4-in-6 is unmapped)
	SrcPort, DstPort uint16
	IPID             uint16 // IPv4 only
	DF               bool   // IPv4 only
}

// ICRCHeadroom is the headroom the …Headroom methods need in front of a
// packet: 8 bytes of ones, an IPv6 header and a UDP header.
const ICRCHeadroom = 8 + ipv6HeaderLen + udpHeaderLen

// pseudoLen is the length of the masked pseudo-header for flow f.
func pseudoLen(f *Flow) int {
	if f.Src.Unmap().Is4() {
		return 8 + ipv4HeaderLen + udpHeaderLen
	}
	return 8 + ipv6HeaderLen + udpHeaderLen
}

// writePseudo writes 8 × 0xFF and the masked IP and UDP headers of a RoCEv2
// datagram of udpPayloadLen bytes into s and returns the length written.
func writePseudo(s []byte, f *Flow, udpPayloadLen int) int {
	for i := 0; i < 8; i++ {
		s[i] = 0xFF
	}
	n := 8
	udpLen := udpHeaderLen + udpPayloadLen
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	// The IPv4 form only when both ends are IPv4: a frame from the network
	// can pair an IPv4-mapped address with a real IPv6 one, and that is an
	// IPv6 packet (As4 of the IPv6 end would panic).
	if src.Is4() && dst.Is4() {
		ip := s[n : n+ipv4HeaderLen]
		ip[0], ip[1] = 0x45, 0xFF
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], f.IPID)
		var ff uint16
		if f.DF {
			ff = 0x4000
		}
		binary.BigEndian.PutUint16(ip[6:], ff)
		ip[8], ip[9], ip[10], ip[11] = 0xFF, ipProtoUDP, 0xFF, 0xFF
		a4, b4 := src.As4(), dst.As4()
		copy(ip[12:], a4[:])
		copy(ip[16:], b4[:])
		n += ipv4HeaderLen
	} else {
		ip := s[n : n+ipv6HeaderLen]
		ip[0], ip[1], ip[2], ip[3] = 0x6F, 0xFF, 0xFF, 0xFF
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = ipProtoUDP, 0xFF
		a16, b16 := f.Src.As16(), f.Dst.As16()
		copy(ip[8:], a16[:])
		copy(ip[24:], b16[:])
		n += ipv6HeaderLen
	}
	u := s[n : n+udpHeaderLen]
	binary.BigEndian.PutUint16(u[0:], f.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xFF, 0xFF
	return n + udpHeaderLen
}

// Datagram returns the ICRC of a RoCEv2 UDP payload (BTH … ICRC) sent over
// flow f; the trailing 4 bytes of payload are not covered.
func (h *ICRC) Datagram(f *Flow, payload []byte) (uint32, error) {
	if len(payload) < BTHSize+ICRCSize {
		return 0, ErrTruncated
	}
	s := h.scratch[:]
	n := writePseudo(s, f, len(payload))
	copy(s[n:], payload[:BTHSize])
	s[n+bthResv8a] = 0xFF
	n += BTHSize
	c := UpdateCRC(0, s[:n])
	return UpdateCRC(c, payload[BTHSize:len(payload)-ICRCSize]), nil
}

// DatagramHeadroom is Datagram for a packet at b[off:] with at least
// ICRCHeadroom bytes in front of it, which it overwrites: the whole covered
// range is then hashed in one pass, as fast as a raw CRC of the same bytes.
// The packet itself is left as it was.
func (h *ICRC) DatagramHeadroom(f *Flow, b []byte, off int) (uint32, error) {
	if off < ICRCHeadroom || off > len(b) {
		return 0, ErrTruncated
	}
	payload := b[off:]
	if len(payload) < BTHSize+ICRCSize {
		return 0, ErrTruncated
	}
	pl := pseudoLen(f)
	writePseudo(b[off-pl:off], f, len(payload))
	saved := payload[bthResv8a]
	payload[bthResv8a] = 0xFF
	c := UpdateCRC(0, b[off-pl:len(b)-ICRCSize])
	payload[bthResv8a] = saved
	return c, nil
}

// SealHeadroom is Seal with the headroom of DatagramHeadroom.
func (h *ICRC) SealHeadroom(f *Flow, b []byte, off int) error {
	c, err := h.DatagramHeadroom(f, b, off)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b[len(b)-ICRCSize:], c)
	return nil
}

// VerifyHeadroom is Verify with the headroom of DatagramHeadroom.
func (h *ICRC) VerifyHeadroom(f *Flow, b []byte, off int) error {
	c, err := h.DatagramHeadroom(f, b, off)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(b[len(b)-ICRCSize:]) != c {
		return ErrICRC
	}
	return nil
}

// Seal computes the ICRC of payload (BTH … ICRC) over flow f and stores it in
// the last 4 bytes.
func (h *ICRC) Seal(f *Flow, payload []byte) error {
	c, err := h.Datagram(f, payload)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(payload[len(payload)-ICRCSize:], c)
	return nil
}

// Verify checks the ICRC stored in the last 4 bytes of payload; it returns
// ErrICRC on a mismatch.
func (h *ICRC) Verify(f *Flow, payload []byte) error {
	c, err := h.Datagram(f, payload)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(payload[len(payload)-ICRCSize:]) != c {
		return ErrICRC
	}
	return nil
}

// StoredICRC returns the ICRC in the last 4 bytes of a RoCEv2 payload or frame.
func StoredICRC(b []byte) uint32 {
	return binary.LittleEndian.Uint32(b[len(b)-ICRCSize:])
}

// FlowICRC seals and verifies packets of one fixed flow (a QP's sender
// side, a switch's flow to one worker). The CRC state after the masked
// IP/UDP pseudo-header depends only on the packet length and is cached for
// the last few lengths (a UC message has three: FIRST, MIDDLE, LAST), so a
// packet costs one CRC pass over exactly its own bytes. Not safe for
// concurrent use.
type FlowICRC struct {
	pseudo [8 + ipv6HeaderLen + udpHeaderLen]byte
	n      int // pseudo-header length; 0 until Reset
	v4     bool
	lens   [flowCacheSize]int // packet lengths cached, -1 for none
	crcs   [flowCacheSize]uint32
	next   int // round-robin victim
}

const flowCacheSize = 4

// Reset binds h to flow f.
func (h *FlowICRC) Reset(f *Flow) {
	h.n = writePseudo(h.pseudo[:], f, 0)
	h.v4 = f.Src.Unmap().Is4()
	for i := range h.lens {
		h.lens[i] = -1
	}
}

// Seal computes the ICRC of pkt (BTH … ICRC) and stores it in its last 4
// bytes.
func (h *FlowICRC) Seal(pkt []byte) error {
	c, err := h.sum(pkt)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCSize:], c)
	return nil
}

// Verify checks the ICRC stored in the last 4 bytes of pkt.
func (h *FlowICRC) Verify(pkt []byte) error {
	c, err := h.sum(pkt)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCSize:]) != c {
		return ErrICRC
	}
	return nil
}

// pseudoCRC returns the CRC of the pseudo-header for a packet of n bytes.
func (h *FlowICRC) pseudoCRC(n int) uint32 {
	for i, l := range h.lens {
		if l == n {
			return h.crcs[i]
		}
	}
	udpLen := uint16(udpHeaderLen + n)
	s := h.pseudo[:h.n]
	if h.v4 {
		binary.BigEndian.PutUint16(s[8+2:], uint16(ipv4HeaderLen)+udpLen)
		binary.BigEndian.PutUint16(s[8+ipv4HeaderLen+4:], udpLen)
	} else {
		binary.BigEndian.PutUint16(s[8+4:], udpLen)
		binary.BigEndian.PutUint16(s[8+ipv6HeaderLen+4:], udpLen)
	}
	c := crc32.ChecksumIEEE(s)
	h.lens[h.next], h.crcs[h.next] = n, c
	h.next = (h.next + 1) % flowCacheSize
	return c
}

func (h *FlowICRC) sum(pkt []byte) (uint32, error) {
	if h.n == 0 {
		return 0, fmt.Errorf("rdma: FlowICRC used before Reset")
	}
	if len(pkt) < BTHSize+ICRCSize {
		return 0, ErrTruncated
	}
	pc := h.pseudoCRC(len(pkt))
	saved := pkt[bthResv8a]
	pkt[bthResv8a] = 0xFF
	c := UpdateCRC(pc, pkt[:len(pkt)-ICRCSize])
	pkt[bthResv8a] = saved
	return c, nil
}
