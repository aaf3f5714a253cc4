package aggregation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// qpState is the engine's view of one UC QP to the switch. The session
// fields live as long as the session; the call fields are reset by every
// AllReduce. Only the goroutine running AllReduce touches it.
type qpState struct {
	qp      verbs.QP
	index   int
	pool    wire.PoolIndex // pool index of the QP's first packet, set 0
	sendOff uint64         // the QP's send staging region in the MR
	// set and msgID describe the message in flight (or the last one sent):
	// both advance once per new message and never on a retransmission, so
	// a resend is identical. Every worker sends the same sequence of
	// messages on QP i, so they agree on both without talking.
	set   uint8
	msgID uint16
	wr    [1]verbs.SendWR // the message in flight, reposted as is on timeout

	busy     bool        // a message is in flight
	cur      int         // tensor message in flight; -1 for an exponent-only round
	next     int         // the next tensor message this QP sends
	scale    quant.Scale // the scale cur was quantized with
	sent     time.Time   // first transmission of the message in flight
	xmit     time.Time   // latest transmission of it (RACK)
	deadline time.Time   // retransmission timer
	rto      time.Duration
	timeouts int // timer expiries of the message in flight
	resends  int // transmissions after the first (timer or RACK)
	silent   int // consecutive timeouts that saw no sign of loss (retransmit)
	// queued counts signaled send WRs posted on the QP whose completion
	// has not come back: transmissions the NIC has not sent yet (a batch
	// of packet writes signals its last WR only).
	queued int
	// Per-packet recovery (Session.pktBits > 0): e0 is the look-ahead
	// exponent the message in flight carries; got marks its result packets
	// that came back one by one, ngot counts them; resE0 is the result
	// exponent of its last packet.
	e0      int8
	resE0   int8
	got     []uint64
	ngot    int
	joining bool // the message in flight is the QP's first of the call
	// firstRes is when the message's first one-packet result came back,
	// if that was before any resend (so it answers the first
	// transmission); zero otherwise.
	firstRes time.Time
	// lastPkt is when the latest of its one-packet results came back.
	lastPkt time.Time
}

// rackState is RACK's (RFC 8985) view of the session's QPs taken together:
// the latest transmission time among messages whose result arrived, and
// that message's time to result. A message still waiting that was
// transmitted before it, by more than the reordering window, has been
// lost (its request or its result): every QP's messages take the same
// path through the same switch, so a result that overtook it is
// evidence, the way a later acknowledgement is for TCP. Loss is then
// repaired in about one round trip instead of a retransmission timeout.
type rackState struct {
	xmit time.Time
	rtt  time.Duration
	// curMin and prevMin are the smallest times to result of this call
	// and of the one before: minRTT follows the host's load within a call
	// or two instead of keeping an idle moment's minimum forever.
	curMin, prevMin time.Duration
}

// sampleMin folds a time to result into the windowed minimum.
func (r *rackState) sampleMin(d time.Duration) {
	if r.curMin == 0 || d < r.curMin {
		r.curMin = d
	}
}

// minRTT is the smallest time to result of this call and the last; 0
// before any.
func (r *rackState) minRTT() time.Duration {
	if r.prevMin > 0 && (r.curMin == 0 || r.prevMin < r.curMin) {
		return r.prevMin
	}
	return r.curMin
}

// newCall starts the next window of the minimum.
func (r *rackState) newCall() {
	if r.curMin > 0 {
		r.prevMin, r.curMin = r.curMin, 0
	}
}

// reoWnd is how much later than its successor a result may come before
// the message is taken for lost (RFC 8985: min_RTT / 4). Results of
// different QPs are reordered when workers send them in different
// orders; a spurious resend costs one message of bandwidth.
func (r *rackState) reoWnd() time.Duration { return r.minRTT() / 4 }

// adaptState is AdaptiveWrites' memory between calls (engine.go,
// chooseWrites): the session's message and fast-retransmission counts
// when the last call started, and how many calls in a row have sent
// packet writes.
type adaptState struct {
	msgs, fast  uint64
	packetCalls int
}

const (
	// lossyFastRetransmits: a call in which RACK found at least one message
	// in this many lost has seen loss (not reordering: without loss RACK
	// fires for a few messages in 10⁴ here, see docs/benchmarks.md).
	lossyFastRetransmits = 64
	// probeMessageWrites: in a run of packet-write calls, every this many
	// calls goes back to message writes to see whether the loss is over.
	probeMessageWrites = 16
)

