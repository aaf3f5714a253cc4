package sweep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// Run runs the sweep of cfg: for each worker count a lab (netlab.Build),
// and in it for each rate, loss and size a row of every all-reduce system,
// then for each of cfg.DDP's dtypes a row of every DDP system, each
// bounded by cfg.Timeout. A system that fails records its error in its
// row and the sweep goes on; Run returns an error for what ends the sweep
// (an invalid cfg, a lab that cannot be built, shaped or removed, ctx
// ending). The Report holds every row run so far, also with an error.
// Every lab is removed before the next worker count and before Run
// returns.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	rep := Report{SchemaVersion: SchemaVersion, Kernel: kernelRelease(), CPUs: runtime.NumCPU(), QueueNs: int64(cfg.Queue),
		PacketSize: cfg.PacketSize, MessageSize: cfg.MessageSize, WorkerArgs: cfg.WorkerArgs, WirePackets: cfg.wirePackets(), LoadAvgStart: loadAvg()}
	r := &runner{cfg: cfg}
	if slices.ContainsFunc(cfg.Systems, func(s System) bool { return s == Gloo || s.IsDDP() }) {
		dir, err := os.MkdirTemp("", "swml-lab-")
		if err != nil {
			return rep, fmt.Errorf("sweep: Python scripts: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }() // temporary scripts: nothing to do if they stay
		r.glooScript, r.ddpScript = filepath.Join(dir, "gloo_allreduce.py"), filepath.Join(dir, "ddp_lab.py")
		for path, script := range map[string][]byte{r.glooScript: netlab.GlooScript, r.ddpScript: netlab.DDPScript} {
			if err := os.WriteFile(path, script, 0o644); err != nil {
				return rep, fmt.Errorf("sweep: Python scripts: %w", err)
			}
		}
	}
	if err := r.checkDDPPython(ctx); err != nil {
		return rep, err
	}
	var err error
sweep:
	for _, n := range cfg.Workers {
		for _, leaves := range cfg.leaves() {
			if err = r.sweepWorkers(ctx, n, leaves, &rep); err != nil {
				break sweep
			}
		}
	}
	lossInflation(rep.Rows)
	rep.LoadAvgEnd = loadAvg()
	return rep, errors.Join(err, reproduced(rep.Rows))
}

type runner struct {
	cfg                   Config
	glooScript, ddpScript string
}

// sweepWorkers builds a lab of n workers (under leaves leaf switches, if
// 2 or more) and runs every row in it; the lab is removed when it returns,
// however.
func (r *runner) sweepWorkers(ctx context.Context, n, leaves int, rep *Report) (err error) {
	lab, err := netlab.Build(ctx, netlab.Config{Workers: n, Prefix: r.cfg.Prefix, AddrsPerWorker: r.cfg.Jobs, Leaves: leaves})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := lab.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := lab.SetWirePackets(ctx, r.cfg.wirePackets()); err != nil {
		return err
	}
	if leaves > 0 {
		if err := lab.ShapeSpine(ctx, netlab.Shaping{RateBps: r.cfg.SpineRate, Queue: r.cfg.Queue}); err != nil {
			return err
		}
	}
	for _, rate := range r.cfg.Rates {
		if err := lab.Shape(ctx, netlab.Shaping{RateBps: rate, Queue: r.cfg.Queue}); err != nil {
			return err
		}
		for _, loss := range r.cfg.Losses {
			if err := lab.SetLoss(ctx, loss); err != nil {
				return err
			}
			// run runs one row and adds it to the report and to rows, the
			// rows whose results are compared.
			run := func(rows []*Row, row *Row) []*Row {
				if row.System == SwitchML || row.System == DDPSwml {
					row.GoMaxProcs = r.goMaxProcs(lab)
				}
				r.progress(row, false)
				r.runSystem(ctx, lab, row)
				r.progress(row, true)
				rep.Rows = append(rep.Rows, row)
				return append(rows, row)
			}
			for _, size := range r.cfg.Sizes {
				var rows []*Row
				for _, sys := range r.cfg.Systems {
					if sys.IsDDP() {
						continue
					}
					wires := []int{0}
					if sys == SwitchML {
						wires = r.cfg.wires()
					}
					for _, wire := range wires {
						if err := ctx.Err(); err != nil {
							return err
						}
						row := &Row{System: sys, WireBits: wire, Workers: n, RateBps: rate, Loss: loss, TensorBytes: size, Elements: size / 4,
							Iters: r.cfg.Iters, Warmup: r.cfg.Warmup, LoadAvg: loadAvg(), Jobs: 1, Leaves: leaves}
						if leaves > 0 {
							row.SpineRateBps = r.cfg.SpineRate
						}
						if sys == SwitchML {
							row.Jobs = r.cfg.Jobs
						}
						rows = run(rows, row)
					}
				}
				compareRows(rows, r.cfg.PacketSize, r.cfg.MessageSize)
			}
			for _, dtype := range r.cfg.DDP.dtypes() {
				var rows []*Row
				for _, sys := range r.cfg.ddpSystems() {
					if err := ctx.Err(); err != nil {
						return err
					}
					rows = run(rows, r.ddpRow(sys, dtype, n, rate, loss))
				}
				compareRows(rows, r.cfg.PacketSize, r.cfg.MessageSize)
			}
		}
	}
	return nil
}

// goMaxProcs is GOMAXPROCS for the Go processes of a row in lab:
// Config.GoMaxProcs, or the host's CPUs ÷ the SwitchML processes
// (workers × Jobs, the switch, the leaf switches), at least 1. The lab
// runs them all on one host: a runtime with more threads than its share
// hands its goroutines between threads that compete for the same CPUs
// (docs/benchmarks.md "One host's CPUs, shared"), as DDP's ranks get
// OMP_NUM_THREADS=1 for the same reason.
func (r *runner) goMaxProcs(lab *netlab.Lab) int {
	if r.cfg.GoMaxProcs > 0 {
		return r.cfg.GoMaxProcs
	}
	return join.ShareOf(len(lab.Workers)*r.cfg.Jobs + 1 + len(lab.Leaves))
}

// goMaxProcsVar is the GOMAXPROCS variable of a Go process of a row in lab.
func (r *runner) goMaxProcsVar(lab *netlab.Lab) string {
	return "GOMAXPROCS=" + strconv.Itoa(r.goMaxProcs(lab))
}

// goEnv is the environment of a Go process of a row in lab.
func (r *runner) goEnv(lab *netlab.Lab) []string {
	return append(os.Environ(), r.goMaxProcsVar(lab))
}

func (r *runner) progress(row *Row, done bool) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(row, done)
	}
}

