package control

// Listing: ListJobs shows each running job as a JobInfo (job.info) in its
// wire form (JobInfo.proto). An operator sees every job, a caller the jobs
// whose token it holds; the others are only counted.

import (
	"context"
	"slices"

	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

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

// info is the job as ListJobs shows it. Holds c.mu.
func (j *job) info() JobInfo {
	info := JobInfo{Job: j.spec.Clone(), SessionID: j.sessionID, MessageSize: j.params.messageSize, TensorBytes: j.params.tensorBytes}
	for r, e := range j.ended {
		if e {
			info.EndedRanks = append(info.EndedRanks, r)
		}
	}
	return info
}

// proto is info in the wire's terms (every rank has the same QP count).
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
		WireBits:        8 * uint32(i.Job.LaneBytes()),
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

// sortJobInfos orders jobs by id, so that a listing reads the same each time.
func sortJobInfos(s []JobInfo) {
	slices.SortFunc(s, func(a, b JobInfo) int { return int(a.Job.ID) - int(b.Job.ID) })
}
