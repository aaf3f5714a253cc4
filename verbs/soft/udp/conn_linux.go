package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/rdma"
	"golang.org/x/sys/unix"
)

// udpNoCheck6Rx is UDP_NO_CHECK6_RX from linux/udp.h.
const udpNoCheck6Rx = 102

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
	rpoll busyPoller
	// GRO: datagrams land in rbig (one 64 KiB buffer per header) and are
	// split into packets; rcur/roff is the next packet not yet handed out.
	gro   bool
	rbig  [][]byte
	rctl  [][groCtlWord]uint64
	rseg  []int // per received datagram: segment size (0: one packet)
	rfrom []netip.AddrPort
	rcur  int
	roff  int

	// send state, guarded by smu. gso: this socket may send GSO datagrams
	// (the kernel has UDP_SEGMENT and has not refused it on this path);
	// gsoAll: to every peer (IPv6, loopback, OffloadOn), else only to the
	// peers in gsoPeers (AllowGSO).
	smu      sync.Mutex
	gso      bool
	gsoAll   bool
	gsoPeers map[netip.Addr]bool
	shdr     []mmsghdr
	siov     []unix.Iovec
	sname    [][sockaddrLen]byte
	sctl     [][gsoCtlWord]uint64
	sgrp     []sendGroup
	sreq     int
	sdone    int
	serr     syscall.Errno
	sfn      func(fd uintptr) bool
	sloss    *lossGen

	rxPackets, rxBytes, txPackets, txBytes atomic.Uint64
	rxLoss, txLoss, rxTrunc                atomic.Uint64
	txDgrams, txCalls, txGSO               atomic.Uint64
	rxDgrams, rxCalls, rxGRO               atomic.Uint64
	rxPollHits, rxPollMisses               atomic.Uint64
	closed                                 atomic.Bool
}

