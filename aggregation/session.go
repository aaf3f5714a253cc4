package aggregation

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
)

var (
	// ErrClosed is returned by calls on a closed Session.
	ErrClosed = errors.New("aggregation: session closed")
	// ErrPeerTimeout is wrapped by AllReduce when a message got no result
	// within Config.PeerTimeout: the switch or another worker is gone, or
	// the network drops too much (ErrHeavyLoss). The error is a
	// *PeerTimeoutError.
	ErrPeerTimeout = errors.New("no result from the switch")
	// ErrHeavyLoss is wrapped, with ErrPeerTimeout, when a message got no
	// result within Config.PeerTimeout although other QPs kept getting
	// theirs: the switch and the workers are there, the network drops too
	// much.
	ErrHeavyLoss = errors.New("heavy loss")
	// ErrWaitingForRank is wrapped, with ErrPeerTimeout, when the
	// controller named the ranks the job waits for
	// (PeerTimeoutError.Waiting): the switch holds partial sums that lack
	// their contributions, or they ended their session.
	ErrWaitingForRank = errors.New("waiting for another rank")
	// ErrSwitchGone is wrapped by AllReduce when the controller's
	// keep-alive stream broke and no result has come back since
	// (switchGoneAfter): the switch daemon, which runs the controller, is
	// gone.
	ErrSwitchGone = errors.New("switch gone")
	// ErrDType is wrapped by AllReduce on an Int32 session and by
	// AllReduceInt32 on a Float32 one: call the other, or open the
	// session with the other Config.DType.
	ErrDType = errors.New("wrong element type for this session")
	// ErrEmpty is wrapped by an all-reduce of an empty tensor.
	ErrEmpty = errors.New("empty tensor")
	// ErrBroken is wrapped by every call after an AllReduce failed midway:
	// this worker's QPs are no longer in step with the other workers', so
	// the session cannot be used again. Close it and open a new one (a new
	// session id, with every worker).
	ErrBroken = errors.New("session broken by an earlier failure")
)

// recvBase is the number of receive WRs posted per QP before anything is
// sent. Every answer the switch sends a worker answers one of its
// transmissions, so each transmission posts a receive for each answer it
// can bring (send.go, transmit) before it is sent, instead of reposting
// one as each answer is polled, which left a burst of duplicate answers to
// resends with no receive (swml_nic_drops_total{reason="no_recv_wr"}).
const recvBase = 8

// Session is one worker's membership in a job: its QPs to the switch, its
// registered buffer and its lease with the controller. AllReduce and
// AllReduceInt32 calls are serialised (one runs at a time, in the order the
// workers agree on: every worker must issue the same sequence of calls with
// the same tensor lengths). Stats and Close are safe to call concurrently
// with them; Close interrupts a running call.
type Session struct {
	cfg      Config
	msgBytes int
	client   *control.Client
	ownsCli  bool
	assign   *control.Assignment

	pd  verbs.PD
	mr  verbs.MR
	qps []*qpState // every QP, by index
	// lanes drive the QPs, each its own share (lane.go); laneStop tells
	// the others that one of them failed.
	lanes    []*lane
	laneStop atomic.Bool

	closing   atomic.Bool
	ctlLost   atomic.Int64 // UnixNano when the keep-alive stream broke
	closeOnce sync.Once
	watchDone chan struct{}
	stopWatch chan struct{}

	recvDepth int // the receive queue's capacity per QP (MaxRecvWR)

	mu     sync.Mutex // held by AllReduce and Close
	broken error      // sticky, guarded by mu
	// pktWrites: the running call sends packet writes (writes.go,
	// chooseWrites), set before its lanes start; adapt is the calls'
	// loss signal and chooseWrites' memory. Guarded by mu but for
	// adapt's atomics, which the lanes set.
	pktWrites bool
	adapt     adaptState
	// notices: the switch sends this job's workers gap notices
	// (control.Assignment.GapNotices; notice.go). resultProbes: and the
	// job is large enough that a late result is mostly another worker's
	// repair, so RACK's evidence sends result probes (rack.go, probeUpTo).
	notices, resultProbes bool
	// pktBits > 0 enables per-packet recovery (timers.go, resend): the
	// packet index bits of wire.PacketMsgID.
	pktBits uint
	// call is the running call (runCall); exps is blockExponents'
	// scratch, reused by every call.
	call call
	exps []int8
	// fireAll is s.fire as a value made once (context.AfterFunc's).
	fireAll func()

	stats counters

	async asyncQueue // AllReduceAsync's queue and runner (async.go)
}

