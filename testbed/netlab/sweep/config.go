package sweep

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// System is an all-reduce, or a training job, the sweep measures.
type System string

// The systems. SwitchML, Gloo and Ring all-reduce a tensor of each of
// Config.Sizes; DDPSwml and DDPGloo train a model with PyTorch's
// DistributedDataParallel (Config.DDP), its gradients through the swml
// backend (the switch daemon and libswml) or through Gloo.
const (
	SwitchML System = "switchml"
	Gloo     System = "gloo"
	Ring     System = "ring"
	DDPSwml  System = "ddp-swml"
	DDPGloo  System = "ddp-gloo"
)

// Systems are every System, in the order a row runs them.
var Systems = []System{SwitchML, Gloo, Ring, DDPSwml, DDPGloo}

// AllReduces are the systems that all-reduce a tensor of Config.Sizes (what
// `swml-rdma lab` runs unless told otherwise).
var AllReduces = []System{SwitchML, Gloo, Ring}

// IsDDP reports whether s trains a model (DDPSwml, DDPGloo) rather than
// all-reducing a tensor.
func (s System) IsDDP() bool { return s == DDPSwml || s == DDPGloo }

// The gradients' dtypes a DDP row can all-reduce (DDPConfig.DTypes).
const (
	DTypeFloat32 = "float32"
	DTypeBF16    = "bf16"
	DTypeFP16    = "fp16"
)

// DDPDTypes are the dtypes DDPConfig.DTypes takes.
var DDPDTypes = []string{DTypeFloat32, DTypeBF16, DTypeFP16}

// Bounds of a DDPConfig: a model of up to MaxDDPModelBytes of float32
// parameters per rank, every rank in its own process on one host.
const (
	MaxDDPModelBytes = 256 << 20
	MaxDDPLayers     = 64
	MaxDDPWidth      = 8192
	MaxDDPBatch      = 4096
)

// The model's input and output widths (testbed/netlab/ddp_lab.py's IN and
// OUT).
const (
	ddpIn  = 64
	ddpOut = 16
)

// DDPConfig is the training of the DDP systems: a multi-layer perceptron
// of Layers hidden Linear(Width, Width) between Linear(64, Width) and
// Linear(Width, 16), every rank its own fixed synthetic batch, SGD;
// Warmup untimed steps, then Steps timed ones (testbed/netlab/ddp_lab.py).
type DDPConfig struct {
	// DTypes are the gradients' dtypes in the all-reduce, each a row of
	// every DDP system: float32 (DDP's own all-reduce), bf16 or fp16 (DDP's
	// compression hooks: the buckets cast to 16 bits). Gloo in torch 1.13
	// cannot sum bfloat16 on CPU, so DDPGloo's bf16 rows send float16, the
	// same two bytes per element (DDPRow.DType says which). Empty: float32.
	DTypes        []string
	Steps, Warmup int
	// ComputeSteps are forward and backward passes without the all-reduce
	// (DDP's no_sync) after the timed steps: the arithmetic alone.
	ComputeSteps         int
	Layers, Width, Batch int
	// SwmlPythonPath is prepended to PYTHONPATH of DDPSwml's ranks: the
	// directory holding the swml package (the repository's python/) where
	// Config.Python cannot import it by itself. LibSwml, if set, is their
	// SWML_LIB (libswml.so); else the package finds its library
	// (docs/pytorch.md "Install").
	SwmlPythonPath, LibSwml string
}

// Params is the number of the model's parameters.
func (d DDPConfig) Params() int {
	w := d.Width
	return ddpIn*w + w + d.Layers*(w*w+w) + w*ddpOut + ddpOut
}

// dtypes are the dtypes DDP rows run with: DTypes, or float32.
func (d DDPConfig) dtypes() []string {
	if len(d.DTypes) == 0 {
		return []string{DTypeFloat32}
	}
	return d.DTypes
}

// ddpSystems are the DDP systems of c, in its order.
func (c Config) ddpSystems() []System {
	var ss []System
	for _, s := range c.Systems {
		if s.IsDDP() {
			ss = append(ss, s)
		}
	}
	return ss
}

