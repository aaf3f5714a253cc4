package control

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
)

// syncGen is one generation of a barrier or broadcast in one scope (session
// id). It completes when numWorkers calls have joined; the next call in the
// scope starts a new generation. Guarded by Controller.mu; value is written
// before done is closed.
type syncGen struct {
	kind       string // "barrier" or "broadcast", for messages
	scope      uint32
	numWorkers int
	root       int          // broadcast only
	count      int          // calls joined
	ranks      map[int]bool // ranks joined, when callers send them
	value      uint64       // the root's value (broadcast)
	agree      *agreement   // the first call's agree_value (barrier), if sent
	complete   bool         // all arrived, or timed out (err set)
	err        error
	timer      *time.Timer
	done       chan struct{}
}

// agreement is the value a barrier's callers must all pass.
type agreement struct {
	name  string
	value uint64
	rank  int // who passed it first
}

// syncCall is one Barrier or Broadcast call.
type syncCall struct {
	numWorkers uint64
	rank       int64 // -1: not sent (p4app Barrier)
	root       int64 // -1: barrier
	value      uint64
	agree      *agreement
}

func (c *Controller) barrier(ctx context.Context, req *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	if err := c.registrationRefusal(ctx, "barrier", req.GetSessionId()); err != nil {
		return nil, err
	}
	call := syncCall{numWorkers: uint64(req.GetNumWorkers()), rank: -1, root: -1}
	if req.Rank != nil {
		call.rank = int64(req.GetRank())
	}
	if req.AgreeValue != nil {
		call.agree = &agreement{name: req.GetAgreeName(), value: req.GetAgreeValue(), rank: int(call.rank)}
		if call.agree.name == "" {
			call.agree.name = "agree_value"
		}
	}
	if _, err := c.join(ctx, c.barriers, "barrier", req.GetSessionId(), call); err != nil {
		return nil, err
	}
	return &pb.BarrierResponse{}, nil
}

func (c *Controller) broadcast(ctx context.Context, req *pb.BroadcastRequest) (*pb.BroadcastResponse, error) {
	if err := c.registrationRefusal(ctx, "broadcast", req.GetSessionId()); err != nil {
		return nil, err
	}
	call := syncCall{numWorkers: uint64(req.GetNumWorkers()), rank: int64(req.GetRank()), root: int64(req.GetRoot()), value: req.GetValue()}
	v, err := c.join(ctx, c.broadcasts, "broadcast", req.GetSessionId(), call)
	if err != nil {
		return nil, err
	}
	return &pb.BroadcastResponse{Value: v}, nil
}

