package join

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestMember: explicit values win over SWML_*, which win over Open MPI's
// variables, which win over torchrun's; bad values fail naming their
// source. The environment is the test's lookup function (as libswml
// passes C's getenv), not the process's.
func TestMember(t *testing.T) {
	two, five := 2, 5
	cases := []struct {
		name     string
		env      map[string]string
		ex       Explicit
		rank, n  int
		local    int
		wantErr  string
		rankFrom string
		sizeFrom string
	}{
		{name: "torchrun", env: map[string]string{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, rank: 1, n: 4, local: 1, rankFrom: "$RANK", sizeFrom: "$WORLD_SIZE"},
		{name: "mpirun wins over torchrun", env: map[string]string{"RANK": "1", "WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
			rank: 3, n: 8, local: 0, rankFrom: "$OMPI_COMM_WORLD_RANK", sizeFrom: "$OMPI_COMM_WORLD_SIZE"},
		{name: "SWML wins over mpirun", env: map[string]string{"RANK": "1", "SWML_RANK": "2", "OMPI_COMM_WORLD_RANK": "3", "SWML_WORKERS": "4", "OMPI_COMM_WORLD_SIZE": "8"},
			rank: 2, n: 4, local: -1, rankFrom: "$SWML_RANK", sizeFrom: "$SWML_WORKERS"},
		{name: "explicit wins", env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, ex: Explicit{Rank: &two, Workers: &five, RankName: "--rank"},
			rank: 2, n: 5, local: -1, rankFrom: "--rank", sizeFrom: "workers"},
		{name: "no rank", env: map[string]string{"WORLD_SIZE": "4"}, ex: Explicit{RankName: "--rank"}, wantErr: "no rank (--rank, $SWML_RANK"},
		{name: "no size", env: map[string]string{"RANK": "0"}, wantErr: "no worker count"},
		{name: "not a number", env: map[string]string{"RANK": "x", "WORLD_SIZE": "4"}, wantErr: `$RANK "x" is not a number`},
		{name: "SWML_WORKERS not a number", env: map[string]string{"RANK": "0", "SWML_WORKERS": "x"}, wantErr: `$SWML_WORKERS "x" is not a number`},
		{name: "rank out of range", env: map[string]string{"RANK": "4", "WORLD_SIZE": "4"}, wantErr: "$RANK 4 with $WORLD_SIZE 4: ranks are 0 … 3"},
		{name: "size zero", env: map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, wantErr: "$WORLD_SIZE 0: a job has 1 to"},
		{name: "local rank above rank", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, wantErr: "$LOCAL_RANK 1: a local rank is 0 … the rank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.ex.Getenv = func(k string) string { return c.env[k] }
			m, err := Member(c.ex)
			if c.wantErr != "" {
				if !errors.Is(err, ErrMembership) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Rank != c.rank || m.Workers != c.n || m.LocalRank != c.local || m.RankFrom != c.rankFrom || m.WorkersFrom != c.sizeFrom {
				t.Fatalf("got %+v, want rank %d (%s) of %d (%s), local %d", m, c.rank, c.rankFrom, c.n, c.sizeFrom, c.local)
			}
		})
	}
}

// TestHostShare: a launcher's count of the ranks on this host gives each
// its share of the CPUs, at least one thread; GOMAXPROCS, a count that is
// not one, or no launcher leave the runtime alone.
func TestHostShare(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{nil, 0},
		{map[string]string{"LOCAL_WORLD_SIZE": "2"}, max(1, cpus/2)},
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_SIZE": strconv.Itoa(4 * cpus)}, 1},
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_SIZE": "1", "LOCAL_WORLD_SIZE": strconv.Itoa(4 * cpus)}, cpus}, // Open MPI's first
		{map[string]string{"LOCAL_WORLD_SIZE": "2", "GOMAXPROCS": "3"}, 0},
		{map[string]string{"LOCAL_WORLD_SIZE": "two"}, 0},
		{map[string]string{"LOCAL_WORLD_SIZE": "0"}, 0},
	} {
		if got := HostShare(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%v: %d threads, want %d", tc.env, got, tc.want)
		}
	}
}
