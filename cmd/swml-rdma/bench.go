package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/aggregation/instant"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:     "bench",
		Category: "benchmarks",
		Usage:    "all-reduce benchmark: software switch, controller and N userspace-NIC workers behind in-memory links (or on loopback), against a ring all-reduce",
		Description: "Runs a software switch (--switch-addr, 127.0.0.1), its controller and --workers workers (127.0.0.2, …), each with\n" +
			"its own userspace RoCEv2 NIC behind its own --link to the switch (in memory; none: loopback sockets), in one\n" +
			"process; prints each all-reduce's ATE/s against its link-rate ceiling and the regime measured (link-bound or\n" +
			"host-bound). It all-reduces a tensor --iters times and checks every\n" +
			"result against a float64 (int32: exact) reference. A mismatch fails the run. With --baseline ring\n" +
			"(the default) the same workers then run a ring all-reduce over the same NICs, checked the same way,\n" +
			"and the table gives SwitchML's ATE/s as a multiple of the ring's. --workers 2,4,8,16 sweeps worker\n" +
			"counts (one row per count and algorithm); --plot draws the sweep. --switch instant measures the worker\n" +
			"engine alone instead (no switch or network cost; docs/bench.md \"Engine alone\"). See docs/bench.md.",
		Flags: append(append(append([]cli.Flag{
			&cli.StringFlag{Name: "workers", Value: "4", Usage: "number of workers, or a comma list to sweep, e.g. 2,4,8,16", EnvVars: []string{"SWML_WORKERS"}, Category: "job"},
			&cli.StringFlag{Name: "switch", Value: switchSoftware, Usage: "software: the software switch and userspace NICs, over --link or on loopback; instant: the worker engine alone, one worker whose writes an in-process switch answers inside the engine's own calls (no network): the engine's capacity, against the memory-bandwidth limit", EnvVars: []string{"SWML_SWITCH"}, Category: "job"},
			&cli.StringFlag{Name: "link", Value: defaultLink, Usage: "each worker's link to the switch, both directions, in memory (no sockets, no root): a rate as tc writes it, e.g. 200mbit or 1gbit, or none for loopback sockets without a link (docs/bench.md \"Linked mode\")", EnvVars: []string{"SWML_LINK"}, Category: "network"},
			&cli.StringFlag{Name: "switch-addr", Value: "127.0.0.1", Usage: "embedded switch's IPv4 address; workers take the next ones", EnvVars: []string{"SWML_SWITCH_ADDR"}, Category: "network"},
			&cli.StringFlag{Name: "loss", Value: "0", Usage: "loss probability at each port a packet crosses: with a link each link direction (a worker's uplink and downlink), with --link none the switch's ingress and egress (the ring: its NICs' send and receive), e.g. 0.01, or a comma list to sweep, e.g. 0,0.001,0.01,0.05", EnvVars: []string{"SWML_LOSS"}, Category: "protocol"},
			&cli.StringFlag{Name: "baseline", Value: "ring", Usage: "also run this all-reduce among the same workers over the same NICs: ring or none", EnvVars: []string{"SWML_BASELINE"}, Category: "job"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (schema in docs/bench.md)", EnvVars: []string{"SWML_JSON"}, Category: "output"},
			&cli.StringFlag{Name: "plot", Usage: "draw time per all-reduce and ATE/s against worker count into `FILE` (.svg)", EnvVars: []string{"SWML_PLOT"}, Category: "output"},
			offloadFlag("network"),
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (runtime/pprof) of the run to `FILE`", EnvVars: []string{"SWML_CPUPROFILE"}, Category: "output"},
		}, allReduceFlags("job")...), distributedBenchFlags()...), logLevelFlag()),
		Action: runBench,
	}
}

