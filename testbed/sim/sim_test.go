package sim

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// The flags of TestSim (docs/sim.md): every point of the sweep workers ×
// payload × loss is one job in its own bubble. The defaults are the CI
// points: 2 and 32 workers at 100 Gbit/s, 256 KiB each.
var (
	flagWorkers = flag.String("workers", "2,32", "workers per job; a list sweeps: 8,16,32,64,128,256")
	flagLeaves  = flag.String("leaves", "0", "leaf switches under one spine, the workers split evenly (0: one flat switch); a list sweeps: 0,4")
	flagUpRate  = flag.String("uplink-rate", "", "each leaf–spine link direction's rate, as tc writes it (default: -rate)")
	flagUpDelay = flag.Duration("uplink-delay", 0, "each leaf–spine link direction's propagation delay (0: -delay)")
	flagUpQueue = flag.Int("uplink-queue", 0, "packets each leaf–spine link's sender queues, drop-tail (0: the workers' links', 1024)")
	flagRate    = flag.String("rate", "100gbit", "each link direction's rate, as tc writes it")
	flagPayload = flag.String("payload", "1024", "payload bytes per packet; a list sweeps: 256,1024")
	flagSize    = flag.String("size", "256KiB", "tensor bytes per worker (KiB, MiB)")
	flagLoss    = flag.String("loss", "0", "fraction of packets every link drops; a list sweeps: 0,0.01")
	flagSeed    = flag.Uint64("seed", 1, "seed of the links' loss")
	flagLossDir = flag.String("loss-only", "", "up or down: -loss on one direction of the workers' links only (worker to switch, switch to worker)")
	flagQPs     = flag.Int("qps", 0, "queue pairs per worker (0: the engine's default)")
	flagPkts    = flag.Int("packets", 0, "packets per message, a power of two (0: the engine's default, 16)")
	flagJobs    = flag.String("jobs", "1", "jobs at once, each of -workers workers on links of their own, sharing the switches (and a tree's leaf–spine links); a list sweeps: 1,2")
	flagIters   = flag.Int("iters", 3, "measured all-reduces per point")
	flagWarmup  = flag.Int("warmup", 1, "unmeasured all-reduces per point")
	flagDelay   = flag.Duration("delay", DefaultDelay, "each link direction's propagation delay")
	flagDType   = flag.String("dtype", "float32", "float32 or int32 (exact)")
	flagRTO     = flag.Duration("rto", 0, "the workers' retransmission timeout floor (0: the engine's default, 1ms)")
	flagRing    = flag.Bool("ring", false, "then run the project's ring all-reduce on the same network")
	flagJSON    = flag.String("json", "", "write the report as JSON to this file (- for standard output)")
	flagPlot    = flag.String("plot", "", "draw the sweep into this file (.svg): of workers, or of loss at one worker count")
	flagFrom    = flag.String("from", "", "run nothing: draw -plot from this report, which -json wrote")
)

// report is TestSim's JSON document.
type report struct {
	Date    string      `json:"date"`
	GoVer   string      `json:"go"`
	CPUs    int         `json:"cpus"`
	Command string      `json:"command"`
	Runs    []runReport `json:"runs"`
}

// runReport is a point's Report with the wall time it took (measured
// outside the bubble, whose clock is virtual).
type runReport struct {
	Report
	WallNs int64 `json:"wall_ns"`
}

