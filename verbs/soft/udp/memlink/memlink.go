package memlink

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// Errors of Listen.
var (
	ErrAddrInUse  = errors.New("memlink: address in use")
	ErrBadAddress = errors.New("memlink: invalid address")
)

// DefaultMaxDatagram is the largest datagram a Network carries by default:
// a 4096-byte RoCEv2 payload with BTH, RETH, ImmDt and ICRC, rounded up.
const DefaultMaxDatagram = 4224

// DefaultRecvQueue is an endpoint's receive queue by default, in packets
// (in flight towards it or waiting to be read).
const DefaultRecvQueue = 1024

// Config configures a Network.
type Config struct {
	// Clock, when set, is the network's time: links move only when the
	// test advances it, so rates, queues and delays act deterministically.
	// Nil: real time.
	Clock *ManualClock
	// Seed seeds every link's generator of Loss and Reorder draws.
	Seed uint64
	// Link is the link of every (source, destination) address pair that
	// SetLink does not configure. The zero value delivers at once, in
	// order, without loss.
	Link LinkConfig
	// MaxDatagram is the largest datagram carried (default
	// DefaultMaxDatagram); larger ones count as sent and are dropped
	// (LinkStats.TooBig).
	MaxDatagram int
	// RecvQueue is each endpoint's receive queue in packets (default
	// DefaultRecvQueue): packets in flight to it or not yet read. A packet
	// that finds it full is dropped (the socket buffer overflowing;
	// LinkStats.Overflow).
	RecvQueue int
	// BatchSize is each endpoint's BatchSize (default udp.DefaultBatchSize).
	BatchSize int
	// PreciseTimers, on real time, has a reader whose next datagram is due
	// within 2 ms woken by one goroutine of the network that sleeps in the
	// kernel, instead of by the runtime's timers, which wake an idle
	// process on a millisecond grid (preciseWait). Not for a
	// testing/synctest bubble, whose clock moves only while every
	// goroutine in it is blocked, which one in a system call is not.
	PreciseTimers bool
	// SourceOrder orders the datagrams an endpoint receives due at the
	// same instant by source address, then each source's send order,
	// instead of by send order alone. On a virtual clock (a
	// testing/synctest bubble) senders in different goroutines act at the
	// same instant in an order the scheduler picks; with SourceOrder a
	// receiver sees the same order every run (testbed/sim).
	SourceOrder bool
	// Tap, when set, sees every datagram sent, before any drop, in send
	// order, under the network's lock: it must not call the network.
	Tap func(src, dst netip.AddrPort, pkt []byte)
}

// LinkConfig is one direction of a link: a FIFO that serialises packets at
// Rate behind at most Queue waiting ones (drop-tail), then Delay of
// propagation.
type LinkConfig struct {
	// Rate is the link's rate in bits per second; 0: unlimited.
	Rate float64
	// Overhead is added to each datagram's length for the rate (e.g. 42:
	// Ethernet, IPv4 and UDP headers and FCS).
	Overhead int
	// Queue is the most packets waiting behind the one on the wire when
	// Rate is set; a packet that finds it full is dropped (drop-tail).
	// 0: unbounded.
	Queue int
	// Delay is the propagation delay.
	Delay time.Duration
	// Loss drops that fraction of packets (0 ≤ p < 1), seeded: each link
	// draws from its own generator (Config.Seed and the pair's addresses),
	// so which of a link's packets are lost depends on its own packets
	// only, not on how other links' sends interleave with them.
	Loss float64
	// Reorder holds that fraction of packets back by ReorderDelay, so that
	// later ones overtake them (seeded, as Loss).
	Reorder      float64
	ReorderDelay time.Duration
	// Drop, when set, drops the packets it returns true for: a
	// deterministic loss pattern. It is called in send order under the
	// network's lock.
	Drop func(src, dst netip.AddrPort, pkt []byte) bool
	// Hold, when set, reorders deterministically: it is called for each
	// packet Drop and Loss let through, in send order under the network's
	// lock, and may keep the packet back (HoldBack) until a later packet
	// of any link is let through with Release; that packet is carried,
	// then every packet held, in the order they were held, each on its
	// own link as if sent at that moment. Held packets count in the
	// link's Held.
	Hold func(src, dst netip.AddrPort, pkt []byte) HoldVerdict
}

