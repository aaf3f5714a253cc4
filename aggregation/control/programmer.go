package control

import (
	"context"
	"errors"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// Programmer is a switch backend the controller programs: the in-process
// software switch, or a Tofino through P4Runtime. Implementations are safe for
// concurrent use.
type Programmer interface {
	// AddJob installs a job: its workers (addresses, QPNs, PSNs, rkeys), its
	// switch QPNs and its pool range. The job's slots start empty.
	AddJob(ctx context.Context, job *wire.Job) error
	// RemoveJob removes a job and reclaims its slots; removing an unknown job
	// is not an error.
	RemoveJob(ctx context.Context, jobID uint32) error
}

// GapNoticer is implemented by a Programmer that can send gap notices
// (wire.GapNotice: the software switch). A job gets them when every rank
// registered gap_notices and the switch sends them
// (RdmaSessionResponse.gap_notices); the Tofino program does not.
type GapNoticer interface {
	SendsGapNotices() bool
}

// ActivityReporter is implemented by a Programmer that can count a job's
// packets (the software switch). The controller uses it to supervise jobs
// whose workers hold no KeepAlive stream (p4app-switchML workers): such a
// job ends after Config.IdleTimeout without a packet.
type ActivityReporter interface {
	// JobPackets is the number of packets that reached the job's QPs since
	// AddJob; false if the job is not installed.
	JobPackets(jobID uint32) (uint64, bool)
}

// OrderReporter is implemented by a Programmer whose results of different
// QPs of a job may overtake each other: the software switch on several
// cores, each completing its own QPs' slots. The workers learn the groups
// (RdmaSessionResponse.qp_order_groups) and take a result as evidence of
// another message's loss only within its group (docs/protocol.md "Loss
// recovery, step by step").
type OrderReporter interface {
	// JobOrderGroups is the ordering group of each of the job's QP
	// indices; false if the job is not installed.
	JobOrderGroups(jobID uint32) ([]uint32, bool)
}

// orderGroups is the job's groups as the response carries them: nil when
// every QP is in one group, as for a switch that is no OrderReporter.
func orderGroups(or OrderReporter, jobID uint32) []uint32 {
	g, ok := or.JobOrderGroups(jobID)
	if !ok {
		return nil
	}
	for _, x := range g {
		if x != g[0] {
			return g
		}
	}
	return nil
}

// ProgressReporter is implemented by a Programmer that can read a job's
// slots (the software switch; a Tofino through P4Runtime). The controller
// answers WaitingFor from it: the ranks missing from the job's partial
// sums are the ones the others wait for (docs/control-plane.md "Who a
// stalled job waits for").
type ProgressReporter interface {
	// JobProgress reads the job's slots and, where the switch counts
	// them, its workers' packets. A job that is not installed is an error
	// wrapping ErrJobNotInstalled.
	JobProgress(ctx context.Context, jobID uint32) (JobProgress, error)
}

// ErrJobNotInstalled is wrapped by a ProgressReporter's error for a job the
// switch does not hold.
var ErrJobNotInstalled = errors.New("job not installed")

// JobProgress is what a switch's slots say about a job's workers.
type JobProgress struct {
	// Aggregating is the number of the job's (slot, set) pairs holding a
	// partial sum.
	Aggregating int
	// Activity: RankProgress.Packets and LastPacket are the switch's
	// counts (the software switch); false where it keeps none (the Tofino
	// program).
	Activity bool
	// Ranks[r] is rank r's share.
	Ranks []RankProgress
}

// RankProgress is one rank's part in a JobProgress.
type RankProgress struct {
	// Missing is the number of aggregating (slot, set) pairs that lack
	// the rank's contribution.
	Missing int
	// Packets is the number of the rank's packets that reached the job's
	// QPs since AddJob; LastPacket when the last one did (zero if none).
	Packets    uint64
	LastPacket time.Time
}