// TestSim runs the jobs the flags describe in virtual time and checks
// each: every result verified, no drop but the links' Loss; and, without
// loss, the paper's claim that an all-reduce's time does not depend on the
// number of workers: every worker count of one payload within 5 % of the
// fastest (the simulation's target; virtual times are exact, so the check cannot
// flake). With -v or -json it prints one line per all-reduce and per
// point.
func TestSim(t *testing.T) {
	if *flagPlot != "" && !strings.EqualFold(filepath.Ext(*flagPlot), ".svg") {
		t.Fatalf("-plot %q: the plot is SVG: give a file name ending in .svg", *flagPlot)
	}
	if *flagFrom != "" {
		if *flagPlot == "" {
			t.Fatal("-from draws a saved report: give -plot FILE.svg too")
		}
		doc, err := readReport(*flagFrom)
		if err != nil {
			t.Fatalf("-from: %v", err)
		}
		if err := simPlot(*flagPlot, doc); err != nil {
			t.Fatal(err)
		}
		return
	}
	workers, err := ints(*flagWorkers)
	if err != nil {
		t.Fatalf("-workers: %v", err)
	}
	payloads, err := ints(*flagPayload)
	if err != nil {
		t.Fatalf("-payload: %v", err)
	}
	losses, err := floats(*flagLoss)
	if err != nil {
		t.Fatalf("-loss: %v", err)
	}
	leaves, err := ints(*flagLeaves)
	if err != nil {
		t.Fatalf("-leaves: %v", err)
	}
	jobs, err := ints(*flagJobs)
	if err != nil {
		t.Fatalf("-jobs: %v", err)
	}
	rate, err := netlab.ParseRate(*flagRate)
	if err != nil || rate == 0 {
		t.Fatalf("-rate: %q: give a rate such as 100gbit (%v)", *flagRate, err)
	}
	var upRate uint64
	if *flagUpRate != "" {
		if upRate, err = netlab.ParseRate(*flagUpRate); err != nil || upRate == 0 {
			t.Fatalf("-uplink-rate: %q: give a rate such as 100gbit (%v)", *flagUpRate, err)
		}
	}
	size, err := parseSize(*flagSize)
	if err != nil || size%4 != 0 {
		t.Fatalf("-size: %q: give a multiple of 4 bytes such as 4MiB (%v)", *flagSize, err)
	}
	dtype, err := wire.ParseDType(*flagDType)
	if err != nil {
		t.Fatalf("-dtype: %v", err)
	}
	loud := testing.Verbose() || *flagJSON != ""
	doc := report{Date: time.Now().UTC().Format(time.RFC3339), GoVer: runtime.Version(), CPUs: runtime.NumCPU(),
		Command: "go test ./testbed/sim/ -run '^TestSim$' -args " + strings.Join(ourArgs(), " ")}
	for _, loss := range losses {
		for _, payload := range payloads {
			for _, k := range leaves {
				for _, nj := range jobs {
					cfg := Config{Leaves: k, Jobs: nj, Rate: float64(rate), Delay: *flagDelay, Loss: loss, LossOnly: *flagLossDir, Seed: *flagSeed,
						UplinkRate: float64(upRate), UplinkDelay: *flagUpDelay, UplinkQueue: *flagUpQueue,
						Session:  aggregation.Config{PacketSize: payload, QPs: *flagQPs, PacketsPerMessage: *flagPkts, DType: dtype, RetransmitTimeout: *flagRTO},
						Elements: size / 4, Iters: *flagIters, Warmup: *flagWarmup, Ring: *flagRing}
					if !sweepWorkers(t, loud, &doc, workers, cfg) {
						return
					}
				}
			}
		}
	}
	if *flagPlot != "" {
		if err := simPlot(*flagPlot, doc); err != nil {
			t.Error(err)
		}
	}
	if *flagJSON == "" {
		return
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *flagJSON == "-" {
		os.Stdout.Write(b)
	} else if err := os.WriteFile(*flagJSON, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sweepWorkers runs base with each worker count, each in its own bubble,
// appends each report to doc and checks it (TestSim); false when a point
// failed to run.
func sweepWorkers(t *testing.T, loud bool, doc *report, workers []int, base Config) bool {
	t.Helper()
	var fastest, slowest time.Duration
	loss, payload := base.Loss, base.Session.PacketSize
	shape := "flat"
	switch {
	case base.Leaves == 1:
		shape = "1 leaf"
	case base.Leaves > 1:
		shape = fmt.Sprintf("%d leaves", base.Leaves)
	}
	for _, n := range workers {
		cfg := base
		cfg.Workers = n
		name := fmt.Sprintf("%d workers", n)
		if cfg.Leaves > 0 {
			name = fmt.Sprintf("%d workers (%s × %d)", n, shape, n/cfg.Leaves)
		}
		name += fmt.Sprintf(", %s, %d B, loss %g", netlab.FormatRate(uint64(cfg.Rate)), payload, loss)
		if cfg.Jobs > 1 {
			name = fmt.Sprintf("%d jobs of %s", cfg.Jobs, name)
		}
		start := time.Now()
		// Inside the bubble time.Now is virtual: a goroutine outside
		// it stamps the progress lines with the wall time.
		progress := make(chan string, 64)
		printed := make(chan struct{})
		go func() {
			defer close(printed)
			for line := range progress {
				fmt.Fprintf(os.Stderr, "sim: %s: %s, %.1fs wall\n", name, line, time.Since(start).Seconds())
			}
		}()
		if loud {
			cfg.Progress = func(k, total int, d time.Duration) {
				progress <- fmt.Sprintf("all-reduce %d of %d: %v virtual", k, total, d)
			}
		}
		var rep Report
		synctest.Test(t, func(t *testing.T) {
			var err error
			if rep, err = Run(t.Context(), cfg); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		})
		close(progress)
		<-printed
		if t.Failed() {
			return false
		}
		wall := time.Since(start)
		doc.Runs = append(doc.Runs, runReport{Report: rep, WallNs: int64(wall)})
		if loud {
			fmt.Fprintf(os.Stderr, "sim: %s: %v virtual per all-reduce (mean %v), %.3g ATE/s, %.3f of the ceiling %.3g (efficiency %.3f, computed %.3f), %d resends, %.0f packets up per worker and call, %.1fs wall\n",
				name, time.Duration(rep.MedianNs), time.Duration(rep.MeanNs), rep.ATEPerSec, rep.OfCeiling, rep.CeilingATEPerSec, rep.MeasuredEfficiency, rep.Efficiency, rep.Retransmissions,
				float64(rep.UpPackets)/float64(cfg.Jobs*cfg.Workers*(cfg.Iters+cfg.Warmup)), wall.Seconds())
		}
		if loud && len(rep.JobTimes) > 1 {
			meds := make([]string, len(rep.JobTimes))
			for k, jt := range rep.JobTimes {
				meds[k] = time.Duration(jt.MedianNs).String()
			}
			fmt.Fprintf(os.Stderr, "sim: %s: every job's median: %s\n", name, strings.Join(meds, ", "))
		}
		if r := rep.Ring; loud && r != nil {
			fmt.Fprintf(os.Stderr, "sim: %s: ring %v virtual per all-reduce, %.3g ATE/s, %.3f of its ceiling %.3g; SwitchML %.2fx the ring\n",
				name, time.Duration(r.MedianNs), r.ATEPerSec, r.OfCeiling, r.CeilingATEPerSec, r.SwitchMLSpeedup)
		}
		if !rep.Verified || rep.QueueDrops != 0 || rep.Overflow != 0 {
			t.Errorf("%s: verified %v, %d drops at link queues, %d at receive queues: the sim's queues must hold every window", name, rep.Verified, rep.QueueDrops, rep.Overflow)
		}
		if loss == 0 && (rep.LinkLost != 0 || rep.Retransmissions != 0) {
			t.Errorf("%s: %d packets lost, %d resends on loss-free links", name, rep.LinkLost, rep.Retransmissions)
		}
		med := time.Duration(rep.MedianNs)
		if fastest == 0 || med < fastest {
			fastest = med
		}
		slowest = max(slowest, med)
	}
	if loss == 0 && float64(slowest) > 1.05*float64(fastest) {
		t.Errorf("%d B, %s, workers %v: all-reduces took %v to %v: more than 5 %% apart", payload, shape, workers, fastest, slowest)
	}
	return true
}

// TestSimTree runs two-level trees in the bubble, each beside the flat
// switch of the same workers and tensors: every result verified, nothing
// dropped on loss-free links, and the tree's result digest the flat
// one's — a tree's sums are the flat switch's bit for bit (docs/switch.md
// "Switch hierarchy"), under loss too. 2 leaves × 4 workers with 1 MiB
// each, the 32-worker point of TestSim's defaults as 2 × 16, and 2 × 4
// with 1 % loss on every link (worker–leaf and leaf–spine, both ways).
func TestSimTree(t *testing.T) {
	for _, tc := range []struct {
		leaves, perLeaf, bytes int
		loss                   float64
	}{{2, 4, 1 << 20, 0}, {2, 16, 256 << 10, 0}, {2, 4, 256 << 10, 0.01}} {
		n := tc.leaves * tc.perLeaf
		t.Run(fmt.Sprintf("%dx%d/loss%g", tc.leaves, tc.perLeaf, tc.loss), func(t *testing.T) {
			run := func(leaves int) Report {
				cfg := Config{Workers: n, Leaves: leaves, Rate: 100e9, Loss: tc.loss, Seed: 3, Elements: tc.bytes / 4, Iters: 1, Warmup: 1}
				var rep Report
				synctest.Test(t, func(t *testing.T) {
					var err error
					if rep, err = Run(t.Context(), cfg); err != nil {
						t.Fatalf("%d leaves: %v", leaves, err)
					}
				})
				if !rep.Verified || rep.QueueDrops+rep.Overflow != 0 {
					t.Errorf("%d leaves: verified %v, %d drops at link queues, %d at receive queues", leaves, rep.Verified, rep.QueueDrops, rep.Overflow)
				}
				switch {
				case tc.loss == 0 && rep.LinkLost+rep.Retransmissions != 0:
					t.Errorf("%d leaves: %d lost, %d resends on loss-free links", leaves, rep.LinkLost, rep.Retransmissions)
				case tc.loss > 0 && (rep.LinkLost == 0 || rep.Retransmissions == 0):
					t.Errorf("%d leaves: %d lost, %d resends: the point does not exercise loss recovery", leaves, rep.LinkLost, rep.Retransmissions)
				}
				return rep
			}
			flat := run(0)
			tree := run(tc.leaves)
			if t.Failed() {
				return
			}
			if tree.Leaves != tc.leaves || tree.WorkersPerLeaf != tc.perLeaf || tree.UplinkRateBps != 100e9 {
				t.Errorf("tree report: %d leaves × %d, uplinks %g bit/s; want %d × %d at 1e11", tree.Leaves, tree.WorkersPerLeaf, tree.UplinkRateBps, tc.leaves, tc.perLeaf)
			}
			if tree.ResultSHA256 == "" || tree.ResultSHA256 != flat.ResultSHA256 {
				t.Errorf("result digests: tree %q, flat %q: the tree's sums must be the flat switch's", tree.ResultSHA256, flat.ResultSHA256)
			}
			t.Logf("flat %v (%.3f of its ceiling, %d resends), tree %v (%.3f of its ceiling %.4g, %d resends) virtual per all-reduce",
				time.Duration(flat.MedianNs), flat.OfCeiling, flat.Retransmissions, time.Duration(tree.MedianNs), tree.OfCeiling, tree.CeilingATEPerSec, tree.Retransmissions)
		})
	}
}

// TestSimJobs runs two jobs at once: on one switch each job has its own
// links and takes exactly the time it takes alone; under two leaves whose
// leaf–spine links carry both jobs' slots at one link's rate, each takes
// about twice that; every result verified, nothing dropped.
func TestSimJobs(t *testing.T) {
	run := func(leaves, jobs int) Report {
		t.Helper()
		cfg := Config{Workers: 4, Leaves: leaves, Jobs: jobs, Rate: 100e9, Elements: 64 << 10, Iters: 2, Warmup: 1}
		var rep Report
		synctest.Test(t, func(t *testing.T) {
			var err error
			if rep, err = Run(t.Context(), cfg); err != nil {
				t.Fatalf("%d leaves, %d jobs: %v", leaves, jobs, err)
			}
		})
		if !rep.Verified || rep.QueueDrops+rep.Overflow+rep.LinkLost+rep.Retransmissions != 0 {
			t.Errorf("%d leaves, %d jobs: verified %v, %d+%d dropped, %d lost, %d resends", leaves, jobs, rep.Verified, rep.QueueDrops, rep.Overflow, rep.LinkLost, rep.Retransmissions)
		}
		if jobs > 1 && (rep.Jobs != jobs || len(rep.JobTimes) != jobs || rep.JobTimes[0] != rep.Times) {
			t.Errorf("%d leaves, %d jobs: report of %d jobs, %d times", leaves, jobs, rep.Jobs, len(rep.JobTimes))
		}
		return rep
	}
	alone, shared := run(0, 1), run(0, 2)
	for k, jt := range shared.JobTimes {
		if jt.MedianNs != alone.MedianNs {
			t.Errorf("one switch: job %d took %v, %v alone: the jobs share no link", k, time.Duration(jt.MedianNs), time.Duration(alone.MedianNs))
		}
	}
	alone, shared = run(2, 1), run(2, 2)
	for k, jt := range shared.JobTimes {
		if r := float64(jt.MedianNs) / float64(alone.MedianNs); r < 1.6 || r > 2.4 {
			t.Errorf("two leaves: job %d took %v, %.2f× its %v alone: the uplinks carry both jobs", k, time.Duration(jt.MedianNs), r, time.Duration(alone.MedianNs))
		}
	}
	if shared.CeilingATEPerSec >= alone.CeilingATEPerSec {
		t.Errorf("ceilings: %.4g with two jobs, %.4g alone: each job has half the uplinks", shared.CeilingATEPerSec, alone.CeilingATEPerSec)
	}
}

// TestSimReproducible runs one lossy point twice with the same seed: the
// same virtual times, the same resends and the same (exact, int32) result.
func TestSimReproducible(t *testing.T) {
	t.Parallel()
	cfg := Config{Workers: 4, Rate: 10e9, Loss: 0.02, Seed: 7, Session: aggregation.Config{DType: wire.Int32, QPs: 4},
		Elements: 16 << 10, Iters: 2, Warmup: 1}
	run := func() Report {
		var rep Report
		synctest.Test(t, func(t *testing.T) {
			var err error
			if rep, err = Run(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
		})
		return rep
	}
	a, b := run(), run()
	if a.LinkLost == 0 || a.Retransmissions == 0 {
		t.Fatalf("%d packets lost, %d resends: the point does not exercise loss recovery", a.LinkLost, a.Retransmissions)
	}
	if a.Times != b.Times || a.Retransmissions != b.Retransmissions || a.LinkLost != b.LinkLost || a.ResultSHA256 != b.ResultSHA256 {
		t.Errorf("same seed, different runs:\n%+v\n%+v", a, b)
	}
}

// ourArgs are the command line's arguments that are not the test
// framework's (-test.…).
func ourArgs() []string {
	var out []string
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(strings.TrimLeft(a, "-"), "test.") {
			out = append(out, a)
		}
	}
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func floats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// parseSize reads a byte count with an optional KiB, MiB or GiB suffix.
func parseSize(s string) (int, error) {
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if t, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = t, u.mult
			break
		}
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q: not a positive byte count", s)
	}
	return v * mult, nil
}

// TestConfigRefused: Run refuses what it cannot simulate before building
// anything, with an error wrapping ErrConfig.
func TestConfigRefused(t *testing.T) {
	ok := Config{Workers: 2, Rate: 1e9, Elements: 1, Iters: 1}
	for name, mut := range map[string]func(*Config){
		"one worker":  func(c *Config) { c.Workers = 1 },
		"257 workers": func(c *Config) { c.Workers = 257 },
		"no rate":     func(c *Config) { c.Rate = 0 },
		"no elements": func(c *Config) { c.Elements = 0 },
		"no iters":    func(c *Config) { c.Iters = 0 },
		"neg delay":   func(c *Config) { c.Delay = -1 },
		"uneven tree": func(c *Config) { c.Workers, c.Leaves = 6, 4 },
		"neg leaves":  func(c *Config) { c.Leaves = -1 },
		"loss only":   func(c *Config) { c.LossOnly = "sideways" },
		"16-bit wire": func(c *Config) { c.Session.Wire = 16 },
		"neg uplink":  func(c *Config) { c.Leaves, c.UplinkRate = 2, -1 },
	} {
		c := ok
		mut(&c)
		if _, err := Run(t.Context(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestSimLargeJob: a job of more than aggregation.LargeJobWorkers workers
// takes the large-job geometry (32 QPs of 4-packet messages) and, under
// loss, sends result probes where a smaller job resends on RACK's
// evidence; its results verified either way, a flat switch and a tree
// alike.
func TestSimLargeJob(t *testing.T) {
	for _, tc := range []struct{ workers, leaves int }{{aggregation.LargeJobWorkers, 0}, {aggregation.LargeJobWorkers + 8, 0}, {aggregation.LargeJobWorkers + 8, 4}} {
		t.Run(fmt.Sprintf("%dw/leaves%d", tc.workers, tc.leaves), func(t *testing.T) {
			cfg := Config{Workers: tc.workers, Leaves: tc.leaves, Rate: 100e9, Loss: 0.01, Seed: 5, Elements: 256 << 10 / 4, Iters: 2, Warmup: 1}
			var rep Report
			synctest.Test(t, func(t *testing.T) {
				var err error
				if rep, err = Run(t.Context(), cfg); err != nil {
					t.Fatal(err)
				}
			})
			large := tc.workers > aggregation.LargeJobWorkers
			wantQPs, wantPPM := aggregation.DefaultGeometry(tc.workers)
			switch {
			case !rep.Verified || rep.QueueDrops+rep.Overflow != 0:
				t.Errorf("verified %v, %d drops at link queues, %d at receive queues", rep.Verified, rep.QueueDrops, rep.Overflow)
			case rep.QPs != wantQPs || rep.MessageSize != wantPPM*rep.PacketSize:
				t.Errorf("%d QPs of %d-byte messages, want %d of %d packets", rep.QPs, rep.MessageSize, wantQPs, wantPPM)
			case rep.LinkLost == 0 || rep.GapNotices == 0:
				t.Errorf("%d lost, %d notices: the point does not exercise loss recovery", rep.LinkLost, rep.GapNotices)
			case large && rep.ResultProbes == 0, !large && rep.ResultProbes != 0:
				t.Errorf("%d workers: %d result probes (%d fast resends)", tc.workers, rep.ResultProbes, rep.FastRetransmissions)
			}
			t.Logf("%v virtual per all-reduce, %d resends, %d fast, %d result probes", time.Duration(rep.MedianNs), rep.Retransmissions, rep.FastRetransmissions, rep.ResultProbes)
		})
	}
}

// TestSimLossOnly: -loss-only keeps the loss to one direction of the
// workers' links. Lost on the way up, a packet write leaves a PSN gap the
// switch names in a gap notice; lost on the way down, a result leaves the
// switch nothing to see, so no notice comes and the workers' own evidence
// repairs it.
func TestSimLossOnly(t *testing.T) {
	for _, dir := range []string{"up", "down"} {
		t.Run(dir, func(t *testing.T) {
			cfg := Config{Workers: 4, Rate: 10e9, Loss: 0.03, LossOnly: dir, Seed: 11, Session: aggregation.Config{Writes: aggregation.PacketWrites},
				Elements: 64 << 10, Iters: 2, Warmup: 1}
			var rep Report
			synctest.Test(t, func(t *testing.T) {
				var err error
				if rep, err = Run(t.Context(), cfg); err != nil {
					t.Fatal(err)
				}
			})
			if !rep.Verified || rep.LinkLost == 0 || rep.Retransmissions == 0 || rep.LossOnly != dir {
				t.Fatalf("verified %v, %d lost, %d resends, loss_only %q", rep.Verified, rep.LinkLost, rep.Retransmissions, rep.LossOnly)
			}
			if got := rep.GapNotices > 0; got != (dir == "up") {
				t.Errorf("loss only %s: %d gap notices", dir, rep.GapNotices)
			}
		})
	}
}