// allReduceFlags describe the tensor and the protocol of an all-reduce job: the
// same for the embedded bench and a worker (every worker of a job passes
// the same values).
func allReduceFlags(category string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "size", Value: "4MiB", Usage: "tensor size in bytes (4-byte elements), e.g. 64MiB", EnvVars: []string{"SWML_SIZE"}, Category: category},
		&cli.IntFlag{Name: "iters", Value: 10, Usage: "measured all-reduces", EnvVars: []string{"SWML_ITERS"}, Category: category},
		&cli.IntFlag{Name: "warmup", Value: 2, Usage: "unmeasured all-reduces first", EnvVars: []string{"SWML_WARMUP"}, Category: category},
		&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32 (block floating point) or int32 (exact)", EnvVars: []string{"SWML_DTYPE"}, Category: category},
		&cli.StringFlag{Name: "wire", Value: "32", Usage: "bits per element on the wire: 32 (int32 lanes) or 16 (int16 lanes: twice the elements per packet, coarser sums; float32 only, a switch with a 16-bit pipeline); bench takes a comma list to run each, e.g. 32,16", EnvVars: []string{"SWML_WIRE"}, Category: "protocol"},
		&cli.IntFlag{Name: "packet-size", Value: aggregation.DefaultPacketSize, Usage: "payload bytes per packet: 256, 512, 1024, 2048, 4096", EnvVars: []string{"SWML_PACKET_SIZE"}, Category: "protocol"},
		&cli.IntFlag{Name: "qps", Value: aggregation.DefaultQPs, Usage: "UC queue pairs per worker (a job of more than 32 workers: 32)", EnvVars: []string{"SWML_QPS"}, Category: "protocol"},
		&cli.IntFlag{Name: "threads", Value: 1, Usage: "goroutines driving each worker's QPs, each a block of neighbouring QPs with its own completion queue (at most --qps; pays off where the host is the bottleneck: a fast RDMA NIC)", EnvVars: []string{"SWML_THREADS"}, Category: "protocol"},
		&cli.StringFlag{Name: "msg-size", Value: "16KiB", Usage: "message size: packet size × a power of two (a job of more than 32 workers: 4 packets)", EnvVars: []string{"SWML_MSG_SIZE"}, Category: "protocol"},
		&cli.DurationFlag{Name: "queue-delay", Value: aggregation.DefaultQueueDelay, Usage: "the worker's window: two messages in flight plus this long at the measured delivery rate, at most one per QP (a link's queue stays short); negative: every QP keeps a message in flight", EnvVars: []string{"SWML_QUEUE_DELAY"}, Category: "protocol"},
		&cli.DurationFlag{Name: "peer-timeout", Value: aggregation.DefaultPeerTimeout, Usage: "fail an all-reduce when a message has had no result for this long: the switch or another worker is taken for dead", EnvVars: []string{"SWML_PEER_TIMEOUT"}, Category: "protocol"},
		&cli.StringFlag{Name: "writes", Value: aggregation.AdaptiveWrites.String(), Usage: "how a message goes on the wire: auto (one WRITE per packet in the session's first call, then one multi-packet WRITE per message until loss is seen, then one WRITE per packet), message or packet; a job with a worker on rxe sends packet writes on every worker; docs/protocol.md", EnvVars: []string{"SWML_WRITES"}, Category: "protocol"},
		&cli.BoolFlag{Name: "gap-notices", Value: true, Usage: "ask the switch to name the packet writes this worker lost on the way up, and send a tail probe after each transmission under loss; a job gets them when every worker asks and the switch sends them (the software switch); docs/protocol.md \"Gap notices\"", EnvVars: []string{"SWML_GAP_NOTICES"}, Category: "protocol"},
	}
}

// benchSchemaVersion is bumped on any incompatible change of benchReport.
const benchSchemaVersion = 1

// benchReport is the JSON document bench prints: one run per worker count.
type benchReport struct {
	SchemaVersion int        `json:"schema_version"`
	Runs          []benchRun `json:"runs"`
}

// benchRun is one worker count: SwitchML's result (flat), the baseline's
// (null with --baseline none) and SwitchML ATE/s ÷ baseline ATE/s (null
// without a baseline).
type benchRun struct {
	benchmark.Record
	// Interrupted marks a row cut short by SIGINT or SIGTERM: Iters then
	// counts the measured all-reduces that finished.
	Interrupted bool            `json:"interrupted"`
	Baseline    *baselineResult `json:"baseline"`
	ATERatio    *float64        `json:"ate_ratio"`
	// LossInflation is the median time ÷ the loss-free median of the
	// same worker count in the same sweep (null without a loss-free run).
	LossInflation *float64 `json:"loss_inflation"`
	// RetransmissionsPerMessage is messages resent ÷ messages sent, over
	// every worker; SwitchDrops the switch's drop counters by reason.
	RetransmissionsPerMessage float64           `json:"retransmissions_per_message"`
	SwitchDrops               map[string]uint64 `json:"switch_drops"`
	// Switch is --switch; Engine the engine-alone measurement of
	// --switch instant (null otherwise).
	Switch string        `json:"switch"`
	Engine *engineResult `json:"engine"`
	// CPUUserNs and CPUSysNs are the process's CPU time inside SwitchML's
	// measured all-reduces (every worker, NIC and the switch), as a worker's
	// record has its own.
	CPUUserNs int64 `json:"cpu_user_ns"`
	CPUSysNs  int64 `json:"cpu_sys_ns"`
	linkResult
}

// linkResult is what a run over links adds, for SwitchML (flat in
// benchRun) and for the ring (in baselineResult): the link rate (0: --link
// none), the all-reduce's link-rate ceiling (netlab.LinkCeilings) and
// ATE/s ÷ it (null without a link), the regime that implies, and the
// counters of its links (null without a link).
type linkResult struct {
	RateBps          uint64      `json:"rate_bps"`
	CeilingATEPerSec float64     `json:"ceiling_ate_per_s"`
	OfCeiling        *float64    `json:"of_ceiling"`
	Regime           string      `json:"regime"`
	Links            *linkTotals `json:"links"`
}

// linkTotals are benchmark.LinkTotals as bench prints them.
type linkTotals struct {
	Links        int    `json:"links"`
	Packets      uint64 `json:"packets"`
	Loss         uint64 `json:"loss"`
	Queue        uint64 `json:"queue"`
	ReceiveQueue uint64 `json:"receive_queue"`
	MaxQueue     int    `json:"max_queue"`
}

// The regimes a row is measured in (docs/bench.md "Regimes"): with a link,
// an all-reduce at linkBoundFraction of its ceiling or more is link-bound
// (the links set its speed), below it host-bound (this host, which runs
// every NIC, the switch and the ring, did not fill the links: its CPUs,
// or its scheduling delays against the all-reduce's window); without a
// link every row is host-bound by construction.
const (
	regimeLink        = "link-bound"
	regimeHost        = "host-bound"
	linkBoundFraction = 0.9
)

