package sweep

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

func validConfig() Config {
	return Config{Workers: []int{2, 4}, Rates: []uint64{0, 200e6}, Losses: []float64{0, 0.01}, Sizes: []int{256 << 10},
		Systems: Systems, Jobs: 1, Iters: 3, Warmup: 1, Timeout: 2 * time.Minute, Queue: 20 * time.Millisecond,
		PacketSize: 1024, MessageSize: 16 << 10, Exe: "/bin/swml-rdma", Python: "/usr/bin/python3",
		DDP: DDPConfig{DTypes: []string{DTypeFloat32, DTypeBF16}, Steps: 3, Warmup: 1, ComputeSteps: 2, Layers: 4, Width: 1024, Batch: 4}}
}

// TestValidate: every invalid sweep is refused before anything is built,
// naming the field and the value refused.
func TestValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("a valid sweep refused: %v", err)
	}
	tree := validConfig()
	tree.Workers, tree.Leaves, tree.SpineRate, tree.Systems = []int{4, 8}, []int{0, 2, 4}, 100e6, []System{SwitchML}
	if err := tree.Validate(); err != nil {
		t.Fatalf("a valid sweep of trees refused: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
		value any
	}{
		{"one worker", func(c *Config) { c.Workers = []int{2, 1} }, "Workers", 1},
		{"too many workers", func(c *Config) { c.Workers = []int{65} }, "Workers", 65},
		{"no rate", func(c *Config) { c.Rates = nil }, "Rates", []uint64(nil)},
		{"loss of one half", func(c *Config) { c.Losses = []float64{0, 0.5} }, "Losses", 0.5},
		{"odd size", func(c *Config) { c.Sizes = []int{6} }, "Sizes", 6},
		{"unknown system", func(c *Config) { c.Systems = []System{SwitchML, "mpi"} }, "Systems", System("mpi")},
		{"system twice", func(c *Config) { c.Systems = []System{Ring, Ring} }, "Systems", Ring},
		{"wire of 8 bits", func(c *Config) { c.Wires = []int{32, 8} }, "Wires", 8},
		{"wire twice", func(c *Config) { c.Wires = []int{16, 16} }, "Wires", 16},
		{"no jobs", func(c *Config) { c.Jobs = 0 }, "Jobs", 0},
		{"five jobs", func(c *Config) { c.Jobs = 5 }, "Jobs", 5},
		{"jobs without SwitchML", func(c *Config) { c.Jobs, c.Systems = 2, []System{Gloo, Ring} }, "Jobs", 2},
		// 62 workers × 4 addresses + 3 more of the switch: 251 > 250.
		{"jobs' addresses", func(c *Config) { c.Jobs, c.Workers = 4, []int{2, 62} }, "Jobs", 4},
		{"one leaf", func(c *Config) { c.Leaves, c.Systems = []int{0, 1}, []System{SwitchML} }, "Leaves", 1},
		{"leaves not dividing", func(c *Config) { c.Leaves, c.Systems, c.Workers = []int{2}, []System{SwitchML}, []int{4, 6, 9} }, "Leaves", 2},
		{"more leaves than workers", func(c *Config) { c.Leaves, c.Systems = []int{4}, []System{SwitchML} }, "Leaves", 4},
		{"leaves twice", func(c *Config) { c.Leaves, c.Systems = []int{2, 2}, []System{SwitchML} }, "Leaves", 2},
		{"Gloo on a tree", func(c *Config) { c.Leaves, c.Systems = []int{0, 2}, []System{SwitchML, Gloo} }, "Leaves", 2},
		{"DDP on a tree", func(c *Config) { c.Leaves, c.Systems = []int{2}, []System{DDPSwml} }, "Leaves", 2},
		{"jobs on a tree", func(c *Config) { c.Leaves, c.Systems, c.Jobs = []int{2}, []System{SwitchML}, 2 }, "Leaves", 2},
		{"spine rate without a tree", func(c *Config) { c.Leaves, c.SpineRate = []int{0}, 100e6 }, "SpineRate", uint64(100e6)},
		{"negative GOMAXPROCS", func(c *Config) { c.GoMaxProcs = -1 }, "GoMaxProcs", -1},
		{"packet size", func(c *Config) { c.PacketSize = 1000 }, "PacketSize", 1000},
		{"message size", func(c *Config) { c.MessageSize = 3000 }, "MessageSize", 3000},
		{"no iterations", func(c *Config) { c.Iters = 0 }, "Iters", 0},
		{"too many iterations", func(c *Config) { c.Iters = MaxIters + 1 }, "Iters", MaxIters + 1},
		{"negative warm-up", func(c *Config) { c.Warmup = -1 }, "Warmup", -1},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, "Timeout", time.Duration(0)},
		{"no queue", func(c *Config) { c.Queue = 0 }, "Queue", time.Duration(0)},
		{"no program for SwitchML", func(c *Config) { c.Exe = "" }, "Exe", ""},
		{"no Python for Gloo", func(c *Config) { c.Python = "" }, "Python", ""},
		{"no Python for DDP", func(c *Config) { c.Systems, c.Python = []System{DDPGloo}, "" }, "Python", ""},
		{"no program for the swml backend's switch", func(c *Config) { c.Systems, c.Exe = []System{DDPSwml}, "" }, "Exe", ""},
		{"no size for an all-reduce", func(c *Config) { c.Systems, c.Sizes = []System{DDPSwml, Gloo}, nil }, "Sizes", []int(nil)},
		{"DDP dtype", func(c *Config) { c.DDP.DTypes = []string{DTypeFloat32, "float64"} }, "DDP.DTypes", "float64"},
		{"DDP dtype twice", func(c *Config) { c.DDP.DTypes = []string{DTypeBF16, DTypeBF16} }, "DDP.DTypes", DTypeBF16},
		{"no DDP steps", func(c *Config) { c.DDP.Steps = 0 }, "DDP.Steps", 0},
		{"too many DDP steps", func(c *Config) { c.DDP.Steps = MaxIters + 1 }, "DDP.Steps", MaxIters + 1},
		{"negative DDP warm-up", func(c *Config) { c.DDP.Warmup = -1 }, "DDP.Warmup", -1},
		{"no compute steps", func(c *Config) { c.DDP.ComputeSteps = 0 }, "DDP.ComputeSteps", 0},
		{"no layers", func(c *Config) { c.DDP.Layers = 0 }, "DDP.Layers", 0},
		{"no width", func(c *Config) { c.DDP.Width = 0 }, "DDP.Width", 0},
		{"no batch", func(c *Config) { c.DDP.Batch = 0 }, "DDP.Batch", 0},
		// 64 layers of 2048: 64 × (2048² + 2048) × 4 B = 1 GiB of parameters.
		{"model too large", func(c *Config) { c.DDP.Layers, c.DDP.Width = 64, 2048 }, "DDP.Layers", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrConfig) || fe.Field != tc.field || fe.Reason == "" {
				t.Fatalf("error %v, want a FieldError of %s", err, tc.field)
			}
			if got, want := fe.Value, tc.value; !equalValue(got, want) {
				t.Errorf("value %v (%T), want %v (%T)", got, got, want, want)
			}
			if len(err.Error()) > 120 {
				t.Errorf("error of %d characters: %s", len(err.Error()), err)
			}
		})
	}
	// Without SwitchML no program is needed, without Gloo no Python; 61
	// workers × 4 addresses + 3 fit in 250.
	c := validConfig()
	c.Systems, c.Exe, c.Python, c.Jobs = []System{Ring}, "", "", 1
	if err := c.Validate(); err != nil {
		t.Errorf("the ring alone: %v", err)
	}
	c = validConfig()
	c.Jobs, c.Workers = 4, []int{2, 61}
	if err := c.Validate(); err != nil {
		t.Errorf("4 jobs of 61 workers: %v", err)
	}
	// DDP alone needs no tensor size; its settings are not checked without
	// a DDP system.
	c = validConfig()
	c.Systems, c.Sizes = []System{DDPGloo, DDPSwml}, nil
	if err := c.Validate(); err != nil {
		t.Errorf("DDP alone: %v", err)
	}
	c = validConfig()
	c.Systems, c.DDP = AllReduces, DDPConfig{}
	if err := c.Validate(); err != nil {
		t.Errorf("all-reduces without DDP settings: %v", err)
	}
}

