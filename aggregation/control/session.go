package control

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swml-rdma/swml-rdma/aggregation/control/internal/spans"
	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
)

// sessionParams are what every rank of a session must agree on.
type sessionParams struct {
	numWorkers  int
	packetSize  int
	messageSize int
	qps         int
	dtype       wire.DType
	v6          bool
	// tensorBytes is the tensor length every call reduces, 0 if not
	// declared (RdmaSessionRequest.tensor_bytes).
	tensorBytes uint64
	// p4app: the request has no packet_size_bytes, as p4app-switchML's
	// workers send it. Such a rank is answered at once (p4app's workers
	// call RdmaSession one after another between barriers, not together),
	// its job's pool starts at slot 0 (they address pool indices from 0),
	// and it holds no KeepAlive stream (IdleTimeout supervises the job).
	p4app bool
}

func (p sessionParams) ppm() int { return p.messageSize / p.packetSize }

// registration is one rank's RdmaSession call.
type registration struct {
	rank   int
	client string // clientOf the call: who is charged the job's slots
	addr   netip.Addr
	mac    net.HardwareAddr
	rkey   uint32
	qpns   []uint32
	psns   []uint32
	// ignoresIPv4ID: RdmaSessionRequest.ignores_ipv4_id.
	ignoresIPv4ID bool
	// needsPacketWrites: RdmaSessionRequest.needs_packet_writes.
	needsPacketWrites bool
	// switchQPNs and switchPSNs are drawn at registration for p4app
	// sessions (the answer cannot wait for the job); nil otherwise.
	switchQPNs []uint32
	switchPSNs []uint32
}

// pendingSession collects registrations until all ranks are in. Guarded by
// Controller.mu except done, job and err, which startJob writes once before
// closing done.
type pendingSession struct {
	id        uint32
	params    sessionParams
	firstRank int // whose parameters the session took, for mismatch errors
	regs      map[int]*registration
	reserved  spans.Span // p4app: slots [0, need), taken when the session opened
	charged   string     // p4app: the client charged for reserved
	heldQPs   int        // QPs of regs, counted in Controller.pendingQPs
	starting  bool       // all ranks in, or timed out; nobody may leave
	timer     *time.Timer
	done      chan struct{}
	job       *job
	err       error
}

// job is a running job. spec is immutable after startJob; the rest is
// guarded by Controller.mu, except done/aborted/reason which endJob writes
// before closing done.
type job struct {
	spec       wire.Job
	sessionID  uint32
	params     sessionParams
	pool       spans.Span // slots
	clients    []string   // distinct clients of its ranks, each charged pool.Size
	token      []byte     // the job's secret (RdmaSessionResponse.job_token)
	idle       *time.Timer
	packets    uint64 // p4app jobs: JobPackets at the last idle check
	switchPSNs [][]uint32
	// packetWrites: a rank registered needs_packet_writes, so every rank
	// sends packet writes (RdmaSessionResponse.packet_writes).
	packetWrites bool
	ended        []bool // rank called EndSession
	attached     []bool // rank opened a KeepAlive stream at some point
	streamOpen   []bool
	ending       bool
	liveness     *time.Timer
	done         chan struct{}
	aborted      bool
	reason       string
}

func (j *job) id() uint32 { return j.spec.ID }

func (p sessionParams) style() string {
	if p.p4app {
		return "p4app-switchML workers"
	}
	return "swml-rdma workers"
}