// chooseWrites decides whether the call starting now sends packet writes
// (Config.Writes). AdaptiveWrites: message writes cost the least CPU and
// are the right choice without loss; once a call shows loss, the next ones
// send packet writes, and every probeMessageWrites-th of them tries message
// writes again. Workers decide alone; a call in which they disagree is
// slower, not wrong (docs/protocol.md "Message writes and packet writes").
func (s *Session) chooseWrites() bool {
	if s.pktBits == 0 {
		return false
	}
	switch s.cfg.Writes {
	case PacketWrites:
		return true
	case MessageWrites:
		return false
	}
	a := &s.adapt
	msgs, fast := s.stats.messages.Load(), s.stats.fastRetransmissions.Load()
	lossy := msgs > a.msgs && (fast-a.fast)*lossyFastRetransmits >= msgs-a.msgs
	a.msgs, a.fast = msgs, fast
	if !s.pktWrites {
		a.packetCalls = 0
		return lossy
	}
	// Packet writes lose little to loss, and RACK's count under them
	// says little about it: probe with message writes now and then.
	a.packetCalls++
	return a.packetCalls%probeMessageWrites != 0
}

// recvOff is where the switch writes the result of a message sent in set:
// the RETH va the worker sends and the switch echoes.
func (s *Session) recvOff(set uint8, qp int) uint64 {
	return uint64((int(set)*len(s.qps) + qp) * s.msgBytes)
}

// Work-request ids: the QP index in the high half, the kind in the low.
const (
	wrSend = 1
	wrRecv = 2
)

func wrID(qp int, kind uint64) uint64 { return uint64(qp)<<32 | kind }

func (s *Session) postRecv(st *qpState) error {
	s.recvWR[0] = verbs.RecvWR{ID: wrID(st.index, wrRecv)}
	if _, err := st.qp.PostRecv(s.recvWR[:]); err != nil {
		return fmt.Errorf("aggregation: post receive on QP %d: %w", st.index, err)
	}
	return nil
}

// AllReduce replaces x, on every worker of the job, by the element-wise sum
// of the workers' x, computed by the switch in block floating point (see
// docs/protocol.md for the error bound). Every worker must call it with a
// tensor of the same length, in the same order relative to its other calls.
// x must not be touched until AllReduce returns. A NaN or ±Inf in x is an
// error before anything is sent.
//
// The session must have been opened with DType wire.Float32. An error other
// than bad input breaks the session (ErrBroken): close it.
func (s *Session) AllReduce(ctx context.Context, x []float32) error {
	if s.cfg.DType != wire.Float32 {
		return fmt.Errorf("aggregation: AllReduce ([]float32) on an %v session: call AllReduceInt32, or open the session with DType wire.Float32", s.cfg.DType)
	}
	if len(x) == 0 {
		return errors.New("aggregation: AllReduce of an empty tensor: pass at least one element")
	}
	if _, err := quant.BlockExponent(x); err != nil {
		var nf *quant.NonFiniteError
		if errors.As(err, &nf) {
			return fmt.Errorf("aggregation: AllReduce: element %d is %v: gradients must be finite (nothing was sent; the other workers wait for this one until their PeerTimeout): %w", nf.Index, nf.Value, err)
		}
		return fmt.Errorf("aggregation: AllReduce: %w", err)
	}
	return s.run(ctx, x, nil)
}

// AllReduceInt32 replaces x, on every worker, by the element-wise sum of the
// workers' x, exactly (wrapping on int32 overflow). The session must have
// been opened with DType wire.Int32. Otherwise as AllReduce.
func (s *Session) AllReduceInt32(ctx context.Context, x []int32) error {
	if s.cfg.DType != wire.Int32 {
		return fmt.Errorf("aggregation: AllReduceInt32 on a %v session: call AllReduce, or open the session with DType wire.Int32", s.cfg.DType)
	}
	if len(x) == 0 {
		return errors.New("aggregation: AllReduceInt32 of an empty tensor: pass at least one element")
	}
	return s.run(ctx, nil, x)
}

// call is the tensor of one AllReduce.
type call struct {
	f    []float32
	i    []int32
	n    int // elements
	vals int // elements per message
	msgs int // messages
}