// TestDDPParams: the model of Layers hidden Linear(Width, Width) between
// Linear(64, Width) and Linear(Width, 16) (ddp_lab.py's make_model).
func TestDDPParams(t *testing.T) {
	for _, tc := range []struct{ layers, width, want int }{
		// 64·1024 + 1024 + 4·(1024² + 1024) + 1024·16 + 16
		{4, 1024, 4281360},
		{1, 8, 64*8 + 8 + 8*8 + 8 + 8*16 + 16},
	} {
		if got := (DDPConfig{Layers: tc.layers, Width: tc.width}).Params(); got != tc.want {
			t.Errorf("%d layers of %d: %d parameters, want %d", tc.layers, tc.width, got, tc.want)
		}
	}
	if got := (DDPConfig{}).dtypes(); len(got) != 1 || got[0] != DTypeFloat32 {
		t.Errorf("no dtypes: %v, want float32", got)
	}
}

func equalValue(a, b any) bool {
	switch s := b.(type) {
	case []uint64:
		g, ok := a.([]uint64)
		return ok && len(g) == len(s)
	case []int:
		g, ok := a.([]int)
		return ok && len(g) == len(s)
	}
	return a == b
}

// TestRunRefusesInvalid: Run validates before it builds anything (no root
// needed to be refused).
func TestRunRefusesInvalid(t *testing.T) {
	c := validConfig()
	c.Workers = []int{1}
	rep, err := Run(context.Background(), c)
	if !errors.Is(err, ErrConfig) || len(rep.Rows) != 0 {
		t.Fatalf("Run of an invalid sweep: %v, %d rows", err, len(rep.Rows))
	}
}

// TestGoMaxProcs: each Go process of a row gets the host's CPUs ÷ the
// row's SwitchML processes, at least one, unless the sweep names a count.
func TestGoMaxProcs(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		workers, jobs, leaves, set, want int
	}{
		{workers: cpus, jobs: 1, want: 1},                      // more processes than CPUs
		{workers: 1, jobs: 1, want: max(1, cpus/2)},            // one worker and the switch
		{workers: 2, jobs: 2, leaves: 0, want: max(1, cpus/5)}, // two jobs' workers
		{workers: 4, jobs: 1, leaves: 2, want: max(1, cpus/7)}, // the spine and two leaves
		{workers: 64, jobs: 1, set: 3, want: 3},
	} {
		r := &runner{cfg: Config{Jobs: tc.jobs, GoMaxProcs: tc.set}}
		lab := &netlab.Lab{Workers: make([]string, tc.workers), Leaves: make([]string, tc.leaves)}
		if got := r.goMaxProcs(lab); got != tc.want {
			t.Errorf("%d workers, %d jobs, %d leaves, GoMaxProcs %d: GOMAXPROCS %d, want %d", tc.workers, tc.jobs, tc.leaves, tc.set, got, tc.want)
		}
		if env := r.goEnv(lab); env[len(env)-1] != "GOMAXPROCS="+strconv.Itoa(tc.want) {
			t.Errorf("environment ends %q, want GOMAXPROCS=%d", env[len(env)-1], tc.want)
		}
	}
}
