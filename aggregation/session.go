package aggregation

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/internal/timing"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

var (
	// ErrClosed is returned by calls on a closed Session.
	ErrClosed = errors.New("aggregation: session closed")
	// ErrPeerTimeout is wrapped by AllReduce when a message got no result
	// within Config.PeerTimeout: the switch or another worker is gone.
	ErrPeerTimeout = errors.New("no result from the switch")
	// ErrHeavyLoss is wrapped, with ErrPeerTimeout, when a message got no
	// result within Config.PeerTimeout although other QPs kept getting
	// theirs: the switch and the workers are there, the network drops too
	// much.
	ErrHeavyLoss = errors.New("heavy loss")
	// ErrSwitchGone is wrapped by AllReduce when the controller's
	// keep-alive stream broke and no result has come back since
	// (switchGoneAfter): the switch daemon, which runs the controller, is
	// gone.
	ErrSwitchGone = errors.New("switch gone")
	// ErrBroken is wrapped by every call after an AllReduce failed midway:
	// this worker's QPs are no longer in step with the other workers', so
	// the session cannot be used again. Close it and open a new one (a new
	// session id, with every worker).
	ErrBroken = errors.New("session broken by an earlier failure")
)

// recvDepth is the number of receive WRs kept posted per QP: one for the
// result in flight plus room for duplicates (a unicast answer to a
// retransmission racing the multicast result), which are dropped and
// reposted.
const recvDepth = 8

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
	cq  verbs.CQ
	qps []*qpState

	wake      *timing.Waker
	closing   atomic.Bool
	ctlLost   atomic.Int64 // UnixNano when the keep-alive stream broke
	closeOnce sync.Once
	watchDone chan struct{}
	stopWatch chan struct{}

	recvDepth int // receive WRs kept posted per QP

	mu     sync.Mutex // held by AllReduce and Close
	broken error      // sticky, guarded by mu
	wcs    []verbs.Completion
	recvWR [1]verbs.RecvWR
	// Times to result (guarded by mu): of messages in the middle of a
	// call, and of each QP's first message of a call.
	rtt, joinRTT timing.RTT
	rack         rackState
	// pktBits > 0 enables per-packet recovery (engine.go, resend): the
	// packet index bits of wire.PacketMsgID; pktWRs is its scratch.
	pktBits uint
	pktWRs  []verbs.SendWR
	// pktWrites: the running call sends packet writes (Config.Writes;
	// engine.go, chooseWrites), guarded by mu.
	pktWrites  bool
	adapt      adaptState
	lastResult time.Time // when any result last arrived (guarded by mu)
	callStart  time.Time // when the running call started (guarded by mu)
	lastPass   time.Time // the engine loop's last pass (guarded by mu)
	// doorbell is set when messages are staged on a QP and not yet sent
	// (engine.go: transmit, ringDoorbell); guarded by mu.
	doorbell stagedSender

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
	s := &Session{cfg: cfg, msgBytes: cfg.messageBytes(), wake: timing.NewWaker(), watchDone: make(chan struct{}), stopWatch: make(chan struct{})}
	if err := s.open(ctx); err != nil {
		_ = s.release(true, err.Error()) // abort: the other workers would wait for this one; err is the one to report
		return nil, err
	}
	go s.watch()
	return s, nil
}

