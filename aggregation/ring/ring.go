package ring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// Ring defaults.
const (
	DefaultMessageSize          = 16 << 10
	DefaultMTU                  = verbs.MTU(1024)
	DefaultRetransmitTimeout    = 10 * time.Millisecond
	DefaultMaxRetransmitTimeout = time.Second
	DefaultPeerTimeout          = 10 * time.Second
	// ringWindowBytes sizes the default window: bytes in flight per rank.
	// Loopback needs little; a bigger window only queues (and inflates the
	// round trip on a loaded machine).
	ringWindowBytes = 256 << 10
	// ringFastRetransmit: an item is resent at once when this many items
	// sent after it were acknowledged (it or its acknowledgement was lost:
	// the path is FIFO); TCP's duplicate-ack threshold.
	ringFastRetransmit = 3
	ringMaxItems       = 1 << 24 // item index bits of the immediate
)

// Ring errors, tested with errors.Is.
var (
	// ErrClosed: the ring was closed before or during the call.
	ErrClosed = errors.New("ring: closed")
	// ErrBroken: an earlier call on this rank failed; the ranks no longer
	// agree on where they are, so the ring cannot be used again.
	ErrBroken = errors.New("ring: broken by an earlier failure (close it and build a new one)")
	// ErrPeerTimeout: a neighbour stopped answering.
	ErrPeerTimeout = errors.New("no progress from a ring neighbour")
)