// Open registers this worker with the controller, waits for every worker of
// the session (bounded by ctx and the controller's session timeout), and
// connects its QPs to the switch. Close the session when done.
func Open(ctx context.Context, cfg Config) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, msgBytes: cfg.messageBytes(), watchDone: make(chan struct{}), stopWatch: make(chan struct{})}
	s.fireAll = s.fire
	for i := range threadsFor(&cfg) {
		s.lanes = append(s.lanes, &lane{Session: s, index: i, wake: timing.NewWaker()})
	}
	if err := s.open(ctx); err != nil {
		_ = s.release(true, err.Error()) // abort: the other workers would wait for this one; err is the one to report
		return nil, err
	}
	go s.watch()
	return s, nil
}

// open makes the session's verbs objects, joins the job and connects the
// QPs to the switch. Whatever fails, Open releases what it made (release).
func (s *Session) open(ctx context.Context) error {
	needsPacketWrites, err := checkUCTruncation(s.cfg.Device, &s.cfg)
	if err != nil {
		return err
	}
	qpns, psns, err := s.allocate()
	if err != nil {
		return err
	}
	if err := s.register(ctx, qpns, psns, needsPacketWrites); err != nil {
		return err
	}
	return s.connect(psns)
}

// allocate makes the worker's side of the job: its PD, its registered
// buffer (docs/protocol.md "Buffer layout": per QP, its recvRegions
// receive regions and its send staging region, QP after QP), each
// lane's CQ and scratch, and the QPs in INIT with the PSN each receives
// from.
func (s *Session) allocate() (qpns, psns []uint32, err error) {
	cfg := &s.cfg
	dev := cfg.Device
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, nil, fmt.Errorf("aggregation: open on %s: %w", dev.Name(), err)
	}
	if s.mr, err = s.pd.AllocMR(cfg.RegisteredBytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, nil, fmt.Errorf("aggregation: register a %d-byte buffer on %s: %w", cfg.RegisteredBytes(), dev.Name(), err)
	}
	answers, sendDepth := s.queueDepths()
	for _, l := range s.lanes {
		if err := l.setUp(answers, sendDepth); err != nil {
			return nil, nil, err
		}
	}
	return s.createQPs(sendDepth)
}

// queueDepths sets per-packet recovery's packet index bits (pktBits) and
// the receive queue's depth (recvDepth), and returns how many answers one
// transmission can bring and the send queue's depth. The receive queue
// holds the answers of four transmissions of a message (the first and
// resends racing each other's answers) beyond the base; each answer is one
// receive.
func (s *Session) queueDepths() (answers, sendDepth int) {
	answers, sendDepth = 1, 64
	if ppm := s.cfg.PacketsPerMessage; s.cfg.perPacketRecovery() {
		s.pktBits = uint(bits.Len(uint(ppm - 1)))
		// A packet write or a resend is up to ppm one-packet messages,
		// each answered by a one-packet result.
		answers = ppm
		sendDepth += 2 * ppm
	}
	s.recvDepth = recvBase + 8*answers
	return answers, sendDepth
}