func (c *Controller) rdmaSession(ctx context.Context, req *pb.RdmaSessionRequest) (*pb.RdmaSessionResponse, error) {
	sid := req.GetSessionId()
	if !c.mayRegister(ctx) {
		return nil, errNoRegistrationToken("RdmaSession", sid)
	}
	reg, params, err := c.parseRegistration(req)
	if err != nil {
		return nil, err
	}
	if from, ok := c.peerMayRegister(ctx, reg.addr); !ok {
		caller := "an unknown address"
		if from.IsValid() {
			caller = from.String()
		}
		return nil, status.Errorf(codes.PermissionDenied,
			"session %d: rank %d registered RoCE address %v but called from %s; results would go to another host. Register the address this host reaches the controller from, or start the controller with --allow-address-mismatch (NAT, a separate RoCE network)",
			sid, reg.rank, reg.addr, caller)
	}
	reg.client = clientOf(ctx)
	need := uint32(params.qps * params.ppm()) // ≤ PoolSize: parseRegistration
	if need > c.cfg.MaxClientSlots {
		return nil, status.Errorf(codes.InvalidArgument,
			"session %d: the job needs %d slots (%d QPs × %d packets per message) but one client may hold %d of the pool's %d (the switch's --client-pool-share); use fewer QPs or smaller messages",
			sid, need, params.qps, params.ppm(), c.cfg.MaxClientSlots, c.cfg.PoolSize)
	}
	if params.p4app && reg.rank == 0 {
		c.replaceP4AppJobs(sid, need)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed()
	}
	if j := c.jobBySession[sid]; j != nil {
		c.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition,
			"session %d is already running as job %d (%d workers); end it first (EndSession, or stop its workers) or use another session id",
			sid, j.id(), j.params.numWorkers)
	}
	p := c.pending[sid]
	if p == nil && len(c.pending) >= c.cfg.MaxPendingSessions {
		c.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted,
			"session %d: %d sessions are already waiting for their workers (the controller's limit); wait for them to start or time out (%v), or raise --max-pending-sessions",
			sid, len(c.pending), c.cfg.SessionTimeout)
	}
	if c.pendingQPs+params.qps > c.cfg.MaxPendingQPs {
		c.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted,
			"session %d: waiting registrations already hold %d QPs and this one brings %d (the controller holds %d QPs of waiting registrations); wait for those sessions to start or time out (%v)",
			sid, c.pendingQPs, params.qps, c.cfg.MaxPendingQPs, c.cfg.SessionTimeout)
	}
	if p == nil {
		p = &pendingSession{id: sid, params: params, firstRank: reg.rank, regs: make(map[int]*registration), done: make(chan struct{})}
		if params.p4app {
			if err := c.reserveP4App(p, need, reg.client); err != nil {
				c.mu.Unlock()
				return nil, err
			}
		}
		p.timer = time.AfterFunc(c.cfg.SessionTimeout, func() { c.expire(p) })
		c.pending[sid] = p
	} else if p.starting {
		c.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument,
			"session %d: rank %d registered twice (all %d ranks are in and the job is starting); every worker needs its own rank in 0..%d", sid, reg.rank, p.params.numWorkers, p.params.numWorkers-1)
	} else if err := p.check(params, reg.rank); err != nil {
		// Every rank of the session learns the mismatch now, not at the
		// session timeout: the job cannot start.
		c.failPending(p, err)
		c.mu.Unlock()
		c.log.Warn("registration refused: ranks disagree", "session", sid, "err", err)
		return nil, err
	}
	if _, dup := p.regs[reg.rank]; dup {
		err := mismatchError(p.id, "rank", reg.rank, reg.rank, p.firstRank, p.firstRank,
			fmt.Sprintf("session %d: rank %d registered twice; every worker needs its own rank in 0..%d", sid, reg.rank, params.numWorkers-1))
		c.failPending(p, err)
		c.mu.Unlock()
		return nil, err
	}
	if params.p4app {
		reg.switchQPNs, reg.switchPSNs = c.drawSwitchQPs(reg.rank, params.qps)
	}
	p.regs[reg.rank] = reg
	p.heldQPs += params.qps
	c.pendingQPs += params.qps
	complete := len(p.regs) == p.params.numWorkers
	if complete {
		p.starting = true
		p.timer.Stop()
		c.starting.Add(1)
	}
	var early *pb.RdmaSessionResponse
	if !complete && params.p4app {
		early = c.buildResponse(sid, params, p.reserved, reg.switchQPNs, reg.switchPSNs)
	}
	c.mu.Unlock()
	c.log.Debug("worker registered", "session", sid, "rank", reg.rank, "workers", params.numWorkers, "addr", reg.addr, "p4app", params.p4app)
	if early != nil {
		// p4app's rank 0 calls RdmaSession before the others do (they wait
		// in a Barrier for it): answer now; the job starts with the last
		// rank's call, before that call returns.
		return early, nil
	}
	if complete {
		c.startJob(p)
	}
	return c.awaitSession(ctx, p, reg.rank)
}

// reserveP4App takes slots [0, need) for a p4app session, whose workers
// address pool indices from 0, and charges them to client. Holds c.mu.
func (c *Controller) reserveP4App(p *pendingSession, need uint32, client string) error {
	if used := c.clientSlots[client]; c.clientShareLimited() && used+need > c.cfg.MaxClientSlots {
		return errClientShare(p.id, client, need, used, c.cfg.MaxClientSlots)
	}
	var ok bool
	if p.reserved, ok = c.pool.AllocAt(0, need); !ok {
		holders, listed := "", 0
		for _, j := range c.sortedJobs() {
			if !j.pool.Overlaps(spans.Span{Base: 0, Size: need}) {
				continue
			}
			if listed++; listed > 4 {
				holders += " …"
				break
			}
			holders += fmt.Sprintf(" job %d (session %d, %s)", j.id(), j.sessionID, j.params.style())
		}
		if holders == "" {
			holders = " a p4app session still waiting for its ranks"
		}
		return status.Errorf(codes.ResourceExhausted,
			"session %d: p4app-style workers (no packet_size_bytes) address pool indices from slot 0, and slots [0, %d) are not all free (%d QPs × %d packets per message); held by%s. A p4app rank 0 ends p4app jobs in its way, never swml-rdma jobs: end those or send packet_size_bytes (swml-rdma workers do)",
			p.id, need, p.params.qps, p.params.ppm(), holders)
	}
	p.charged = client
	c.clientSlots[client] += need
	return nil
}

// clientShareLimited: the operator gave one client less than the whole
// pool. Without that, a full pool is reported as such, not as a client's
// share.
func (c *Controller) clientShareLimited() bool { return c.cfg.MaxClientSlots < c.cfg.PoolSize }

func errClientShare(sid uint32, client string, need, used, limit uint32) error {
	return status.Errorf(codes.ResourceExhausted,
		"session %d: client %s already holds %d pool slots and the job needs %d more; one client may hold %d (the switch's --client-pool-share): end one of its jobs or wait",
		sid, client, used, need, limit)
}

// replaceP4AppJobs clears the way for a new p4app job, as p4app-switchML's
// own controller does on every rank-0 RdmaSession (clear_rdma_workers): a
// p4app job always starts at slot 0, so running p4app jobs whose slots
// overlap [0, need) or that run under session sid are ended, and waiting
// p4app sessions in the way fail. Its workers never end their session, so
// without this the next p4app job would wait for IdleTimeout. It does
// nothing when a swml-rdma job holds any of those slots: those are never
// touched, and the registration is refused naming them.
func (c *Controller) replaceP4AppJobs(sid uint32, need uint32) {
	span := spans.Span{Base: 0, Size: need}
	c.mu.Lock()
	var victims []*job
	for _, j := range c.sortedJobs() {
		inWay := j.pool.Overlaps(span) || j.sessionID == sid
		if !inWay {
			continue
		}
		if !j.params.p4app {
			c.mu.Unlock()
			return
		}
		victims = append(victims, j)
	}
	for _, p := range c.pending {
		if p.id == sid && p.regs[0] == nil {
			continue // this rank 0 is joining it
		}
		if p.params.p4app && !p.starting && (p.reserved.Overlaps(span) || p.id == sid) {
			c.failPending(p, status.Errorf(codes.Aborted,
				"session %d: a new p4app-switchML job's rank 0 registered (session %d) and took its slots, as p4app's own controller does; start this job again", p.id, sid))
		}
	}
	c.mu.Unlock()
	for _, j := range victims {
		c.endJob(j, true, fmt.Sprintf("a new p4app-switchML job's rank 0 registered (session %d) and needs slots [0, %d): p4app workers never end their session, so the old job is ended, as p4app's own controller does", sid, need), endReasonReplaced)
	}
}