// Config configures a ring all-reduce. Zero fields take the defaults.
type Config struct {
	// MessageSize is the bytes per RDMA WRITE message (a multiple of 4;
	// default 16 KiB). The last message of a segment may be shorter.
	MessageSize int
	// MTU is the path MTU: the payload bytes per packet (default 1024).
	MTU verbs.MTU
	// Window is the most messages a rank has in flight (sent, not yet
	// acknowledged); default 256 KiB / MessageSize, within [4, 256].
	Window int
	// RetransmitTimeout is the first and smallest retransmission timeout
	// (default 10 ms); MaxRetransmitTimeout caps the backoff (default 1 s).
	RetransmitTimeout, MaxRetransmitTimeout time.Duration
	// PeerTimeout bounds how long a rank waits without any progress before
	// it fails with ErrPeerTimeout (default 10 s).
	PeerTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.MessageSize == 0 {
		c.MessageSize = DefaultMessageSize
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.RetransmitTimeout == 0 {
		c.RetransmitTimeout = DefaultRetransmitTimeout
	}
	if c.MaxRetransmitTimeout == 0 {
		c.MaxRetransmitTimeout = DefaultMaxRetransmitTimeout
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	switch {
	case c.MessageSize < 4 || c.MessageSize%4 != 0 || c.MessageSize > 1<<30:
		return c, fmt.Errorf("ring: message size %d: give a multiple of 4 bytes up to 1 GiB", c.MessageSize)
	case c.Window < 0:
		return c, fmt.Errorf("ring: window %d: give a positive number of messages (0 for the default)", c.Window)
	case c.RetransmitTimeout < 0 || c.MaxRetransmitTimeout < c.RetransmitTimeout:
		return c, fmt.Errorf("ring: retransmission timeouts %v … %v: give 0 < first ≤ max", c.RetransmitTimeout, c.MaxRetransmitTimeout)
	case c.PeerTimeout < c.RetransmitTimeout:
		return c, fmt.Errorf("ring: peer timeout %v is below the retransmission timeout %v: a neighbour would be declared dead before the first retransmission", c.PeerTimeout, c.RetransmitTimeout)
	}
	if err := c.MTU.Check(); err != nil {
		return c, fmt.Errorf("ring: %w", err)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow(c.MessageSize)
	}
	return c, nil
}

// DefaultWindow is the window, in messages, that a Config with Window 0
// gets for messages of messageSize bytes: 256 KiB in flight, within
// [4, 256] messages. Each rank's MR holds 2 × window messages.
func DefaultWindow(messageSize int) int {
	return min(max(ringWindowBytes/max(messageSize, 1), 4), 256)
}

// RegisteredBytes is one rank's registered memory for messages of
// messageSize bytes and a window of window messages (0: DefaultWindow): a
// send and a receive region of window messages each.
func RegisteredBytes(messageSize, window int) int {
	if window == 0 {
		window = DefaultWindow(messageSize)
	}
	return 2 * window * messageSize
}

// Stats counts one rank's traffic (or, from Ring.Stats, all ranks').
type Stats struct {
	AllReduces      uint64 `json:"all_reduces"`
	Messages        uint64 `json:"messages"`        // data messages sent, first transmissions
	Retransmissions uint64 `json:"retransmissions"` // data messages resent after a timeout
	Packets         uint64 `json:"packets"`         // packets sent: data, retransmissions and acks
	Acks            uint64 `json:"acks"`            // acknowledgements sent
	Duplicates      uint64 `json:"duplicates"`      // data messages received again (acknowledged, not consumed)
	Stray           uint64 `json:"stray"`           // messages or acks that belonged to no call in progress
}

func (s *Stats) add(o Stats) {
	s.AllReduces += o.AllReduces
	s.Messages += o.Messages
	s.Retransmissions += o.Retransmissions
	s.Packets += o.Packets
	s.Acks += o.Acks
	s.Duplicates += o.Duplicates
	s.Stray += o.Stray
}

type ringCounters struct {
	allReduces, messages, retransmissions, packets, acks, duplicates, stray atomic.Uint64
}

// Ring is a ring all-reduce among len(devs) ranks: the baseline SwitchML is
// measured against (docs/bench.md
// "The ring baseline"). N ranks, one verbs device each, form a ring; rank
// r has a UC QP "right" connected to rank r+1's QP "left". Data flows
// right-ward as RDMA WRITE WITH IMMEDIATE messages; acknowledgements flow
// back on the same QP pair as zero-length WRITE WITH IMMEDIATE messages.
//
// Algorithm. The tensor of n elements is cut into N segments (segment j is
// [j·n/N, (j+1)·n/N)), each segment into M messages of MessageSize bytes.
// Reduce-scatter: in step s = 0 … N−2 rank r sends segment (r−s) mod N and
// adds what it receives (segment (r−1−s) mod N) into its tensor; afterwards
// segment (r+1) mod N is fully reduced on rank r. All-gather: in step
// s = 0 … N−2 rank r sends segment (r+1−s) mod N and copies in what it
// receives (segment (r−s) mod N). A rank's sends form one sequence of
// K = 2(N−1)·M items, item k = step·M + message; item k ≥ M may be sent once
// item k−M has been received from the left, so the steps pipeline message by
// message rather than waiting for whole segments.
//
// Immediate: bits 31–24 are the call's epoch (a per-rank call counter, mod
// 256), bits 23–0 the item index k. The same encoding acknowledges item k.
//
// Reliability (UC loses a whole message when any packet is lost, and a loaded
// loopback socket overflows): each rank has a send window of Window messages.
// Item k is staged in send slot k mod Window and written into the right
// neighbour's receive slot k mod Window; it may be sent only when item
// k−Window has been acknowledged, and the receiver acknowledges an item only
// after it has consumed the slot (added or copied it into the tensor), so a
// slot is never overwritten while in use. The receiver consumes an item once
// and acknowledges every copy, so duplicates are harmless. Loss is repaired
// two ways: an unacknowledged item is resent at once when three items sent
// after it have been acknowledged (fast retransmit; the path is FIFO, so it
// or its acknowledgement was lost), and when the oldest unacknowledged item's
// timer expires it alone is resent and the timeout doubles (the timeout
// adapts to the measured round trip as TCP's does, never below
// RetransmitTimeout, never above MaxRetransmitTimeout). An item of the
// previous call is acknowledged again (its first acknowledgement may have been
// lost after this rank moved on); an item of the next call that arrives
// before this rank's own AllReduce started is remembered by slot and consumed
// when the call starts. Because the path is FIFO, a stale retransmission
// always lands before the item that reuses its slot.
// A rank with no progress — no new item received and no new acknowledgement —
// for PeerTimeout fails with ErrPeerTimeout, naming the neighbour.
//
// Each rank runs one engine goroutine for the ring's lifetime (so it keeps
// acknowledging a neighbour's retransmissions between calls); AllReduce hands
// it the tensor and waits. Element data travels in host byte order (little-
// endian on every platform this project supports).
//
// Use: Rank(i).AllReduce is called by one goroutine per rank, all with
// tensors of the same length; Close may be called from any goroutine, once
// all calls returned or to abort them.
type Ring struct {
	ranks     []*Rank
	cfg       Config
	closeOnce sync.Once
	closeErr  error
}

// Rank is one rank of a Ring. Its methods are safe for concurrent use,
// but calls to AllReduce run one at a time.
type Rank struct {
	ring        *Ring
	rank, size  int
	cfg         Config
	dev         verbs.Device
	left, right verbs.Device

	pd              verbs.PD
	mr              verbs.MR
	cq              verbs.CQ
	qpRight, qpLeft verbs.QP
	rightRKey       uint32
	leftRKey        uint32
	msgBytes        int
	vals            int // elements per message
	window          int
	recvOff         uint64 // MR offset of the receive slots

	callMu     sync.Mutex // one AllReduce at a time
	call       ringCall
	reqs       chan *ringCall
	waker      *timing.Waker
	engineDone chan struct{}
	closing    atomic.Bool
	broken     error // set by the engine before engineDone closes
	cnt        ringCounters

	e ringEngine // owned by the engine goroutine
}

type ringCall struct {
	ctx    context.Context
	f      []float32
	i      []int32
	result chan error
}

// ringFlight is one item in flight, by send slot.
type ringFlight struct {
	k        int
	length   uint32
	sent     time.Time // last transmission
	seq      uint64    // transmission sequence number of the last transmission
	later    int       // items transmitted after it and acknowledged since
	resent   bool      // retransmitted at least once (no RTT sample: Karn)
	restarts int       // expired timer restarts behind an older item (timers)
	deadline time.Time
}

type ringEngine struct {
	call    *ringCall
	inCall  bool
	epoch   uint8
	n, m, k int // elements, messages per segment, items per call

	sendNext, sendBase int
	acked              []bool
	recvDone           []bool
	recvCount          int
	flight             []ringFlight
	pending            []int // by receive slot: item+1 of the next call, 0 if none
	nextTimer          time.Time
	lastProgress       time.Time

	rtt   timing.RTT    // round trips of items sent once (Karn)
	rto   time.Duration // timeout of items sent from now on, doubled by expiries
	txSeq uint64        // transmissions so far (orders them)

	wcs     []verbs.Completion
	sendWRs []verbs.SendWR
	ackWRs  []verbs.SendWR
	recvWRs []verbs.RecvWR
	signal  int // sends since the last signaled one
}

// New builds a ring over devs (rank i uses devs[i]): per rank a PD, one
// MR of 2 × Window × MessageSize bytes (send and receive slots), one CQ and
// two UC QPs, connected in process. A single device gives a one-rank ring
// whose AllReduce leaves the tensor as it is.
func New(devs []verbs.Device, cfg Config) (*Ring, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, errors.New("ring: of no devices: give at least one")
	}
	n := len(devs)
	r := &Ring{cfg: cfg, ranks: make([]*Rank, n)}
	ok := false
	defer func() {
		if !ok {
			_ = r.release() // the error that made New fail is the one to report
		}
	}()
	for i, d := range devs {
		rr := &Rank{ring: r, rank: i, size: n, cfg: cfg, dev: d, left: devs[(i+n-1)%n], right: devs[(i+1)%n],
			msgBytes: cfg.MessageSize, vals: cfg.MessageSize / 4, window: cfg.Window,
			reqs: make(chan *ringCall, 1), engineDone: make(chan struct{})}
		rr.call.result = make(chan error, 1)
		r.ranks[i] = rr
		if n == 1 {
			continue
		}
		if err := rr.open(); err != nil {
			return nil, fmt.Errorf("ring: rank %d on %s: %w", i, d.Name(), err)
		}
	}
	if n > 1 {
		for i, rr := range r.ranks {
			right := r.ranks[(i+1)%n]
			attr := verbs.RTRAttr{RemoteQPN: right.qpLeft.QPN(), RemoteAddr: right.dev.Addr(), MTU: cfg.MTU}
			if err := verbs.Connect(rr.qpRight, verbs.AccessRemoteWrite, attr, 0); err != nil {
				return nil, fmt.Errorf("ring: connect rank %d to rank %d: %w", i, right.rank, err)
			}
			attr = verbs.RTRAttr{RemoteQPN: rr.qpRight.QPN(), RemoteAddr: rr.dev.Addr(), MTU: cfg.MTU}
			if err := verbs.Connect(right.qpLeft, verbs.AccessRemoteWrite, attr, 0); err != nil {
				return nil, fmt.Errorf("ring: connect rank %d to rank %d: %w", right.rank, i, err)
			}
			rr.rightRKey = right.mr.RKey()
			right.leftRKey = rr.mr.RKey()
		}
		for _, rr := range r.ranks {
			if err := rr.postInitialRecvs(); err != nil {
				return nil, err
			}
		}
	}
	for _, rr := range r.ranks {
		if n > 1 {
			rr.waker = timing.NewWaker()
			go rr.engine()
		}
	}
	ok = true
	return r, nil
}

// recvDepth is the receive WRs kept posted on each QP: a window of new
// items plus room for duplicates and the next call's early items.
func (rr *Rank) recvDepth() int { return 4*rr.window + 128 }

func (rr *Rank) open() error {
	var err error
	if rr.pd, err = rr.dev.AllocPD(); err != nil {
		return err
	}
	if rr.mr, err = rr.pd.AllocMR(RegisteredBytes(rr.msgBytes, rr.window), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return err
	}
	rr.recvOff = uint64(rr.window * rr.msgBytes)
	depth := rr.recvDepth()
	if rr.cq, err = rr.dev.CreateCQ(2*depth + 2*rr.window + 256); err != nil {
		return err
	}
	qc := verbs.QPConfig{SendCQ: rr.cq, RecvCQ: rr.cq, MaxSendWR: 4*rr.window + 128, MaxRecvWR: depth}
	if rr.qpRight, err = rr.pd.CreateUCQP(qc); err != nil {
		return err
	}
	if rr.qpLeft, err = rr.pd.CreateUCQP(qc); err != nil {
		return err
	}
	e := &rr.e
	e.flight = make([]ringFlight, rr.window)
	e.pending = make([]int, rr.window)
	e.wcs = make([]verbs.Completion, 64)
	e.sendWRs = make([]verbs.SendWR, 0, rr.window)
	e.ackWRs = make([]verbs.SendWR, 0, 2*rr.window+len(e.wcs))
	e.recvWRs = make([]verbs.RecvWR, depth)
	e.rto = rr.cfg.RetransmitTimeout
	return nil
}

func (rr *Rank) postInitialRecvs() error {
	for _, qp := range []verbs.QP{rr.qpLeft, rr.qpRight} {
		if _, err := qp.PostRecv(rr.e.recvWRs); err != nil {
			return fmt.Errorf("ring: rank %d: post receives: %w", rr.rank, err)
		}
	}
	return nil
}

// Size is the number of ranks.
func (r *Ring) Size() int { return len(r.ranks) }

// Config is the configuration with defaults filled in.
func (r *Ring) Config() Config { return r.cfg }

// Rank returns rank i (0 ≤ i < Size).
func (r *Ring) Rank(i int) *Rank { return r.ranks[i] }

// Stats sums every rank's counters.
func (r *Ring) Stats() Stats {
	var s Stats
	for _, rr := range r.ranks {
		s.add(rr.Stats())
	}
	return s
}

// Stats returns a snapshot of this rank's counters.
func (rr *Rank) Stats() Stats {
	c := &rr.cnt
	return Stats{AllReduces: c.allReduces.Load(), Messages: c.messages.Load(), Retransmissions: c.retransmissions.Load(),
		Packets: c.packets.Load(), Acks: c.acks.Load(), Duplicates: c.duplicates.Load(), Stray: c.stray.Load()}
}

// Close stops every rank's engine (a call in progress returns ErrClosed)
// and releases the verbs objects. Idempotent.
func (r *Ring) Close() error {
	r.closeOnce.Do(func() {
		for _, rr := range r.ranks {
			if rr.waker != nil {
				rr.closing.Store(true)
				rr.waker.Fire()
			}
		}
		for _, rr := range r.ranks {
			if rr.waker != nil {
				<-rr.engineDone
				rr.waker.Halt()
			}
		}
		r.closeErr = r.release()
	})
	return r.closeErr
}

func (r *Ring) release() error {
	var errs []error
	for _, rr := range r.ranks {
		if rr == nil {
			continue
		}
		for _, c := range []interface{ Close() error }{rr.qpRight, rr.qpLeft, rr.cq, rr.mr, rr.pd} {
			if c != nil {
				errs = append(errs, c.Close())
			}
		}
	}
	return errors.Join(errs...)
}

// AllReduce replaces x by the element-wise float32 sum of every rank's x.
// Every rank must call it with a tensor of the same length; the results are
// bit-identical on all ranks (each element is summed once, in ring order, and
// then copied). x must not be touched until AllReduce returns. An error
// other than bad input breaks the rank (ErrBroken afterwards).
func (rr *Rank) AllReduce(ctx context.Context, x []float32) error {
	return rr.do(ctx, x, nil)
}

// AllReduceInt32 is AllReduce for int32 (exact, wrapping on overflow).
func (rr *Rank) AllReduceInt32(ctx context.Context, x []int32) error {
	return rr.do(ctx, nil, x)
}

func (rr *Rank) do(ctx context.Context, f []float32, iv []int32) error {
	n := len(f) + len(iv)
	if n == 0 {
		return errors.New("ring: all-reduce of an empty tensor: pass at least one element")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ring: rank %d: all-reduce not started: %w", rr.rank, err)
	}
	if rr.size == 1 {
		rr.cnt.allReduces.Add(1)
		return nil
	}
	m := ceilDiv(ceilDiv(n, rr.size), rr.vals)
	if items := 2 * (rr.size - 1) * m; items >= ringMaxItems {
		return fmt.Errorf("ring: all-reduce of %d elements in %d-byte messages is %d messages per rank, more than the %d the immediate can number: raise the message size", n, rr.msgBytes, items, ringMaxItems)
	}
	rr.callMu.Lock()
	defer rr.callMu.Unlock()
	if rr.closing.Load() {
		return ErrClosed
	}
	c := &rr.call
	c.ctx, c.f, c.i = ctx, f, iv
	select {
	case <-rr.engineDone:
		return rr.engineGone()
	case rr.reqs <- c:
	}
	rr.waker.Fire()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, rr.waker.Fire)
		defer stop()
	}
	select {
	case err := <-c.result:
		c.ctx, c.f, c.i = nil, nil, nil
		return err
	case <-rr.engineDone:
		select {
		case err := <-c.result:
			return err
		default:
		}
		return rr.engineGone()
	}
}