// runSystem runs one system in one row, bounded by Config.Timeout; what
// goes wrong is the row's Error. A SwitchML row with Jobs > 1 runs one job
// alone, then (if that worked) Jobs jobs at once, each bounded.
func (r *runner) runSystem(ctx context.Context, lab *netlab.Lab, row *Row) {
	d, err := r.measure(ctx, lab, func(ctx context.Context) error {
		switch row.System {
		case SwitchML:
			return r.runSwitchML(ctx, lab, row)
		case Gloo:
			return r.runGloo(ctx, lab, row)
		case DDPSwml, DDPGloo:
			return r.runDDP(ctx, lab, row)
		default:
			return r.runRing(ctx, lab, row)
		}
	})
	row.UDPRcvbufErrors, row.SwitchUDPRcvbufErrors, row.QueueDrops, row.LossDrops = d.UDPRcvbufErrors, d.SwitchUDPRcvbufErrors, d.QueueDrops, d.LossDrops
	row.QueueDropsUp, row.QueueDropsDown = d.QueueDropsUp, d.QueueDropsDown
	if row.System == Gloo || row.System == DDPGloo {
		row.Retransmissions = d.TCPRetransSegs
	}
	if err != nil {
		row.Error = err.Error()
		return
	}
	if row.System != SwitchML || row.Jobs < 2 {
		return
	}
	sh := &Shared{}
	d, err = r.measure(ctx, lab, func(ctx context.Context) error { return r.runShared(ctx, lab, row, sh) })
	sh.UDPRcvbufErrors, sh.SwitchUDPRcvbufErrors, sh.QueueDrops, sh.LossDrops = d.UDPRcvbufErrors, d.SwitchUDPRcvbufErrors, d.QueueDrops, d.LossDrops
	row.Shared = sh
	if err != nil {
		row.Error = fmt.Sprintf("%d jobs at once: %v", row.Jobs, err)
		row.Verified = false
	}
}

// measure runs fn bounded by Config.Timeout and returns the lab's counters
// over it (zero if they could not be read: then the error says so).
func (r *runner) measure(ctx context.Context, lab *netlab.Lab, fn func(context.Context) error) (netlab.Counters, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	before, err := lab.Counters(ctx)
	if err != nil {
		return netlab.Counters{}, err
	}
	err = fn(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("not done within %v: %w", r.cfg.Timeout, err)
	}
	after, cerr := lab.Counters(context.WithoutCancel(ctx))
	if cerr != nil {
		return netlab.Counters{}, cmp.Or(err, cerr)
	}
	return after.Sub(before), err
}

// loadAvg is /proc/loadavg's first three fields, "?" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// kernelRelease is the running kernel's release, the OS's name where it
// cannot be read.
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return strings.TrimSpace(string(b))
}