// sortedJobs is c.jobs by id. Holds c.mu.
func (c *Controller) sortedJobs() []*job {
	js := make([]*job, 0, len(c.jobs))
	for _, j := range c.jobs {
		js = append(js, j)
	}
	slices.SortFunc(js, func(a, b *job) int { return cmp.Compare(a.id(), b.id()) })
	return js
}

// drawSwitchQPs picks rank's switch QPNs and PSNs. Holds c.mu.
func (c *Controller) drawSwitchQPs(rank, q int) (qpns, psns []uint32) {
	qpns, psns = make([]uint32, q), make([]uint32, q)
	for i := range q {
		if c.cfg.QPNScheme == QPNOpaque {
			qpns[i] = c.randomQPN()
		} else {
			qpns[i], _ = wire.P4AppQPN(rank, i) // bounds checked in parseRegistration
		}
		psns[i] = rand.Uint32() & rdma.PSNMask
	}
	return qpns, psns
}

// releasePending frees what a p4app session took before its job existed:
// the reserved slots and the ranks' switch QPNs. Holds c.mu.
func (c *Controller) releasePending(p *pendingSession) {
	if p.reserved.Size != 0 {
		c.pool.Free(p.reserved)
		c.uncharge(p.charged, p.reserved.Size)
		p.reserved = spans.Span{}
	}
	for _, reg := range p.regs {
		c.releaseRegQPNs(reg)
	}
}

// dropPending removes p from the pending table. Holds c.mu.
func (c *Controller) dropPending(p *pendingSession) {
	if c.pending[p.id] == p {
		delete(c.pending, p.id)
	}
	c.pendingQPs -= p.heldQPs
	p.heldQPs = 0
}

// failPending ends a waiting session: every waiting rank gets err. Holds
// c.mu.
func (c *Controller) failPending(p *pendingSession, err error) {
	p.err = err
	p.starting = true
	p.timer.Stop()
	c.releasePending(p)
	c.dropPending(p)
	close(p.done)
}

func (c *Controller) uncharge(client string, n uint32) {
	if c.clientSlots[client] <= n {
		delete(c.clientSlots, client)
		return
	}
	c.clientSlots[client] -= n
}

func (c *Controller) releaseRegQPNs(reg *registration) {
	if c.cfg.QPNScheme == QPNOpaque {
		for _, q := range reg.switchQPNs {
			delete(c.qpnsInUse, q)
		}
	}
	reg.switchQPNs = nil
}

// awaitSession waits for the session to start or time out; it leaves the
// session on cancellation or Close.
func (c *Controller) awaitSession(ctx context.Context, p *pendingSession, rank int) (*pb.RdmaSessionResponse, error) {
	var leaveErr error
	select {
	case <-p.done:
	case <-ctx.Done():
		leaveErr = status.FromContextError(ctx.Err()).Err()
	case <-c.closing:
		leaveErr = errClosed()
	}
	if leaveErr != nil && c.leave(p, rank) {
		return nil, leaveErr
	}
	<-p.done // starting (ends within one Programmer call) or timed out
	if p.err != nil {
		return nil, p.err
	}
	return c.response(p.job, rank), nil
}

// expire fails a session SessionTimeout after its first registration,
// naming the ranks that never registered (the first few: num_workers is
// the caller's claim, the message must not grow with it); every waiting
// rank gets the same error.
func (c *Controller) expire(p *pendingSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.starting || c.pending[p.id] != p {
		return
	}
	c.stats.registrationTimeouts++
	missing := describeMissing(p.params.numWorkers, len(p.regs), func(r int) bool { return p.regs[r] != nil })
	c.log.Warn("registration timed out", "session", p.id, "registered", len(p.regs), "workers", p.params.numWorkers, "missing", missing)
	c.failPending(p, status.Errorf(codes.DeadlineExceeded,
		"session %d: %s never registered within %v; start the missing workers (same --session-id and --workers) or raise the switch's --session-timeout",
		p.id, missing, c.cfg.SessionTimeout))
}

// describeMissing names the ranks of [0, n) that are not present, of
// which there are n - count: "rank 3 of 4", "ranks 2, 3 of 4", or beyond
// maxListed ranks "65535 of 65536 ranks (the first 16: 1, 2, …)". It looks
// at no more than count+maxListed ranks.
func describeMissing(n, count int, present func(int) bool) string {
	const maxListed = 16
	total := n - count
	listed := make([]int, 0, min(total, maxListed))
	for r := 0; r < n && len(listed) < maxListed; r++ {
		if !present(r) {
			listed = append(listed, r)
		}
	}
	switch {
	case total == 1:
		return fmt.Sprintf("rank %s of %d", formatRanks(listed), n)
	case total <= maxListed:
		return fmt.Sprintf("ranks %s of %d", formatRanks(listed), n)
	}
	return fmt.Sprintf("%d of %d ranks (the first %d: %s, …)", total, n, len(listed), formatRanks(listed))
}

// leave withdraws rank's registration; false if the session is already
// starting or has timed out (then the caller must wait for done).
func (c *Controller) leave(p *pendingSession, rank int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.starting {
		return false
	}
	if reg := p.regs[rank]; reg != nil {
		c.releaseRegQPNs(reg)
		p.heldQPs -= len(reg.qpns)
		c.pendingQPs -= len(reg.qpns)
	}
	delete(p.regs, rank)
	if len(p.regs) == 0 && c.pending[p.id] == p {
		p.timer.Stop()
		c.releasePending(p)
		c.dropPending(p)
	}
	return true
}