func (rr *Rank) engineGone() error {
	if rr.broken != nil {
		return fmt.Errorf("%w: %w", ErrBroken, rr.broken)
	}
	return ErrClosed
}

// engine is the rank's protocol loop; it owns rr.e.
func (rr *Rank) engine() {
	defer close(rr.engineDone)
	e := &rr.e
	finish := func(err error) {
		if err == nil {
			rr.cnt.allReduces.Add(1)
		}
		c := e.call
		e.call, e.inCall = nil, false
		c.result <- err
	}
	fail := func(err error) {
		rr.broken = err
		if e.call != nil {
			finish(err)
		}
	}
	for {
		rr.waker.Reset()
		if rr.closing.Load() {
			if e.call != nil {
				finish(ErrClosed)
			}
			return
		}
		now := time.Now()
		if e.call == nil {
			select {
			case c := <-rr.reqs:
				if err := rr.start(c, now); err != nil {
					fail(err)
					return
				}
			default:
			}
		}
		wake := now.Add(time.Hour)
		if e.call != nil {
			if err := e.call.ctx.Err(); err != nil {
				fail(fmt.Errorf("ring: rank %d: all-reduce interrupted, the ring cannot continue: %w", rr.rank, err))
				return
			}
			if err := rr.progress(now, &wake); err != nil {
				fail(err)
				return
			}
			if rr.finished() {
				finish(nil)
				continue
			}
		}
		k, err := rr.cq.Poll(e.wcs)
		if err == nil && k == 0 {
			rr.waker.Arm(wake.Sub(now))
			k, err = verbs.Await(rr.cq, e.wcs, rr.waker.C())
			if err == nil && k == 0 {
				continue // woken
			}
		}
		if err != nil {
			fail(fmt.Errorf("ring: rank %d: completion queue: %w", rr.rank, err))
			return
		}
		if err := rr.handle(e.wcs[:k], time.Now()); err != nil {
			fail(err)
			return
		}
		if e.call != nil && rr.finished() {
			finish(nil)
		}
	}
}

