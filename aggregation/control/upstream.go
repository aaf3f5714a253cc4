package control

// A switch hierarchy (docs/switch.md "Switch hierarchy"): a leaf switch's
// controller serves a share of a job's ranks (Config.Ranks), and its
// Programmer, an UpstreamJoiner, makes each job it installs one worker of
// the spine switch's job before the leaf's workers are answered. When the
// spine's job ends without the leaf ending it (the spine or its controller
// lost, another leaf gone), the leaf's job is aborted with the spine's
// reason, so every worker of the tree fails with an error naming it.

import (
	"context"
	"fmt"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// RankRange is the ranks of a job that one leaf switch serves: First,
// First+1, …, First+Count−1 of the job's num_workers. Count 0: every rank.
type RankRange struct {
	First, Count int
}

// UpstreamSession is what a leaf's job tells its spine beyond the job
// itself: what the leaf's workers registered.
type UpstreamSession struct {
	SessionID   uint32
	MessageSize int
	TensorBytes uint64
}

// UpstreamLink is a leaf job's membership of its spine's job: Done is
// closed when that job ends, Err says why (nil: the leaf ended it). End
// leaves it when the leaf's job ends, before the job is removed from the
// switch: a clean end (EndSession) when every rank ended, an abort with
// reason otherwise, so that the other leaves' workers learn why.
type UpstreamLink interface {
	Done() <-chan struct{}
	Err() error
	End(ctx context.Context, aborted bool, reason string)
}

// UpstreamJoiner is implemented by a Programmer that is a leaf of a switch
// hierarchy. The controller calls JoinUpstream after AddJob and answers the
// job's ranks only once it returns; an error fails the session as a
// refused AddJob does. RemoveJob leaves the spine's job.
type UpstreamJoiner interface {
	JoinUpstream(ctx context.Context, job *wire.Job, s UpstreamSession) (UpstreamLink, error)
}

// mapRank turns a rank of a job's num_workers into this controller's
// share (Config.Ranks): the switch job's rank and worker count.
func (c *Controller) mapRank(sid uint32, n, rank int) (int, int, error) {
	r := c.cfg.Ranks
	if r.Count == 0 {
		return n, rank, nil
	}
	if n < r.First+r.Count || rank < r.First || rank >= r.First+r.Count {
		return 0, 0, invalid(sid, "rank %d of %d workers: this leaf switch serves ranks %d..%d; register with the leaf of this rank",
			rank, n, r.First, r.First+r.Count-1)
	}
	return r.Count, rank - r.First, nil
}

// shareRank is the switch job's rank of a job's rank r: r itself, or on a
// leaf (Config.Ranks) r − First; a rank outside the share maps to one at
// or beyond the switch job's worker count, which the caller refuses.
func (c *Controller) shareRank(r uint32) int {
	rank := int(r)
	if c.cfg.Ranks.Count == 0 {
		return rank
	}
	if rank < c.cfg.Ranks.First {
		return c.cfg.Ranks.Count
	}
	return rank - c.cfg.Ranks.First
}

// watchUpstream aborts job j when its spine's job ends first.
func (c *Controller) watchUpstream(j *job, link UpstreamLink) {
	select {
	case <-link.Done():
	case <-j.done:
		return
	}
	err := link.Err()
	if err == nil {
		return // the leaf left the spine's job: its own job is ending
	}
	c.endJob(j, true, fmt.Sprintf("the spine's job ended: %v", err), endReasonUpstream)
}