// check compares a later rank's parameters with the session's.
func (p *pendingSession) check(q sessionParams, rank int) error {
	mismatch := func(param, what string, got, want any, fix string) error {
		return mismatchError(p.id, param, rank, got, p.firstRank, want,
			fmt.Sprintf("session %d: rank %d registered with %s %v but rank %d with %v; %s", p.id, rank, what, got, p.firstRank, want, fix))
	}
	style := func(p4 bool) string {
		if p4 {
			return "p4app-style (no packet_size_bytes)"
		}
		return "swml-rdma-style (packet_size_bytes set)"
	}
	fam := func(v6 bool) string {
		if v6 {
			return "IPv6"
		}
		return "IPv4"
	}
	switch {
	case q.numWorkers != p.params.numWorkers:
		return mismatch("num_workers", "num_workers", q.numWorkers, p.params.numWorkers, "every worker of a session must pass the same worker count")
	case q.packetSize != p.params.packetSize:
		return mismatch("packet_size", "packet size", q.packetSize, p.params.packetSize, "every worker must use the same packet size (path MTU)")
	case q.messageSize != p.params.messageSize:
		return mismatch("message_size", "message_size", q.messageSize, p.params.messageSize, "every worker must use the same message size")
	case q.qps != p.params.qps:
		return mismatch("qps", "QP count", q.qps, p.params.qps, "every worker must open the same number of QPs")
	case q.dtype != p.params.dtype:
		return mismatch("dtype", "dtype", q.dtype, p.params.dtype, "every worker must reduce the same element type")
	case q.p4app != p.params.p4app:
		return mismatch("request_style", "request style", style(q.p4app), style(p.params.p4app), "all workers of a job must be p4app-switchML workers or all swml-rdma workers")
	case q.v6 != p.params.v6:
		return mismatch("address_family", "address family", fam(q.v6), fam(p.params.v6), "all workers of a job use IPv4 or all use IPv6")
	case q.tensorBytes != p.params.tensorBytes:
		return mismatch("tensor_bytes", "tensor length", tensorLength(q.tensorBytes), tensorLength(p.params.tensorBytes), "every worker must all-reduce a tensor of the same length (--size)")
	}
	return nil
}

// tensorLength prints a registered tensor_bytes.
type tensorLength uint64

func (t tensorLength) String() string {
	if t == 0 {
		return "(not declared)"
	}
	return fmt.Sprintf("%d bytes", uint64(t))
}

// mismatchError is the INVALID_ARGUMENT of ranks that disagree on a
// parameter; it carries an ErrorInfo (reason ErrorReasonMismatch) from
// which Client errors rebuild a *MismatchError.
func mismatchError(sid uint32, param string, rank int, value any, firstRank int, firstValue any, msg string) error {
	st := status.New(codes.InvalidArgument, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ErrorReasonMismatch, Domain: errorDomain, Metadata: map[string]string{
		"session": fmt.Sprint(sid), "param": param,
		"rank": fmt.Sprint(rank), "value": fmt.Sprint(value),
		"first_rank": fmt.Sprint(firstRank), "first_value": fmt.Sprint(firstValue),
	}}); err == nil {
		st = d
	}
	return st.Err()
}

