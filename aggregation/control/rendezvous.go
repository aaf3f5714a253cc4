package control

// Rendezvous: the ranks of a session meet (docs/control-plane.md
// "Sequence of a session").
//
//  1. rdmaSession takes a rank's registration, parsed on its own
//     (register.go), checks that the caller may register it (auth.go) and
//     that the job fits one client's share, and files it under its
//     pending session, which the first rank opens with its parameters.
//  2. A later rank's parameters are checked against the first rank's
//     (check): a rank that disagrees, or registers twice while the
//     session waits, fails the whole session at once (failPending) with an
//     error every rank can read (mismatchError).
//  3. The last rank in starts the job (alloc.go, startJob); every rank
//     waits for it in awaitSession. A p4app rank is answered at once
//     (p4app.go).
//  4. A rank whose context ends, or a closing controller, leaves the
//     session before it starts (leave); a session not full within
//     SessionTimeout of its first registration expires, naming the ranks
//     that never came (expire, describeMissing).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
)

// rdmaSession serves RdmaSession: steps 1 to 3 above. The checks that need
// no lock run first; the tables are then read and written under c.mu,
// which is released before the job starts or the rank waits.
func (c *Controller) rdmaSession(ctx context.Context, req *pb.RdmaSessionRequest) (*pb.RdmaSessionResponse, error) {
	sid := req.GetSessionId()
	if err := c.registrationRefusal(ctx, "RdmaSession", sid); err != nil {
		return nil, err
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
		return nil, reasonError(codes.FailedPrecondition, ErrorReasonSessionRunning, fmt.Sprintf(
			"session %d is already running as job %d (%d workers); end it first or use another session id",
			sid, j.id(), j.params.numWorkers))
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
	case q.elementBytes != p.params.elementBytes:
		return mismatch("wire_bits", "wire_bits", 8*int(q.elementBytes), 8*int(p.params.elementBytes), "every worker of a job must use the same wire width")
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

// dropPending removes p from the pending table. Holds c.mu.
func (c *Controller) dropPending(p *pendingSession) {
	if c.pending[p.id] == p {
		delete(c.pending, p.id)
	}
	c.pendingQPs -= p.heldQPs
	p.heldQPs = 0
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