func (c *call) span(j int) (lo, hi int) {
	lo = j * c.vals
	return lo, min(lo+c.vals, c.n)
}

func (s *Session) run(ctx context.Context, f []float32, iv []int32) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("aggregation: AllReduce not started: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	if s.broken != nil {
		if s.broken == ErrClosed {
			return ErrClosed
		}
		return fmt.Errorf("aggregation: %w: %w", ErrBroken, s.broken)
	}
	s.wake.Reset()
	s.pktWrites = s.chooseWrites()
	if s.pktWrites {
		s.stats.packetWriteCalls.Add(1)
	}
	stop := context.AfterFunc(ctx, s.wake.Stop)
	defer stop()
	c := call{f: f, i: iv, n: len(f) + len(iv), vals: s.msgBytes / 4}
	c.msgs = (c.n + c.vals - 1) / c.vals
	if err := s.drive(ctx, &c); err != nil {
		s.broken = err
		return err
	}
	s.stats.allReduces.Add(1)
	s.stats.callTimes.observe(time.Since(start))
	return nil
}

// drive runs the worker protocol of docs/protocol.md for one tensor.
func (s *Session) drive(ctx context.Context, c *call) error {
	now := time.Now()
	s.callStart, s.lastPass = now, now
	s.rack.newCall()
	active := 0
	for _, st := range s.qps {
		st.next, st.busy, st.cur, st.joining = st.index, false, -1, true
		if st.next >= c.msgs {
			continue // every worker leaves the same QPs idle
		}
		var err error
		if c.f != nil {
			err = s.sendExponents(c, st, now)
		} else {
			_, err = s.sendNext(c, st, 0, now)
		}
		if err != nil {
			return err
		}
		active++
	}
	// On every way out: nothing staged stays behind. The call's result is
	// decided by then; a failed send shows up as the next call's error.
	defer func() { _ = s.ringDoorbell() }()
	for active > 0 {
		if err := s.interrupted(ctx); err != nil {
			return err
		}
		// Completions first: a result that is already here must not be
		// retransmitted because this goroutine was late to look (on a
		// loaded host it can be descheduled for longer than a timeout).
		k, err := s.cq.Poll(s.wcs)
		if err != nil {
			if ierr := s.interrupted(ctx); ierr != nil {
				return ierr
			}
			return fmt.Errorf("aggregation: %v: completion queue: %w", s, err)
		}
		if k > 0 {
			n, err := s.completeAll(c, k)
			if err != nil {
				return err
			}
			active -= n
			if k == len(s.wcs) {
				continue // more may be waiting
			}
		}
		now := time.Now()
		wakeAt := now.Add(time.Hour)
		if gap := now.Sub(s.lastPass); gap > s.cfg.PeerTimeout/2 {
			// This process was not running (stopped, or starved of CPU):
			// the silence is ours, not the peers'. Restart the waits; if
			// the job ended meanwhile, the controller's event says so.
			for _, st := range s.qps {
				if st.busy {
					st.sent, st.deadline = st.sent.Add(gap), now
				}
			}
		}
		s.lastPass = now
		// Wake at least four times per PeerTimeout, so a longer gap
		// between passes can only mean this process was not running.
		wakeAt = minTime(wakeAt, now.Add(s.cfg.PeerTimeout/4))
		if t, ok := s.switchGoneAt(); ok {
			wakeAt = minTime(wakeAt, t)
		}
		for _, st := range s.qps {
			if !st.busy {
				continue
			}
			if now.Sub(st.sent) >= s.cfg.PeerTimeout {
				return s.deadPeer(st, now)
			}
			if !now.Before(st.deadline) {
				if err := s.retransmit(st, now); err != nil {
					return err
				}
			} else if lostAt, ok := s.lostAt(st); ok {
				// Evidence of loss (RACK, or its own packets' results).
				if !now.Before(lostAt) {
					if err := s.fastRetransmit(st, now); err != nil {
						return err
					}
				} else {
					wakeAt = minTime(wakeAt, lostAt)
				}
			}
			wakeAt = minTime(wakeAt, minTime(st.deadline, st.sent.Add(s.cfg.PeerTimeout)))
		}
		// Everything the completions and timers made ready goes out
		// together: one system call for all QPs.
		if err := s.ringDoorbell(); err != nil {
			return err
		}
		if k > 0 || active == 0 {
			continue
		}
		s.wake.Arm(wakeAt.Sub(now))
		k, err = s.cq.Wait(s.wake, s.wcs)
		if errors.Is(err, timing.ErrWoken) {
			continue
		}
		if err != nil {
			if ierr := s.interrupted(ctx); ierr != nil {
				return ierr
			}
			return fmt.Errorf("aggregation: %v: completion queue: %w", s, err)
		}
		n, err := s.completeAll(c, k)
		if err != nil {
			return err
		}
		active -= n
	}
	return nil
}

