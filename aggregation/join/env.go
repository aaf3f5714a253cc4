package join

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
)

// Environment variables Member reads after the explicit values, in order of
// precedence: ours, then Open MPI's, then torchrun's. Open MPI's come
// before torchrun's so that under mpirun a stray RANK (left over from a
// torchrun shell, or set by a wrapper) does not pick a different rank than
// the launcher gave.
var (
	RankEnv      = []string{"SWML_RANK", "OMPI_COMM_WORLD_RANK", "RANK"}
	WorldSizeEnv = []string{"SWML_WORKERS", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"}
	LocalRankEnv = []string{"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}
)

// ErrMembership is wrapped by every error of Member: a rank or job size
// that is missing, not a number or out of range.
var ErrMembership = errors.New("job membership")

// Membership is one process's place in a job.
type Membership struct {
	Rank, Workers int
	// LocalRank is the rank among the job's processes on this host
	// (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK), -1 when unknown.
	LocalRank int
	// RankFrom and WorkersFrom name where each value came from, for
	// messages: "--rank", "$OMPI_COMM_WORLD_RANK", "$RANK", …
	RankFrom, WorkersFrom string
}

// Explicit are values given by the caller (flags, a framework's own
// config); they win over the environment.
type Explicit struct {
	Rank, Workers *int // nil: not given
	// RankName and WorkersName are how messages name the explicit values,
	// e.g. "--rank"; default "rank", "workers".
	RankName, WorkersName string
	// Getenv reads one environment variable ("" for unset); nil is
	// os.Getenv. A library loaded into a host program passes C's getenv,
	// which sees what the host set after the process started.
	Getenv func(string) string
}

// Member resolves rank and job size: the explicit values when given, else
// the first set variable of RankEnv and WorldSizeEnv (SWML_*, then Open
// MPI's, then torchrun's); and the local rank from LocalRankEnv. Errors wrap
// ErrMembership and name the source of a missing, malformed or
// out-of-range value.
func Member(e Explicit) (Membership, error) {
	m := Membership{LocalRank: -1}
	if e.RankName == "" {
		e.RankName = "rank"
	}
	if e.WorkersName == "" {
		e.WorkersName = "workers"
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	var err error
	if m.Rank, m.RankFrom, err = fromEnv(e.Getenv, e.Rank, e.RankName, RankEnv); err != nil {
		return m, err
	}
	if m.RankFrom == "" {
		return m, fmt.Errorf("%w: no rank (%s, $SWML_RANK, $OMPI_COMM_WORLD_RANK or $RANK)", ErrMembership, e.RankName)
	}
	if m.Workers, m.WorkersFrom, err = fromEnv(e.Getenv, e.Workers, e.WorkersName, WorldSizeEnv); err != nil {
		return m, err
	}
	if m.WorkersFrom == "" {
		return m, fmt.Errorf("%w: no worker count (%s, $SWML_WORKERS, $OMPI_COMM_WORLD_SIZE or $WORLD_SIZE)", ErrMembership, e.WorkersName)
	}
	if m.Workers < 1 || m.Workers > quant.MaxWorkers {
		return m, fmt.Errorf("%w: %s %d: a job has 1 to %d workers", ErrMembership, m.WorkersFrom, m.Workers, quant.MaxWorkers)
	}
	if m.Rank < 0 || m.Rank >= m.Workers {
		return m, fmt.Errorf("%w: %s %d with %s %d: ranks are 0 … %d", ErrMembership, m.RankFrom, m.Rank, m.WorkersFrom, m.Workers, m.Workers-1)
	}
	lr, from, err := fromEnv(e.Getenv, nil, "", LocalRankEnv)
	if err != nil {
		return m, err
	}
	if from != "" {
		if lr < 0 || lr > m.Rank {
			return m, fmt.Errorf("%w: %s %d: a local rank is 0 … the rank (%d)", ErrMembership, from, lr, m.Rank)
		}
		m.LocalRank = lr
	}
	return m, nil
}

// fromEnv returns *v (from name) if v is set, else the first non-empty
// variable of envs; from is "" when none was set.
func fromEnv(getenv func(string) string, v *int, name string, envs []string) (n int, from string, err error) {
	if v != nil {
		return *v, name, nil
	}
	for _, e := range envs {
		s := getenv(e)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, "", fmt.Errorf("%w: $%s %q is not a number", ErrMembership, e, s)
		}
		return n, "$" + e, nil
	}
	return 0, "", nil
}

// LocalSizeEnv are the launchers' counts of a job's processes on this host,
// in order of precedence: Open MPI's, then torchrun's.
var LocalSizeEnv = []string{"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"}

// HostShare is how many threads a rank's Go runtime should run on
// (runtime.GOMAXPROCS) when a launcher says how many of the job's ranks
// share this host: the CPUs this process may use ÷ that count, at least 1.
// 0 — leave the runtime as it is — when GOMAXPROCS is set (the user's
// choice), when no launcher says, or when what it says is not a count.
// Each runtime on all of the host's CPUs wakes a second thread whenever a
// NIC's receive goroutine hands its engine a batch, and with several
// ranks on one host those threads compete for the same cores
// (docs/benchmarks.md "One host's CPUs, shared"). getenv is as
// Explicit.Getenv; nil is os.Getenv. The CLI's worker and libswml follow
// this one rule.
func HostShare(getenv func(string) string) int {
	if getenv == nil {
		getenv = os.Getenv
	}
	if getenv("GOMAXPROCS") != "" {
		return 0
	}
	for _, e := range LocalSizeEnv {
		s := getenv(e)
		if s == "" {
			continue
		}
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 {
			return 0
		}
		return ShareOf(k)
	}
	return 0
}

// ShareOf is one of procs processes' share of the CPUs this process may
// use: the CPUs ÷ procs, at least 1 (HostShare; the network lab gives its
// processes the same).
func ShareOf(procs int) int {
	return max(1, runtime.NumCPU()/max(procs, 1))
}
