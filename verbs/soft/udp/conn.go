package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/rdma"
	"golang.org/x/sys/unix"
)

// DefaultBatchSize is the number of datagrams moved per system call.
const DefaultBatchSize = 64

// udpNoCheck6Rx is UDP_NO_CHECK6_RX from linux/udp.h.
const udpNoCheck6Rx = 102

// Config configures an endpoint.
type Config struct {
	// Addr is the local address to bind (IPv4 or IPv6, not unspecified).
	Addr netip.Addr
	// Port defaults to 4791 (RoCEv2).
	Port int
	// BatchSize is the most datagrams per recvmmsg/sendmmsg (default 64).
	BatchSize int
	// SocketBuffer sets SO_RCVBUF and SO_SNDBUF in bytes (default 4 MiB;
	// forced past rmem_max when running as root).
	SocketBuffer int
	// Capture, when set, receives a copy of every datagram sent and received.
	Capture *Capture
	// RecvLoss and SendLoss drop that fraction of datagrams (0 ≤ p < 1)
	// after receiving and instead of sending, from a generator seeded with
	// Seed. For tests and demos.
	RecvLoss, SendLoss float64
	Seed               uint64
}

// Msg is one datagram of a batch: its bytes are Buf[Off:Off+N]. For
// ReadBatch the datagram is stored at Buf[Off:] and N and Addr are set; for
// WriteBatch Buf[Off:Off+N] is sent to Addr. Off leaves headroom in front of
// the datagram (rdma.ICRCHeadroom lets the ICRC be computed in one pass).
type Msg struct {
	Buf  []byte
	Off  int
	N    int
	Addr netip.AddrPort
}

// Bytes returns the datagram, Buf[Off:Off+N].
func (m *Msg) Bytes() []byte { return m.Buf[m.Off : m.Off+m.N] }

// Stats are the endpoint's counters.
type Stats struct {
	RxPackets, RxBytes uint64
	TxPackets, TxBytes uint64
	RxLossDropped      uint64 // dropped by RecvLoss
	TxLossDropped      uint64 // dropped by SendLoss
	RxTruncated        uint64 // datagrams larger than the buffer given
}

// Conn is a RoCEv2 UDP endpoint.
type Conn struct {
	uc    *net.UDPConn
	raw   syscall.RawConn
	local netip.AddrPort
	v4    bool
	batch int
	cap   *Capture

	// receive state, owned by the ReadBatch caller
	rhdr  []mmsghdr
	riov  []unix.Iovec
	rname [][sockaddrLen]byte
	rreq  int
	rgot  int
	rerr  syscall.Errno
	rfn   func(fd uintptr) bool
	rloss *lossGen

	// send state, guarded by smu
	smu   sync.Mutex
	shdr  []mmsghdr
	siov  []unix.Iovec
	sname [][sockaddrLen]byte
	sreq  int
	sdone int
	serr  syscall.Errno
	sfn   func(fd uintptr) bool
	sloss *lossGen

	rxPackets, rxBytes, txPackets, txBytes atomic.Uint64
	rxLoss, txLoss, rxTrunc                atomic.Uint64
	closed                                 atomic.Bool
}

// sockaddrLen fits a sockaddr_in6.
const sockaddrLen = unix.SizeofSockaddrInet6

// mmsghdr is struct mmsghdr from <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

type lossGen struct {
	p float64
	r *rand.Rand
}

func newLoss(p float64, seed, stream uint64) *lossGen {
	if p <= 0 {
		return nil
	}
	return &lossGen{p: p, r: rand.New(rand.NewPCG(seed, stream))}
}

func (l *lossGen) drop() bool { return l != nil && l.r.Float64() < l.p }

