package control

import (
	"context"

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

// ActivityReporter is implemented by a Programmer that can count a job's
// packets (the software switch). The controller uses it to supervise jobs
// whose workers hold no KeepAlive stream (p4app-switchML workers): such a
// job ends after Config.IdleTimeout without a packet.
type ActivityReporter interface {
	// JobPackets is the number of packets that reached the job's QPs since
	// AddJob; false if the job is not installed.
	JobPackets(jobID uint32) (uint64, bool)
}