// parseRegistration validates one request on its own.
func (c *Controller) parseRegistration(req *pb.RdmaSessionRequest) (*registration, sessionParams, error) {
	sid := req.GetSessionId()
	bad := func(format string, args ...any) (*registration, sessionParams, error) {
		return nil, sessionParams{}, status.Errorf(codes.InvalidArgument, "session %d: "+format, append([]any{sid}, args...)...)
	}
	n64 := uint64(req.GetNumWorkers())
	if n64 == 0 {
		return bad("num_workers is 0: pass the job's worker count (at least 1)")
	}
	if n64 > uint64(c.cfg.MaxWorkers) {
		return bad("num_workers %d: this switch serves at most %d workers per job", n64, c.cfg.MaxWorkers)
	}
	n := int(n64)
	rank := int(req.GetRank())
	if rank >= n {
		return bad("rank %d is out of range for %d workers: ranks are 0..%d", rank, n, n-1)
	}
	q := len(req.GetQpns())
	if q == 0 {
		return bad("rank %d sent no QPNs: a worker needs at least one QP", rank)
	}
	if len(req.GetPsns()) != q {
		return bad("rank %d sent %d QPNs but %d PSNs: send one PSN per QP", rank, q, len(req.GetPsns()))
	}
	if uint64(n)*uint64(q) > uint64(c.cfg.MaxPendingQPs) {
		return bad("%d workers × %d QPs: the controller holds at most %d QPs per job; use fewer QPs", n, q, c.cfg.MaxPendingQPs)
	}
	if c.cfg.QPNScheme == QPNP4App && (n > wire.MaxP4AppWorkers || q > wire.MaxP4AppQPs) {
		return bad("%d workers × %d QPs: the Tofino QPN encoding holds %d workers and %d QPs per worker; use fewer, or the software switch", n, q, wire.MaxP4AppWorkers, wire.MaxP4AppQPs)
	}
	seen := make(map[uint32]int, q)
	for i, v := range req.GetQpns() {
		if v > rdma.QPNMask {
			return bad("rank %d: QPN %#x of QP %d has more than 24 bits", rank, v, i)
		}
		if first, dup := seen[v]; dup {
			return bad("rank %d: QPs %d and %d both have QPN %#x; send each QP's own QPN", rank, first, i, v)
		}
		seen[v] = i
	}
	for i, v := range req.GetPsns() {
		if v > rdma.PSNMask {
			return bad("rank %d: PSN %#x of QP %d has more than 24 bits", rank, v, i)
		}
	}
	size := int(req.GetPacketSizeBytes())
	if size == 0 {
		switch req.GetPacketSize() {
		case pb.PacketSize_MTU_128:
			size = 128
		case pb.PacketSize_MTU_256:
			size = 256
		case pb.PacketSize_MTU_512:
			size = 512
		case pb.PacketSize_MTU_1024:
			size = 1024
		default:
			return bad("rank %d: unknown packet_size %d: use MTU_256, MTU_512, MTU_1024 or packet_size_bytes", rank, req.GetPacketSize())
		}
	}
	if err := wire.CheckPacketSize(size); err != nil {
		return bad("rank %d: %v", rank, err)
	}
	msg := int(req.GetMessageSize())
	if msg == 0 {
		return bad("rank %d: message_size is 0: pass bytes per message, a power-of-two multiple of the packet size (e.g. %d)", rank, 16*size)
	}
	if _, err := wire.MessagePackets(msg, size); err != nil {
		lower := size
		if k := msg / size; k > 1 {
			lower = size << (bits.Len(uint(k)) - 1)
		}
		return bad("rank %d: message_size %d is not a power-of-two multiple of the %d-byte packet size (e.g. %d or %d)", rank, msg, size, lower, 2*lower)
	}
	if need := uint64(q) * uint64(msg/size); need > uint64(c.cfg.PoolSize) {
		return bad("rank %d: the job needs %d slots (%d QPs × %d packets per message) but the switch's pool has %d; use fewer QPs or smaller messages",
			rank, need, q, msg/size, c.cfg.PoolSize)
	}
	var dt wire.DType
	switch req.GetDtype() {
	case pb.DataType_DATA_TYPE_FLOAT32:
		dt = wire.Float32
	case pb.DataType_DATA_TYPE_INT32:
		dt = wire.Int32
	default:
		return bad("rank %d: unknown dtype %d: use DATA_TYPE_FLOAT32 or DATA_TYPE_INT32", rank, req.GetDtype())
	}
	if req.GetOp() != pb.ReduceOp_REDUCE_OP_SUM {
		return bad("rank %d: unknown op %d: the switch only sums (REDUCE_OP_SUM)", rank, req.GetOp())
	}
	var addr netip.Addr
	switch gid := req.GetGid(); {
	case len(gid) == 16:
		addr = netip.AddrFrom16([16]byte(gid)).Unmap()
	case len(gid) != 0:
		return bad("rank %d: gid has %d bytes; a RoCEv2 GID is 16 bytes", rank, len(gid))
	case req.GetIpv4() != 0:
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], req.GetIpv4())
		addr = netip.AddrFrom4(b)
	default:
		return bad("rank %d sent no address: set ipv4 (field 5) or gid (field 100) to the worker NIC's address", rank)
	}
	if addr.IsUnspecified() {
		return bad("rank %d: address %v is unspecified; pass the worker NIC's address", rank, addr)
	}
	v6 := addr.Is6()
	if v6 && !c.cfg.SwitchIPv6.IsValid() {
		return nil, sessionParams{}, status.Errorf(codes.FailedPrecondition,
			"session %d: rank %d registered IPv6 address %v but the switch has no IPv6 address; give the switch one or use IPv4 workers", sid, rank, addr)
	}
	if !v6 && !c.cfg.SwitchIPv4.IsValid() {
		return nil, sessionParams{}, status.Errorf(codes.FailedPrecondition,
			"session %d: rank %d registered IPv4 address %v but the switch has no IPv4 address; give the switch one or use IPv6 workers", sid, rank, addr)
	}
	if req.GetMac()>>48 != 0 {
		return bad("rank %d: mac %#x has more than 48 bits", rank, req.GetMac())
	}
	reg := &registration{
		rank: rank,
		addr: addr,
		mac:  macFromUint64(req.GetMac()),
		rkey: req.GetRkey(),
		qpns: slices.Clone(req.GetQpns()),
		psns: slices.Clone(req.GetPsns()),

		ignoresIPv4ID:     req.GetIgnoresIpv4Id(),
		needsPacketWrites: req.GetNeedsPacketWrites(),
	}
	return reg, sessionParams{numWorkers: n, packetSize: size, messageSize: msg, qps: q, dtype: dt, v6: v6,
		tensorBytes: req.GetTensorBytes(), p4app: req.GetPacketSizeBytes() == 0}, nil
}

// startJob allocates and installs the job of a complete session, then
// wakes its waiters.
func (c *Controller) startJob(p *pendingSession) {
	defer c.starting.Done()
	c.mu.Lock()
	j, err := c.allocJob(p)
	c.mu.Unlock()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTimeout)
		spec := j.spec.Clone() // the backend may keep it
		err = c.cfg.Programmer.AddJob(ctx, &spec)
		cancel()
		if err != nil {
			c.log.Error("switch refused job", "session", p.id, "job", j.id(), "err", err)
			err = status.Errorf(codes.Unavailable, "session %d: the switch did not install job %d: %v", p.id, j.id(), err)
			c.mu.Lock()
			c.freeJob(j)
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	c.dropPending(p)
	if err == nil {
		c.jobs[j.id()] = j
		c.jobBySession[p.id] = j
		c.stats.sessionsTotal++
		if c.cfg.LivenessTimeout > 0 && !p.params.p4app {
			j.liveness = time.AfterFunc(c.cfg.LivenessTimeout, func() { c.checkLiveness(j) })
		}
		if _, ok := c.cfg.Programmer.(ActivityReporter); ok && p.params.p4app && c.cfg.IdleTimeout > 0 {
			j.idle = time.AfterFunc(c.cfg.IdleTimeout, func() { c.checkIdle(j) })
		}
		c.log.Info("job started", "session", p.id, "job", j.id(), "workers", p.params.numWorkers,
			"qps", p.params.qps, "packet_size", p.params.packetSize, "pool_base", j.pool.Base, "pool_slots", j.pool.Size)
	}
	p.job, p.err = j, err
	close(p.done)
	c.mu.Unlock()
}