// Bounds of a Config: every run ends (MaxIters), and a lab of MaxWorkers
// namespaces, each with its processes, fits one host.
const (
	MaxIters   = 1000
	MaxWorkers = 64
	MaxJobs    = 4
)

// ShareTolerance is the fairness bound on each of N jobs sharing the switch
// and the links: within 20 % of an equal share (Shared.EqualShare).
const ShareTolerance = 0.2

// The lab's ports: the controller's gRPC in the switch namespace, Gloo's
// rendezvous at worker 0.
const (
	ControllerPort = 50099
	GlooPort       = 29500
)

// Config is a sweep: every combination of Workers, Rates, Losses and
// Sizes is a row, in which each of Systems runs.
type Config struct {
	Workers []int     // worker counts, 2 to MaxWorkers; one lab is built per count
	Rates   []uint64  // link rates in bits per second, each direction; 0: unshaped
	Losses  []float64 // loss probabilities per packet and link direction, in [0, 0.5)
	Sizes   []int     // float32 tensor sizes in bytes, multiples of 4
	Systems []System  // what runs in each row, in this order, each once
	// Wires are SwitchML's element widths on the wire, 32 or 16 bits
	// (aggregation.Config.Wire): SwitchML runs once per width in each row,
	// in this order. Empty: 32.
	Wires []int
	// Jobs is how many SwitchML jobs share the switch and the links (1 to
	// MaxJobs): with more than one, each SwitchML row runs one
	// job alone, then Jobs jobs at once (Row.Shared).
	Jobs int
	// Leaves are the shapes to sweep for each worker count: 0 is one
	// switch, K ≥ 2 a two-level tree of K leaf switches, each serving
	// workers ÷ K of them, under a spine (netlab.Config.Leaves; the switch
	// hierarchy of docs/switch.md). Only SwitchML runs on a tree. Empty: 0.
	Leaves []int
	// SpineRate is the rate of every leaf–spine link of a tree, in bits
	// per second each direction (netlab.Lab.ShapeSpine); 0 leaves them
	// unshaped, so that the workers' links are the bottleneck.
	SpineRate uint64
	// Iters measured and Warmup unmeasured all-reduces per system and row.
	Iters, Warmup int
	// Timeout bounds each system's run in a row (with Jobs > 1 the solo run
	// and the shared run each); its processes are ended after it.
	Timeout time.Duration
	// Queue is each shaped link direction's queue (netlab.Shaping.Queue).
	Queue time.Duration
	// PacketSize and MessageSize are SwitchML's and the ring's payload
	// bytes per packet and per message (wire.MessagePackets).
	PacketSize, MessageSize int
	// WorkerArgs and SwitchArgs are more flags for every `swml-rdma
	// worker` and for `swml-rdma switch`.
	WorkerArgs, SwitchArgs []string
	// Exe is the swml-rdma program whose `switch` and `worker` commands
	// run SwitchML.
	Exe string
	// GoMaxProcs is GOMAXPROCS of every Go runtime the lab starts (the
	// switch daemons, the workers, libswml in DDPSwml's ranks); 0: each
	// gets its share of the host, the CPUs ÷ the SwitchML processes of a
	// row (workers × Jobs + switches), at least 1 (runner.goMaxProcs).
	GoMaxProcs int
	// Python is the interpreter with torch that runs Gloo.
	Python string
	// Prefix starts every namespace name (netlab.Config.Prefix).
	Prefix string
	// DDP is the training of DDPSwml and DDPGloo; unused without them.
	DDP DDPConfig
	// Progress, if set, is called before each system's run in a row (done
	// false: the row has no results yet) and after it (done true), from the
	// goroutine that called Run.
	Progress func(row *Row, done bool)
}

// ErrConfig is wrapped by every FieldError.
var ErrConfig = errors.New("sweep: invalid Config")