// setUp makes the lane's scratch and its CQ, deep enough for the send and
// receive queues of its QPs.
func (s *lane) setUp(answers, sendDepth int) error {
	cfg := &s.cfg
	e := &s.eng
	// Scratch the lane writes per message: 8 more elements than it
	// needs, so that no other lane's is on its last cache line.
	if s.pktBits > 0 {
		e.scratch.pktWRs = make([]verbs.SendWR, 0, cfg.PacketsPerMessage+8)
	}
	n := max(answers, recvBase)
	e.scratch.recvWRs = make([]verbs.RecvWR, n, n+8)
	e.scratch.wcs = make([]verbs.Completion, 64, 64+8)
	lq := 0 // the lane's QPs
	for i := range cfg.QPs {
		if s.laneOf(i) == s.index {
			lq++
		}
	}
	var err error
	if s.cq, err = cfg.Device.CreateCQ(lq*(s.recvDepth+sendDepth) + 256); err != nil {
		return fmt.Errorf("aggregation: create CQ %d on %s: %w", s.index, cfg.Device.Name(), err)
	}
	return nil
}

// createQPs creates the session's UC QPs on their lanes' CQs and moves
// them to INIT; it returns their QPNs and the PSN each will receive from,
// for the registration.
func (s *Session) createQPs(sendDepth int) (qpns, psns []uint32, err error) {
	cfg := &s.cfg
	q := cfg.QPs
	qpns, psns = make([]uint32, q), make([]uint32, q)
	for i := range q {
		l := s.lanes[s.laneOf(i)]
		qp, err := s.pd.CreateUCQP(verbs.QPConfig{SendCQ: l.cq, RecvCQ: l.cq, MaxSendWR: sendDepth, MaxRecvWR: s.recvDepth})
		if err != nil {
			return nil, nil, fmt.Errorf("aggregation: create UC QP %d of %d on %s: %w", i, q, cfg.Device.Name(), err)
		}
		st := &qpState{qp: qp, index: i, sendOff: s.sendOff(i)}
		// The first message goes in set 0 with id 0.
		st.msg.set, st.msg.id = 1, wire.MsgIDMask
		st.pkts.alloc(cfg.PacketsPerMessage, l.gotWords)
		s.qps = append(s.qps, st)
		l.qps = append(l.qps, st)
		if err := qp.Init(verbs.AccessRemoteWrite); err != nil {
			return nil, nil, fmt.Errorf("aggregation: QP %d to INIT: %w", i, err)
		}
		qpns[i] = qp.QPN()
		psns[i] = rand.Uint32() & rdma.PSNMask
	}
	return qpns, psns, nil
}

// register joins the job through the controller (dialled here unless
// Config.Controller is given): it sends the worker's QPs and buffer and
// waits for the job's assignment, then checks that the assignment fits
// this worker (checkAssignment).
func (s *Session) register(ctx context.Context, qpns, psns []uint32, needsPacketWrites bool) error {
	cfg := &s.cfg
	dev := cfg.Device
	s.client = cfg.Controller
	if s.client == nil {
		var err error
		if s.client, err = control.Dial(cfg.ControllerAddr); err != nil {
			return fmt.Errorf("aggregation: %w", err)
		}
		s.ownsCli = true
	}
	a, err := s.client.RegisterRDMA(ctx, control.Registration{
		SessionID:   cfg.SessionID,
		Rank:        cfg.Rank,
		NumWorkers:  cfg.Workers,
		Addr:        dev.Addr(),
		RKey:        s.mr.RKey(),
		PacketSize:  cfg.PacketSize,
		MessageSize: s.msgBytes,
		QPNs:        qpns,
		PSNs:        psns,
		DType:       cfg.DType,
		TensorBytes: uint64(cfg.TensorBytes),
		// A userspace NIC sees no IPv4 header: the switch may send it
		// GSO datagrams.
		IgnoresIPv4ID: isUDPDevice(dev),
		// A NIC that wedges on a truncated multi-packet WRITE gets only
		// one-packet results if every worker sends packet writes.
		NeedsPacketWrites: needsPacketWrites,
		// Gap notices: this engine takes them (notice.go) unless told not
		// to; the job gets them if every worker asked.
		GapNotices: !cfg.NoGapNotices,
		// The element width of the job's lanes: the controller refuses
		// ranks that differ, and a switch that cannot sum it.
		WireBits: cfg.Wire,
	})
	if err != nil {
		return fmt.Errorf("aggregation: join session %d as rank %d of %d: %w", cfg.SessionID, cfg.Rank, cfg.Workers, err)
	}
	s.assign = a
	return s.checkAssignment(needsPacketWrites)
}

