package control

// Waiting: which ranks a stalled job waits for (docs/control-plane.md "Who
// a stalled job waits for"). A worker whose message got no result within
// its peer timeout asks (Client.WaitingFor), so that its error can name
// the rank that holds the job up instead of blaming a silent switch.
//
//   - The switch's slots say it where the Programmer can read them
//     (ProgressReporter: the software switch, a Tofino through P4Runtime):
//     a (slot, set) pair holding a partial sum waits for every rank whose
//     bit its bitmap lacks, and the software switch's per-rank packet
//     counts say how long each has been silent.
//   - Everywhere, the controller adds what it knows itself: a rank that
//     ended its session while the others still call.
//
// A stopped process (SIGSTOP, a debugger) keeps its keep-alive stream's
// TCP connection open, so the stream alone cannot tell it from a live one
// within a peer timeout.

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
)

// waitingFor answers WaitingFor for the job the request names, with its
// token.
func (c *Controller) waitingFor(ctx context.Context, req *pb.WaitingForRequest) (*pb.WaitingForResponse, error) {
	c.mu.Lock()
	j := c.jobs[req.GetJobId()]
	if j == nil {
		c.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "job %d is not running (it ended already, or the id is wrong: see ListJobs)", req.GetJobId())
	}
	if !tokenEqual(req.GetJobToken(), j.token) {
		c.mu.Unlock()
		return nil, errBadToken(j.id())
	}
	ended := slices.Clone(j.ended)
	started := j.started
	c.mu.Unlock()

	resp := &pb.WaitingForResponse{}
	waits := make([]*pb.RankWait, len(ended))
	for r := range waits {
		waits[r] = &pb.RankWait{Rank: uint32(r + c.cfg.Ranks.First), Addr: j.spec.Workers[r].Addr.AsSlice(), Ended: ended[r]}
	}
	// The switch is read without c.mu: it takes its own locks.
	if pr, ok := c.cfg.Programmer.(ProgressReporter); ok {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.SessionTimeout)
		prog, err := pr.JobProgress(pctx, j.id())
		cancel()
		switch {
		case err != nil:
			c.log.Warn("reading a job's slots", "job", j.id(), "err", err)
		case len(prog.Ranks) == len(waits):
			now := time.Now()
			resp.SlotsRead = true
			resp.Aggregating = uint32(prog.Aggregating)
			for r, rp := range prog.Ranks {
				w := waits[r]
				w.MissingSlots = uint32(rp.Missing)
				if !prog.Activity {
					continue
				}
				w.ActivityKnown = true
				w.Packets = rp.Packets
				since := started
				if rp.Packets > 0 {
					since = rp.LastPacket
				}
				w.IdleMs = uint64(max(now.Sub(since), 0) / time.Millisecond)
			}
		}
	}
	for _, w := range waits {
		if w.GetMissingSlots() > 0 || w.GetEnded() {
			resp.Waiting = append(resp.Waiting, w)
		}
	}
	// Most missing first; among equals, the longest silent (a stopped
	// rank before one that is merely late to its call).
	slices.SortStableFunc(resp.Waiting, func(a, b *pb.RankWait) int {
		return cmp.Or(cmp.Compare(b.GetMissingSlots(), a.GetMissingSlots()), cmp.Compare(b.GetIdleMs(), a.GetIdleMs()))
	})
	c.log.Info("asked who a job waits for", "job", j.id(), "rank", req.GetRank(), "slots_read", resp.GetSlotsRead(),
		"aggregating", resp.GetAggregating(), "waiting", len(resp.GetWaiting()))
	return resp, nil
}