// newLinkResult is the linkResult of an all-reduce at ate ATE/s on links
// of rate bps with ceiling ATE/s, and the counters of its links.
func newLinkResult(bps uint64, ceiling, ate float64, links benchmark.LinkTotals) linkResult {
	if bps == 0 || ceiling <= 0 {
		return linkResult{Regime: regimeHost}
	}
	f := ate / ceiling
	r := linkResult{RateBps: bps, CeilingATEPerSec: ceiling, OfCeiling: &f, Regime: regimeHost,
		Links: &linkTotals{Links: links.Links, Packets: links.Packets, Loss: links.Lost, Queue: links.Queue, ReceiveQueue: links.Overflow, MaxQueue: links.MaxQueue}}
	if f >= linkBoundFraction {
		r.Regime = regimeLink
	}
	return r
}

// The values of --switch.
const (
	switchSoftware = "software"
	switchInstant  = "instant"
)

// engineResult is what --switch instant measures beyond a run's columns
// (benchmark.EngineAloneResult): over the measured calls, this process's
// CPU time and the tensor's Gbit/s per second of it, the messages sent,
// the heap objects allocated and their number per message, and copy() of
// the tensor twice timed in the same run with the median call's time ÷
// it.
type engineResult struct {
	CPUNs            int64   `json:"cpu_ns"`
	GbpsPerCore      float64 `json:"gbit_per_s_per_core"`
	Messages         uint64  `json:"messages"`
	Allocs           uint64  `json:"allocs"`
	AllocsPerMessage float64 `json:"allocs_per_message"`
	CopyLimitNs      int64   `json:"copy_limit_ns"`
	CopyLimitRatio   float64 `json:"copy_limit_ratio"`
}

// baselineResult is the ring all-reduce among the same workers. Packets
// counts everything the ranks sent (data, retransmissions and
// acknowledgements); Retransmissions counts data messages resent.
type baselineResult struct {
	Name string `json:"name"`
	benchmark.Times
	Packets         uint64 `json:"packets"`
	Retransmissions uint64 `json:"retransmissions"`
	Verified        bool   `json:"verified"`
	WindowMessages  int    `json:"window_messages"`
	// LossInflation as for the SwitchML run, against the ring's own
	// loss-free run.
	LossInflation *float64 `json:"loss_inflation"`
	// CPUUserNs and CPUSysNs are the process's CPU time inside the ring's
	// measured all-reduces.
	CPUUserNs int64 `json:"cpu_user_ns"`
	CPUSysNs  int64 `json:"cpu_sys_ns"`
	linkResult
}

type benchConfig struct {
	jobSpec
	sw         string // --switch
	workers    int
	sweep      []int     // worker counts; workers is the one running
	losses     []float64 // loss sweep; loss is the one running
	loss       float64
	switchAddr netip.Addr
	baseline   string // "ring" or "none"
	plot       string
	offload    udp.Offload
	link       uint64 // --link in bits per second; 0: none
}

// defaultLink is --link's default: the network lab's rate (docs/netlab.md),
// low enough that the development machine (2 vCPUs) runs four workers,
// the switch and the ring at line rate when it is not shared, so that the
// default run measures the regime SwitchML is for: links, not a host
// (docs/benchmarks.md "Linked bench").
const defaultLink = "200mbit"

// distributedCategory holds the flags of `bench --controller`.
const distributedCategory = "distributed (with --controller)"

// distributedBenchFlags are the worker's job-member flags; --controller
// switches bench from the embedded switch to being one worker of a job.
func distributedBenchFlags() []cli.Flag {
	flags := jobMemberFlags(distributedCategory)
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "controller" {
			sf.Usage = "run as one worker of a multi-process/multi-host job at the controller `ADDR` (host:port of `swml-rdma switch`) instead of the embedded switch; needs --rank (or $SWML_RANK, $OMPI_COMM_WORLD_RANK, $RANK)"
			// Only the flag makes bench a worker: an SWML_CONTROLLER exported
			// for a job's workers (docs/operations.md) must not turn a plain
			// `bench` into one, silently waiting for a rank.
			sf.EnvVars = nil
			sf.Value = ""
		}
	}
	return flags
}

// embeddedOnlyFlags make no sense for one worker of a distributed job.
var embeddedOnlyFlags = []struct{ name, why string }{
	{"baseline", "the ring baseline needs every worker in this process"},
	{"plot", "a plot needs a sweep of worker counts"},
	{"loss", "loss is simulated by the switch: pass --loss to `swml-rdma switch`"},
	{"switch", "the switch is the one behind --controller"},
	{"switch-addr", "the switch is the one behind --controller"},
	{"link", "the links are the embedded bench's; a worker runs on its host's network"},
	{"cpuprofile", "profile the embedded bench, or the worker with `go tool pprof` on a test"},
}