// checkAssignment checks the controller's answer against this worker: a
// switch QPN, PSN and pool index per QP, the same packets per message, a
// choice of writes this worker can follow (agreeWrites), and a switch
// address.
func (s *Session) checkAssignment(needsPacketWrites bool) error {
	cfg, a, q := &s.cfg, s.assign, s.cfg.QPs
	if len(a.SwitchQPNs) != q || len(a.SwitchPSNs) != q || len(a.QPPoolIndices) != q {
		return fmt.Errorf("aggregation: job %d: the controller assigned %d switch QPNs, %d PSNs and %d pool indices for %d QPs; controller and worker versions disagree",
			a.JobID, len(a.SwitchQPNs), len(a.SwitchPSNs), len(a.QPPoolIndices), q)
	}
	if a.PacketsPerMessage != 0 && a.PacketsPerMessage != cfg.PacketsPerMessage {
		return fmt.Errorf("aggregation: job %d: the controller set %d packets per message, this worker %d", a.JobID, a.PacketsPerMessage, cfg.PacketsPerMessage)
	}
	if err := agreeWrites(cfg.Device, cfg, a, needsPacketWrites); err != nil {
		return err
	}
	if !a.SwitchAddr.IsValid() || a.SwitchAddr.IsUnspecified() {
		return fmt.Errorf("aggregation: job %d: the controller returned no switch address; configure the controller with the switch's RoCE address", a.JobID)
	}
	return nil
}

// connect points every QP at its switch QP (RTR with the PSN it receives
// from, psns[i]; RTS with the switch's), tells each lane's RACK the QPs'
// ordering groups, and posts the first receives.
func (s *Session) connect(psns []uint32) error {
	cfg, a := &s.cfg, s.assign
	if u, ok := cfg.Device.(verbs.UDPDevice); ok {
		// No switch checks the ICRC over the IPv4 Identification (the
		// software switch reads a UDP socket; the Tofino program never
		// parses the ICRC): a message may leave as one GSO datagram.
		u.AllowGSO(a.SwitchAddr)
	}
	for _, l := range s.lanes {
		l.eng.est.rack.groups(l.qps, a.OrderGroups)
		s.notices = a.GapNotices
	}
	s.resultProbes = s.notices && s.cfg.Workers > LargeJobWorkers
	for i, st := range s.qps {
		st.pool = a.QPPoolIndices[i]
		err := st.qp.ReadyToReceive(verbs.RTRAttr{RemoteQPN: a.SwitchQPNs[i], RemoteAddr: a.SwitchAddr, RecvPSN: psns[i], MTU: verbs.MTU(cfg.PacketSize)})
		if err == nil {
			err = st.qp.ReadyToSend(a.SwitchPSNs[i])
		}
		if err != nil {
			return fmt.Errorf("aggregation: connect QP %d to switch %v QPN %#x: %w", i, a.SwitchAddr, a.SwitchQPNs[i], err)
		}
		// Results can arrive as soon as any worker sends: receives go in
		// before this worker sends anything.
		if err := s.lanes[s.laneOf(i)].postRecvs(st, recvBase); err != nil {
			return err
		}
	}
	return nil
}

