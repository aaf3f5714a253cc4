package control

// Teardown: a job ends on the first of docs/control-plane.md "Teardown
// rule": every rank's EndSession or one rank's abort (endSession), a watch
// of liveness.go, a p4app job replaced (p4app.go), or the controller
// closing. endJob is the one way out: the switch removes the job, its
// ranges are freed and its KeepAlive streams get ENDED.

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
)

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
	if j.upstream != nil {
		j.upstream.End(ctx, aborted, reason)
	}
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

// endSession serves EndSession: a rank ends its part of the job (the last
// one ends the job) or aborts it for every rank. The job's token, or the
// operator's, is needed: a stranger must not end another's job.
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
	rank := c.shareRank(req.GetRank())
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

// errBadToken is what a call about job id gets without the job's token.
func errBadToken(id uint32) error {
	return status.Errorf(codes.PermissionDenied,
		"job %d: job_token missing or wrong: pass the job_token RdmaSession returned to this job's ranks (control.Client does), or the controller's operator token", id)
}
