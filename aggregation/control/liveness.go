package control

// Liveness: how the controller learns that a running job's worker is gone
// (docs/control-plane.md "Teardown rule", rules 3 and 4).
//
//   - Each rank holds a KeepAlive stream while it runs (keepAlive): the
//     stream gets ATTACHED, then ENDED when the job ends; a stream that
//     closes before its rank ended the session aborts the job.
//   - A rank that neither opens one nor ends within LivenessTimeout of the
//     job's start aborts it (checkLiveness).
//   - p4app-switchML workers hold no stream: their job ends after
//     IdleTimeout without a packet at the switch (checkIdle), where the
//     Programmer counts packets (ActivityReporter).

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
)

// eventSender is what keepAlive needs of the server side of a KeepAlive
// stream.
type eventSender interface {
	Send(*pb.JobEvent) error
	Context() context.Context
}

// keepAlive serves one rank's KeepAlive stream: ATTACHED at once, ENDED
// when the job ends. The stream needs the job's token, and a rank holds
// one stream at a time.
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
	rank := c.shareRank(req.GetRank())
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
		c.endJob(j, true, fmt.Sprintf("rank %d's keep-alive stream closed before it ended its session (worker exited or lost the controller)", rank+c.cfg.Ranks.First), endReasonKeepAlive)
	}
	return err
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