func runBench(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("bench takes no arguments (got %q): flags go before nothing, e.g. swml-rdma bench --workers 8", c.Args().Slice()), 2)
	}
	if c.IsSet("controller") {
		for _, f := range embeddedOnlyFlags {
			if c.IsSet(f.name) {
				return cli.Exit(fmt.Sprintf("--%s does not apply with --controller: %s; drop it", f.name, f.why), 2)
			}
		}
		return runWorker(c)
	}
	for _, f := range []string{"rank", "session-id", "nic", "device", "addr", "gid-index", "busy-poll", "connect-timeout", "metrics-addr"} {
		if c.IsSet(f) {
			return cli.Exit(fmt.Sprintf("--%s%s applies to one worker of a distributed job: pass --controller ADDR too, or drop it (unset the variable) for the embedded bench", f, envSource(f, c.String(f))), 2)
		}
	}
	cfg, err := benchFlags(c)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	// The embedded bench logs nothing, but takes only the levels switch and
	// worker take (one validator, parseLogLevel).
	if _, err := parseLogLevel(c.String("log-level")); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if path := c.String("cpuprofile"); path != "" {
		stopProfile, err := startCPUProfile(path)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.sw == switchInstant {
		return runEngineAlone(ctx, c, cfg)
	}
	prog := newProgress(c.App.ErrWriter, benchSteps(cfg))
	defer prog.tick(time.Second)()
	report := benchReport{SchemaVersion: benchSchemaVersion}
	for _, w := range cfg.sweep {
		cfg.workers = w
		for _, wb := range cfg.wires {
			cfg.wire = wb
			if err := runLossSweep(ctx, c, cfg, prog, &report); err != nil {
				return err
			}
		}
	}
	prog.clear()
	if cfg.plot != "" {
		if err := writePlot(cfg.plot, report.Runs); err != nil {
			return cli.Exit("bench: "+err.Error(), 1)
		}
	}
	return printBench(c.App.Writer, report, c.Bool("json"))
}

// runLossSweep runs cfg's loss sweep at one worker count and wire width,
// adding its rows to report; on a failure or an interrupt it prints the
// rows so far and returns the command's exit error.
func runLossSweep(ctx context.Context, c *cli.Context, cfg benchConfig, prog *progress, report *benchReport) error {
	w := cfg.workers
	var lossFree *benchRun
	for _, l := range cfg.losses {
		cfg.loss = l
		run, measured, done, err := runEmbeddedBench(ctx, cfg, prog)
		if err != nil {
			prog.clear()
			interrupted := ctx.Err() != nil && c.Context.Err() == nil
			if interrupted && measured {
				// The measured all-reduces that finished are a
				// measurement too: a row of its own, marked.
				run.Interrupted = true
				report.Runs = append(report.Runs, run)
			}
			if len(report.Runs) > 0 || (interrupted && c.Bool("json")) {
				// The rows finished before the failure or the interrupt
				// are measurements: print them (the table or the JSON
				// document, which an interrupt prints even without a
				// row, for the script that reads it), then say why the
				// rest is missing.
				if perr := printBench(c.App.Writer, *report, c.Bool("json")); perr != nil {
					return cli.Exit("bench: "+perr.Error(), 1)
				}
			}
			if interrupted {
				// Everything the run opened (switch, controller, NICs,
				// sessions) is closed by now: runEmbeddedBench defers it.
				return cli.Exit(fmt.Sprintf("bench (%d workers, %d-bit wire, loss %g): interrupted (SIGINT or SIGTERM) after %s; nothing left running%s", w, cfg.wire, l, done, finishedRows(len(report.Runs))), exitInterrupted)
			}
			return cli.Exit(fmt.Sprintf("bench (%d workers, %d-bit wire, loss %g): %v%s%s", w, cfg.wire, l, err, remedy(err), finishedRows(len(report.Runs))), 1)
		}
		if l == 0 {
			lossFree = &run
		}
		if lossFree != nil {
			x := float64(run.MedianNs) / float64(lossFree.MedianNs)
			run.LossInflation = &x
			if run.Baseline != nil && lossFree.Baseline != nil {
				y := float64(run.Baseline.MedianNs) / float64(lossFree.Baseline.MedianNs)
				run.Baseline.LossInflation = &y
			}
		}
		report.Runs = append(report.Runs, run)
	}
	return nil
}

// envSource says that flag's value came from its SWML_ variable, if that
// is set to value: a variable exported for a job's workers is easy to
// forget when a message names only the flag.
func envSource(flag, value string) string {
	if env := "SWML_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")); value != "" && os.Getenv(env) == value {
		return fmt.Sprintf(" (from $%s)", env)
	}
	return ""
}

// finishedRows says that the rows finished before a failure were printed.
func finishedRows(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (the %d finished rows are printed)", n)
}

// benchSteps is the number of all-reduces the whole run does (progress).
func benchSteps(cfg benchConfig) int {
	per := cfg.warmup + cfg.iters
	if cfg.baseline != "none" {
		per *= 2
	}
	return per * len(cfg.sweep) * len(cfg.wires) * len(cfg.losses)
}