// watch turns the end of the job (another worker died, the controller
// aborted it) into a wake-up of a running AllReduce.
func (s *Session) watch() {
	defer close(s.watchDone)
	if s.assign == nil {
		return
	}
	select {
	case <-s.assign.Done():
		// Only an abort stops the data path: a lost controller (no ENDED
		// event) leaves the job installed on the switch, which keeps
		// aggregating.
		err := s.assign.Err()
		if errors.Is(err, control.ErrJobEnded) {
			s.fire()
		} else if errors.Is(err, control.ErrControllerLost) {
			// The data path decides: a running AllReduce fails if no
			// result comes back soon (engine.go, interrupted).
			s.ctlLost.Store(time.Now().UnixNano())
			s.fire()
		}
	case <-s.stopWatch:
	}
}

// Wire is the session's element width on the wire in bits, 32 or 16
// (Config.Wire).
func (s *Session) Wire() int { return s.cfg.Wire }

// JobID is the controller's id of the job this session belongs to.
func (s *Session) JobID() uint32 { return s.assign.JobID }

// Rank and Workers repeat the configuration.
func (s *Session) Rank() int    { return s.cfg.Rank }
func (s *Session) Workers() int { return s.cfg.Workers }

// Close ends this worker's part in the job: it interrupts a running
// AllReduce, tells the controller (EndSession; an abort if the session was
// broken, so the other workers learn at once), and releases the QPs, CQ and
// buffer. It does not close the Device or a caller-provided Controller.
// Idempotent.
func (s *Session) Close() error { return s.end("") }

// Abort ends this worker's part in the job like Close, but aborts the job
// for every worker whatever state it is in: the others' running or next
// AllReduce fails at once with an error wrapping control.ErrJobEnded that
// names this rank and reason. Use it when this worker stops before the job
// is done (a signal, a failure outside the session) — a Close between two
// calls would look like a clean end, and the others would wait out their
// PeerTimeout. Idempotent with Close: only the first of them acts.
func (s *Session) Abort(reason string) error {
	if reason == "" {
		reason = "aborted by the application"
	}
	return s.end(reason)
}

// end implements Close (abortReason "": abort only if broken) and Abort.
func (s *Session) end(abortReason string) error {
	var err error
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.fire()
		s.mu.Lock()
		broken := s.broken
		s.broken = ErrClosed
		s.mu.Unlock()
		reason := abortReason
		if reason == "" && broken != nil {
			reason = broken.Error()
		}
		err = s.release(reason != "", reason)
		close(s.stopWatch)
		<-s.watchDone
	})
	return err
}

// release ends the lease and frees the verbs objects.
func (s *Session) release(abort bool, reason string) error {
	var errs []error
	if s.assign != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if abort {
			err = s.client.Abort(ctx, s.assign, reason)
		} else {
			err = s.client.EndSession(ctx, s.assign)
		}
		cancel()
		// A job that already ended (another worker aborted it) is not
		// this worker's failure.
		if err != nil && s.assign.Err() == nil {
			errs = append(errs, fmt.Errorf("aggregation: end session: %w", err))
		}
	}
	if s.ownsCli && s.client != nil {
		s.client.Close()
	}
	for _, st := range s.qps {
		st.qp.Close()
	}
	for _, l := range s.lanes {
		if l.cq != nil {
			l.cq.Close()
		}
	}
	if s.mr != nil {
		s.mr.Close()
	}
	if s.pd != nil {
		s.pd.Close()
	}
	for _, l := range s.lanes {
		l.wake.Halt()
	}
	return errors.Join(errs...)
}