// completeAll handles s.wcs[:k] and returns how many QPs finished.
func (s *Session) completeAll(c *call, k int) (int, error) {
	finished := 0
	for i := range s.wcs[:k] {
		done, err := s.complete(c, &s.wcs[i])
		if err != nil {
			return finished, err
		}
		if done {
			finished++
		}
	}
	return finished, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// interrupted says why the engine must stop, if it must.
func (s *Session) interrupted(ctx context.Context) error {
	if s.closing.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("aggregation: %v: AllReduce interrupted, the session cannot continue: %w", s, err)
	}
	select {
	case <-s.assign.Done():
		if err := s.assign.Err(); errors.Is(err, control.ErrJobEnded) {
			return fmt.Errorf("aggregation: %v: the controller ended the job: %w", s, err)
		}
	default:
	}
	if t, ok := s.switchGoneAt(); ok && !time.Now().Before(t) {
		lost := time.Unix(0, s.ctlLost.Load())
		return fmt.Errorf("aggregation: %v: %w: the keep-alive stream to the controller broke %v ago (%v) and no result has come back since: the switch daemon (`swml-rdma switch` runs the controller) is gone; restart it and the job",
			s, ErrSwitchGone, time.Since(lost).Round(time.Millisecond), s.assign.Err())
	}
	return nil
}

// switchGoneAfter is how long a call waits for a result after the
// keep-alive stream broke before it takes the switch for gone. A
// controller apart from the switch (a Tofino's) can fail while the switch
// keeps aggregating: results then keep coming and the call goes on.
const switchGoneAfter = 500 * time.Millisecond

// switchGoneAt is when the running call fails for a broken keep-alive
// stream unless a result arrives first; false if the stream is fine.
func (s *Session) switchGoneAt() (time.Time, bool) {
	n := s.ctlLost.Load()
	if n == 0 {
		return time.Time{}, false
	}
	t := time.Unix(0, n)
	if s.lastResult.After(t) {
		t = s.lastResult
	}
	if s.callStart.After(t) {
		t = s.callStart
	}
	return t.Add(switchGoneAfter), true
}