// FieldError is Validate's error: which Config field, its value, and what
// a valid value is.
type FieldError struct {
	Field  string // the Config field: "Workers", "MessageSize", …
	Value  any    // the value refused (one element of a list)
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("sweep: Config.%s %v: %s", e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrConfig.
func (e *FieldError) Unwrap() error { return ErrConfig }

func fieldError(field string, value any, format string, args ...any) error {
	return &FieldError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// wires are the widths SwitchML runs at: Wires, or 32.
func (c Config) wires() []int {
	if len(c.Wires) == 0 {
		return []int{32}
	}
	return c.Wires
}

// leaves are the shapes the sweep builds: Leaves, or one switch.
func (c Config) leaves() []int {
	if len(c.Leaves) == 0 {
		return []int{0}
	}
	return c.Leaves
}

// wirePackets: a sweep with loss runs every row on wire packets
// (netlab.Lab.SetWirePackets), so that its loss-free rows compare like with
// like.
func (c Config) wirePackets() bool {
	return slices.ContainsFunc(c.Losses, func(p float64) bool { return p > 0 })
}

// Validate checks c before anything is built; the error is a *FieldError.
func (c Config) Validate() error {
	switch {
	case len(c.Workers) == 0:
		return fieldError("Workers", c.Workers, "give at least one worker count")
	case len(c.Rates) == 0:
		return fieldError("Rates", c.Rates, "give at least one rate (0: unshaped)")
	case len(c.Losses) == 0:
		return fieldError("Losses", c.Losses, "give at least one loss probability (0: none)")
	case len(c.Sizes) == 0 && len(c.ddpSystems()) < len(c.Systems):
		return fieldError("Sizes", c.Sizes, "give at least one tensor size")
	case len(c.Systems) == 0:
		return fieldError("Systems", c.Systems, "give at least one of switchml, gloo, ring, ddp-swml, ddp-gloo")
	}
	for _, n := range c.Workers {
		if n < 2 || n > MaxWorkers {
			return fieldError("Workers", n, "give 2 to %d workers (each is a namespace and processes)", MaxWorkers)
		}
	}
	for _, p := range c.Losses {
		if math.IsNaN(p) || p < 0 || p >= 0.5 {
			return fieldError("Losses", p, "give probabilities in [0, 0.5), e.g. 0.01")
		}
	}
	for _, n := range c.Sizes {
		if n <= 0 || n%4 != 0 {
			return fieldError("Sizes", n, "a tensor of 4-byte elements needs a positive multiple of 4 bytes")
		}
	}
	for i, s := range c.Systems {
		if !slices.Contains(Systems, s) {
			return fieldError("Systems", s, "none of switchml, gloo, ring, ddp-swml, ddp-gloo")
		}
		if slices.Contains(c.Systems[:i], s) {
			return fieldError("Systems", s, "named twice")
		}
	}
	for i, w := range c.Wires {
		if w != 32 && w != 16 {
			return fieldError("Wires", w, "give 32 or 16 bits per element")
		}
		if slices.Contains(c.Wires[:i], w) {
			return fieldError("Wires", w, "named twice")
		}
	}
	if c.GoMaxProcs < 0 {
		return fieldError("GoMaxProcs", c.GoMaxProcs, "give 0 (each process its share of the CPUs) or a count of threads")
	}
	jobs := c.Jobs
	switch {
	case jobs < 1 || jobs > MaxJobs:
		return fieldError("Jobs", c.Jobs, "give 1 to %d", MaxJobs)
	case jobs > 1 && !slices.Contains(c.Systems, SwitchML):
		return fieldError("Jobs", c.Jobs, "only SwitchML runs jobs side by side: add switchml to the systems")
	case netlab.Hosts(slices.Max(c.Workers), jobs) > netlab.MaxHosts:
		// Each job's workers and switch have addresses of their own.
		return fieldError("Jobs", c.Jobs, "with %d workers take %d addresses; the lab's subnet holds %d",
			slices.Max(c.Workers), netlab.Hosts(slices.Max(c.Workers), jobs), netlab.MaxHosts)
	}
	if err := c.validateLeaves(); err != nil {
		return err
	}
	if wire.CheckPacketSize(c.PacketSize) != nil {
		return fieldError("PacketSize", c.PacketSize, "give one of %v bytes", wire.PacketSizes)
	}
	if _, err := wire.MessagePackets(c.MessageSize, c.PacketSize); err != nil {
		return fieldError("MessageSize", c.MessageSize, "must be the packet size (%d) times a power of two", c.PacketSize)
	}
	switch {
	case c.Iters < 1 || c.Iters > MaxIters:
		return fieldError("Iters", c.Iters, "give 1 to %d", MaxIters)
	case c.Warmup < 0 || c.Warmup > MaxIters:
		return fieldError("Warmup", c.Warmup, "give 0 to %d", MaxIters)
	case c.Timeout <= 0:
		return fieldError("Timeout", c.Timeout, "give a positive bound, e.g. 5m")
	case c.Queue <= 0:
		return fieldError("Queue", c.Queue, "give a positive duration, e.g. 20ms")
	case c.Exe == "" && slices.Contains(c.Systems, SwitchML):
		return fieldError("Exe", c.Exe, "SwitchML runs from the swml-rdma program: give its path")
	case c.Python == "" && slices.ContainsFunc(c.Systems, func(s System) bool { return s == Gloo || s.IsDDP() }):
		return fieldError("Python", c.Python, "Gloo and DDP run in a Python with torch: give its path")
	case c.Exe == "" && slices.Contains(c.Systems, DDPSwml):
		return fieldError("Exe", c.Exe, "the swml backend's switch runs from the swml-rdma program: give its path")
	}
	if len(c.ddpSystems()) > 0 {
		return c.DDP.validate()
	}
	return nil
}

func (c Config) validateLeaves() error {
	tree := false
	for i, k := range c.Leaves {
		if slices.Contains(c.Leaves[:i], k) {
			return fieldError("Leaves", k, "named twice")
		}
		if k == 0 {
			continue
		}
		tree = true
		for _, n := range c.Workers {
			if err := netlab.CheckTree(n, k, 1); err != nil {
				return fieldError("Leaves", k, "%d workers: give 0 (one switch) or 2+ leaves dividing every worker count", n)
			}
		}
		if i := slices.IndexFunc(c.Systems, func(s System) bool { return s != SwitchML }); i >= 0 {
			// The tree routes only leaf–spine traffic: workers under
			// different leaves cannot reach each other, as Gloo, the ring
			// and DDP's rendezvous need.
			return fieldError("Leaves", k, "only SwitchML runs on a tree (workers reach only their leaf), not %s", c.Systems[i])
		}
		if c.Jobs > 1 {
			return fieldError("Leaves", k, "a tree runs one SwitchML job at a time, not %d", c.Jobs)
		}
	}
	if c.SpineRate > 0 && !tree {
		return fieldError("SpineRate", c.SpineRate, "only a tree (2 or more leaves) has leaf–spine links")
	}
	return nil
}

func (d DDPConfig) validate() error {
	for i, dt := range d.DTypes {
		if !slices.Contains(DDPDTypes, dt) {
			return fieldError("DDP.DTypes", dt, "give float32, bf16 or fp16")
		}
		if slices.Contains(d.DTypes[:i], dt) {
			return fieldError("DDP.DTypes", dt, "named twice")
		}
	}
	switch {
	case d.Steps < 1 || d.Steps > MaxIters:
		return fieldError("DDP.Steps", d.Steps, "give 1 to %d", MaxIters)
	case d.Warmup < 0 || d.Warmup > MaxIters:
		return fieldError("DDP.Warmup", d.Warmup, "give 0 to %d", MaxIters)
	case d.ComputeSteps < 1 || d.ComputeSteps > MaxIters:
		return fieldError("DDP.ComputeSteps", d.ComputeSteps, "give 1 to %d", MaxIters)
	case d.Layers < 1 || d.Layers > MaxDDPLayers:
		return fieldError("DDP.Layers", d.Layers, "give 1 to %d hidden layers", MaxDDPLayers)
	case d.Width < 1 || d.Width > MaxDDPWidth:
		return fieldError("DDP.Width", d.Width, "give 1 to %d", MaxDDPWidth)
	case d.Batch < 1 || d.Batch > MaxDDPBatch:
		return fieldError("DDP.Batch", d.Batch, "give 1 to %d samples per rank", MaxDDPBatch)
	case 4*d.Params() > MaxDDPModelBytes:
		return fieldError("DDP.Layers", d.Layers, "%d layers of width %d are %d MiB of float32 parameters; at most %d MiB per rank",
			d.Layers, d.Width, 4*d.Params()>>20, MaxDDPModelBytes>>20)
	}
	return nil
}