// Stats counts a session's traffic since Open.
type Stats struct {
	// AllReduces is the number of completed AllReduce and AllReduceInt32
	// calls.
	AllReduces uint64
	// Messages counts messages sent for the first time (exponent-only
	// rounds included); Packets counts every packet sent, retransmissions
	// included.
	Messages uint64
	Packets  uint64
	// Retransmissions counts messages resent, for either reason: Timeouts
	// counts retransmission timer expiries, FastRetransmissions resends
	// because the result of a message sent later came back first (RACK,
	// docs/protocol.md "Loss recovery").
	Retransmissions     uint64
	Timeouts            uint64
	FastRetransmissions uint64
	// SpuriousRetransmissions counts resent messages whose result turned
	// out to answer an earlier transmission: resends that were not needed.
	SpuriousRetransmissions uint64
	// Results counts results used; StaleResults those dropped by the
	// message-id check (duplicates of results already used).
	Results      uint64
	StaleResults uint64
	// BytesSent and BytesReceived count RDMA payload bytes.
	BytesSent     uint64
	BytesReceived uint64
	// PacketWriteCalls counts the calls that sent packet writes
	// (Config.Writes).
	PacketWriteCalls uint64
	// GapNotices counts the switch's gap notices received, and
	// NoticeResends the packets resent on them (docs/protocol.md "Gap
	// notices").
	GapNotices    uint64
	NoticeResends uint64
	// TailProbes counts the tail probes sent: packet writes without
	// payload that follow a transmission's last packet under loss.
	TailProbes uint64
	// ResultProbes counts the result probes sent: packet writes without
	// payload that ask the switch for a late result instead of resending
	// the packet (jobs of more than LargeJobWorkers workers with gap
	// notices; docs/protocol.md "Result probes").
	ResultProbes uint64
}

type counters struct {
	allReduces, messages, packets, retransmissions, timeouts, fastRetransmissions, spurious, results, stale, bytesSent, bytesReceived, packetWriteCalls, gapNotices, noticeResends, tailProbes, resultProbes atomic.Uint64
	callTimes                                                                                                                                                                                                callHistogram // completed calls (metrics.go)
}

// Stats returns the session's counters. Safe for concurrent use.
func (s *Session) Stats() Stats {
	st := s.stats.load()
	for _, l := range s.lanes {
		st.add(l.stats.load())
	}
	return st
}

// load reads c's counters.
func (c *counters) load() Stats {
	var st Stats
	for _, f := range statFields {
		*f.stat(&st) = f.counter(c).Load()
	}
	return st
}

// add adds o's counts to st's.
func (st *Stats) add(o Stats) {
	for _, f := range statFields {
		*f.stat(st) += *f.stat(&o)
	}
}

// who names the session in errors: "job 7 rank 1".
func (s *Session) who() string {
	id := uint32(0)
	if s.assign != nil {
		id = s.assign.JobID
	}
	return fmt.Sprintf("job %d rank %d", id, s.cfg.Rank)
}

// String describes a session for logs.
func (s *Session) String() string {
	id := uint32(0)
	if s.assign != nil {
		id = s.assign.JobID
	}
	return fmt.Sprintf("job %d rank %d/%d (%s, %d-bit wire, %d QPs × %d × %d B)", id, s.cfg.Rank, s.cfg.Workers, s.cfg.DType, s.cfg.Wire, s.cfg.QPs, s.cfg.PacketsPerMessage, s.cfg.PacketSize)
}

// checkUCTruncation says whether this worker's NIC needs the job to send
// packet writes: a NIC whose UC responder wedges when a multi-packet WRITE
// loses a packet (Linux rxe, see verbs.UCTruncation) must get every result
// as a one-packet WRITE: otherwise one lost packet of a result, or one
// result interleaved with a resend's answer, stops every later result on
// that QP, and the job ends in a timeout far from its cause. The switch's
// result mirrors the request that completed its slot, so every worker of
// the job must send packet writes: the worker says so when it registers
// (control.Registration.NeedsPacketWrites) and the controller tells every
// worker (agreeWrites). It refuses what cannot work on such a NIC: message
// writes chosen explicitly, and multi-packet messages without per-packet
// recovery, which packet writes need.
func checkUCTruncation(dev verbs.Device, cfg *Config) (needsPacketWrites bool, err error) {
	w, ok := dev.(verbs.UCTruncation)
	if !ok || cfg.PacketsPerMessage <= 1 || !w.UCTruncatedWriteWedges() {
		return false, nil
	}
	wedges := fmt.Sprintf("%s wedges a UC QP on a truncated multi-packet WRITE (Soft-RoCE, docs/testbed.md \"Known limit\")", dev.Name())
	switch {
	case cfg.Writes == MessageWrites:
		return false, fieldError("Writes", cfg.Writes, "%s: use AdaptiveWrites or PacketWrites", wedges)
	case cfg.WholeMessageResend:
		return false, fieldError("WholeMessageResend", true, "%s, and packet writes need per-packet recovery", wedges)
	case !cfg.perPacketRecovery():
		return false, &FieldError{Field: "PacketsPerMessage", Value: cfg.PacketsPerMessage, Max: 1 << wire.MaxPacketIDBits,
			Reason: fmt.Sprintf("%s, and packet writes need at most %d packets per message", wedges, 1<<wire.MaxPacketIDBits)}
	}
	return true, nil
}