// HoldVerdict is what a LinkConfig.Hold says of a packet.
type HoldVerdict int

const (
	Pass     HoldVerdict = iota // carried now
	HoldBack                    // kept back until a Release
	Release                     // carried now, then every packet held
)

func (c *LinkConfig) validate() error {
	if c.Rate < 0 || c.Queue < 0 || c.Delay < 0 || c.ReorderDelay < 0 || c.Overhead < 0 {
		return fmt.Errorf("memlink: link %+v: negative rate, queue, delay or overhead", *c)
	}
	if c.Loss < 0 || c.Loss >= 1 || c.Reorder < 0 || c.Reorder > 1 {
		return fmt.Errorf("memlink: link loss %v, reorder %v: must be in [0, 1)", c.Loss, c.Reorder)
	}
	return nil
}

// LinkStats are one link's counters.
type LinkStats struct {
	Packets, Bytes uint64 // sent into the link, before drops
	Delivered      uint64 // queued at the receiving endpoint
	Lost           uint64 // dropped by Loss or Drop
	Held           uint64 // kept back by Hold (and carried at a Release)
	QueueDrops     uint64 // dropped at a full link queue (drop-tail)
	Overflow       uint64 // dropped at the receiver's full queue
	NoEndpoint     uint64 // no endpoint at the destination
	TooBig         uint64 // longer than MaxDatagram
	MaxQueue       int    // the most packets waiting behind the wire (with Rate and Queue set)
	// Busy is the packets' time on the wire, Wait the time they spent
	// waiting behind it, summed (with Rate set).
	Busy, Wait time.Duration
}

type pair struct{ src, dst netip.Addr }

// hash is FNV-1a of the pair's addresses: the stream of its link's
// generator.
func (p pair) hash() uint64 {
	h := uint64(14695981039346656037)
	s, d := p.src.As16(), p.dst.As16()
	for _, b := range append(s[:], d[:]...) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return h
}

type link struct {
	cfg LinkConfig
	st  LinkStats
	rng *rand.Rand // Loss and Reorder draws
	// frac is the fraction of a nanosecond of wire time that busy has not
	// counted yet.
	frac float64
	// busy is when the wire is free; deps[head:head+n] (a ring) are the
	// departure times of the packets on the wire or waiting.
	busy    time.Duration
	deps    []time.Duration
	dhead   int
	dn      int
	hasDeps bool
}

// Network is a set of in-memory endpoints joined by configurable links.
// Safe for concurrent use.
type Network struct {
	cfg   Config
	start time.Time

	mu        sync.Mutex
	eps       map[netip.AddrPort]*Endpoint
	links     map[pair]*link
	lastPair  pair
	lastLink  *link
	seq       uint64
	linkConfs map[pair]LinkConfig
	held      []heldPacket // LinkConfig.Hold's, in the order held
	// waiters are the endpoints whose readers wait for a datagram due
	// within preciseWait, each at its wakeAt; ticking says that tick runs.
	waiters []*Endpoint
	ticking bool
}

// heldPacket is a datagram a link's Hold kept back.
type heldPacket struct {
	src, dst netip.AddrPort
	b        []byte
}

// New returns an empty network.
func New(cfg Config) (*Network, error) {
	if err := cfg.Link.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxDatagram <= 0 {
		cfg.MaxDatagram = DefaultMaxDatagram
	}
	if cfg.RecvQueue <= 0 {
		cfg.RecvQueue = DefaultRecvQueue
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = udp.DefaultBatchSize
	}
	n := &Network{
		cfg: cfg, start: time.Now(),
		eps: make(map[netip.AddrPort]*Endpoint), links: make(map[pair]*link), linkConfs: make(map[pair]LinkConfig),
	}
	if cfg.Clock != nil {
		cfg.Clock.attach(n)
	}
	return n, nil
}