// sendGroup is one datagram of a sendmmsg call: packets siov[iov:iov+n] to
// one address; with n > 1 a GSO datagram of seg-byte segments.
type sendGroup struct {
	iov, n, seg, bytes int
	addr               netip.AddrPort
	namelen            uint32
	gso                bool // more packets may join (GSO to this peer)
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
func Listen(cfg Config) (*Conn, error) { return listenWith(cfg, nil) }

// listenWith opens an endpoint; beforeBind, when set, runs on the socket
// before it is bound (ListenGroup sets SO_REUSEPORT there).
func listenWith(cfg Config, beforeBind func(fd int) error) (*Conn, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, fmt.Errorf("udp: listen: local address %v: give the NIC's own address (e.g. 127.0.0.2)", cfg.Addr)
	}
	if cfg.RecvLoss < 0 || cfg.RecvLoss >= 1 || cfg.SendLoss < 0 || cfg.SendLoss >= 1 {
		return nil, fmt.Errorf("udp: loss probabilities %v/%v: must be in [0, 1)", cfg.RecvLoss, cfg.SendLoss)
	}
	if cfg.Offload > OffloadOn {
		return nil, fmt.Errorf("udp: listen: unknown %v: use OffloadAuto, OffloadOff or OffloadOn", cfg.Offload)
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
	gso, gsoAll, gro, err := offloadFor(cfg.Offload, addr)
	if err != nil {
		return nil, fmt.Errorf("udp: listen on %v: %w", addr, err)
	}
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	uc, err := listenUDP(network, netip.AddrPortFrom(addr, uint16(port)), beforeBind)
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
		bufBytes = DefaultSocketBuffer
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
		if gro && serr == nil {
			// Probed at package level; a refusal here is a real error.
			serr = unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
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
		uc: uc, raw: raw, v4: addr.Is4(), batch: batch, cap: cfg.Capture, gso: gso, gsoAll: gsoAll, gro: gro,
		local: netip.AddrPortFrom(addr, uint16(uc.LocalAddr().(*net.UDPAddr).Port)),
		rhdr:  make([]mmsghdr, batch), riov: make([]unix.Iovec, batch), rname: make([][sockaddrLen]byte, batch),
		shdr: make([]mmsghdr, batch), sname: make([][sockaddrLen]byte, batch), sgrp: make([]sendGroup, batch),
		rloss: newLoss(cfg.RecvLoss, cfg.Seed, 1), sloss: newLoss(cfg.SendLoss, cfg.Seed, 2),
		rpoll: newBusyPoller(cfg.BusyPoll),
	}
	if gso {
		c.siov = make([]unix.Iovec, batch*gsoMaxSegments)
		c.sctl = make([][gsoCtlWord]uint64, batch)
	} else {
		c.siov = make([]unix.Iovec, batch)
	}
	for i := range c.rhdr {
		c.rhdr[i].hdr.Iov = &c.riov[i]
		c.rhdr[i].hdr.SetIovlen(1)
		c.rhdr[i].hdr.Name = &c.rname[i][0]
		c.shdr[i].hdr.Name = &c.sname[i][0]
	}
	if gro {
		n := groDatagrams(batch, cfg.GROBuffers)
		c.rbig = make([][]byte, n)
		slab := make([]byte, n*groBufLen)
		c.rctl = make([][groCtlWord]uint64, n)
		c.rseg = make([]int, n)
		c.rfrom = make([]netip.AddrPort, n)
		for i := range c.rbig {
			c.rbig[i] = slab[i*groBufLen : (i+1)*groBufLen : (i+1)*groBufLen]
			c.riov[i].Base = &c.rbig[i][0]
			c.riov[i].SetLen(groBufLen)
			c.rhdr[i].hdr.Control = (*byte)(unsafe.Pointer(&c.rctl[i][0]))
		}
	}
	c.rfn = c.recvmmsg
	c.sfn = c.sendmmsg
	return c, nil
}

// LocalAddr is the bound address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// BatchSize is the most datagrams one ReadBatch or WriteBatch system call moves.
func (c *Conn) BatchSize() int { return c.batch }

// Offloads reports whether this endpoint sends with UDP GSO to every peer
// and receives with UDP GRO (GSOTo tells it for one peer).
func (c *Conn) Offloads() (gso, gro bool) {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.gso && c.gsoAll, c.gro
}

// AllowGSO says whether peer cannot see, or does not check, the IPv4
// Identification of the packets it receives (see Offload): a UDP socket
// (the software switch, the userspace NIC) or the Tofino program, which
// never parses the ICRC. Under OffloadAuto over IPv4 off loopback, runs of
// packets to such a peer go out as GSO datagrams too; ok false takes that
// back. It changes nothing where GSO already goes to every peer or the
// kernel has none. Safe to call at any time (GSOPeers).
func (c *Conn) AllowGSO(peer netip.Addr, ok bool) {
	c.smu.Lock()
	defer c.smu.Unlock()
	peer = peer.Unmap()
	if !ok {
		delete(c.gsoPeers, peer)
		return
	}
	if c.gsoPeers == nil {
		c.gsoPeers = make(map[netip.Addr]bool)
	}
	c.gsoPeers[peer] = true
}

// GSOTo reports whether runs of packets to peer go out as GSO datagrams.
func (c *Conn) GSOTo(peer netip.Addr) bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.gsoToLocked(peer.Unmap())
}

func (c *Conn) gsoToLocked(peer netip.Addr) bool {
	return c.gso && (c.gsoAll || c.gsoPeers[peer])
}

// recvmmsg and sendmmsg run as raw system calls (no entersyscall/
// exitsyscall around them). Both pass MSG_DONTWAIT on a non-blocking
// socket, so neither ever sleeps in the kernel: EAGAIN hands the wait to
// the runtime's netpoller (raw.Read, raw.Write). What they can do is run
// long: a sendmmsg into a veth or loopback runs the receiving side's
// softirq (bridge, IP, the peer socket's wake-up) in this call. Through
// syscall.Syscall6 the runtime's sysmon takes the P of a call that runs
// past 20 µs and starts another thread to run it, and the caller then
// waits for a P on its way out: per batch, a thread wake-up and two
// context switches that do no work. In the network lab (4 workers,
// unshaped, docs/benchmarks.md "Raw system calls") that was an eighth of
// the processes' CPU. The price of a raw
// call is that a garbage collection's stop-the-world waits for it to
// return, which it does without blocking.
func (c *Conn) recvmmsg(fd uintptr) bool {
	n, e := c.recvmmsgOnce(fd)
	if e == unix.EAGAIN && c.rpoll.due() {
		n, e = c.busyPoll(fd)
	}
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	c.rgot, c.rerr = int(n), e
	return true
}

