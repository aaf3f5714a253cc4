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
	complete   bool         // all arrived, or timed out (err set)
	err        error
	timer      *time.Timer
	done       chan struct{}
}

// syncCall is one Barrier or Broadcast call.
type syncCall struct {
	numWorkers int
	rank       int // -1: not sent (p4app Barrier)
	root       int // -1: barrier
	value      uint64
}

func (c *Controller) barrier(ctx context.Context, req *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	call := syncCall{numWorkers: int(req.GetNumWorkers()), rank: -1, root: -1}
	if req.Rank != nil {
		call.rank = int(req.GetRank())
	}
	if _, err := c.join(ctx, c.barriers, "barrier", req.GetSessionId(), call); err != nil {
		return nil, err
	}
	return &pb.BarrierResponse{}, nil
}

func (c *Controller) broadcast(ctx context.Context, req *pb.BroadcastRequest) (*pb.BroadcastResponse, error) {
	call := syncCall{numWorkers: int(req.GetNumWorkers()), rank: int(req.GetRank()), root: int(req.GetRoot()), value: req.GetValue()}
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
	n := call.numWorkers
	switch {
	case n == 0:
		return bad("num_workers is 0: pass the number of workers taking part (at least 1)")
	case call.rank >= n:
		return bad("rank %d is out of range for %d workers: ranks are 0..%d", call.rank, n, n-1)
	case call.root >= n:
		return bad("root %d is out of range for %d workers: ranks are 0..%d", call.root, n, n-1)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errClosed()
	}
	g := table[scope]
	if g == nil {
		g = &syncGen{kind: kind, scope: scope, numWorkers: n, root: call.root, ranks: make(map[int]bool), done: make(chan struct{})}
		g.timer = time.AfterFunc(c.cfg.SessionTimeout, func() { c.expireSync(table, g) })
		table[scope] = g
	}
	switch waiting, want, root := g.count, g.numWorkers, g.root; {
	case want != n:
		c.mu.Unlock()
		return bad("this call says num_workers %d but the %d waiting call(s) say %d; every worker must pass the same count", n, waiting, want)
	case root != call.root:
		c.mu.Unlock()
		return bad("this call says root %d but the %d waiting call(s) say %d; every worker must pass the same root", call.root, waiting, root)
	case call.rank >= 0 && g.ranks[call.rank]:
		c.mu.Unlock()
		return bad("rank %d joined twice; every worker needs its own rank in 0..%d", call.rank, n-1)
	}
	g.count++
	if call.rank >= 0 {
		g.ranks[call.rank] = true
	}
	if call.rank == g.root && g.root >= 0 {
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
	if call.rank >= 0 {
		delete(g.ranks, call.rank)
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
	g.err = status.Error(codes.DeadlineExceeded, g.timeoutMessage(c.cfg.SessionTimeout))
	g.complete = true
	delete(table, g.scope)
	close(g.done)
}

// timeoutMessage names the missing ranks when callers sent ranks.
func (g *syncGen) timeoutMessage(d time.Duration) string {
	msg := fmt.Sprintf("%s (session %d): %d of %d workers arrived within %v", g.kind, g.scope, g.count, g.numWorkers, d)
	if len(g.ranks) == g.count {
		var missing []int
		for r := range g.numWorkers {
			if !g.ranks[r] {
				missing = append(missing, r)
			}
		}
		word := "ranks"
		if len(missing) == 1 {
			word = "rank"
		}
		msg += fmt.Sprintf("; %s %s never arrived", word, formatRanks(missing))
	}
	return msg + "; a worker is gone or passed a different --workers"
}
