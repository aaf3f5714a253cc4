package ring

// The ring and its ranks: the protocol (Ring's doc comment), a rank's
// state, and building and closing a ring (New, Close). A rank's engine
// goroutine runs the protocol; follow one item through it in these files:
//
//	engine.go   the engine's state (ringEngine, ringFlight) and loop
//	            (engine): start a call → progress (timers, fill) → poll →
//	            handle → finished; no progress for PeerTimeout fails it
//	send.go     an item's way out: the window and its data allow it
//	            (fill), it is staged in its send slot and written into the
//	            right neighbour's receive slot
//	receive.go  an item's way in: consumed once (added or copied into the
//	            tensor), acknowledged every time (onData)
//	ack.go      acknowledgements: one sent for every copy received; one
//	            received slides the window, samples the round trip and
//	            may trigger a fast retransmit (onAck)
//	rto.go      the retransmission timer: the oldest item's expiry, the
//	            backoff, the timeout from the measured round trip
//
// and around them items.go (which elements item k carries, its slots, its
// immediate), call.go (AllReduce hands a call to the engine and waits for
// it), config.go and stats.go.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/verbs"
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

// open creates the rank's verbs objects: PD, MR (send then receive
// slots), one CQ for both QPs, the two UC QPs; and the engine's buffers.
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

// postInitialRecvs posts recvDepth receives on each QP: the data items
// arrive on the left one, the acknowledgements on the right one.
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

// release closes every rank's verbs objects, QPs first.
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