// join adds call to the scope's current generation of table and waits for
// it to complete; it returns the root's value.
func (c *Controller) join(ctx context.Context, table map[uint32]*syncGen, kind string, scope uint32, call syncCall) (uint64, error) {
	bad := func(format string, args ...any) (uint64, error) {
		return 0, status.Errorf(codes.InvalidArgument, "%s (session %d): "+format, append([]any{kind, scope}, args...)...)
	}
	switch n := call.numWorkers; {
	case n == 0:
		return bad("num_workers is 0: pass the number of workers taking part (at least 1)")
	case n > uint64(c.cfg.MaxWorkers):
		return bad("num_workers %d: this switch serves at most %d workers per job", n, c.cfg.MaxWorkers)
	case call.rank >= int64(n):
		return bad("rank %d is out of range for %d workers: ranks are 0..%d", call.rank, n, n-1)
	case call.root >= int64(n):
		return bad("root %d is out of range for %d workers: ranks are 0..%d", call.root, n, n-1)
	}
	n, rank, root := int(call.numWorkers), int(call.rank), int(call.root)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errClosed()
	}
	g := table[scope]
	if g == nil {
		// One generation per running job, and as many beyond as sessions
		// may wait: session ids are the caller's to pick.
		if limit := len(c.jobs) + c.cfg.MaxPendingSessions; len(table) >= limit {
			c.mu.Unlock()
			return 0, status.Errorf(codes.ResourceExhausted,
				"%s (session %d): %d %ss are already waiting for their workers (the controller's limit: one per running job + --max-pending-sessions); wait for them to complete or time out (%v)",
				kind, scope, len(table), kind, c.cfg.SessionTimeout)
		}
		g = &syncGen{kind: kind, scope: scope, numWorkers: n, root: root, agree: call.agree, ranks: make(map[int]bool), done: make(chan struct{})}
		g.timer = time.AfterFunc(c.cfg.SessionTimeout, func() { c.expireSync(table, g) })
		table[scope] = g
	}
	// A call that disagrees with the waiting ones fails the generation:
	// every caller learns it now, not at the timeout.
	disagree := func(param string, got, want any, format string, args ...any) (uint64, error) {
		err := mismatchError(scope, param, rank, got, -1, want, fmt.Sprintf("%s (session %d): "+format, append([]any{kind, scope}, args...)...))
		c.failSync(table, g, err)
		c.mu.Unlock()
		return 0, err
	}
	switch waiting, want, groot := g.count, g.numWorkers, g.root; {
	case want != n:
		return disagree("num_workers", n, want, "this call says num_workers %d but the %d waiting call(s) say %d; every worker must pass the same count", n, waiting, want)
	case groot != root:
		return disagree("root", root, groot, "this call says root %d but the %d waiting call(s) say %d; every worker must pass the same root", root, waiting, groot)
	case rank >= 0 && g.ranks[rank]:
		return disagree("rank", rank, rank, "rank %d joined twice; every worker needs its own rank in 0..%d", rank, n-1)
	case g.agree != nil && (call.agree == nil || call.agree.value != g.agree.value || call.agree.name != g.agree.name):
		// Every caller learns it now: the generation cannot complete.
		err := g.disagreement(call)
		c.failSync(table, g, err)
		c.mu.Unlock()
		return 0, err
	case g.agree == nil && call.agree != nil && g.count > 0:
		err := mismatchError(scope, call.agree.name, rank, call.agree.value, -1, "(not sent)",
			fmt.Sprintf("%s (session %d): rank %d passed %s %d but the %d waiting call(s) passed none; every worker must pass the same", kind, scope, rank, call.agree.name, call.agree.value, waiting))
		c.failSync(table, g, err)
		c.mu.Unlock()
		return 0, err
	}
	g.count++
	if rank >= 0 {
		g.ranks[rank] = true
	}
	if rank == g.root && g.root >= 0 {
		g.value = call.value
	}
	if g.count == n {
		g.complete = true
		g.timer.Stop()
		close(g.done)
		delete(table, scope)
		c.mu.Unlock()
		return g.value, nil
	}
	c.mu.Unlock()

	var err error
	select {
	case <-g.done:
		return g.value, g.err
	case <-ctx.Done():
		err = status.FromContextError(ctx.Err()).Err()
	case <-c.closing:
		err = errClosed()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.complete {
		return g.value, g.err
	}
	g.count--
	if rank >= 0 {
		delete(g.ranks, rank)
	}
	if g.count == 0 && table[scope] == g {
		g.timer.Stop()
		delete(table, scope)
	}
	return 0, err
}

// expireSync fails a generation SessionTimeout after its first call; every
// waiting call gets the same error.
func (c *Controller) expireSync(table map[uint32]*syncGen, g *syncGen) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.complete || table[g.scope] != g {
		return
	}
	c.stats.syncTimeouts++
	c.failSync(table, g, status.Error(codes.DeadlineExceeded, g.timeoutMessage(c.cfg.SessionTimeout)))
}

// failSync completes a generation with err for every waiting call. Holds
// c.mu.
func (c *Controller) failSync(table map[uint32]*syncGen, g *syncGen, err error) {
	g.err = err
	g.complete = true
	g.timer.Stop()
	if table[g.scope] == g {
		delete(table, g.scope)
	}
	close(g.done)
}

// disagreement is the error of a call whose agree_value differs from the
// generation's.
func (g *syncGen) disagreement(call syncCall) error {
	a := g.agree
	if call.agree == nil {
		return mismatchError(g.scope, a.name, int(call.rank), "(not sent)", a.rank, a.value,
			fmt.Sprintf("%s (session %d): rank %d passed no %s but rank %d passed %d; every worker must pass the same", g.kind, g.scope, call.rank, a.name, a.rank, a.value))
	}
	if call.agree.name != a.name {
		return mismatchError(g.scope, "agree_name", int(call.rank), call.agree.name, a.rank, a.name,
			fmt.Sprintf("%s (session %d): rank %d agrees on %q but rank %d on %q; every worker must pass the same", g.kind, g.scope, call.rank, call.agree.name, a.rank, a.name))
	}
	return mismatchError(g.scope, a.name, int(call.rank), call.agree.value, a.rank, a.value,
		fmt.Sprintf("%s (session %d): rank %d passed %s %d but rank %d passed %d; every worker must pass the same", g.kind, g.scope, call.rank, a.name, call.agree.value, a.rank, a.value))
}

// timeoutMessage names the missing ranks when callers sent ranks.
func (g *syncGen) timeoutMessage(d time.Duration) string {
	msg := fmt.Sprintf("%s (session %d): %d of %d workers arrived within %v", g.kind, g.scope, g.count, g.numWorkers, d)
	if len(g.ranks) == g.count {
		msg += fmt.Sprintf("; %s never arrived", describeMissing(g.numWorkers, g.count, func(r int) bool { return g.ranks[r] }))
	}
	return msg + "; a worker is gone or passed a different --workers"
}