// allocJob picks the job id, pool range, switch QPNs and PSNs. Holds c.mu.
func (c *Controller) allocJob(p *pendingSession) (*job, error) {
	prm := p.params
	ppm := prm.ppm()
	need := uint32(prm.qps * ppm) // ≤ PoolSize: parseRegistration
	if c.cfg.QPNScheme == QPNP4App {
		for r := range prm.numWorkers {
			if other, busy := c.p4appAddrs[p.regs[r].addr]; busy {
				c.releasePending(p)
				return nil, status.Errorf(codes.FailedPrecondition,
					"session %d: rank %d's address %v is already in job %d; with Tofino QPNs a worker address can be in one job at a time — end job %d or give this worker another address",
					p.id, r, p.regs[r].addr, other, other)
			}
		}
	}
	var clients []string
	for r := range prm.numWorkers {
		if cl := p.regs[r].client; !slices.Contains(clients, cl) {
			clients = append(clients, cl)
		}
	}
	for _, cl := range clients {
		used := c.clientSlots[cl]
		if cl == p.charged {
			used -= p.reserved.Size // the reservation becomes this job's range
		}
		if c.clientShareLimited() && used+need > c.cfg.MaxClientSlots {
			c.releasePending(p)
			return nil, errClientShare(p.id, cl, need, used, c.cfg.MaxClientSlots)
		}
	}
	pool, ok := p.reserved, prm.p4app
	if !ok {
		pool, ok = c.pool.Alloc(need)
	}
	if !ok {
		free, largest := c.pool.Available()
		return nil, status.Errorf(codes.ResourceExhausted,
			"session %d: pool exhausted: the job needs %d slots (%d QPs × %d packets per message) but %d of %d slots are free (largest free range %d); end another job, use fewer QPs or smaller messages, or give the switch a larger pool",
			p.id, need, prm.qps, ppm, free, c.cfg.PoolSize, largest)
	}
	j := &job{
		sessionID:  p.id,
		params:     prm,
		pool:       pool,
		token:      newJobToken(),
		switchPSNs: make([][]uint32, prm.numWorkers),
		ended:      make([]bool, prm.numWorkers),
		attached:   make([]bool, prm.numWorkers),
		streamOpen: make([]bool, prm.numWorkers),
		done:       make(chan struct{}),
	}
	if c.cfg.QPNScheme == QPNOpaque && !prm.p4app && uint64(len(c.qpnsInUse))+uint64(prm.numWorkers*prm.qps) > (opaqueQPNHi-opaqueQPNLo)/2 {
		// Half full at most, so random picks find a free QPN quickly.
		c.pool.Free(pool)
		return nil, status.Errorf(codes.ResourceExhausted, "session %d: out of switch QPNs for %d workers × %d QPs; end other jobs", p.id, prm.numWorkers, prm.qps)
	}
	if p.reserved.Size != 0 {
		c.uncharge(p.charged, p.reserved.Size)
		p.reserved, p.charged = spans.Span{}, ""
	}
	for _, cl := range clients {
		c.clientSlots[cl] += need
	}
	j.clients = clients
	for c.jobs[c.nextJobID] != nil || c.nextJobID == 0 {
		c.nextJobID++
	}
	j.spec = wire.Job{
		ID:         c.nextJobID,
		DType:      prm.dtype,
		PacketSize: prm.packetSize,
		PoolBase:   pool.Base,
		PoolSlots:  pool.Size,
		Workers:    make([]wire.Worker, prm.numWorkers),
	}
	c.nextJobID++
	for r := range prm.numWorkers {
		reg := p.regs[r]
		sq, psns := reg.switchQPNs, reg.switchPSNs
		if sq == nil {
			sq, psns = c.drawSwitchQPs(r, prm.qps)
		}
		j.switchPSNs[r] = psns
		j.packetWrites = j.packetWrites || reg.needsPacketWrites
		j.spec.Workers[r] = wire.Worker{
			Rank:       r,
			Addr:       reg.addr,
			MAC:        reg.mac,
			RKey:       reg.rkey,
			QPNs:       reg.qpns,
			PSNs:       reg.psns,
			SwitchQPNs: sq,

			IgnoresIPv4ID: reg.ignoresIPv4ID,
		}
		if c.cfg.QPNScheme == QPNP4App {
			c.p4appAddrs[reg.addr] = j.spec.ID
		}
	}
	if err := j.spec.Validate(); err != nil {
		c.freeJob(j)
		return nil, status.Errorf(codes.Internal, "session %d: %v", p.id, err)
	}
	return j, nil
}

// randomQPN picks an unused opaque switch QPN and marks it used; the space
// is at most half full (allocJob), so this takes two tries on average.
// Holds c.mu.
func (c *Controller) randomQPN() uint32 {
	for {
		q := opaqueQPNLo + rand.Uint32N(opaqueQPNHi-opaqueQPNLo)
		if _, used := c.qpnsInUse[q]; !used {
			c.qpnsInUse[q] = struct{}{}
			return q
		}
	}
}

// freeJob returns a job's pool range and QPNs. Holds c.mu.
func (c *Controller) freeJob(j *job) {
	c.pool.Free(j.pool)
	for _, cl := range j.clients {
		c.uncharge(cl, j.pool.Size)
	}
	j.clients = nil
	for _, w := range j.spec.Workers {
		if c.cfg.QPNScheme == QPNOpaque {
			for _, q := range w.SwitchQPNs {
				delete(c.qpnsInUse, q)
			}
		}
		if c.p4appAddrs[w.Addr] == j.id() {
			delete(c.p4appAddrs, w.Addr)
		}
	}
}