// SetLink configures the link from src to dst (one direction; ports do not
// matter), replacing its state. Set it before traffic flows.
func (n *Network) SetLink(src, dst netip.Addr, cfg LinkConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p := pair{src.Unmap(), dst.Unmap()}
	n.linkConfs[p] = cfg
	delete(n.links, p)
	n.lastLink = nil
	return nil
}

// LinkStats returns the counters of the link from src to dst.
func (n *Network) LinkStats(src, dst netip.Addr) LinkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.links[pair{src.Unmap(), dst.Unmap()}]; l != nil {
		return l.st
	}
	return LinkStats{}
}

// now is the network's time since New.
func (n *Network) now() time.Duration {
	if n.cfg.Clock != nil {
		return n.cfg.Clock.Now()
	}
	return time.Since(n.start)
}

// link returns the link of p, creating it on first use (the only
// allocation on the send path, once per pair).
func (n *Network) link(p pair) *link {
	if n.lastLink != nil && n.lastPair == p {
		return n.lastLink
	}
	l := n.links[p]
	if l == nil {
		cfg, ok := n.linkConfs[p]
		if !ok {
			cfg = n.cfg.Link
		}
		l = &link{cfg: cfg, rng: rand.New(rand.NewPCG(n.cfg.Seed, p.hash()))}
		if cfg.Rate > 0 && cfg.Queue > 0 {
			l.deps = make([]time.Duration, cfg.Queue+1)
			l.hasDeps = true
		}
		n.links[p] = l
	}
	n.lastPair, n.lastLink = p, l
	return l
}

// Listen opens an endpoint at addr (a port of 0 means 4791).
func (n *Network) Listen(addr netip.AddrPort) (*Endpoint, error) {
	if !addr.Addr().IsValid() || addr.Addr().IsUnspecified() {
		return nil, fmt.Errorf("memlink: listen on %v: %w", addr, ErrBadAddress)
	}
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), 4791)
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.eps[addr]; ok {
		return nil, fmt.Errorf("memlink: listen on %v: %w", addr, ErrAddrInUse)
	}
	e := newEndpoint(n, addr)
	n.eps[addr] = e
	return e, nil
}

// send carries one datagram from e to m.Addr; n.mu is held.
func (n *Network) send(e *Endpoint, m *udp.Msg, now time.Duration) {
	b := m.Bytes()
	dst := netip.AddrPortFrom(m.Addr.Addr().Unmap(), m.Addr.Port())
	if n.cfg.Tap != nil {
		n.cfg.Tap(e.local, dst, b)
	}
	l := n.link(pair{e.local.Addr(), dst.Addr()})
	l.st.Packets++
	l.st.Bytes += uint64(len(b))
	c := &l.cfg
	switch {
	case len(b) > n.cfg.MaxDatagram:
		l.st.TooBig++
		return
	case c.Drop != nil && c.Drop(e.local, dst, b):
		l.st.Lost++
		return
	case c.Loss > 0 && l.rng.Float64() < c.Loss:
		l.st.Lost++
		return
	}
	v := Pass
	if c.Hold != nil {
		v = c.Hold(e.local, dst, b)
	}
	if v == HoldBack {
		l.st.Held++
		n.held = append(n.held, heldPacket{e.local, dst, append([]byte(nil), b...)})
		return
	}
	n.carry(l, e.local, dst, b, now)
	if v == Release {
		held := n.held
		n.held = nil
		for _, h := range held {
			n.carry(n.link(pair{h.src.Addr(), h.dst.Addr()}), h.src, h.dst, h.b, now)
		}
	}
}