// complete handles one completion; done is true when the QP has nothing
// more to send in this call.
func (s *Session) complete(c *call, wc *verbs.Completion) (done bool, err error) {
	qi := int(wc.WRID >> 32)
	if qi >= len(s.qps) {
		return false, fmt.Errorf("aggregation: %v: completion for unknown work request %#x", s, wc.WRID)
	}
	st := s.qps[qi]
	if wc.Status != verbs.WCSuccess {
		return false, fmt.Errorf("aggregation: %v: QP %d: %w", s, qi, wc.Err())
	}
	if wc.Opcode != verbs.WCRecvRDMAWithImm {
		// A send completed: the NIC has put it on the wire.
		if st.queued > 0 {
			st.queued--
		}
		return false, nil
	}
	if err := s.postRecv(st); err != nil {
		return false, err
	}
	imm := wire.Imm(wc.Imm)
	now := time.Now()
	// Any answer, even a duplicate, shows the switch is there.
	s.lastResult = now
	maxE := imm.E0()
	wholeResult := true
	if !st.busy || !wc.HasImm {
		s.stats.stale.Add(1)
		return false, nil
	}
	if id := imm.MsgID(); id&wire.PacketMsgIDFlag != 0 {
		// One packet of the message, answered alone (per-packet
		// recovery): the message is complete when all of them are.
		k := 0
		if s.pktBits > 0 {
			k = wire.PacketIndex(id, s.pktBits)
		}
		if s.pktBits == 0 || k >= s.cfg.PacketsPerMessage || id != wire.PacketMsgID(st.msgID, k, s.pktBits) || st.got[k>>6]&(1<<(k&63)) != 0 {
			s.stats.stale.Add(1)
			return false, nil
		}
		s.lastResult = now
		st.got[k>>6] |= 1 << (k & 63)
		st.lastPkt = now
		if st.ngot++; st.ngot == 1 && st.resends == 0 {
			st.firstRes = now
		}
		if k == s.cfg.PacketsPerMessage-1 {
			st.resE0 = imm.E0()
		}
		if st.ngot < s.cfg.PacketsPerMessage {
			return false, nil
		}
		maxE = st.resE0
		wholeResult = false
	} else if id != st.msgID {
		// A duplicate: the switch answered a retransmission of a message
		// whose result this worker already used.
		s.stats.stale.Add(1)
		return false, nil
	}
	s.stats.results.Add(1)
	s.stats.bytesReceived.Add(uint64(s.msgBytes))
	s.lastResult = now
	switch {
	case !wholeResult && !st.firstRes.IsZero():
		// Packet results: the first one came back before any resend, so
		// it answers the first transmission, and unlike the last one it
		// does not wait for another worker's resend of a lost packet.
		// Under heavy loss hardly any message gets all its packets back
		// at the first try: without this the estimate would have no
		// samples, and with the last result's time every loss would
		// lengthen the next timeouts.
		s.sampleRTT(st, st.firstRes.Sub(st.sent), st.sent)
	case st.resends == 0 || (wholeResult && s.pktBits > 0):
		// Karn's rule: only a result that surely answers the first
		// transmission gives an unambiguous time: the message was sent
		// once, or (per-packet recovery) it was resent packet by packet,
		// whose answers carry packet ids, and this whole-message result
		// answers the first transmission. Without the second case, the
		// late results that fired a timer would never be sampled, and
		// the estimate would keep too short a timeout on a loaded host.
		s.sampleRTT(st, now.Sub(st.sent), st.xmit)
	default:
		if r := now.Sub(st.xmit); r >= s.rack.minRTT() && st.xmit.After(s.rack.xmit) {
			// A resent message: the result can be taken for the answer to
			// its latest transmission only if it took at least the
			// smallest time to result since (RFC 8985, section 6.2).
			s.rack.xmit, s.rack.rtt = st.xmit, r
		}
	}
	st.busy = false
	st.joining = false
	if st.cur >= 0 {
		lo, hi := c.span(st.cur)
		off := s.recvOff(st.set, qi)
		res := s.mr.Bytes()[off : off+uint64(4*(hi-lo))]
		if c.f != nil {
			quant.Dequantize(c.f[lo:hi], res, st.scale)
		} else {
			quant.DecodeInt32(c.i[lo:hi], res)
		}
	}
	sent, err := s.sendNext(c, st, maxE, now)
	return !sent, err
}

// sendExponents starts a float32 call on st: a message of zeros whose only
// content is the look-ahead exponent of the QP's first tensor message.
func (s *Session) sendExponents(c *call, st *qpState, now time.Time) error {
	buf := s.mr.Bytes()[st.sendOff : st.sendOff+uint64(s.msgBytes)]
	clear(buf)
	e0, err := s.exponent(c, st.next)
	if err != nil {
		return err
	}
	st.cur = -1
	return s.post(st, e0, now)
}

// exponent is the block exponent of tensor message j, or MinExponent (the
// identity of the switch's max) if there is no such message.
func (s *Session) exponent(c *call, j int) (int8, error) {
	if j >= c.msgs {
		return quant.MinExponent, nil
	}
	lo, hi := c.span(j)
	e, err := quant.BlockExponent(c.f[lo:hi])
	if err != nil {
		return 0, fmt.Errorf("aggregation: AllReduce: the tensor changed during the call: %w", err)
	}
	return e, nil
}

// sendNext sends the QP's next tensor message, quantized with the maximum
// exponent maxE the switch returned for it; false if the QP is done.
func (s *Session) sendNext(c *call, st *qpState, maxE int8, now time.Time) (bool, error) {
	j := st.next
	if j >= c.msgs {
		return false, nil
	}
	lo, hi := c.span(j)
	buf := s.mr.Bytes()[st.sendOff : st.sendOff+uint64(s.msgBytes)]
	var e0 int8
	if c.f != nil {
		sc, err := quant.NewScale(s.cfg.Workers, maxE)
		if err != nil {
			return false, fmt.Errorf("aggregation: %v: %w", s, err)
		}
		if err := quant.Quantize(buf, c.f[lo:hi], sc); err != nil {
			return false, fmt.Errorf("aggregation: AllReduce: the tensor changed during the call: %w", err)
		}
		st.scale = sc
		if e0, err = s.exponent(c, j+len(s.qps)); err != nil {
			return false, err
		}
	} else {
		quant.EncodeInt32(buf, c.i[lo:hi])
	}
	// The last message of a tensor is padded with zeros: the switch adds
	// whole packets, and zeros change no sum.
	clear(buf[4*(hi-lo):])
	st.cur = j
	st.next = j + len(s.qps)
	return true, s.post(st, e0, now)
}