// recvmmsgOnce is one recvmmsg of c.rreq headers that does not wait.
func (c *Conn) recvmmsgOnce(fd uintptr) (uintptr, syscall.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&c.rhdr[0])), uintptr(c.rreq), unix.MSG_DONTWAIT, 0, 0)
	return n, e
}

// busyPoll retries recvmmsg on the empty socket for up to its budget
// (busyPoller), giving the CPU to other threads (sched_yield) and the
// processor to the process's other goroutines (runtime.Gosched) between
// tries, and reading the clock every few tries. It stops at once when the
// Conn is closed.
func (c *Conn) busyPoll(fd uintptr) (uintptr, syscall.Errno) {
	const every = 4
	start := time.Now()
	for i := 1; ; i++ {
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) // never fails
		runtime.Gosched()
		n, e := c.recvmmsgOnce(fd)
		if e != unix.EAGAIN && e != unix.EINTR {
			c.rpoll.done(true)
			c.rxPollHits.Add(1)
			return n, e
		}
		if i%every == 0 && (c.closed.Load() || time.Since(start) >= c.rpoll.budget) {
			c.rpoll.done(false)
			c.rxPollMisses.Add(1)
			return n, unix.EAGAIN
		}
	}
}

// recv runs one recvmmsg of c.rreq headers (blocking until at least one
// datagram is there).
func (c *Conn) recv() error {
	c.rgot, c.rerr = 0, 0
	if err := c.raw.Read(c.rfn); err != nil {
		return err
	}
	if c.rerr != 0 {
		if c.closed.Load() {
			return net.ErrClosed
		}
		return fmt.Errorf("udp: recvmmsg on %v: %w", c.local, c.rerr)
	}
	c.rxCalls.Add(1)
	c.rxDgrams.Add(uint64(c.rgot))
	return nil
}

// ReadBatch blocks until at least one datagram arrives, then stores up to
// len(msgs) of them, one packet per Msg: a GRO datagram is split into its
// packets, and packets that do not fit msgs are kept for the next call.
// Datagrams longer than their Buf are counted and dropped. It returns
// net.ErrClosed after Close.
func (c *Conn) ReadBatch(msgs []Msg) (int, error) {
	if c.gro {
		return c.readGRO(msgs, false)
	}
	return c.readPlain(msgs)
}

var _ Lender = (*Conn)(nil)

// ReadLent is ReadBatch that lends the packets of GRO datagrams (Lender):
// on a GRO socket every packet comes back lent, a slice of the 64 KiB
// receive buffer it arrived in, and the caller's buffers are not used;
// without GRO the datagrams are received straight into the caller's
// buffers, as by ReadBatch, which copies nothing either.
func (c *Conn) ReadLent(msgs []Msg) (int, error) {
	if c.gro {
		return c.readGRO(msgs, true)
	}
	return c.readPlain(msgs)
}