func (rr *Rank) finished() bool {
	e := &rr.e
	return e.recvCount == e.k && e.sendBase == e.k
}

// start sets up a call: geometry, bitmaps, and the items of this call that
// arrived before it started.
func (rr *Rank) start(c *ringCall, now time.Time) error {
	e := &rr.e
	e.call, e.inCall = c, true
	e.epoch++
	e.n = len(c.f) + len(c.i)
	e.m = max((ceilDiv(e.n, rr.size)+rr.vals-1)/rr.vals, 1)
	e.k = 2 * (rr.size - 1) * e.m
	e.acked = resetBools(e.acked, e.k)
	e.recvDone = resetBools(e.recvDone, e.k)
	e.recvCount, e.sendNext, e.sendBase = 0, 0, 0
	e.nextTimer = now.Add(time.Hour)
	e.lastProgress = now
	for k := range e.k {
		if lo, hi := rr.recvRange(k); lo == hi {
			e.recvDone[k] = true
			e.recvCount++
		}
	}
	for slot, p := range e.pending {
		if p == 0 {
			continue
		}
		e.pending[slot] = 0
		if err := rr.onData(p-1, rr.e.epoch, uint32(rr.msgBytes), now, true); err != nil {
			return err
		}
	}
	return rr.flushAcks()
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func resetBools(b []bool, n int) []bool {
	if cap(b) < n {
		return make([]bool, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// segment is segment j's element range.
func (rr *Rank) segment(j int) (lo, hi int) {
	n, p := rr.e.n, rr.size
	return j * n / p, (j + 1) * n / p
}

func (rr *Rank) mod(j int) int { return ((j % rr.size) + rr.size) % rr.size }

// itemRange is the element range of item k as sent by rank r.
func (rr *Rank) itemRange(r, k int) (lo, hi int) {
	e := &rr.e
	s, m := k/e.m, k%e.m
	var j int
	if s < rr.size-1 {
		j = rr.mod(r - s) // reduce-scatter
	} else {
		j = rr.mod(r + 1 - (s - (rr.size - 1))) // all-gather
	}
	slo, shi := rr.segment(j)
	lo = min(slo+m*rr.vals, shi)
	return lo, min(lo+rr.vals, shi)
}

func (rr *Rank) sendRange(k int) (int, int) { return rr.itemRange(rr.rank, k) }
func (rr *Rank) recvRange(k int) (int, int) { return rr.itemRange(rr.rank-1, k) }

func (rr *Rank) slot(off uint64, k int) []byte {
	b := rr.mr.Bytes()
	o := off + uint64((k%rr.window)*rr.msgBytes)
	return b[o : o+uint64(rr.msgBytes)]
}

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func i32s(b []byte) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// progress runs the timers and fills the send window; wake is lowered to the
// next time the engine must look again.
func (rr *Rank) progress(now time.Time, wake *time.Time) error {
	e := &rr.e
	if !now.Before(e.nextTimer) {
		if err := rr.timers(now); err != nil {
			return err
		}
	}
	if now.Sub(e.lastProgress) >= rr.cfg.PeerTimeout {
		return rr.stalled(now)
	}
	if err := rr.fill(now); err != nil {
		return err
	}
	*wake = minTime(*wake, minTime(e.nextTimer, e.lastProgress.Add(rr.cfg.PeerTimeout)))
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (rr *Rank) stalled(now time.Time) error {
	e := &rr.e
	what := fmt.Sprintf("waiting for data from rank %d (%s)", rr.mod(rr.rank-1), rr.left.Addr())
	if e.sendBase < e.sendNext {
		what = fmt.Sprintf("waiting for data from rank %d (%s) and acknowledgements from rank %d (%s)",
			rr.mod(rr.rank-1), rr.left.Addr(), rr.mod(rr.rank+1), rr.right.Addr())
	}
	return fmt.Errorf("ring: rank %d: %w: nothing new for %v, %s; %d of %d messages received, %d of %d acknowledged (is every rank calling AllReduce with the same length? raise Config.PeerTimeout if the network is merely slow)",
		rr.rank, ErrPeerTimeout, now.Sub(e.lastProgress).Round(time.Millisecond), what, e.recvCount, e.k, e.sendBase, e.k)
}

// timers handles the retransmission timers: the oldest unacknowledged item
// whose timer expired is resent and the timeout doubles until the next
// clean round-trip sample; the other unacknowledged items' timers restart
// (they most likely just wait behind it; a real loss among them is
// repaired by the fast retransmit as acknowledgements arrive), except that
// an item whose own timer has expired rtoRestarts times is resent too.
//
// Why the exception (issue 10, found with `bench --loss 0.05`): when the
// window has stalled, no new item is sent, so no clean sample comes and the
// timeout stays at its maximum; resending one item per expiry then needed
// a second per lost item and a rank went its whole PeerTimeout without
// progress while its neighbour waited for several lost messages.
func (rr *Rank) timers(now time.Time) error {
	e := &rr.e
	e.nextTimer = now.Add(time.Hour)
	expired := false
	for k := e.sendBase; k < e.sendNext; k++ {
		if e.acked[k] {
			continue
		}
		f := &e.flight[k%rr.window]
		due := !now.Before(f.deadline)
		switch {
		case due && !expired:
			expired = true
			e.rto = min(2*e.rto, rr.cfg.MaxRetransmitTimeout)
			rr.retransmit(k, now)
		case due && f.restarts >= rtoRestarts:
			rr.retransmit(k, now)
		case expired:
			if due {
				f.restarts++
			}
			f.deadline = maxTime(f.deadline, now.Add(e.rto))
		}
		e.nextTimer = minTime(e.nextTimer, f.deadline)
	}
	return rr.postData()
}

// rtoRestarts is how many times an item's expired timer may be restarted
// behind an older item's before it is resent as well.
const rtoRestarts = 1

// retransmit queues item k again (rr.postData sends it).
func (rr *Rank) retransmit(k int, now time.Time) {
	e := &rr.e
	f := &e.flight[k%rr.window]
	e.txSeq++
	f.sent, f.seq, f.later, f.resent, f.deadline, f.restarts = now, e.txSeq, 0, true, now.Add(e.rto), 0
	e.nextTimer = minTime(e.nextTimer, f.deadline)
	e.sendWRs = append(e.sendWRs, rr.dataWR(k, f.length))
	rr.cnt.retransmissions.Add(1)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (rr *Rank) dataWR(k int, length uint32) verbs.SendWR {
	slot := uint64((k % rr.window) * rr.msgBytes)
	rr.cnt.packets.Add(uint64(max(ceilDiv(int(length), int(rr.cfg.MTU)), 1)))
	return verbs.SendWR{
		ID:         uint64(k),
		Opcode:     verbs.WRRDMAWriteWithImm,
		Local:      verbs.SGE{Addr: slot, Length: length, LKey: rr.mr.LKey()},
		RemoteAddr: rr.recvOff + slot,
		RKey:       rr.rightRKey,
		Imm:        rr.imm(rr.e.epoch, k),
		Signaled:   rr.signaled(),
	}
}

func (rr *Rank) imm(epoch uint8, k int) uint32 { return uint32(epoch)<<24 | uint32(k) }

// signaled requests a send completion now and then, so that a hardware send
// queue of unsignaled requests gets reclaimed.
func (rr *Rank) signaled() bool {
	rr.e.signal++
	if rr.e.signal >= rr.window {
		rr.e.signal = 0
		return true
	}
	return false
}

func (rr *Rank) postData() error {
	e := &rr.e
	if len(e.sendWRs) == 0 {
		return nil
	}
	_, err := rr.qpRight.PostSend(e.sendWRs)
	e.sendWRs = e.sendWRs[:0]
	if err != nil {
		return fmt.Errorf("ring: rank %d: send to rank %d: %w", rr.rank, rr.mod(rr.rank+1), err)
	}
	return nil
}

// fill sends new items while the window and the dependencies allow.
func (rr *Rank) fill(now time.Time) error {
	e := &rr.e
	for e.sendNext < e.k && e.sendNext < e.sendBase+rr.window {
		k := e.sendNext
		if k >= e.m && !e.recvDone[k-e.m] {
			break
		}
		lo, hi := rr.sendRange(k)
		e.sendNext++
		if lo == hi {
			e.acked[k] = true
			rr.advance()
			continue
		}
		dst := rr.slot(0, k)
		if e.call.f != nil {
			copy(f32s(dst), e.call.f[lo:hi])
		} else {
			copy(i32s(dst), e.call.i[lo:hi])
		}
		length := uint32(4 * (hi - lo))
		f := &e.flight[k%rr.window]
		e.txSeq++
		*f = ringFlight{k: k, length: length, sent: now, seq: e.txSeq, deadline: now.Add(e.rto)}
		e.nextTimer = minTime(e.nextTimer, f.deadline)
		e.sendWRs = append(e.sendWRs, rr.dataWR(k, length))
		rr.cnt.messages.Add(1)
	}
	return rr.postData()
}

func (rr *Rank) advance() {
	e := &rr.e
	for e.sendBase < e.sendNext && e.acked[e.sendBase] {
		e.sendBase++
	}
}

// handle processes a batch of completions, then reposts the receives it
// consumed and sends the acknowledgements it owes.
func (rr *Rank) handle(wcs []verbs.Completion, now time.Time) error {
	var nData, nAck int
	for i := range wcs {
		wc := &wcs[i]
		if err := wc.Err(); err != nil {
			return fmt.Errorf("ring: rank %d: %w", rr.rank, err)
		}
		if wc.Opcode != verbs.WCRecvRDMAWithImm {
			continue // a signaled send
		}
		k, epoch := int(wc.Imm&(ringMaxItems-1)), uint8(wc.Imm>>24)
		switch wc.QPN {
		case rr.qpLeft.QPN():
			nData++
			if err := rr.onData(k, epoch, wc.ByteLen, now, false); err != nil {
				return err
			}
		case rr.qpRight.QPN():
			nAck++
			rr.onAck(k, epoch, now)
		}
	}
	if nData > 0 {
		if _, err := rr.qpLeft.PostRecv(rr.e.recvWRs[:nData]); err != nil {
			return fmt.Errorf("ring: rank %d: repost receives: %w", rr.rank, err)
		}
	}
	if nAck > 0 {
		if _, err := rr.qpRight.PostRecv(rr.e.recvWRs[:nAck]); err != nil {
			return fmt.Errorf("ring: rank %d: repost receives: %w", rr.rank, err)
		}
	}
	if err := rr.postData(); err != nil { // fast retransmissions
		return err
	}
	return rr.flushAcks()
}

// onData handles data item k of the given epoch that has landed in receive
// slot k mod Window. deferred is true for an early item replayed by start.
func (rr *Rank) onData(k int, epoch uint8, byteLen uint32, now time.Time, deferred bool) error {
	e := &rr.e
	switch {
	case e.inCall && epoch == e.epoch:
		if k >= e.k {
			return rr.mismatch(k, byteLen)
		}
		if e.recvDone[k] {
			rr.cnt.duplicates.Add(1)
			break
		}
		lo, hi := rr.recvRange(k)
		if !deferred && byteLen != uint32(4*(hi-lo)) {
			return rr.mismatch(k, byteLen)
		}
		src := rr.slot(rr.recvOff, k)[:4*(hi-lo)]
		reduce := k/e.m < rr.size-1
		switch {
		case e.call.f != nil && reduce:
			addFloat32(e.call.f[lo:hi], f32s(src))
		case e.call.f != nil:
			copy(e.call.f[lo:hi], f32s(src))
		case reduce:
			addInt32(e.call.i[lo:hi], i32s(src))
		default:
			copy(e.call.i[lo:hi], i32s(src))
		}
		e.recvDone[k] = true
		e.recvCount++
		e.lastProgress = now
	case (e.inCall && epoch == e.epoch-1) || (!e.inCall && epoch == e.epoch):
		rr.cnt.duplicates.Add(1) // the left neighbour missed our acknowledgement
	case !e.inCall && epoch == e.epoch+1:
		e.pending[k%rr.window] = k + 1 // consumed and acknowledged when our call starts
		return nil
	default:
		rr.cnt.stray.Add(1)
		return nil
	}
	return rr.queueAck(epoch, k)
}

func (rr *Rank) mismatch(k int, byteLen uint32) error {
	return fmt.Errorf("ring: rank %d: message %d from rank %d carries %d bytes, which this rank's tensor of %d elements does not expect: every rank must call AllReduce with a tensor of the same length",
		rr.rank, k, rr.mod(rr.rank-1), byteLen, rr.e.n)
}

func (rr *Rank) queueAck(epoch uint8, k int) error {
	e := &rr.e
	e.ackWRs = append(e.ackWRs, verbs.SendWR{
		ID:       uint64(k),
		Opcode:   verbs.WRRDMAWriteWithImm,
		Local:    verbs.SGE{LKey: rr.mr.LKey()},
		RKey:     rr.leftRKey,
		Imm:      rr.imm(epoch, k),
		Signaled: rr.signaled(),
	})
	rr.cnt.acks.Add(1)
	rr.cnt.packets.Add(1)
	if len(e.ackWRs) == cap(e.ackWRs) {
		return rr.flushAcks()
	}
	return nil
}

func (rr *Rank) flushAcks() error {
	e := &rr.e
	if len(e.ackWRs) == 0 {
		return nil
	}
	_, err := rr.qpLeft.PostSend(e.ackWRs)
	e.ackWRs = e.ackWRs[:0]
	if err != nil {
		return fmt.Errorf("ring: rank %d: acknowledge to rank %d: %w", rr.rank, rr.mod(rr.rank-1), err)
	}
	return nil
}

func (rr *Rank) onAck(k int, epoch uint8, now time.Time) {
	e := &rr.e
	if !e.inCall || epoch != e.epoch || k >= e.sendNext || e.acked[k] {
		rr.cnt.stray.Add(1)
		return
	}
	e.acked[k] = true
	e.lastProgress = now
	f := &e.flight[k%rr.window]
	if !f.resent {
		rr.sampleRTT(now.Sub(f.sent))
	}
	// Items transmitted before k and still unacknowledged were lost, or
	// their acknowledgements were (FIFO path); resend after a few such
	// acknowledgements, as TCP does after three duplicate ACKs.
	for j := e.sendBase; j < k; j++ {
		if g := &e.flight[j%rr.window]; !e.acked[j] && g.seq < f.seq {
			if g.later++; g.later >= ringFastRetransmit {
				rr.retransmit(j, now)
			}
		}
	}
	rr.advance()
}

// sampleRTT updates the smoothed round trip (RFC 6298) and the timeout of
// items sent from now on; it never goes below RetransmitTimeout, so on an
// idle loopback the configured value holds and on a loaded machine the
// timeout grows instead of firing spuriously.
func (rr *Rank) sampleRTT(rtt time.Duration) {
	e := &rr.e
	e.rtt.Sample(rtt)
	e.rto = e.rtt.RTO(rr.cfg.RetransmitTimeout, rr.cfg.MaxRetransmitTimeout)
}

func addFloat32(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

func addInt32(dst, src []int32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