// Listen opens an endpoint on cfg.Addr.
func Listen(cfg Config) (*Conn, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, fmt.Errorf("udp: listen: local address %v: give the NIC's own address (e.g. 127.0.0.2)", cfg.Addr)
	}
	if cfg.RecvLoss < 0 || cfg.RecvLoss >= 1 || cfg.SendLoss < 0 || cfg.SendLoss >= 1 {
		return nil, fmt.Errorf("udp: loss probabilities %v/%v: must be in [0, 1)", cfg.RecvLoss, cfg.SendLoss)
	}
	port := cfg.Port
	if port == 0 {
		port = rdma.UDPPort
	}
	batch := cfg.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	addr := cfg.Addr.Unmap()
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	uc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("udp: listen on %v port %d: %w: another NIC or switch already uses this address; give each endpoint its own address (127.0.0.2, 127.0.0.3, …)", addr, port, err)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("udp: listen on %v port %d: %w: the address is not configured on any interface", addr, port, err)
		}
		return nil, fmt.Errorf("udp: listen on %v port %d: %w", addr, port, err)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, err
	}
	bufBytes := cfg.SocketBuffer
	if bufBytes <= 0 {
		bufBytes = 4 << 20
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		s := int(fd)
		if addr.Is4() {
			serr = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		} else {
			serr = unix.SetsockoptInt(s, unix.IPPROTO_UDP, udpNoCheck6Rx, 1)
			if serr == nil {
				serr = unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			}
		}
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(s, unix.SOL_SOCKET, o[0], bufBytes) != nil {
				_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, o[1], bufBytes)
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: socket options on %v: %w", addr, err)
	}
	c := &Conn{
		uc: uc, raw: raw, v4: addr.Is4(), batch: batch, cap: cfg.Capture,
		local: netip.AddrPortFrom(addr, uint16(uc.LocalAddr().(*net.UDPAddr).Port)),
		rhdr:  make([]mmsghdr, batch), riov: make([]unix.Iovec, batch), rname: make([][sockaddrLen]byte, batch),
		shdr: make([]mmsghdr, batch), siov: make([]unix.Iovec, batch), sname: make([][sockaddrLen]byte, batch),
		rloss: newLoss(cfg.RecvLoss, cfg.Seed, 1), sloss: newLoss(cfg.SendLoss, cfg.Seed, 2),
	}
	for i := range c.rhdr {
		c.rhdr[i].hdr.Iov = &c.riov[i]
		c.rhdr[i].hdr.SetIovlen(1)
		c.rhdr[i].hdr.Name = &c.rname[i][0]
		c.shdr[i].hdr.Iov = &c.siov[i]
		c.shdr[i].hdr.SetIovlen(1)
		c.shdr[i].hdr.Name = &c.sname[i][0]
	}
	c.rfn = c.recvmmsg
	c.sfn = c.sendmmsg
	return c, nil
}

// LocalAddr is the bound address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// BatchSize is the most datagrams one ReadBatch or WriteBatch system call moves.
func (c *Conn) BatchSize() int { return c.batch }

func (c *Conn) recvmmsg(fd uintptr) bool {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&c.rhdr[0])), uintptr(c.rreq), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	c.rgot, c.rerr = int(n), e
	return true
}

// ReadBatch blocks until at least one datagram arrives, then stores up to
// len(msgs) (at most BatchSize) of them. Datagrams longer than their Buf are
// counted and dropped. It returns net.ErrClosed after Close.
func (c *Conn) ReadBatch(msgs []Msg) (int, error) {
	for {
		req := min(len(msgs), c.batch)
		if req == 0 {
			return 0, nil
		}
		for i := 0; i < req; i++ {
			m := &msgs[i]
			if m.Off < 0 || m.Off >= len(m.Buf) {
				return 0, fmt.Errorf("udp: ReadBatch: message %d has no room after offset %d in its %d-byte buffer", i, m.Off, len(m.Buf))
			}
			b := m.Buf[m.Off:]
			c.riov[i].Base = &b[0]
			c.riov[i].SetLen(len(b))
			c.rhdr[i].hdr.Namelen = sockaddrLen
			c.rhdr[i].hdr.Flags = 0
		}
		c.rreq, c.rgot, c.rerr = req, 0, 0
		if err := c.raw.Read(c.rfn); err != nil {
			return 0, err
		}
		if c.rerr != 0 {
			if c.closed.Load() {
				return 0, net.ErrClosed
			}
			return 0, fmt.Errorf("udp: recvmmsg on %v: %w", c.local, c.rerr)
		}
		out := 0
		for i := 0; i < c.rgot; i++ {
			h := &c.rhdr[i]
			n := int(h.len)
			if h.hdr.Flags&unix.MSG_TRUNC != 0 {
				c.rxTrunc.Add(1)
				continue
			}
			c.rxPackets.Add(1)
			c.rxBytes.Add(uint64(n))
			from := parseSockaddr(c.rname[i][:])
			if c.cap != nil {
				c.cap.Write(from, c.local, msgs[i].Buf[msgs[i].Off:msgs[i].Off+n])
			}
			if c.rloss.drop() {
				c.rxLoss.Add(1)
				continue
			}
			if out != i {
				msgs[out].Buf, msgs[i].Buf = msgs[i].Buf, msgs[out].Buf
				msgs[out].Off, msgs[i].Off = msgs[i].Off, msgs[out].Off
			}
			msgs[out].N = n
			msgs[out].Addr = from
			out++
		}
		if out > 0 {
			return out, nil
		}
	}
}