// readPlain is ReadBatch without GRO: each datagram is received into its
// Msg's buffer.
func (c *Conn) readPlain(msgs []Msg) (int, error) {
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
		c.rreq = req
		if err := c.recv(); err != nil {
			return 0, err
		}
		out := 0
		var cnt rxCount
		for i := 0; i < c.rgot; i++ {
			h := &c.rhdr[i]
			n := int(h.len)
			if h.hdr.Flags&unix.MSG_TRUNC != 0 {
				c.rxTrunc.Add(1)
				continue
			}
			from := parseSockaddr(c.rname[i][:])
			if !c.accept(from, msgs[i].Buf[msgs[i].Off:msgs[i].Off+n], &cnt) {
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
		c.addRx(&cnt)
		if out > 0 {
			return out, nil
		}
	}
}

// rxCount accumulates a batch's packet and byte counts, added to the
// endpoint's counters once per batch rather than once per packet.
type rxCount struct{ packets, bytes uint64 }

func (c *Conn) addRx(n *rxCount) {
	if n.packets > 0 {
		c.rxPackets.Add(n.packets)
		c.rxBytes.Add(n.bytes)
	}
}

// accept counts (into n) and captures one received packet and applies
// RecvLoss.
func (c *Conn) accept(from netip.AddrPort, b []byte, n *rxCount) bool {
	n.packets++
	n.bytes += uint64(len(b))
	if c.cap != nil {
		c.cap.Write(from, c.local, b)
	}
	if c.rloss.drop() {
		c.rxLoss.Add(1)
		return false
	}
	return true
}

// readGRO is ReadBatch on a GRO socket: datagrams are received into the
// endpoint's own 64 KiB buffers and each packet is copied to its Msg, or,
// with lend, handed over where it lies (ReadLent).
func (c *Conn) readGRO(msgs []Msg, lend bool) (int, error) {
	if !lend {
		for i := range msgs {
			if m := &msgs[i]; m.Off < 0 || m.Off >= len(m.Buf) {
				return 0, fmt.Errorf("udp: ReadBatch: message %d has no room after offset %d in its %d-byte buffer", i, m.Off, len(m.Buf))
			}
		}
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		if c.rcur >= c.rgot {
			c.rreq = len(c.rbig)
			for i := 0; i < c.rreq; i++ {
				h := &c.rhdr[i].hdr
				h.Namelen = sockaddrLen
				h.Flags = 0
				h.SetControllen(groCtlLen)
			}
			c.rcur, c.roff = 0, 0
			if err := c.recv(); err != nil {
				c.rgot = 0
				return 0, err
			}
			for i := 0; i < c.rgot; i++ {
				h := &c.rhdr[i]
				c.rseg[i] = groSegment(&c.rctl[i], int(h.hdr.Controllen))
				c.rfrom[i] = parseSockaddr(c.rname[i][:])
				if h.hdr.Flags&unix.MSG_TRUNC != 0 {
					c.rxTrunc.Add(1)
					c.rseg[i] = -1
				} else if c.rseg[i] > 0 && int(h.len) > c.rseg[i] {
					c.rxGRO.Add(1)
				}
			}
		}
		out := 0
		var cnt rxCount
		for out < len(msgs) && c.rcur < c.rgot {
			i := c.rcur
			total := int(c.rhdr[i].len)
			seg := c.rseg[i]
			if seg < 0 || c.roff >= total {
				c.rcur++
				c.roff = 0
				continue
			}
			n := total - c.roff
			if seg > 0 {
				n = min(n, seg)
			}
			b := c.rbig[i][c.roff : c.roff+n : c.roff+n]
			c.roff += n
			m := &msgs[out]
			if !lend && n > len(m.Buf)-m.Off {
				c.rxTrunc.Add(1)
				continue
			}
			if !c.accept(c.rfrom[i], b, &cnt) {
				continue
			}
			if lend {
				m.Buf, m.Off = b, 0
			} else {
				copy(m.Buf[m.Off:], b)
			}
			m.N = n
			m.Addr = c.rfrom[i]
			out++
		}
		c.addRx(&cnt)
		if out > 0 {
			return out, nil
		}
	}
}

func (c *Conn) sendmmsg(fd uintptr) bool {
	for c.sdone < c.sreq {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&c.shdr[c.sdone])), uintptr(c.sreq-c.sdone), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			c.sdone += int(n)
			c.txCalls.Add(1)
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

// WriteBatch sends msgs[i].Buf[Off:Off+N] to msgs[i].Addr, blocking while
// the socket buffer is full. Datagrams dropped by SendLoss count as sent.
// With GSO, runs of consecutive packets to one address whose sizes are equal
// (the last of a run may be shorter) go out as one GSO datagram: the
// packets, and what Capture and SendLoss see, are the same as without.
func (c *Conn) WriteBatch(msgs []Msg) (int, error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	sent := 0
	for sent < len(msgs) {
		ng, ni := 0, 0
		i := sent
		for ; i < len(msgs); i++ {
			m := &msgs[i]
			if m.N <= 0 || m.Off < 0 || m.Off+m.N > len(m.Buf) {
				return sent, fmt.Errorf("udp: WriteBatch: message %d: bytes [%d, %d) outside its %d-byte buffer", i, m.Off, m.Off+m.N, len(m.Buf))
			}
			join := ng > 0 && c.canJoin(&c.sgrp[ng-1], m)
			if (!join && ng == len(c.sgrp)) || ni == len(c.siov) {
				break
			}
			if c.cap != nil {
				c.cap.Write(c.local, m.Addr, m.Bytes())
			}
			if c.sloss.drop() {
				c.txLoss.Add(1)
				continue
			}
			if !join {
				nl, err := putSockaddr(c.sname[ng][:], m.Addr, c.v4)
				if err != nil {
					return sent, err
				}
				c.sgrp[ng] = sendGroup{iov: ni, seg: m.N, addr: m.Addr, namelen: nl, gso: c.gsoToLocked(m.Addr.Addr())}
				ng++
			}
			g := &c.sgrp[ng-1]
			c.siov[ni].Base = &m.Buf[m.Off]
			c.siov[ni].SetLen(m.N)
			ni++
			g.n++
			g.bytes += m.N
		}
		if ng > 0 {
			if err := c.sendGroups(ng); err != nil {
				return sent, err
			}
		}
		sent = i
	}
	return sent, nil
}

// canJoin says whether m can be the next segment of GSO datagram g.
func (c *Conn) canJoin(g *sendGroup, m *Msg) bool {
	return g.gso && c.gso && m.Addr == g.addr && m.N <= g.seg &&
		// a shorter segment ends a datagram
		g.bytes == g.n*g.seg &&
		g.n < gsoMaxSegments && g.bytes+m.N <= gsoMaxBytes
}

// sendGroups sends sgrp[:ng], falling back to one datagram per packet if
// the kernel refuses GSO on this path.
func (c *Conn) sendGroups(ng int) error {
	for j := 0; j < ng; j++ {
		g := &c.sgrp[j]
		h := &c.shdr[j]
		h.hdr.Iov = &c.siov[g.iov]
		h.hdr.SetIovlen(g.n)
		h.hdr.Namelen = g.namelen
		h.len = 0
		if g.n > 1 {
			putGSOSegment(&c.sctl[j], g.seg)
			h.hdr.Control = (*byte)(unsafe.Pointer(&c.sctl[j][0]))
			h.hdr.SetControllen(gsoCtlLen)
		} else {
			h.hdr.Control = nil
			h.hdr.SetControllen(0)
		}
	}
	c.sreq, c.sdone, c.serr = ng, 0, 0
	if err := c.raw.Write(c.sfn); err != nil {
		return err
	}
	c.countSent(0, c.sdone)
	if c.serr == 0 {
		return nil
	}
	if g := &c.sgrp[c.sdone]; g.n > 1 && (c.serr == unix.EIO || c.serr == unix.EINVAL || c.serr == unix.EMSGSIZE) {
		// No GSO on this path (e.g. a device without checksum offload):
		// send the rest packet by packet from now on.
		c.gso = false
		return c.resendUnsegmented(c.sdone, ng)
	}
	return fmt.Errorf("udp: sendmmsg from %v: %w", c.local, c.serr)
}

func (c *Conn) countSent(from, to int) {
	for j := from; j < to; j++ {
		g := &c.sgrp[j]
		c.txPackets.Add(uint64(g.n))
		c.txBytes.Add(uint64(g.bytes))
		if g.n > 1 {
			c.txGSO.Add(1)
		}
	}
	c.txDgrams.Add(uint64(to - from))
}

// resendUnsegmented sends the packets of sgrp[from:ng] one datagram each,
// through sgrp[0] (each group is copied before sgrp[0] is overwritten; the
// iovecs stay where they are).
func (c *Conn) resendUnsegmented(from, ng int) error {
	for j := from; j < ng; j++ {
		g := c.sgrp[j]
		for k := 0; k < g.n; k++ {
			c.sgrp[0] = sendGroup{iov: g.iov + k, n: 1, seg: int(c.siov[g.iov+k].Len), bytes: int(c.siov[g.iov+k].Len), addr: g.addr, namelen: g.namelen}
			if _, err := putSockaddr(c.sname[0][:], g.addr, c.v4); err != nil {
				return err
			}
			if err := c.sendGroups(1); err != nil {
				return err
			}
		}
	}
	return nil
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
		TxDatagrams: c.txDgrams.Load(), TxCalls: c.txCalls.Load(), TxGSODatagrams: c.txGSO.Load(),
		RxDatagrams: c.rxDgrams.Load(), RxCalls: c.rxCalls.Load(), RxGRODatagrams: c.rxGRO.Load(),
		RxPollHits: c.rxPollHits.Load(), RxPollMisses: c.rxPollMisses.Load(),
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
