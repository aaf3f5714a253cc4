package join

import (
	"fmt"
	"os"
	"strconv"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
)

// Environment variables Member reads, in order of precedence after the
// explicit values.
var (
	RankEnv      = []string{"OMPI_COMM_WORLD_RANK", "RANK"}
	WorldSizeEnv = []string{"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"}
	LocalRankEnv = []string{"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}
)

// Membership is one process's place in a job.
type Membership struct {
	Rank, Workers int
	// LocalRank is the rank among the job's processes on this host
	// (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK), -1 when unknown.
	LocalRank int
	// RankFrom and WorkersFrom name where each value came from, for
	// messages: "explicit", "$OMPI_COMM_WORLD_RANK", "$RANK", …
	RankFrom, WorkersFrom string
}

// Explicit are values given by the caller (flags, a framework's own
// config); they win over the environment.
type Explicit struct {
	Rank, Workers *int // nil: not given
	// RankName and WorkersName are how messages name the explicit values,
	// e.g. "--rank"; default "rank", "workers".
	RankName, WorkersName string
	// RankHint and WorkersHint say how to give them when missing, e.g.
	// "--rank N"; default the names.
	RankHint, WorkersHint string
}

// Member resolves rank and job size: the explicit values when given, else
// Open MPI's variables, else torchrun's; and the local rank from the
// environment. It fails naming the source of a missing, malformed or
// out-of-range value.
func Member(e Explicit) (Membership, error) {
	m := Membership{LocalRank: -1}
	if e.RankName == "" {
		e.RankName = "rank"
	}
	if e.WorkersName == "" {
		e.WorkersName = "workers"
	}
	if e.RankHint == "" {
		e.RankHint = e.RankName
	}
	if e.WorkersHint == "" {
		e.WorkersHint = e.WorkersName
	}
	var err error
	if m.Rank, m.RankFrom, err = fromEnv(e.Rank, e.RankName, RankEnv); err != nil {
		return m, err
	}
	if m.RankFrom == "" {
		return m, fmt.Errorf("no rank: pass %s, or launch with mpirun (OMPI_COMM_WORLD_RANK) or torchrun (RANK)", e.RankHint)
	}
	if m.Workers, m.WorkersFrom, err = fromEnv(e.Workers, e.WorkersName, WorldSizeEnv); err != nil {
		return m, err
	}
	if m.WorkersFrom == "" {
		return m, fmt.Errorf("no worker count: pass %s, or launch with mpirun (OMPI_COMM_WORLD_SIZE) or torchrun (WORLD_SIZE)", e.WorkersHint)
	}
	if m.Workers < 1 || m.Workers > quant.MaxWorkers {
		return m, fmt.Errorf("%s %d: a job has 1 to %d workers", m.WorkersFrom, m.Workers, quant.MaxWorkers)
	}
	if m.Rank < 0 || m.Rank >= m.Workers {
		return m, fmt.Errorf("%s %d with %s %d: ranks of a %d-worker job are 0 … %d", m.RankFrom, m.Rank, m.WorkersFrom, m.Workers, m.Workers, m.Workers-1)
	}
	lr, from, err := fromEnv(nil, "", LocalRankEnv)
	if err != nil {
		return m, err
	}
	if from != "" {
		if lr < 0 || lr > m.Rank {
			return m, fmt.Errorf("%s %d: a local rank is 0 … the rank (%d)", from, lr, m.Rank)
		}
		m.LocalRank = lr
	}
	return m, nil
}

// fromEnv returns *v (from name) if v is set, else the first non-empty
// variable of envs; from is "" when none was set.
func fromEnv(v *int, name string, envs []string) (n int, from string, err error) {
	if v != nil {
		return *v, name, nil
	}
	for _, e := range envs {
		s := os.Getenv(e)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, "", fmt.Errorf("%s=%q in the environment is not a number: unset it or give the value explicitly", e, s)
		}
		return n, "$" + e, nil
	}
	return 0, "", nil
}