// carry moves one datagram that passed its link's Drop, Loss and Hold
// across the link from src to dst: the rate, queue, delay and reordering
// of l, then dst's receive queue; n.mu is held.
func (n *Network) carry(l *link, src, dst netip.AddrPort, b []byte, now time.Duration) {
	c := &l.cfg
	due := now
	if c.Rate > 0 {
		if l.hasDeps {
			for l.dn > 0 && l.deps[l.dhead] <= now {
				l.dhead = (l.dhead + 1) % len(l.deps)
				l.dn--
			}
			// One packet is on the wire, the others wait.
			if l.dn > c.Queue {
				l.st.QueueDrops++
				return
			}
		}
		start := max(now, l.busy)
		l.st.Wait += start - now
		// A packet's time on the wire is rarely whole nanoseconds (88.48 ns
		// for 1106 bytes at 100 Gbit/s): the fraction is carried to the
		// next packet, or a fast link would run 0.5 % above its rate.
		wire := float64(8*(len(b)+c.Overhead))*1e9/c.Rate + l.frac
		whole := math.Floor(wire)
		l.frac = wire - whole
		l.busy = start + time.Duration(whole)
		l.st.Busy += time.Duration(whole)
		due = l.busy
		if l.hasDeps {
			l.deps[(l.dhead+l.dn)%len(l.deps)] = l.busy
			l.dn++
			l.st.MaxQueue = max(l.st.MaxQueue, l.dn-1)
		}
	}
	due += c.Delay
	if c.Reorder > 0 && l.rng.Float64() < c.Reorder {
		due += c.ReorderDelay
	}
	d := n.eps[dst]
	if d == nil || d.closed {
		l.st.NoEndpoint++
		return
	}
	if !d.rx.push(b, src, due, n.seq) {
		l.st.Overflow++
		return
	}
	n.seq++
	l.st.Delivered++
	d.wake()
}

// advanced wakes every endpoint after the manual clock moved.
func (n *Network) advanced() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.eps {
		e.wake()
	}
}

// Endpoint is one address of a Network: a udp.Endpoint. ReadBatch from one
// goroutine at a time; the rest is safe for concurrent use.
type Endpoint struct {
	net   *Network
	local netip.AddrPort
	batch int

	// under net.mu
	rx      rxQueue
	closed  bool
	st      udp.Stats
	wakeAt  time.Duration // when tick wakes the reader, if waiting
	waiting bool          // in net.waiters

	notify chan struct{}
	done   chan struct{}
	timer  *time.Timer // owned by the ReadBatch caller
}

var _ udp.Endpoint = (*Endpoint)(nil)

func newEndpoint(n *Network, addr netip.AddrPort) *Endpoint {
	e := &Endpoint{
		net: n, local: addr, batch: n.cfg.BatchSize,
		notify: make(chan struct{}, 1), done: make(chan struct{}),
	}
	e.rx.init(n.cfg.RecvQueue, n.cfg.MaxDatagram, n.cfg.SourceOrder)
	return e
}

func (e *Endpoint) wake() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// Network is the network the endpoint belongs to.
func (e *Endpoint) Network() *Network { return e.net }

// LocalAddr is the endpoint's address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.local }

// BatchSize is the network's batch size.
func (e *Endpoint) BatchSize() int { return e.batch }

// Stats returns the endpoint's counters (packets and bytes; a datagram is
// a packet and a call a batch; what the links drop is in LinkStats).
func (e *Endpoint) Stats() udp.Stats {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	return e.st
}

// Close removes the endpoint from the network; a blocked ReadBatch returns
// net.ErrClosed. Idempotent.
func (e *Endpoint) Close() error {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	delete(n.eps, e.local)
	close(e.done)
	return nil
}

// WriteBatch sends every Msg through its link. It never blocks: a full link
// queue or receive queue drops, as a network does.
func (e *Endpoint) WriteBatch(msgs []udp.Msg) (int, error) {
	for i := range msgs {
		if m := &msgs[i]; m.N <= 0 || m.Off < 0 || m.Off+m.N > len(m.Buf) {
			return 0, fmt.Errorf("memlink: WriteBatch: message %d: bytes [%d, %d) outside its %d-byte buffer", i, m.Off, m.Off+m.N, len(m.Buf))
		}
	}
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.closed {
		return 0, net.ErrClosed
	}
	now := n.now()
	for i := range msgs {
		n.send(e, &msgs[i], now)
		e.st.TxPackets++
		e.st.TxBytes += uint64(msgs[i].N)
	}
	e.st.TxDatagrams += uint64(len(msgs))
	e.st.TxCalls++
	return len(msgs), nil
}