// agreeWrites applies the job's choice of writes from the controller's
// answer: when some worker's NIC needs packet writes (checkUCTruncation),
// every worker sends them from the first call on, whatever its own
// Config.Writes would choose, because a mixed job would send that NIC
// multi-packet results. A worker set to MessageWrites, or one that cannot
// send packet writes, fails the job at Open; so does a worker that needs
// packet writes and is answered by a controller that does not know the
// request.
func agreeWrites(dev verbs.Device, cfg *Config, a *control.Assignment, needsPacketWrites bool) error {
	switch {
	case needsPacketWrites && !a.PacketWrites:
		return fmt.Errorf("aggregation: job %d: %s needs packet writes, and the controller's answer does not make the job send them (a controller that ignores needs_packet_writes)", a.JobID, dev.Name())
	case !a.PacketWrites || cfg.PacketsPerMessage <= 1:
		return nil
	case cfg.Writes == MessageWrites:
		return fieldError("Writes", cfg.Writes, "job %d sends packet writes (another worker's NIC needs them): use AdaptiveWrites or PacketWrites", a.JobID)
	case !cfg.perPacketRecovery():
		return fieldError("WholeMessageResend", cfg.WholeMessageResend, "job %d sends packet writes (another worker's NIC needs them), which need per-packet recovery", a.JobID)
	}
	cfg.Writes = PacketWrites
	return nil
}

// PeerTimeoutError is AllReduce's error when a message had no result for
// Config.PeerTimeout. It wraps ErrPeerTimeout, and ErrHeavyLoss when other
// QPs kept getting results (the switch and the workers are there, the
// network drops too much); otherwise another worker stopped calling
// AllReduce, or the switch is gone or unreachable. docs/operations.md
// ("Errors you may meet") says what to do about each, for front ends to
// render. Inspect it with errors.As.
type PeerTimeoutError struct {
	Job  uint32
	Rank int
	QP   int
	// Message is the tensor message that waited; -1 for the exponent
	// round that starts a float32 call.
	Message int
	// Waited is how long it went without a result; Resends how often it
	// was resent, Timeouts how many of those were timer expiries.
	Waited            time.Duration
	Resends, Timeouts int
	// PacketsBack of Packets came back one by one (per-packet recovery;
	// both 0 without it).
	PacketsBack, Packets int
	// LastResult is how long ago any QP got a result, 0 if none did in
	// this call.
	LastResult time.Duration
	// HeavyLoss: results kept coming on other QPs.
	HeavyLoss bool
	// KeepAliveBroken: the keep-alive stream to the controller broke.
	KeepAliveBroken bool
	// Switch is the switch's RoCE address.
	Switch netip.Addr
	// Messages and Retransmissions are the session's counts so far.
	Messages, Retransmissions uint64
	// Waiting are the other ranks the job waits for, as the controller
	// told (control.Client.WaitingFor) when the call failed; empty when it
	// could not tell, or was not asked (heavy loss, no keep-alive).
	Waiting []control.RankWait
}