func benchFlags(c *cli.Context) (benchConfig, error) {
	cfg := benchConfig{baseline: c.String("baseline"), plot: c.String("plot"), sw: c.String("switch")}
	var err error
	switch cfg.sw {
	case switchSoftware:
	case switchInstant:
		return cfg, engineAloneFlags(c, &cfg)
	default:
		return cfg, fmt.Errorf("--switch %q: use software (the software switch and userspace NICs on loopback) or instant (the worker engine alone)%s", cfg.sw, envSource("switch", cfg.sw))
	}
	if cfg.offload, err = parseOffload(c); err != nil {
		return cfg, err
	}
	if cfg.link, err = netlab.ParseRate(c.String("link")); err != nil {
		return cfg, fmt.Errorf("--link: %w%s; or none for loopback sockets", err, envSource("link", c.String("link")))
	}
	if cfg.link != 0 && c.IsSet("offload") {
		return cfg, fmt.Errorf("--offload%s does not apply with --link %s: no socket carries the job's traffic; drop it, or give --link none", envSource("offload", c.String("offload")), netlab.FormatRate(cfg.link))
	}
	if cfg.sweep, err = parseWorkers(c.String("workers")); err != nil {
		return cfg, fmt.Errorf("%w%s", err, envSource("workers", c.String("workers")))
	}
	cfg.workers = slices.Max(cfg.sweep)
	if cfg.losses, err = parseLosses(c.String("loss")); err != nil {
		return cfg, err
	}
	cfg.loss = cfg.losses[0]
	if cfg.jobSpec, err = parseJobFlags(c, cfg.workers); err != nil {
		return cfg, err
	}
	if cfg.baseline != "ring" && cfg.baseline != "none" {
		return cfg, fmt.Errorf("--baseline %q: use ring (a ring all-reduce among the same workers) or none", cfg.baseline)
	}
	if cfg.plot != "" {
		if err := checkPlotPath(cfg.plot); err != nil {
			return cfg, err
		}
		if len(cfg.losses) > 1 && len(cfg.sweep) > 1 {
			return cfg, fmt.Errorf("--plot draws a --workers sweep at one loss rate or a --loss sweep at one worker count, not both: drop --plot or one of the lists")
		}
		if len(cfg.wires) > 1 {
			return cfg, fmt.Errorf("--plot draws one --wire width: drop --plot or give --wire 32 or 16")
		}
	}
	if cfg.switchAddr, err = netip.ParseAddr(c.String("switch-addr")); err != nil || !cfg.switchAddr.Is4() {
		return cfg, fmt.Errorf("--switch-addr %q: give an IPv4 address such as 127.0.0.1", c.String("switch-addr"))
	}
	if last := cfg.switchAddr.As4()[3]; int(last)+cfg.workers > 254 {
		return cfg, fmt.Errorf("--switch-addr %v with %d workers: the workers' addresses would run past .254; pick a lower last byte", cfg.switchAddr, cfg.workers)
	}
	return cfg, checkBench(cfg)
}