// post sends a new message from st's staging region: next set, next
// message id, look-ahead exponent e0.
func (s *Session) post(st *qpState, e0 int8, now time.Time) error {
	st.set ^= 1
	st.msgID = (st.msgID + 1) & wire.MsgIDMask
	st.e0 = e0
	if st.ngot > 0 {
		clear(st.got)
		st.ngot = 0
	}
	st.firstRes = time.Time{}
	st.wr[0] = verbs.SendWR{
		ID:         wrID(st.index, wrSend),
		Opcode:     verbs.WRRDMAWriteWithImm,
		Local:      verbs.SGE{Addr: st.sendOff, Length: uint32(s.msgBytes), LKey: s.mr.LKey()},
		RemoteAddr: s.recvOff(st.set, st.index),
		RKey:       uint32(st.pool | wire.PoolIndex(st.set)),
		Imm:        uint32(wire.MakeImm(st.msgID, e0, 0)),
		Signaled:   true,
	}
	st.busy = true
	st.sent, st.xmit = now, now
	st.rto = s.rto(st)
	st.deadline = now.Add(st.rto)
	st.timeouts, st.resends, st.silent = 0, 0, 0
	s.stats.messages.Add(1)
	if s.pktWrites {
		return s.transmitPackets(st)
	}
	return s.transmit(st, st.wr[:], s.cfg.PacketsPerMessage)
}

// sampleRTT folds a time to result r of a transmission of st's message at
// xmit into the estimates: the timer's (the joining one for a QP's first
// message of the call), the windowed minimum, and RACK's latest delivered
// transmission.
func (s *Session) sampleRTT(st *qpState, r time.Duration, xmit time.Time) {
	if st.joining {
		s.joinRTT.Sample(r)
	} else {
		s.rtt.Sample(r)
	}
	s.rack.sampleMin(r)
	if xmit.After(s.rack.xmit) {
		s.rack.xmit, s.rack.rtt = xmit, r
	}
}

// lostAt is when st's message is taken for lost without a timeout, if
// there is evidence: a result of a message sent after it is back (RACK),
// or, with packet writes, some of its own packets' results came back after
// its latest transmission and the rest did not follow within the
// reordering window (every worker sends a message's packets together, so
// its results come back together).
func (s *Session) lostAt(st *qpState) (time.Time, bool) {
	var t time.Time
	ok := false
	if st.xmit.Before(s.rack.xmit) {
		t, ok = st.xmit.Add(s.rack.rtt+s.rack.reoWnd()), true
	}
	if s.pktWrites && st.lastPkt.After(st.xmit) {
		if u := st.lastPkt.Add(s.rack.reoWnd()); !ok || u.Before(t) {
			t, ok = u, true
		}
	}
	return t, ok
}

// rto is the first timeout of st's new message: RFC 6298 over the measured
// times to result, never below Config.RetransmitTimeout. A QP's first
// message of a call has its own estimate: its result waits for the last
// worker to join the call, which on a busy host can take longer than a
// round trip (that wait is not loss, and resending does not shorten it).
func (s *Session) rto(st *qpState) time.Duration {
	floor, ceil := s.cfg.RetransmitTimeout, s.cfg.MaxRetransmitTimeout
	if st.joining {
		return s.joinRTT.RTO(floor, ceil)
	}
	if m := s.rack.minRTT(); m > 0 {
		// Under loss, a message sent once can still wait for another
		// worker's resend before its slot completes, and that wait feeds
		// the RTT estimate, which lengthens every timer, which lengthens
		// the waits. Bounding the timeout by a multiple of the smallest
		// time to result breaks that loop.
		k := time.Duration(rtoMinRTTs)
		if s.pktWrites {
			k = rtoMinRTTsPacketWrites
		}
		ceil = min(ceil, max(floor, k*m))
	}
	return s.rtt.RTO(floor, ceil)
}