// With Config.PreciseTimers, a real-time reader whose next datagram is due
// less than preciseWait away is woken by the network's tick goroutine, which sleeps in the kernel
// (sleepPrecise) in slices of at most preciseSlice. The runtime's timers
// wake an idle process with millisecond granularity (its netpoller waits in
// whole milliseconds), which would add up to a millisecond to every link a
// packet crosses — more than a message's time on a 1 Gbit/s link — and so
// turn a link's rate into a round-trip-time limit for windowed senders.
// One goroutine sleeps for all readers, so that at most one thread (and
// the scheduler's P it holds) waits in a system call at a time.
const (
	preciseWait  = 2 * time.Millisecond
	preciseSlice = 100 * time.Microsecond
)

// awaitDue has the tick goroutine wake e's reader at its head datagram's
// due time; n.mu is held.
func (n *Network) awaitDue(e *Endpoint) {
	e.wakeAt = e.rx.headDue()
	if !e.waiting {
		e.waiting = true
		n.waiters = append(n.waiters, e)
	}
	if !n.ticking {
		n.ticking = true
		go n.tick()
	}
}

// tick wakes each waiting reader once its datagram is due, sleeping in the
// kernel in between; it returns when no reader waits.
func (n *Network) tick() {
	for {
		n.mu.Lock()
		now := n.now()
		next := time.Duration(-1)
		k := 0
		for _, e := range n.waiters {
			switch {
			case e.closed:
				e.waiting = false
			case e.wakeAt <= now:
				e.waiting = false
				e.wake()
			default:
				if next < 0 || e.wakeAt < next {
					next = e.wakeAt
				}
				n.waiters[k] = e
				k++
			}
		}
		clear(n.waiters[k:])
		n.waiters = n.waiters[:k]
		if k == 0 {
			n.ticking = false
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		sleepPrecise(min(next-now, preciseSlice))
	}
}

// ReadBatch blocks until a datagram is due, then returns every due one
// that fits msgs, in order of arrival.
func (e *Endpoint) ReadBatch(msgs []udp.Msg) (int, error) {
	for i := range msgs {
		if m := &msgs[i]; m.Off < 0 || m.Off >= len(m.Buf) {
			return 0, fmt.Errorf("memlink: ReadBatch: message %d has no room after offset %d in its %d-byte buffer", i, m.Off, len(m.Buf))
		}
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	n := e.net
	for {
		n.mu.Lock()
		if e.closed {
			n.mu.Unlock()
			return 0, net.ErrClosed
		}
		now := n.now()
		got := 0
		for got < len(msgs) && e.rx.len() > 0 && e.rx.headDue() <= now {
			m := &msgs[got]
			b, from := e.rx.head()
			if len(b) > len(m.Buf)-m.Off {
				e.st.RxTruncated++
				e.rx.pop()
				continue
			}
			m.N = copy(m.Buf[m.Off:], b)
			m.Addr = from
			e.rx.pop()
			e.st.RxPackets++
			e.st.RxBytes += uint64(m.N)
			got++
		}
		wait := time.Duration(-1)
		if got > 0 {
			e.st.RxDatagrams += uint64(got)
			e.st.RxCalls++
		} else if e.rx.len() > 0 && n.cfg.Clock == nil {
			if wait = e.rx.headDue() - now; n.cfg.PreciseTimers && wait < preciseWait {
				// Due soon: tick wakes this reader (notify), as a
				// datagram due sooner that arrives meanwhile does.
				n.awaitDue(e)
				wait = -1
			} else if n.cfg.PreciseTimers {
				wait -= preciseWait / 2 // the runtime's timer wakes late; tick the rest
			}
		}
		n.mu.Unlock()
		if got > 0 {
			return got, nil
		}
		var tc <-chan time.Time
		if wait >= 0 {
			if e.timer == nil {
				e.timer = time.NewTimer(wait)
			} else {
				e.timer.Reset(wait)
			}
			tc = e.timer.C
		}
		select {
		case <-e.notify:
		case <-tc:
		case <-e.done:
		}
		if e.timer != nil {
			e.timer.Stop()
		}
	}
}