func (e *PeerTimeoutError) Error() string {
	what := "exponent round"
	if e.Message >= 0 {
		what = fmt.Sprintf("message %d", e.Message)
	}
	cause := ""
	switch {
	case e.HeavyLoss:
		cause = ": " + ErrHeavyLoss.Error()
	case len(e.Waiting) > 0:
		cause = ": " + waitingText(e.Waiting)
	}
	return fmt.Sprintf("aggregation: job %d rank %d: QP %d %s: %v for %v%s",
		e.Job, e.Rank, e.QP, what, ErrPeerTimeout, e.Waited.Round(time.Millisecond), cause)
}

// waitingText names the first rank of w, the one missing from the most
// partial sums, and counts the others: "rank 2 (10.0.0.4) silent 10.2s",
// "rank 2 (10.0.0.4) absent in 3 slots, +2" where the switch counts no
// packets.
func waitingText(w []control.RankWait) string {
	r := w[0]
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d (%v)", r.Rank, r.Addr)
	switch {
	case r.Ended:
		b.WriteString(" ended its session")
	case r.ActivityKnown && r.Packets == 0:
		b.WriteString(" sent nothing")
	case r.ActivityKnown:
		fmt.Fprintf(&b, " silent %v", r.Idle.Round(100*time.Millisecond))
	default:
		fmt.Fprintf(&b, " absent in %d slots", r.MissingSlots)
	}
	if len(w) > 1 {
		fmt.Fprintf(&b, ", +%d", len(w)-1) // more ranks, in PeerTimeoutError.Waiting
	}
	return b.String()
}

// Unwrap gives ErrPeerTimeout, and ErrHeavyLoss when the network dropped
// too much or ErrWaitingForRank when the controller named the ranks the
// job waits for.
func (e *PeerTimeoutError) Unwrap() []error {
	switch {
	case e.HeavyLoss:
		return []error{ErrPeerTimeout, ErrHeavyLoss}
	case len(e.Waiting) > 0:
		return []error{ErrPeerTimeout, ErrWaitingForRank}
	}
	return []error{ErrPeerTimeout}
}

// waitingForTimeout bounds the question to the controller that names the
// ranks a failed call waited for (askWaitingFor).
const waitingForTimeout = 2 * time.Second

// askWaitingFor fills a *PeerTimeoutError in err with the other ranks the
// job waits for, as the controller sees them (docs/control-plane.md "Who a
// stalled job waits for"): a stopped or stuck rank is then named instead
// of a silent switch. It does not ask on heavy loss (the other ranks are
// there) or when the keep-alive stream broke (the controller is gone).
// When the controller cannot tell because the job has just ended —
// another rank whose timer fired first aborted it, with the ranks it was
// told in its reason — the call's error is that end; otherwise err as it
// is.
func (s *Session) askWaitingFor(err error) error {
	var pe *PeerTimeoutError
	if !errors.As(err, &pe) || pe.HeavyLoss || pe.KeepAliveBroken || s.client == nil || s.assign == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitingForTimeout)
	defer cancel()
	w, qerr := s.client.WaitingFor(ctx, s.assign)
	if qerr != nil {
		select {
		case <-s.assign.Done():
		case <-ctx.Done():
		}
		if aerr := s.assign.Err(); errors.Is(aerr, control.ErrJobEnded) {
			return fmt.Errorf("aggregation: %v: the controller ended the job: %w", s.who(), aerr)
		}
		return err
	}
	for _, r := range w.Ranks {
		if r.Rank != s.cfg.Rank {
			pe.Waiting = append(pe.Waiting, r)
		}
	}
	return err
}

// isUDPDevice reports whether dev reads RoCEv2 from a UDP socket and so
// cannot see the IPv4 Identification of what it receives (verbs.UDPDevice).
func isUDPDevice(dev verbs.Device) bool {
	_, ok := dev.(verbs.UDPDevice)
	return ok
}