// rtoMinRTTs bounds the retransmission timeout, in smallest times to
// result (see rto).
const rtoMinRTTs = 4

// rtoMinRTTsPacketWrites is rtoMinRTTs for packet writes: their samples
// are times to the first packet result, which do not wait for another
// worker's resend, so the loop the bound breaks is weaker, while a tight
// bound fires for slow peers (docs/benchmarks.md "A/B runs behind the loss
// design": at 32 workers, 8 instead of 4 sent 29–33 k instead of 52 k
// spurious resends without loss).
const rtoMinRTTsPacketWrites = 8

// stagedSender is a QP whose sends can be queued and sent later together
// with other QPs' (verbs/soft.QP): the engine stages every message that is
// ready and then rings the doorbell once, so the messages of all its QPs
// leave in one system call (and, with GSO, a handful of datagrams).
type stagedSender interface {
	PostSendStaged(wrs []verbs.SendWR) (int, error)
	Doorbell() error
}

// transmit posts wrs (packets packets in all) on st's QP.
func (s *Session) transmit(st *qpState, wrs []verbs.SendWR, packets int) error {
	var err error
	if ss, ok := st.qp.(stagedSender); ok {
		_, err = ss.PostSendStaged(wrs)
		s.doorbell = ss
	} else {
		_, err = st.qp.PostSend(wrs)
	}
	if err != nil {
		return fmt.Errorf("aggregation: %v: send on QP %d: %w", s, st.index, err)
	}
	for i := range wrs {
		if wrs[i].Signaled {
			st.queued++
		}
	}
	s.stats.packets.Add(uint64(packets))
	s.stats.bytesSent.Add(uint64(packets * s.cfg.PacketSize))
	return nil
}

// retransmit resends st's message unchanged after a timeout. The switch's
// bitmaps make that idempotent: a contribution already counted is not
// added again, and a resend into a completed slot gets the result back.
func (s *Session) retransmit(st *qpState, now time.Time) error {
	if st.queued > 0 {
		// The NIC has not yet sent what was posted before: another copy
		// would only queue behind it (a slow NIC, rxe under emulation,
		// then sends stale resends long after the worker moved on, and
		// the resends of the message that matters wait behind them).
		st.deadline = now.Add(st.rto)
		return nil
	}
	st.timeouts++
	s.stats.timeouts.Add(1)
	keepPace := s.lastResult.After(st.xmit)
	if s.pktWrites {
		// With packet writes every worker sends a message's packets
		// together, so once some of its results are back the missing
		// ones were lost; none back means its slots wait for a slow
		// peer, which resending does not hurry.
		keepPace = st.ngot > 0
	}
	if keepPace {
		// Results came back since the last transmission: the path and
		// the switch work, the message (or a peer's contribution to it)
		// was lost. Resend at the pace of the current estimate, undoing
		// any backoff of a silent spell before: backing off would only
		// make the wait for a lost resend longer.
		st.silent = 0
		st.rto = s.rto(st)
	} else if st.silent++; st.silent%s.cfg.BackoffAfter == 0 {
		// Nothing at all came back: the other workers have not joined the
		// call yet, or the switch is gone. Back off.
		st.rto = min(2*st.rto, s.cfg.MaxRetransmitTimeout)
	}
	return s.resend(st, now)
}

// fastRetransmit resends st's message because RACK found it lost (a
// result of a message sent after it is back); the timer restarts.
func (s *Session) fastRetransmit(st *qpState, now time.Time) error {
	if st.queued > 0 {
		return nil // as retransmit; its send completion wakes the engine
	}
	s.stats.fastRetransmissions.Add(1)
	return s.resend(st, now)
}

func (s *Session) resend(st *qpState, now time.Time) error {
	st.resends++
	st.xmit = now
	st.deadline = now.Add(st.rto)
	s.stats.retransmissions.Add(1)
	if s.pktBits == 0 {
		return s.transmit(st, st.wr[:], s.cfg.PacketsPerMessage)
	}
	// Per-packet recovery: resend each packet whose result is not back as
	// a message of its own (WRITE ONLY WITH IMMEDIATE, to the packet's own
	// slot and buffer offset). With UC, one lost packet loses its whole
	// message, so resending whole messages needs every packet of a resend
	// and of its answer to get through at once: at 5 % loss, 19 % of the
	// tries with 16 packets. Packet by packet, each try repairs 90 % of
	// what is missing. The switch treats each as a one-packet message.
	return s.transmitPackets(st)
}

