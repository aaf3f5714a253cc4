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

// System is an all-reduce the sweep measures.
type System string

// The systems, in the order a row runs them.
const (
	SwitchML System = "switchml"
	Gloo     System = "gloo"
	Ring     System = "ring"
)

// Systems are every System, in the order a row runs them.
var Systems = []System{SwitchML, Gloo, Ring}

// Bounds of a Config: every run ends (MaxIters), and a lab of MaxWorkers
// namespaces, each with its processes, fits one host.
const (
	MaxIters   = 1000
	MaxWorkers = 64
	MaxJobs    = 4
)

// ShareTolerance is issue 24's bound on each of N jobs sharing the switch
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
	// Python is the interpreter with torch that runs Gloo.
	Python string
	// Prefix starts every namespace name (netlab.Config.Prefix).
	Prefix string
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
	case len(c.Sizes) == 0:
		return fieldError("Sizes", c.Sizes, "give at least one tensor size")
	case len(c.Systems) == 0:
		return fieldError("Systems", c.Systems, "give at least one of switchml, gloo, ring")
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
			return fieldError("Systems", s, "none of switchml, gloo, ring")
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
	case c.Python == "" && slices.Contains(c.Systems, Gloo):
		return fieldError("Python", c.Python, "Gloo runs in a Python with torch: give its path")
	}
	return nil
}