func (c *Conn) sendmmsg(fd uintptr) bool {
	for c.sdone < c.sreq {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&c.shdr[c.sdone])), uintptr(c.sreq-c.sdone), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			c.sdone += int(n)
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			c.serr = e
			return true
		}
	}
	return true
}

// WriteBatch sends msgs[i].Buf[:msgs[i].N] to msgs[i].Addr, blocking while
// the socket buffer is full. Datagrams dropped by SendLoss count as sent.
func (c *Conn) WriteBatch(msgs []Msg) (int, error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	sent := 0
	for sent < len(msgs) {
		req := 0
		i := sent
		for ; i < len(msgs) && req < c.batch; i++ {
			m := &msgs[i]
			if m.N <= 0 || m.Off < 0 || m.Off+m.N > len(m.Buf) {
				return sent, fmt.Errorf("udp: WriteBatch: message %d: bytes [%d, %d) outside its %d-byte buffer", i, m.Off, m.Off+m.N, len(m.Buf))
			}
			if c.cap != nil {
				c.cap.Write(c.local, m.Addr, m.Bytes())
			}
			if c.sloss.drop() {
				c.txLoss.Add(1)
				continue
			}
			nl, err := putSockaddr(c.sname[req][:], m.Addr, c.v4)
			if err != nil {
				return sent, err
			}
			c.siov[req].Base = &m.Buf[m.Off]
			c.siov[req].SetLen(m.N)
			c.shdr[req].hdr.Namelen = nl
			c.shdr[req].len = 0
			c.txBytes.Add(uint64(m.N))
			req++
		}
		if req > 0 {
			c.sreq, c.sdone, c.serr = req, 0, 0
			if err := c.raw.Write(c.sfn); err != nil {
				return sent, err
			}
			if c.serr != 0 {
				return sent + c.sdone, fmt.Errorf("udp: sendmmsg from %v: %w", c.local, c.serr)
			}
			c.txPackets.Add(uint64(req))
		}
		sent = i
	}
	return sent, nil
}

func parseSockaddr(b []byte) netip.AddrPort {
	fam := *(*uint16)(unsafe.Pointer(&b[0]))
	port := binary.BigEndian.Uint16(b[2:4])
	switch fam {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port)
	}
	return netip.AddrPort{}
}

func putSockaddr(b []byte, ap netip.AddrPort, v4 bool) (uint32, error) {
	a := ap.Addr()
	if v4 {
		a = a.Unmap()
		if !a.Is4() {
			return 0, fmt.Errorf("udp: destination %v is not IPv4 but this endpoint is", ap)
		}
		*(*uint16)(unsafe.Pointer(&b[0])) = unix.AF_INET
		binary.BigEndian.PutUint16(b[2:4], ap.Port())
		a4 := a.As4()
		copy(b[4:8], a4[:])
		clear(b[8:16])
		return unix.SizeofSockaddrInet4, nil
	}
	if a.Is4() {
		return 0, fmt.Errorf("udp: destination %v is IPv4 but this endpoint is IPv6", ap)
	}
	*(*uint16)(unsafe.Pointer(&b[0])) = unix.AF_INET6
	binary.BigEndian.PutUint16(b[2:4], ap.Port())
	clear(b[4:8])
	a16 := a.As16()
	copy(b[8:24], a16[:])
	clear(b[24:28])
	return unix.SizeofSockaddrInet6, nil
}

// Stats returns a snapshot of the counters.
func (c *Conn) Stats() Stats {
	return Stats{
		RxPackets: c.rxPackets.Load(), RxBytes: c.rxBytes.Load(),
		TxPackets: c.txPackets.Load(), TxBytes: c.txBytes.Load(),
		RxLossDropped: c.rxLoss.Load(), TxLossDropped: c.txLoss.Load(), RxTruncated: c.rxTrunc.Load(),
	}
}

// Close closes the socket; a blocked ReadBatch returns net.ErrClosed. It is
// idempotent.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.uc.Close()
}