// parseWorkers accepts a worker count or a comma list of them.
func parseWorkers(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("--workers %q: %q is not a number; give a count such as 4 or a comma list such as 2,4,8,16", s, f)
		}
		if n < 1 || n > 250 {
			return nil, fmt.Errorf("--workers %d: give 1 to 250 workers (each gets its own address 127.0.0.2 …)", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseLosses accepts a loss probability or a comma list of them; a list
// starting at 0 gives every other row its inflation over the loss-free one.
func parseLosses(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(p) || p < 0 || p >= 0.5 {
			return nil, fmt.Errorf("--loss %q: %q is not a loss probability in [0, 0.5); give one such as 0.01, or a comma list such as 0,0.001,0.01,0.05", s, f)
		}
		out = append(out, p)
	}
	return out, nil
}

// runEmbeddedBench runs the whole system in this process for cfg.workers
// workers (benchmark.Embedded): SwitchML, then (unless --baseline none) the
// ring among the same workers over the same NICs. On an error the row
// holds what finished (benchmark.EmbeddedResult); measured says whether
// any measured SwitchML all-reduce did, and reached how far each
// algorithm got.
func runEmbeddedBench(ctx context.Context, cfg benchConfig, prog *progress) (run benchRun, measured bool, reached string, err error) {
	res, err := benchmark.Embedded(ctx, benchmark.EmbeddedConfig{
		Workers: cfg.workers, SwitchAddr: cfg.switchAddr, Loss: cfg.loss, Offload: cfg.offload, Link: benchmark.Link{Rate: float64(cfg.link)},
		Session: cfg.session(), Elements: cfg.elements(), Warmup: cfg.warmup, Iters: cfg.iters,
		Ring: cfg.baseline == "ring", Step: prog.step, Phase: prog.phase,
	})
	if errors.Is(err, syscall.EADDRINUSE) {
		err = fmt.Errorf("%w (the switch is at --switch-addr %v, the workers at the next addresses: pick another --switch-addr if something holds them)", err, cfg.switchAddr)
	}
	calls := cfg.warmup + cfg.iters
	reached = fmt.Sprintf("%d of %d SwitchML all-reduces", res.SwitchMLCalls, calls)
	if cfg.baseline == "ring" && res.SwitchMLCalls == calls {
		reached += fmt.Sprintf(", %d of %d ring all-reduces", res.RingCalls, calls)
	}
	run = benchRun{Switch: switchSoftware, Record: benchmark.Record{Workers: cfg.workers, DType: cfg.dtype.String(), WireBits: cfg.wire, TensorBytes: cfg.size, Elements: cfg.elements(),
		Iters: max(res.SwitchMLCalls-cfg.warmup, 0), Warmup: cfg.warmup,
		PacketSize: cfg.packetSize, MessageSize: cfg.msgSize, QPs: cfg.qps, Loss: cfg.loss, Verified: true,
		Packets: res.Packets, Retransmissions: res.Retransmissions, Writes: cfg.writes.String(), PacketWriteCalls: res.PacketWriteCalls,
		ResendCauses: res.ResendCauses},
		SwitchDrops: res.SwitchDrops, CPUUserNs: int64(res.CPUUser), CPUSysNs: int64(res.CPUSys)}
	run.Times = res.SwitchML.Times()
	if res.Messages > 0 {
		run.RetransmissionsPerMessage = float64(res.Retransmissions) / float64(res.Messages)
	}
	// SwitchML's ceiling does not depend on the worker count; LinkCeilings
	// wants two workers or more for the ring's. It counts 32 bits per
	// element on the wire: a 16-bit wire carries twice the elements.
	ceil := netlab.LinkCeilings(float64(cfg.link), max(cfg.workers, 2), cfg.packetSize, cfg.msgSize)
	run.linkResult = newLinkResult(cfg.link, ceil.SwitchML*32/float64(cfg.wire), run.ATEPerSec, res.Links)
	if r := res.Ring; r != nil {
		run.Baseline = &baselineResult{Name: "ring", Times: r.Summary.Times(),
			Packets: r.Packets, Retransmissions: r.Retransmissions, Verified: true, WindowMessages: r.WindowMessages,
			CPUUserNs: int64(r.CPUUser), CPUSysNs: int64(r.CPUSys)}
		run.Baseline.linkResult = newLinkResult(cfg.link, ceil.Ring, run.Baseline.ATEPerSec, r.Links)
		ratio := run.ATEPerSec / run.Baseline.ATEPerSec
		run.ATERatio = &ratio
	}
	return run, run.Iters > 0, reached, err
}

func printBench(out io.Writer, rep benchReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if len(rep.Runs) == 0 {
		return nil
	}
	r0 := rep.Runs[0]
	var counts, losses []string
	for _, r := range rep.Runs {
		if c := strconv.Itoa(r.Workers); !slices.Contains(counts, c) {
			counts = append(counts, c)
		}
		if l := strconv.FormatFloat(r.Loss, 'g', -1, 64); !slices.Contains(losses, l) {
			losses = append(losses, l)
		}
	}
	what := "SwitchML all-reduce"
	if r0.Baseline != nil {
		what = "SwitchML vs " + r0.Baseline.Name + " all-reduce"
	}
	where := "on loopback"
	if r0.RateBps > 0 {
		where = fmt.Sprintf("over %s links (in memory: each worker behind its own switch port, %s drop-tail buffer each way)",
			netlab.FormatRate(r0.RateBps), humanBytes(benchmark.DefaultPortBuffer))
	}
	fmt.Fprintf(out, "%s %s: %s workers, %s tensor of %s (%d elements), packet %d B, message %d B, %d QPs/worker, %s writes, loss %s, %d iters (+%d warmup)\n",
		what, where, strings.Join(counts, ","), r0.DType, humanBytes(r0.TensorBytes), r0.Elements, r0.PacketSize, r0.MessageSize, r0.QPs, rep.Runs[0].Writes, strings.Join(losses, ","), r0.Iters, r0.Warmup)
	anyLoss := false
	for _, r := range rep.Runs {
		anyLoss = anyLoss || r.Loss > 0
	}
	switch {
	case anyLoss && r0.RateBps > 0:
		fmt.Fprintln(out, "(--loss drops on each link direction a packet crosses: a worker's uplink, then a downlink)")
	case anyLoss && r0.Baseline != nil:
		fmt.Fprintf(out, "(--loss drops at the switch's ingress and egress for SwitchML, at the sending and the receiving NIC for the %s)\n", r0.Baseline.Name)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, strings.Join(benchColumns, "\t")+"\t")
	d := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }
	infl := func(x *float64) string {
		if x == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f×", *x)
	}
	ceiling := func(l linkResult) (string, string) {
		if l.OfCeiling == nil {
			return "-", "-"
		}
		return fmt.Sprintf("%.3g", l.CeilingATEPerSec), fmt.Sprintf("%.2f", *l.OfCeiling)
	}
	for _, r := range rep.Runs {
		ratio := "-"
		if r.ATERatio != nil {
			ratio = fmt.Sprintf("%.2f×", *r.ATERatio)
		}
		var drops uint64
		for _, n := range r.SwitchDrops {
			drops += n
		}
		c, of := ceiling(r.linkResult)
		fmt.Fprintf(w, "%d\t%d\t%g\t%s\t%v\t%v\t%v\t%.3g\t%s\t%s\t%.3f\t%d\t%d\t%.4f\t%s\t%d\t%v\t%s\t\n", r.Workers, r.WireBits, r.Loss, "switchml",
			d(r.MedianNs), d(r.MinNs), d(r.MaxNs), r.ATEPerSec, c, of, r.Gbps, r.Packets, r.Retransmissions, r.RetransmissionsPerMessage, infl(r.LossInflation), drops, r.Verified, ratio)
		if b := r.Baseline; b != nil {
			c, of := ceiling(b.linkResult)
			fmt.Fprintf(w, "%d\t%s\t%g\t%s\t%v\t%v\t%v\t%.3g\t%s\t%s\t%.3f\t%d\t%d\t%s\t%s\t%s\t%v\t%s\t\n", r.Workers, "-", r.Loss, b.Name,
				d(b.MedianNs), d(b.MinNs), d(b.MaxNs), b.ATEPerSec, c, of, b.Gbps, b.Packets, b.Retransmissions, "-", infl(b.LossInflation), "-", b.Verified, "baseline")
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if r0.Baseline != nil {
		fmt.Fprintf(out, "ATE/s ratio = SwitchML ATE/s ÷ %s ATE/s in the same run (> 1: SwitchML is faster).\n", r0.Baseline.Name)
	}
	if r0.RateBps > 0 {
		fmt.Fprintln(out, "ceiling = the most ATE/s the links carry for that all-reduce (docs/bench.md \"Linked mode\"); of ceiling = ATE/s ÷ ceiling.")
	}
	for _, r := range rep.Runs {
		fmt.Fprintln(out, regimeLine(r))
		if line := linkDropsLine(r); line != "" {
			fmt.Fprintln(out, line)
		}
		if line := resendLine(r); line != "" {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

// regimeLine says which regime a row measured (docs/bench.md "Regimes"):
// whether the links or this host's CPUs set the speed.
func regimeLine(r benchRun) string {
	head := fmt.Sprintf("%d workers, %d-bit wire, loss %g: ", r.Workers, r.WireBits, r.Loss)
	if r.RateBps == 0 {
		return head + "host-bound: loopback, no link; the switch, every NIC and the ring share this host's CPUs, so the ratio compares software paths, not networks"
	}
	parts := []string{fmt.Sprintf("SwitchML %s (%.2f of its ceiling)", r.Regime, *r.OfCeiling)}
	if b := r.Baseline; b != nil && b.OfCeiling != nil {
		parts = append(parts, fmt.Sprintf("%s %s (%.2f)", b.Name, b.Regime, *b.OfCeiling))
	}
	line := head + strings.Join(parts, ", ")
	if r.Regime == regimeLink {
		return line + ": the links set SwitchML's speed"
	}
	return line + ": this host, not the links, set SwitchML's speed (its CPUs, or how late a loaded host wakes the goroutines); a quieter host or a lower --link measures the links"
}

// linkDropsLine names what a row's links dropped, or is empty when they
// dropped nothing: losses (--loss), full port queues, full receive queues.
func linkDropsLine(r benchRun) string {
	var parts []string
	add := func(name string, d *linkTotals) {
		if d != nil && d.Loss+d.Queue+d.ReceiveQueue > 0 {
			parts = append(parts, fmt.Sprintf("%s %d lost, %d at full port queues, %d at full receive queues", name, d.Loss, d.Queue, d.ReceiveQueue))
		}
	}
	add("SwitchML", r.Links)
	if r.Baseline != nil {
		add(r.Baseline.Name, r.Baseline.Links)
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("%d workers, %d-bit wire, loss %g: link drops: %s", r.Workers, r.WireBits, r.Loss, strings.Join(parts, "; "))
}

// benchColumns are the columns of bench's table, in order (docs/bench.md
// "Table" shows and explains each).
var benchColumns = []string{"workers", "wire", "loss", "all-reduce", "median", "min", "max", "ATE/s", "ceiling", "of ceiling", "Gbit/s", "packets",
	"retransmissions", "retx/msg", "vs loss-free", "switch drops", "verified", "ATE/s ratio"}

// resendLine explains a row's SwitchML resends and switch drops, or is
// empty when it has none: why the workers resent (timer, RACK, and how
// many resent messages turned out not to need it), and every drop reason
// of the switch with its count. Without loss, resends are spurious and
// the switch drops the resends that reach slots still waiting for other
// workers (retransmit_incomplete): docs/bench.md "Table".
func resendLine(r benchRun) string {
	var drops []string
	for _, reason := range slices.Sorted(maps.Keys(r.SwitchDrops)) {
		if n := r.SwitchDrops[reason]; n > 0 {
			drops = append(drops, fmt.Sprintf("%s %d", reason, n))
		}
	}
	if r.Retransmissions == 0 && len(drops) == 0 {
		return ""
	}
	line := fmt.Sprintf("%d workers, %d-bit wire, loss %g: %d resends (%d timer expiries, %d RACK), %d resent messages answered by an earlier transmission (spurious)",
		r.Workers, r.WireBits, r.Loss, r.Retransmissions, r.Timeouts, r.FastRetransmissions, r.SpuriousRetransmissions)
	if len(drops) > 0 {
		line += "; switch drops: " + strings.Join(drops, ", ")
	}
	if r.Interrupted {
		line += fmt.Sprintf("; interrupted after %d measured all-reduces", r.Iters)
	}
	return line
}

// startCPUProfile starts runtime/pprof CPU profiling into path; the returned
// function stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %v: give a writable file path", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %v (is another profile running?)", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// engineAloneFlags checks the flags of --switch instant: the job's, for a
// one-worker job; those of the software switch and its network are
// refused, naming why.
func engineAloneFlags(c *cli.Context, cfg *benchConfig) error {
	for _, f := range []struct{ name, why string }{
		{"loss", "the instant switch loses nothing"},
		{"baseline", "the ring needs several workers and a network"},
		{"plot", "a plot needs a sweep of worker counts"},
		{"switch-addr", "the instant switch has no network address"},
		{"offload", "no socket carries the job's traffic"},
		{"link", "the instant switch has no network"},
	} {
		if c.IsSet(f.name) {
			return fmt.Errorf("--%s%s does not apply with --switch instant: %s; drop it", f.name, envSource(f.name, c.String(f.name)), f.why)
		}
	}
	if w := c.String("workers"); c.IsSet("workers") && w != "1" {
		return fmt.Errorf("--workers %s%s with --switch instant: the engine alone is one worker (a one-worker job, whose sum is its own tensor); drop --workers", w, envSource("workers", w))
	}
	cfg.workers, cfg.sweep, cfg.losses, cfg.baseline = 1, []int{1}, []float64{0}, "none"
	var err error
	if cfg.jobSpec, err = parseJobFlags(c, 1); err != nil {
		return err
	}
	if len(cfg.wires) > 1 {
		return fmt.Errorf("--wire %s with --switch instant: the engine alone runs one width; give --wire 32 or 16", c.String("wire"))
	}
	var need memoryNeed
	size := uint64(cfg.size)
	need.add(2*size, "2 × %s: the input and the all-reduce buffer", approxBytes(size))
	need.add(2*size, "2 × %s: the copies that time the memory-bandwidth limit", approxBytes(size))
	mr := uint64(cfg.session().RegisteredBytes())
	need.add(mr+baseBytes, "%s registered messages and process", approxBytes(mr+baseBytes))
	return need.check(fmt.Sprintf("--size %s with --switch instant", approxBytes(size)), "lower --size")
}

// runEngineAlone is bench --switch instant: the worker engine alone
// (benchmark.EngineAlone), printed as a table or a one-run JSON document.
func runEngineAlone(ctx context.Context, c *cli.Context, cfg benchConfig) error {
	const label = "engine alone"
	prog := newProgress(c.App.ErrWriter, cfg.warmup+cfg.iters)
	defer prog.tick(time.Second)()
	prog.phase(label)
	res, err := benchmark.EngineAlone(ctx, benchmark.EngineAloneConfig{
		Session: cfg.session(), Elements: cfg.elements(), Warmup: cfg.warmup, Iters: cfg.iters,
		Step: func() { prog.step(label) },
	})
	prog.clear()
	if err != nil {
		if ctx.Err() != nil && c.Context.Err() == nil {
			return cli.Exit("bench --switch instant: interrupted (SIGINT or SIGTERM); nothing left running", exitInterrupted)
		}
		return cli.Exit(fmt.Sprintf("bench --switch instant: %v%s", err, remedy(err)), 1)
	}
	st := res.Session
	run := benchRun{Switch: switchInstant, Record: benchmark.Record{Workers: 1, DType: cfg.dtype.String(), WireBits: cfg.wire, TensorBytes: cfg.size, Elements: cfg.elements(), Iters: cfg.iters, Warmup: cfg.warmup,
		PacketSize: cfg.packetSize, MessageSize: cfg.msgSize, QPs: cfg.qps, Verified: true,
		Packets: st.Packets, Retransmissions: st.Retransmissions, Writes: cfg.writes.String(), PacketWriteCalls: st.PacketWriteCalls,
		ResendCauses: benchmark.CausesOf(&st)},
		SwitchDrops: make(map[string]uint64),
		Engine: &engineResult{CPUNs: int64(res.CPU), GbpsPerCore: res.GbpsPerCore, Messages: res.Messages, Allocs: res.Allocs, AllocsPerMessage: res.AllocsPerMessage,
			CopyLimitNs: int64(res.CopyLimit), CopyLimitRatio: res.LimitRatio},
	}
	run.Times = res.Summary.Times()
	if st.Messages > 0 {
		run.RetransmissionsPerMessage = float64(st.Retransmissions) / float64(st.Messages)
	}
	for r, n := range res.Switch.Drops {
		run.SwitchDrops[instant.DropReason(r).String()] = n
	}
	rep := benchReport{SchemaVersion: benchSchemaVersion, Runs: []benchRun{run}}
	if c.Bool("json") {
		return printBench(c.App.Writer, rep, true)
	}
	return printEngineAlone(c.App.Writer, run)
}

// printEngineAlone prints bench --switch instant's table.
func printEngineAlone(out io.Writer, r benchRun) error {
	e := r.Engine
	fmt.Fprintf(out, "SwitchML worker engine alone (instant switch: one worker, no network): %s tensor of %s (%d elements), %d-bit wire, packet %d B, message %d B, %d QPs, %s writes, %d iters (+%d warmup)\n",
		r.DType, humanBytes(r.TensorBytes), r.Elements, r.WireBits, r.PacketSize, r.MessageSize, r.QPs, r.Writes, r.Iters, r.Warmup)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "median\tmin\tmax\telements/s\tGbit/s\tGbit/s per core\tmessages/call\tallocs/message\t2 × copy\tvs 2 × copy\tverified\t")
	d := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }
	fmt.Fprintf(w, "%v\t%v\t%v\t%.3g\t%.2f\t%.2f\t%d\t%.3f\t%v\t%.2f×\t%v\t\n", d(r.MedianNs), d(r.MinNs), d(r.MaxNs), r.ATEPerSec, r.Gbps, e.GbpsPerCore,
		e.Messages/uint64(r.Iters), e.AllocsPerMessage, time.Duration(e.CopyLimitNs).Round(time.Microsecond), e.CopyLimitRatio, r.Verified)
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "Gbit/s per core: the tensor per second of this process's CPU time. vs 2 × copy: the median ÷ copy() of the tensor twice,")
	fmt.Fprintln(out, "timed in the same run on as many goroutines as --threads, each its share — quantizing and dequantizing each read and write")
	fmt.Fprintln(out, "4 B per element, so 1.00× is the memory-bandwidth limit.")
	return nil
}