// response is rank's answer to RdmaSession.
func (c *Controller) response(j *job, rank int) *pb.RdmaSessionResponse {
	resp := c.buildResponse(j.sessionID, j.params, j.pool, j.spec.Workers[rank].SwitchQPNs, j.switchPSNs[rank])
	resp.JobId = j.id()
	resp.JobToken = slices.Clone(j.token)
	resp.PacketWrites = j.packetWrites
	return resp
}

// buildResponse is an RdmaSession answer without the job's id and token
// (which an early p4app answer cannot have yet).
func (c *Controller) buildResponse(sid uint32, prm sessionParams, pool spans.Span, qpns, psns []uint32) *pb.RdmaSessionResponse {
	ppm := prm.ppm()
	idx := make([]uint32, prm.qps)
	for i := range idx {
		idx[i] = uint32(wire.MakePoolIndex(pool.Base+uint32(i*ppm), 0))
	}
	resp := &pb.RdmaSessionResponse{
		SessionId:         uint64(sid),
		Mac:               macToUint64(c.cfg.SwitchMAC),
		Rkey:              uint32(wire.MakePoolIndex(pool.Base, 0)),
		Qpns:              slices.Clone(qpns),
		Psns:              slices.Clone(psns),
		PoolBase:          pool.Base,
		PoolSlots:         pool.Size,
		PacketSizeBytes:   uint32(prm.packetSize),
		QpPoolIndices:     idx,
		NumWorkers:        uint32(prm.numWorkers),
		PacketsPerMessage: uint32(ppm),
	}
	if c.cfg.SwitchIPv4.IsValid() {
		resp.Ipv4 = binary.BigEndian.Uint32(c.cfg.SwitchIPv4.AsSlice())
	}
	if prm.v6 {
		resp.Gid = c.cfg.SwitchIPv6.AsSlice()
	}
	return resp
}

// endJob removes a job from the switch, frees its ranges and wakes its
// KeepAlive streams. It returns false, after the job is gone, if another
// call got there first.
func (c *Controller) endJob(j *job, aborted bool, reason, label string) bool {
	c.mu.Lock()
	if j.ending {
		c.mu.Unlock()
		<-j.done
		return false
	}
	j.ending = true
	j.aborted, j.reason = aborted, reason
	delete(c.jobs, j.id())
	if c.jobBySession[j.sessionID] == j {
		delete(c.jobBySession, j.sessionID)
	}
	if j.liveness != nil {
		j.liveness.Stop()
	}
	if j.idle != nil {
		j.idle.Stop()
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTimeout)
	err := c.cfg.Programmer.RemoveJob(ctx, j.id())
	cancel()
	if err != nil {
		// The slots are freed anyway: AddJob promises the next job's slots
		// start empty.
		c.log.Error("switch did not remove job", "job", j.id(), "err", err)
	}
	lvl := c.log.Info
	if aborted {
		lvl = c.log.Warn
	}
	lvl("job ended", "session", j.sessionID, "job", j.id(), "aborted", aborted, "reason", reason)

	c.mu.Lock()
	c.freeJob(j)
	c.stats.endedByReason[label]++
	close(j.done)
	c.mu.Unlock()
	return true
}

// checkLiveness aborts a job whose ranks have neither opened a KeepAlive
// stream nor ended within LivenessTimeout of its start.
func (c *Controller) checkLiveness(j *job) {
	c.mu.Lock()
	var missing []int
	for r := range j.params.numWorkers {
		if !j.attached[r] && !j.ended[r] {
			missing = append(missing, r)
		}
	}
	ending := j.ending
	c.mu.Unlock()
	if ending || len(missing) == 0 {
		return
	}
	word := "ranks"
	if len(missing) == 1 {
		word = "rank"
	}
	c.endJob(j, true, fmt.Sprintf("%s %s of %d never opened a keep-alive stream within %v of the job's start (worker gone, or a client without KeepAlive: run the controller with liveness checks off)",
		word, formatRanks(missing), j.params.numWorkers, c.cfg.LivenessTimeout), endReasonLiveness)
}

// errBadToken is what a call about job id gets without the job's token.
func errBadToken(id uint32) error {
	return status.Errorf(codes.PermissionDenied,
		"job %d: job_token missing or wrong: pass the job_token RdmaSession returned to this job's ranks (control.Client does), or the controller's operator token", id)
}

// checkIdle aborts a p4app job (no KeepAlive streams) when no packet
// reached its QPs since the last check, IdleTimeout ago.
func (c *Controller) checkIdle(j *job) {
	n, ok := c.cfg.Programmer.(ActivityReporter).JobPackets(j.id())
	c.mu.Lock()
	if j.ending || !ok {
		c.mu.Unlock()
		return
	}
	if n != j.packets {
		j.packets = n
		j.idle.Reset(c.cfg.IdleTimeout)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.endJob(j, true, fmt.Sprintf("no packet reached the switch for %v (p4app-switchML workers hold no keep-alive stream: data-plane silence ends their job)", c.cfg.IdleTimeout), endReasonIdle)
}

func (c *Controller) endSession(ctx context.Context, req *pb.EndSessionRequest) (*pb.EndSessionResponse, error) {
	operator := c.isOperator(ctx)
	c.mu.Lock()
	j := c.jobs[req.GetJobId()]
	if j == nil {
		c.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "job %d is not running (it ended already, or the id is wrong: see ListJobs)", req.GetJobId())
	}
	if !operator && !tokenEqual(req.GetJobToken(), j.token) {
		c.mu.Unlock()
		return nil, errBadToken(j.id())
	}
	rank := int(req.GetRank())
	if rank >= j.params.numWorkers {
		c.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "job %d: rank %d is out of range for %d workers", j.id(), rank, j.params.numWorkers)
	}
	if req.GetAbort() {
		c.mu.Unlock()
		reason := fmt.Sprintf("rank %d aborted the job", rank)
		if req.GetReason() != "" {
			reason += ": " + req.GetReason()
		}
		return &pb.EndSessionResponse{Ended: c.endJob(j, true, reason, endReasonAbort)}, nil
	}
	j.ended[rank] = true
	var pendingRanks []uint32
	for r, e := range j.ended {
		if !e {
			pendingRanks = append(pendingRanks, uint32(r))
		}
	}
	c.mu.Unlock()
	if len(pendingRanks) > 0 {
		return &pb.EndSessionResponse{PendingRanks: pendingRanks}, nil
	}
	return &pb.EndSessionResponse{Ended: c.endJob(j, false, "every rank ended the session", endReasonEnd)}, nil
}