// transmitPackets sends each packet of st's message whose result is not
// back as a one-packet WRITE ONLY WITH IMMEDIATE: packet k goes to pool
// index pool+2k with the packet message id of k, lands at its own offset of
// the receive region, and is answered by a one-packet result. Only the
// last work request is signaled: its completion stands for all of them
// (st.queued counts one).
func (s *Session) transmitPackets(st *qpState) error {
	ps := s.cfg.PacketSize
	recv := s.recvOff(st.set, st.index)
	wrs := s.pktWRs[:0]
	for k := range s.cfg.PacketsPerMessage {
		if st.got[k>>6]&(1<<(k&63)) != 0 {
			continue
		}
		off := uint64(k * ps)
		wrs = append(wrs, verbs.SendWR{
			ID:         wrID(st.index, wrSend),
			Opcode:     verbs.WRRDMAWriteWithImm,
			Local:      verbs.SGE{Addr: st.sendOff + off, Length: uint32(ps), LKey: s.mr.LKey()},
			RemoteAddr: recv + off,
			RKey:       uint32(st.pool.Add(k) | wire.PoolIndex(st.set)),
			Imm:        uint32(wire.MakeImm(wire.PacketMsgID(st.msgID, k, s.pktBits), st.e0, 0)),
		})
	}
	s.pktWRs = wrs
	if len(wrs) == 0 {
		return nil
	}
	wrs[len(wrs)-1].Signaled = true
	return s.transmit(st, wrs, len(wrs))
}

func (s *Session) deadPeer(st *qpState, now time.Time) error {
	what := fmt.Sprintf("message %d", st.cur)
	if st.cur < 0 {
		what = "the exponent round"
	}
	waited := now.Sub(st.sent).Round(time.Millisecond)
	resent := fmt.Sprintf("%d resends (%d after a timeout)", st.resends, st.timeouts)
	if st.ngot > 0 {
		resent += fmt.Sprintf(", %d of its %d packets' results back", st.ngot, s.cfg.PacketsPerMessage)
	}
	msgs, retx := s.stats.messages.Load(), s.stats.retransmissions.Load()
	lossSeen := 0.0
	if msgs > 0 {
		lossSeen = 100 * float64(retx) / float64(msgs)
	}
	if !s.lastResult.IsZero() && now.Sub(s.lastResult) < s.cfg.PeerTimeout/2 {
		return fmt.Errorf("aggregation: %v: %w: %w: %s on QP %d has had no result for %v despite %s, while other QPs got results until %v ago: the switch (%v) and the other workers are there, but the network drops too much (this session resent %d of %d messages, %.0f%%); check the links' drop counters, or raise Config.PeerTimeout",
			s, ErrPeerTimeout, ErrHeavyLoss, what, st.index, waited, resent, now.Sub(s.lastResult).Round(time.Millisecond), s.assign.SwitchAddr, retx, msgs, lossSeen)
	}
	heard := "no result at all has come back during this call"
	if s.lastResult.After(s.callStart) {
		heard = fmt.Sprintf("no result from the switch on any QP for %v", now.Sub(s.lastResult).Round(time.Millisecond))
	}
	ka := "the keep-alive stream to the controller is up"
	if s.ctlLost.Load() != 0 {
		ka = "the keep-alive stream to the controller broke"
	}
	return fmt.Errorf("aggregation: %v: %w: %s on QP %d has had no result for %v despite %s, and %s (%s): another worker of the job has stopped calling AllReduce, or the switch (%v) is gone or unreachable (raise Config.PeerTimeout if a worker is merely slow to reach its next call)",
		s, ErrPeerTimeout, what, st.index, waited, resent, heard, ka, s.assign.SwitchAddr)
}

// ringDoorbell sends the messages staged since the last call.
func (s *Session) ringDoorbell() error {
	d := s.doorbell
	if d == nil {
		return nil
	}
	s.doorbell = nil
	if err := d.Doorbell(); err != nil {
		return fmt.Errorf("aggregation: %v: send: %w", s, err)
	}
	return nil
}