func (s *Session) open(ctx context.Context) error {
	cfg := &s.cfg
	dev := cfg.Device
	q := cfg.QPs
	if err := checkUCTruncation(dev, cfg); err != nil {
		return err
	}
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("aggregation: open on %s: %w", dev.Name(), err)
	}
	// Layout (docs/protocol.md "Buffer layout"): receive regions for set 0
	// and set 1 of every QP, then the send staging region of every QP.
	if s.mr, err = s.pd.AllocMR(3*q*s.msgBytes, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return fmt.Errorf("aggregation: register a %d-byte buffer on %s: %w", 3*q*s.msgBytes, dev.Name(), err)
	}
	depth := recvDepth
	sendDepth := 64
	if ppm := cfg.PacketsPerMessage; cfg.perPacketRecovery() {
		s.pktBits = uint(bits.Len(uint(ppm - 1)))
		s.pktWRs = make([]verbs.SendWR, 0, ppm)
		// A packet write or a resend is up to ppm one-packet messages,
		// each answered by a one-packet result, and a resend's answers
		// can race the results of the first transmission.
		depth += 2 * ppm
		sendDepth += 2 * ppm
	}
	s.recvDepth = depth
	if s.cq, err = dev.CreateCQ(q*(depth+sendDepth) + 256); err != nil {
		return fmt.Errorf("aggregation: create CQ on %s: %w", dev.Name(), err)
	}
	s.wcs = make([]verbs.Completion, 64)
	qpns := make([]uint32, q)
	psns := make([]uint32, q)
	for i := range q {
		qp, err := s.pd.CreateUCQP(verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: sendDepth, MaxRecvWR: depth})
		if err != nil {
			return fmt.Errorf("aggregation: create UC QP %d of %d on %s: %w", i, q, dev.Name(), err)
		}
		st := &qpState{qp: qp, index: i, sendOff: uint64((2*q + i) * s.msgBytes), set: 1, msgID: wire.MsgIDMask,
			got: make([]uint64, (cfg.PacketsPerMessage+63)/64)}
		s.qps = append(s.qps, st)
		if err := qp.Init(verbs.AccessRemoteWrite); err != nil {
			return fmt.Errorf("aggregation: QP %d to INIT: %w", i, err)
		}
		qpns[i] = qp.QPN()
		psns[i] = rand.Uint32() & 0xFFFFFF
	}

	s.client = cfg.Controller
	if s.client == nil {
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
	})
	if err != nil {
		return fmt.Errorf("aggregation: join session %d as rank %d of %d: %w", cfg.SessionID, cfg.Rank, cfg.Workers, err)
	}
	s.assign = a
	if len(a.SwitchQPNs) != q || len(a.SwitchPSNs) != q || len(a.QPPoolIndices) != q {
		return fmt.Errorf("aggregation: job %d: the controller assigned %d switch QPNs, %d PSNs and %d pool indices for %d QPs; controller and worker versions disagree",
			a.JobID, len(a.SwitchQPNs), len(a.SwitchPSNs), len(a.QPPoolIndices), q)
	}
	if a.PacketsPerMessage != 0 && a.PacketsPerMessage != cfg.PacketsPerMessage {
		return fmt.Errorf("aggregation: job %d: the controller set %d packets per message, this worker %d", a.JobID, a.PacketsPerMessage, cfg.PacketsPerMessage)
	}
	if !a.SwitchAddr.IsValid() || a.SwitchAddr.IsUnspecified() {
		return fmt.Errorf("aggregation: job %d: the controller returned no switch address; configure the controller with the switch's RoCE address", a.JobID)
	}
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
		for range depth {
			if err := s.postRecv(st); err != nil {
				return err
			}
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
			s.wake.Stop()
		} else if errors.Is(err, control.ErrControllerLost) {
			// The data path decides: a running AllReduce fails if no
			// result comes back soon (engine.go, interrupted).
			s.ctlLost.Store(time.Now().UnixNano())
			s.wake.Fire()
		}
	case <-s.stopWatch:
	}
}

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
		s.wake.Stop()
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
	if s.cq != nil {
		s.cq.Close()
	}
	if s.mr != nil {
		s.mr.Close()
	}
	if s.pd != nil {
		s.pd.Close()
	}
	s.wake.Halt()
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
}

type counters struct {
	allReduces, messages, packets, retransmissions, timeouts, fastRetransmissions, results, stale, bytesSent, bytesReceived, packetWriteCalls atomic.Uint64
}

// Stats returns the session's counters. Safe for concurrent use.
func (s *Session) Stats() Stats {
	c := &s.stats
	return Stats{
		AllReduces:          c.allReduces.Load(),
		Messages:            c.messages.Load(),
		Packets:             c.packets.Load(),
		Retransmissions:     c.retransmissions.Load(),
		Timeouts:            c.timeouts.Load(),
		FastRetransmissions: c.fastRetransmissions.Load(),
		Results:             c.results.Load(),
		StaleResults:        c.stale.Load(),
		BytesSent:           c.bytesSent.Load(),
		BytesReceived:       c.bytesReceived.Load(),
		PacketWriteCalls:    c.packetWriteCalls.Load(),
	}
}

// String describes a session for logs.
func (s *Session) String() string {
	id := uint32(0)
	if s.assign != nil {
		id = s.assign.JobID
	}
	return fmt.Sprintf("job %d rank %d/%d (%s, %d QPs × %d × %d B)", id, s.cfg.Rank, s.cfg.Workers, s.cfg.DType, s.cfg.QPs, s.cfg.PacketsPerMessage, s.cfg.PacketSize)
}

// checkUCTruncation refuses multi-packet messages on a NIC whose UC responder
// wedges when a multi-packet WRITE loses a packet (Linux rxe, see
// verbs.UCTruncation): the switch's results are multi-packet WRITEs, one loss
// or one interleaved resend answer would stop every later result on that QP,
// and the job would end in a timeout far from its cause.
//
// Packet writes (Config.Writes PacketWrites) make every request and so
// every result a one-packet WRITE, as long as every worker of the job sends
// them: the switch's result mirrors the request that completed its slot.
func checkUCTruncation(dev verbs.Device, cfg *Config) error {
	w, ok := dev.(verbs.UCTruncation)
	ppm := cfg.PacketsPerMessage
	if !ok || ppm <= 1 || cfg.Writes == PacketWrites || !w.UCTruncatedWriteWedges() {
		return nil
	}
	return configError("%s is Soft-RoCE (rdma_rxe), whose UC QPs stop accepting messages after a multi-packet RDMA WRITE loses a packet "+
		"(Linux rxe_resp.c, class D1 errors; docs/testbed.md \"Known limits\"), and with %v writes this job may get results as %d-packet messages: "+
		"send packet writes on every worker of the job (--writes packet; Config.Writes PacketWrites), or one packet per message (--msg-size %d, equal to --packet-size; Config.PacketsPerMessage 1)",
		dev.Name(), cfg.Writes, ppm, cfg.PacketSize)
}