type eventSender interface {
	Send(*pb.JobEvent) error
	Context() context.Context
}

func (c *Controller) keepAlive(req *pb.KeepAliveRequest, stream eventSender) error {
	c.mu.Lock()
	j := c.jobs[req.GetJobId()]
	if j == nil {
		c.mu.Unlock()
		return status.Errorf(codes.NotFound, "job %d is not running (it ended already, or the id is wrong: see ListJobs)", req.GetJobId())
	}
	if !tokenEqual(req.GetJobToken(), j.token) {
		c.mu.Unlock()
		return errBadToken(j.id())
	}
	rank := int(req.GetRank())
	switch {
	case rank >= j.params.numWorkers:
		c.mu.Unlock()
		return status.Errorf(codes.InvalidArgument, "job %d: rank %d is out of range for %d workers", j.id(), rank, j.params.numWorkers)
	case j.streamOpen[rank]:
		c.mu.Unlock()
		return status.Errorf(codes.AlreadyExists, "job %d: rank %d already holds a keep-alive stream; one per rank", j.id(), rank)
	case j.ended[rank]:
		c.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "job %d: rank %d has ended its session", j.id(), rank)
	}
	j.streamOpen[rank] = true
	j.attached[rank] = true
	c.mu.Unlock()

	err := stream.Send(&pb.JobEvent{Kind: pb.JobEvent_ATTACHED, JobId: j.id()})
	if err == nil {
		select {
		case <-j.done:
			err = stream.Send(&pb.JobEvent{Kind: pb.JobEvent_ENDED, JobId: j.id(), Aborted: j.aborted, Reason: j.reason})
		case <-stream.Context().Done():
			err = status.FromContextError(stream.Context().Err()).Err()
		}
	}
	c.mu.Lock()
	j.streamOpen[rank] = false
	lost := !j.ended[rank] && !j.ending
	c.mu.Unlock()
	if lost {
		c.endJob(j, true, fmt.Sprintf("rank %d's keep-alive stream closed before it ended its session (worker exited or lost the controller)", rank), endReasonKeepAlive)
	}
	return err
}

// listJobs answers ListJobs: every job for an operator, otherwise only the
// jobs whose token the request carries; the rest are only counted.
func (c *Controller) listJobs(ctx context.Context, req *pb.ListJobsRequest) *pb.ListJobsResponse {
	operator := c.isOperator(ctx)
	c.mu.Lock()
	infos := make([]JobInfo, 0, len(c.jobs))
	hidden := 0
	for _, j := range c.jobs {
		visible := operator || slices.ContainsFunc(req.GetJobTokens(), func(t []byte) bool { return tokenEqual(t, j.token) })
		if visible {
			infos = append(infos, j.info())
		} else {
			hidden++
		}
	}
	c.mu.Unlock()
	sortJobInfos(infos)
	resp := &pb.ListJobsResponse{HiddenJobs: uint32(hidden)}
	for _, info := range infos {
		resp.Jobs = append(resp.Jobs, info.proto())
	}
	return resp
}

func (j *job) info() JobInfo {
	info := JobInfo{Job: j.spec.Clone(), SessionID: j.sessionID, MessageSize: j.params.messageSize, TensorBytes: j.params.tensorBytes}
	for r, e := range j.ended {
		if e {
			info.EndedRanks = append(info.EndedRanks, r)
		}
	}
	return info
}

func (i JobInfo) proto() *pb.JobInfo {
	p := &pb.JobInfo{
		JobId:           i.Job.ID,
		SessionId:       i.SessionID,
		NumWorkers:      uint32(len(i.Job.Workers)),
		PacketSizeBytes: uint32(i.Job.PacketSize),
		MessageSize:     uint32(i.MessageSize),
		PoolBase:        i.Job.PoolBase,
		PoolSlots:       i.Job.PoolSlots,
		TensorBytes:     i.TensorBytes,
	}
	if i.Job.DType == wire.Int32 {
		p.Dtype = pb.DataType_DATA_TYPE_INT32
	}
	for _, w := range i.Job.Workers {
		p.NumQps = uint32(len(w.SwitchQPNs))
		p.SwitchQpns = append(p.SwitchQpns, w.SwitchQPNs...)
	}
	for _, r := range i.EndedRanks {
		p.EndedRanks = append(p.EndedRanks, uint32(r))
	}
	return p
}

func sortJobInfos(s []JobInfo) {
	slices.SortFunc(s, func(a, b JobInfo) int { return int(a.Job.ID) - int(b.Job.ID) })
}

// formatRanks writes "2, 3" or "2, 3, 5, … (12 in all)".
func formatRanks(r []int) string {
	const show = 16
	var b strings.Builder
	for i, v := range r {
		if i == show {
			fmt.Fprintf(&b, ", … (%d in all)", len(r))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, v)
	}
	return b.String()
}

func macFromUint64(v uint64) net.HardwareAddr {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return net.HardwareAddr(slices.Clone(b[2:]))
}

func macToUint64(m net.HardwareAddr) uint64 {
	if len(m) != 6 {
		return 0
	}
	var b [8]byte
	copy(b[2:], m)
	return binary.BigEndian.Uint64(b[:])
}
