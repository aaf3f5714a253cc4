package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/aggregation/ring"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// `swml-rdma lab`: the one-rack network lab of testbed/netlab, and the
// sweep that measures SwitchML, Gloo and the ring in it (docs/netlab.md).

func init() { commands = append(commands, labCommand()) }

// The lab's systems, in the order each row runs them.
const (
	sysSwitchML = "switchml"
	sysGloo     = "gloo"
	sysRing     = "ring"
)

var labSystems = []string{sysSwitchML, sysGloo, sysRing}

const (
	labControllerPort = 50099
	labGlooPort       = 29500
	labMaxIters       = 1000
	labMaxWorkers     = 64
	labMaxJobs        = 4
	// labShareTolerance is issue 24's bound on each of N jobs sharing the
	// switch and the links: within 20 % of an equal share.
	labShareTolerance = 0.2
)

func labCommand() *cli.Command {
	return &cli.Command{
		Name:     "lab",
		Category: "benchmarks",
		Usage:    "network lab (root, Linux): workers in network namespaces on shaped, lossy veth links through a switch namespace; SwitchML vs Gloo vs the ring",
		Description: "Builds a one-rack topology on this host (testbed/netlab): a switch namespace with a bridge, and per worker a\n" +
			"namespace joined to it by a veth pair shaped to --rate in both directions (tbf) and dropping --loss of its\n" +
			"packets at random (nftables). For every combination of --workers, --rate, --loss and --size it runs, over the\n" +
			"same links: the switch daemon (`swml-rdma switch`) in the switch namespace and one `swml-rdma worker` process\n" +
			"per worker namespace; Gloo's all_reduce (torch.distributed, /usr/bin/python3, GLOO_SOCKET_IFNAME); and the\n" +
			"project's ring over userspace NICs in the worker namespaces. Every result is verified. Prints a table (or\n" +
			"--json) with each system's ATE/s, its link-rate ceiling, retransmissions and drops; --plot draws ATE/s\n" +
			"against workers with the ceilings. Everything is removed on exit and on Ctrl-C; --cleanup removes what a\n" +
			"killed run left. See docs/netlab.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workers", Value: "2,4", Usage: "worker counts to sweep, e.g. 2,4,8", EnvVars: []string{"SWML_LAB_WORKERS"}, Category: "sweep"},
			&cli.StringFlag{Name: "rate", Value: "200mbit", Usage: "link rates to sweep, each direction (tc units: 200mbit, 1gbit; 0 = unshaped), e.g. 0,200mbit,1gbit", EnvVars: []string{"SWML_LAB_RATE"}, Category: "sweep"},
			&cli.StringFlag{Name: "loss", Value: "0", Usage: "loss probabilities to sweep, per packet and link direction, e.g. 0,0.01", EnvVars: []string{"SWML_LAB_LOSS"}, Category: "sweep"},
			&cli.StringFlag{Name: "size", Value: "4MiB", Usage: "tensor sizes to sweep (float32), e.g. 4MiB,16MiB", EnvVars: []string{"SWML_LAB_SIZE"}, Category: "sweep"},
			&cli.StringFlag{Name: "systems", Value: strings.Join(labSystems, ","), Usage: "what to run in each row: switchml, gloo, ring", EnvVars: []string{"SWML_LAB_SYSTEMS"}, Category: "sweep"},
			&cli.IntFlag{Name: "jobs", Value: 1, Usage: "SwitchML jobs sharing the switch and the links (1 to 4): with N > 1 each row runs one job alone, then N jobs at once, and reports each job's share of what one job reaches alone ÷ N (Gloo and the ring run as one job)", EnvVars: []string{"SWML_LAB_JOBS"}, Category: "sweep"},
			&cli.IntFlag{Name: "iters", Value: 5, Usage: "measured all-reduces per system and row", EnvVars: []string{"SWML_ITERS"}, Category: "sweep"},
			&cli.IntFlag{Name: "warmup", Value: 1, Usage: "unmeasured all-reduces first", EnvVars: []string{"SWML_WARMUP"}, Category: "sweep"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "bound on each system's run in a row (its processes are ended after it)", EnvVars: []string{"SWML_LAB_TIMEOUT"}, Category: "sweep"},
			&cli.DurationFlag{Name: "queue", Value: netlab.DefaultQueue, Usage: "each shaped link direction's queue, as time to drain it at --rate (tbf limit)", EnvVars: []string{"SWML_LAB_QUEUE"}, Category: "links"},
			&cli.IntFlag{Name: "packet-size", Value: 1024, Usage: "SwitchML's and the ring's payload bytes per packet", EnvVars: []string{"SWML_PACKET_SIZE"}, Category: "protocol"},
			&cli.StringFlag{Name: "msg-size", Value: "16KiB", Usage: "SwitchML's and the ring's message size", EnvVars: []string{"SWML_MSG_SIZE"}, Category: "protocol"},
			&cli.StringFlag{Name: "worker-args", Usage: "more flags for every `swml-rdma worker`, space-separated, e.g. \"--writes packet --qps 4\"", EnvVars: []string{"SWML_LAB_WORKER_ARGS"}, Category: "protocol"},
			&cli.StringFlag{Name: "switch-args", Usage: "more flags for `swml-rdma switch`, space-separated", EnvVars: []string{"SWML_LAB_SWITCH_ARGS"}, Category: "protocol"},
			&cli.StringFlag{Name: "python", Value: "/usr/bin/python3", Usage: "the Python with torch (Debian's python3-torch) that runs Gloo", EnvVars: []string{"SWML_LAB_PYTHON"}, Category: "gloo"},
			&cli.StringFlag{Name: "prefix", Value: netlab.DefaultPrefix, Usage: "first part of every namespace name (<prefix><pid>-sw, <prefix><pid>-w0, …)", EnvVars: []string{"SWML_LAB_PREFIX"}, Category: "links"},
			&cli.BoolFlag{Name: "cleanup", Usage: "only remove the namespaces (and their processes) of labs whose process is gone, then exit", Category: "links"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (schema in docs/netlab.md)", EnvVars: []string{"SWML_JSON"}, Category: "output"},
			&cli.StringFlag{Name: "plot", Usage: "draw time and ATE/s against workers, with the link-rate ceilings, into `FILE` (.svg; one file per rate, loss and size, suffixed, when there are several)", EnvVars: []string{"SWML_PLOT"}, Category: "output"},
		},
		Action: runLab,
	}
}

// labConfig is the validated sweep.
type labConfig struct {
	workers               []int
	rates                 []uint64
	losses                []float64
	sizes                 []int
	systems               []string
	jobs                  int // SwitchML jobs sharing the links; 1: one
	iters, warmup         int
	timeout, queue        time.Duration
	packetSize, msgSize   int
	workerArgs, switchArg []string
	python, prefix, plot  string
}

// wirePackets: a sweep with loss runs on wire packets (netlab.SetWirePackets).
func (c labConfig) wirePackets() bool {
	return slices.ContainsFunc(c.losses, func(p float64) bool { return p > 0 })
}

func labFlags(c *cli.Context) (labConfig, error) {
	cfg := labConfig{jobs: c.Int("jobs"), iters: c.Int("iters"), warmup: c.Int("warmup"), timeout: c.Duration("timeout"), queue: c.Duration("queue"),
		packetSize: c.Int("packet-size"), python: c.String("python"), prefix: c.String("prefix"), plot: c.String("plot"),
		workerArgs: strings.Fields(c.String("worker-args")), switchArg: strings.Fields(c.String("switch-args"))}
	var err error
	if cfg.workers, err = parseWorkers(c.String("workers")); err != nil {
		return cfg, err
	}
	for _, n := range cfg.workers {
		if n < 2 || n > labMaxWorkers {
			return cfg, fmt.Errorf("--workers %d: give 2 to %d workers (each is a namespace and processes)", n, labMaxWorkers)
		}
	}
	for _, f := range strings.Split(c.String("rate"), ",") {
		r, err := netlab.ParseRate(f)
		if err != nil {
			return cfg, fmt.Errorf("--rate: %v", err)
		}
		cfg.rates = append(cfg.rates, r)
	}
	for _, f := range strings.Split(c.String("loss"), ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(p >= 0 && p < 0.5) {
			return cfg, fmt.Errorf("--loss %q: give probabilities in [0, 0.5), e.g. 0,0.01", c.String("loss"))
		}
		cfg.losses = append(cfg.losses, p)
	}
	for _, f := range strings.Split(c.String("size"), ",") {
		n, err := parseSize(f)
		if err != nil {
			return cfg, fmt.Errorf("--size: %v", err)
		}
		if n%4 != 0 {
			return cfg, fmt.Errorf("--size %d: a tensor of 4-byte elements needs a multiple of 4 bytes", n)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	for _, f := range strings.Split(c.String("systems"), ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(labSystems, f) {
			return cfg, fmt.Errorf("--systems %q: %q is none of %s", c.String("systems"), f, strings.Join(labSystems, ", "))
		}
		if !slices.Contains(cfg.systems, f) {
			cfg.systems = append(cfg.systems, f)
		}
	}
	switch {
	case cfg.jobs < 1 || cfg.jobs > labMaxJobs:
		return cfg, fmt.Errorf("--jobs %d: give 1 to %d", cfg.jobs, labMaxJobs)
	case cfg.jobs > 1 && !slices.Contains(cfg.systems, sysSwitchML):
		return cfg, fmt.Errorf("--jobs %d: only SwitchML runs jobs side by side (Gloo and the ring run one); add switchml to --systems", cfg.jobs)
	case netlab.Hosts(slices.Max(cfg.workers), cfg.jobs) > netlab.MaxHosts:
		return cfg, fmt.Errorf("--jobs %d with --workers %d: each job's workers and switch have their own addresses, %d in all, and the lab's subnet holds %d",
			cfg.jobs, slices.Max(cfg.workers), netlab.Hosts(slices.Max(cfg.workers), cfg.jobs), netlab.MaxHosts)
	}
	if cfg.msgSize, err = parseSize(c.String("msg-size")); err != nil {
		return cfg, fmt.Errorf("--msg-size: %v", err)
	}
	if err := wire.CheckPacketSize(cfg.packetSize); err != nil {
		return cfg, fmt.Errorf("--packet-size: %v", err)
	}
	if ppm := cfg.msgSize / cfg.packetSize; cfg.msgSize%cfg.packetSize != 0 || ppm&(ppm-1) != 0 {
		return cfg, fmt.Errorf("--msg-size %d: must be the packet size (%d) times a power of two", cfg.msgSize, cfg.packetSize)
	}
	switch {
	case cfg.iters < 1 || cfg.iters > labMaxIters:
		return cfg, fmt.Errorf("--iters %d: give 1 to %d", cfg.iters, labMaxIters)
	case cfg.warmup < 0 || cfg.warmup > labMaxIters:
		return cfg, fmt.Errorf("--warmup %d: give 0 to %d", cfg.warmup, labMaxIters)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("--timeout %v: give a positive bound, e.g. 5m", cfg.timeout)
	case cfg.queue <= 0:
		return cfg, fmt.Errorf("--queue %v: give a positive duration, e.g. 20ms", cfg.queue)
	}
	if cfg.plot != "" {
		if err := checkPlotPath(cfg.plot); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// labRow is one system's run in one row of the sweep.
type labRow struct {
	System      string  `json:"system"`
	Workers     int     `json:"workers"`
	RateBps     uint64  `json:"rate_bps"` // 0: unshaped
	Loss        float64 `json:"loss"`
	TensorBytes int     `json:"tensor_bytes"`
	Elements    int     `json:"elements"`
	Iters       int     `json:"iters"`
	Warmup      int     `json:"warmup"`
	// MedianNs is the slowest rank's median time per all-reduce (the ring
	// runs in one process: the median of whole all-reduces); MinNs and
	// MaxNs the extremes over ranks.
	MedianNs  int64   `json:"median_ns"`
	MinNs     int64   `json:"min_ns"`
	MaxNs     int64   `json:"max_ns"`
	ATEPerSec float64 `json:"ate_per_s"`
	Gbps      float64 `json:"gbit_per_s"`
	// CeilingATEPerSec is the system's link-rate ceiling (0 unshaped);
	// OfCeiling ATE/s ÷ it; VsGloo ATE/s ÷ Gloo's in the same row.
	CeilingATEPerSec float64  `json:"ceiling_ate_per_s"`
	OfCeiling        *float64 `json:"of_ceiling"`
	VsGloo           *float64 `json:"vs_gloo"`
	// LossInflation is the median ÷ the median of the same system's
	// loss-free row (same workers, rate and size) of this run; null
	// without one.
	LossInflation *float64 `json:"loss_inflation"`
	// Packets the system's senders sent (SwitchML: the workers'; ring:
	// its ranks', acknowledgements included; Gloo: not counted).
	Packets uint64 `json:"packets"`
	// Retransmissions: SwitchML messages resent by the workers, ring
	// messages resent, Gloo TCP segments retransmitted (kernel).
	Retransmissions uint64 `json:"retransmissions"`
	// Messages are the messages first sent (SwitchML: the tensor's,
	// workers × all-reduces × ⌈size ÷ message⌉, warm-up included — the
	// worker's JSON has no message count; ring: its ranks' count),
	// RetransmissionsPerMessage Retransmissions ÷ Messages; 0 and null for
	// Gloo.
	Messages                  uint64   `json:"messages"`
	RetransmissionsPerMessage *float64 `json:"retransmissions_per_message"`
	// Why SwitchML's workers resent (summed over them; zero otherwise).
	resendCauses
	// SwitchDrops are the software switch's drops by reason (SwitchML).
	SwitchDrops map[string]uint64 `json:"switch_drops,omitempty"`
	// Kernel counters over the run: full socket receive buffers (all
	// namespaces, and the switch namespace's alone), tbf queue drops (all,
	// then worker → switch and switch → worker), and the loss rules' drops.
	UDPRcvbufErrors       uint64 `json:"udp_rcvbuf_errors"`
	SwitchUDPRcvbufErrors uint64 `json:"switch_udp_rcvbuf_errors"`
	QueueDrops            uint64 `json:"queue_drops"`
	QueueDropsUp          uint64 `json:"queue_drops_up"`
	QueueDropsDown        uint64 `json:"queue_drops_down"`
	LossDrops             uint64 `json:"loss_drops"`
	// CPU per measured all-reduce, summed over the system's processes
	// (each measures itself around its calls, not its checks: SwitchML's
	// workers and Gloo's ranks; the ring runs in the lab process and is
	// not measured), in user and kernel mode; SwitchCPUNs is the switch
	// daemon's CPU over its life ÷ the all-reduces it served (warm-up
	// included; SwitchML only). Kernel time includes the network stack's
	// work done in the process's system calls (on a veth, often the
	// receiving side's too). 0 when not measured.
	CPUUserNs    int64  `json:"cpu_user_ns_per_call"`
	CPUSysNs     int64  `json:"cpu_sys_ns_per_call"`
	SwitchCPUNs  int64  `json:"switch_cpu_ns_per_call"`
	Verified     bool   `json:"verified"`
	ResultSHA256 string `json:"result_sha256,omitempty"`
	LoadAvg      string `json:"load_avg"` // /proc/loadavg's first three fields at the start
	Error        string `json:"error,omitempty"`
	// Jobs is --jobs in SwitchML rows, 1 in Gloo's and the ring's (they
	// run one job whatever --jobs says). With Jobs > 1 every field above
	// is one SwitchML job run alone first (session id 1, the workers' first
	// addresses: the baseline), and Shared the Jobs jobs then run at once.
	Jobs   int        `json:"jobs"`
	Shared *labShared `json:"shared,omitempty"`
}

// labShared is a SwitchML row's N jobs run at once (--jobs N > 1) on one
// switch daemon over the same links: job j has session id j and its
// worker in each worker namespace binds that namespace's j-th address
// (netlab.Lab.Addrs); every worker process of every job starts together.
type labShared struct {
	Jobs []*labJob `json:"jobs"`
	// ATEPerSec is the sum of the jobs' ATE/s; OfCeiling it ÷ the row's
	// ceiling (the jobs share the links, so theirs is one job's);
	// VsAlone it ÷ the solo job's ATE/s.
	ATEPerSec float64  `json:"ate_per_s"`
	OfCeiling *float64 `json:"of_ceiling"`
	VsAlone   float64  `json:"vs_alone"`
	// MinShare and MaxShare are the extremes of the jobs' shares;
	// EqualShare says whether every share is within 20 % of 1 (issue
	// 24's target). Jain is Jain's fairness index of the jobs' ATE/s,
	// (Σx)² ÷ (N·Σx²): 1 when equal, 1/N when one job has everything.
	MinShare   float64 `json:"min_share"`
	MaxShare   float64 `json:"max_share"`
	EqualShare bool    `json:"equal_share"`
	Jain       float64 `json:"jain_index"`
	// The switch's drops and the kernel's counters over the shared run,
	// as the row's own over the solo run.
	SwitchDrops           map[string]uint64 `json:"switch_drops,omitempty"`
	UDPRcvbufErrors       uint64            `json:"udp_rcvbuf_errors"`
	SwitchUDPRcvbufErrors uint64            `json:"switch_udp_rcvbuf_errors"`
	QueueDrops            uint64            `json:"queue_drops"`
	LossDrops             uint64            `json:"loss_drops"`
}

// labJob is one job of a SwitchML run: its workers' results, summed and
// summarised as a row's are.
type labJob struct {
	Job       int    `json:"job"` // 1 … N
	SessionID uint32 `json:"session_id"`
	// MedianNs is the job's slowest rank's median; MinNs, MaxNs the
	// extremes over its ranks; ATEPerSec at MedianNs.
	MedianNs  int64   `json:"median_ns"`
	MinNs     int64   `json:"min_ns"`
	MaxNs     int64   `json:"max_ns"`
	ATEPerSec float64 `json:"ate_per_s"`
	// Share is ATE/s ÷ (the solo job's ATE/s ÷ N): 1 is an equal share of
	// what one job reaches alone on the same links.
	Share float64 `json:"share"`
	// LinkShare is ATE/s ÷ (the row's ceiling ÷ N): 1 is an equal share of
	// the links' rate (null unshaped). Where one job alone stays below its
	// ceiling, N jobs may fill the links better, and Share exceeds 1
	// while LinkShare does not.
	LinkShare *float64 `json:"link_share"`
	// SpanNs is from the start of the job's first worker process to the
	// exit of its last, on the lab's clock: where the jobs' spans differ
	// the faster job's all-reduces overlapped the other's, the slower
	// job's last ones may have run alone (and look better than shared).
	SpanNs                    int64    `json:"span_ns"`
	Packets                   uint64   `json:"packets"`
	Retransmissions           uint64   `json:"retransmissions"`
	Messages                  uint64   `json:"messages"`
	RetransmissionsPerMessage *float64 `json:"retransmissions_per_message"`
	resendCauses
	// CPU per measured all-reduce, summed over the job's workers (labRow).
	CPUUserNs    int64  `json:"cpu_user_ns_per_call"`
	CPUSysNs     int64  `json:"cpu_sys_ns_per_call"`
	ResultSHA256 string `json:"result_sha256"`
	Verified     bool   `json:"verified"`
	// switchCPU is the switch daemon's CPU per all-reduce it served
	// (every job's: it is shared).
	switchCPU int64
}

const labSchemaVersion = 1

type labReport struct {
	SchemaVersion int      `json:"schema_version"`
	Kernel        string   `json:"kernel"`
	CPUs          int      `json:"cpus"`
	QueueNs       int64    `json:"queue_ns"`
	PacketSize    int      `json:"packet_size"`
	MessageSize   int      `json:"message_size"`
	WorkerArgs    []string `json:"worker_args"`
	// WirePackets: the links cut GSO/TSO datagrams into packets before
	// the loss rules (a sweep with loss; netlab.SetWirePackets).
	WirePackets  bool      `json:"wire_packets"`
	LoadAvgStart string    `json:"load_avg_start"`
	LoadAvgEnd   string    `json:"load_avg_end"`
	Rows         []*labRow `json:"rows"`
}

func runLab(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("lab takes no arguments (got %q): flags go before nothing, e.g. swml-rdma lab --workers 2,4", c.Args().Slice()), exitUsage)
	}
	cfg, err := labFlags(c)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	if runtime.GOOS != "linux" {
		return cli.Exit("lab: needs Linux (network namespaces, veth, tc, nftables)", 1)
	}
	if err := netlab.CheckRoot(); err != nil {
		return cli.Exit("lab: "+err.Error(), 1)
	}
	if err := netlab.CheckTools(); err != nil {
		return cli.Exit("lab: "+err.Error(), 1)
	}
	removed, err := netlab.Cleanup(cfg.prefix)
	if len(removed) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "lab: removed %d namespaces of a lab whose process is gone: %s\n", len(removed), strings.Join(removed, " "))
	}
	if err != nil {
		return cli.Exit("lab: cleanup: "+err.Error(), 1)
	}
	if c.Bool("cleanup") {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return cli.Exit("lab: the path of this program (it runs its own switch and worker): "+err.Error(), 1)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	r := &labRunner{cfg: cfg, exe: exe, log: c.App.ErrWriter}
	if slices.Contains(cfg.systems, sysGloo) {
		dir, err := os.MkdirTemp("", "swml-lab-")
		if err != nil {
			return cli.Exit("lab: "+err.Error(), 1)
		}
		defer func() { _ = os.RemoveAll(dir) }() // a temporary script: nothing to do if it stays
		r.glooScript = filepath.Join(dir, "gloo_allreduce.py")
		if err := os.WriteFile(r.glooScript, netlab.GlooScript, 0o644); err != nil {
			return cli.Exit("lab: "+err.Error(), 1)
		}
	}
	rep := labReport{SchemaVersion: labSchemaVersion, Kernel: kernelRelease(), CPUs: runtime.NumCPU(), QueueNs: int64(cfg.queue),
		PacketSize: cfg.packetSize, MessageSize: cfg.msgSize, WorkerArgs: cfg.workerArgs, WirePackets: cfg.wirePackets(), LoadAvgStart: loadAvg()}
	runErr := r.sweep(ctx, &rep)
	lossInflation(rep.Rows)
	rep.LoadAvgEnd = loadAvg()
	if cfg.plot != "" && len(rep.Rows) > 0 {
		if err := writeLabPlots(cfg.plot, rep); err != nil {
			fmt.Fprintln(c.App.ErrWriter, "lab:", err)
		}
	}
	if err := printLab(c.App.Writer, rep, c.Bool("json")); err != nil {
		return err
	}
	// What is left after the run: nothing of this process's labs.
	if left, err := netlab.Namespaces(fmt.Sprintf("%s%d-", cfg.prefix, os.Getpid())); err == nil && len(left) > 0 {
		return cli.Exit(fmt.Sprintf("lab: namespaces left behind: %s (swml-rdma lab --cleanup removes them)", strings.Join(left, " ")), 1)
	}
	switch {
	case ctx.Err() != nil && c.Context.Err() == nil:
		return cli.Exit("lab: interrupted (SIGINT or SIGTERM); every namespace and process of the lab is removed", exitInterrupted)
	case runErr != nil:
		return cli.Exit("lab: "+runErr.Error(), 1)
	}
	for _, row := range rep.Rows {
		if row.Error != "" {
			return cli.Exit(fmt.Sprintf("lab: %s at %d workers, %s, loss %g, %s failed: %s", row.System, row.Workers,
				netlab.FormatRate(row.RateBps), row.Loss, humanBytes(row.TensorBytes), row.Error), 1)
		}
	}
	return nil
}

type labRunner struct {
	cfg        labConfig
	exe        string
	glooScript string
	log        io.Writer
}

// sweep builds a lab per worker count and runs every row in it; the lab
// is removed before the next count and when sweep returns, however.
func (r *labRunner) sweep(ctx context.Context, rep *labReport) error {
	for _, n := range r.cfg.workers {
		if err := r.sweepWorkers(ctx, n, rep); err != nil {
			return err
		}
	}
	return nil
}

func (r *labRunner) sweepWorkers(ctx context.Context, n int, rep *labReport) error {
	lab, err := netlab.Build(ctx, netlab.Config{Workers: n, Prefix: r.cfg.prefix, AddrsPerWorker: r.cfg.jobs})
	if err != nil {
		return err
	}
	defer func() {
		if err := lab.Close(); err != nil {
			fmt.Fprintln(r.log, "lab: removing the lab:", err)
		}
	}()
	// A sweep with loss runs every row on wire packets (GSO/TSO cut in
	// software before the links), loss-free rows included.
	if err := lab.SetWirePackets(ctx, r.cfg.wirePackets()); err != nil {
		return err
	}
	for _, rate := range r.cfg.rates {
		if err := lab.Shape(ctx, netlab.Shaping{RateBps: rate, Queue: r.cfg.queue}); err != nil {
			return err
		}
		for _, loss := range r.cfg.losses {
			if err := lab.SetLoss(ctx, loss); err != nil {
				return err
			}
			for _, size := range r.cfg.sizes {
				var rows []*labRow
				for _, sys := range r.cfg.systems {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					row := &labRow{System: sys, Workers: n, RateBps: rate, Loss: loss, TensorBytes: size, Elements: size / 4,
						Iters: r.cfg.iters, Warmup: r.cfg.warmup, LoadAvg: loadAvg(), Jobs: 1}
					if sys == sysSwitchML {
						row.Jobs = r.cfg.jobs
					}
					fmt.Fprintf(r.log, "lab: %s, %d workers, %s, loss %g, %s …\n", sys, n, netlab.FormatRate(rate), loss, humanBytes(size))
					r.runSystem(ctx, lab, row)
					if row.MedianNs > 0 {
						alone := ""
						if row.Jobs > 1 {
							alone = " (one job alone)"
						}
						fmt.Fprintf(r.log, "lab:   median %v, %.3g ATE/s, %d retransmissions%s\n", time.Duration(row.MedianNs).Round(time.Microsecond), row.ATEPerSec,
							row.Retransmissions, alone)
					}
					if row.Shared != nil {
						for _, j := range row.Shared.Jobs {
							fmt.Fprintf(r.log, "lab:   job %d of %d together: median %v, %.3g ATE/s, share %.2f, %d retransmissions\n", j.Job, row.Jobs,
								time.Duration(j.MedianNs).Round(time.Microsecond), j.ATEPerSec, j.Share, j.Retransmissions)
						}
					}
					if row.Error != "" {
						fmt.Fprintf(r.log, "lab:   failed: %s\n", row.Error)
					}
					rows = append(rows, row)
					rep.Rows = append(rep.Rows, row)
				}
				compareRows(rows, r.cfg)
			}
		}
	}
	return nil
}

// runSystem runs one system in one row, bounded by --timeout; what goes
// wrong is the row's Error. A SwitchML row with --jobs N > 1 runs one job
// alone, then (if that worked) N jobs at once, each bounded by --timeout.
func (r *labRunner) runSystem(ctx context.Context, lab *netlab.Lab, row *labRow) {
	d, err := r.measure(ctx, lab, func(ctx context.Context) error {
		switch row.System {
		case sysSwitchML:
			return r.runSwitchML(ctx, lab, row)
		case sysGloo:
			return r.runGloo(ctx, lab, row)
		default:
			return r.runRing(ctx, lab, row)
		}
	})
	row.UDPRcvbufErrors, row.SwitchUDPRcvbufErrors, row.QueueDrops, row.LossDrops = d.UDPRcvbufErrors, d.SwitchUDPRcvbufErrors, d.QueueDrops, d.LossDrops
	row.QueueDropsUp, row.QueueDropsDown = d.QueueDropsUp, d.QueueDropsDown
	if row.System == sysGloo {
		row.Retransmissions = d.TCPRetransSegs
	}
	if err != nil {
		row.Error = err.Error()
		return
	}
	if row.System != sysSwitchML || row.Jobs < 2 {
		return
	}
	sh := &labShared{}
	d, err = r.measure(ctx, lab, func(ctx context.Context) error { return r.runShared(ctx, lab, row, sh) })
	sh.UDPRcvbufErrors, sh.SwitchUDPRcvbufErrors, sh.QueueDrops, sh.LossDrops = d.UDPRcvbufErrors, d.SwitchUDPRcvbufErrors, d.QueueDrops, d.LossDrops
	row.Shared = sh
	if err != nil {
		row.Error = fmt.Sprintf("%d jobs at once: %v", row.Jobs, err)
		row.Verified = false
	}
}

// measure runs fn bounded by --timeout and returns the lab's counters over
// it (zero if they could not be read: then the error says so).
func (r *labRunner) measure(ctx context.Context, lab *netlab.Lab, fn func(context.Context) error) (netlab.Counters, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.timeout)
	defer cancel()
	before, err := lab.Counters(ctx)
	if err != nil {
		return netlab.Counters{}, err
	}
	err = fn(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("not done within --timeout %v: %w", r.cfg.timeout, err)
	}
	after, cerr := lab.Counters(context.WithoutCancel(ctx))
	if cerr != nil {
		return netlab.Counters{}, cmp.Or(err, cerr)
	}
	return after.Sub(before), err
}

// labProc is a process of a row: its command and what it wrote.
type labProc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	// started is when it was started; exited when waitAll saw it end.
	started, exited time.Time
}

func startLabProc(cmd *exec.Cmd, name string) (*labProc, error) {
	p := &labProc{name: name, cmd: cmd}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// failure describes a process that failed: its error and its last words.
func (p *labProc) failure(err error) error {
	tail := strings.TrimSpace(p.stderr.String() + "\n" + p.stdout.String())
	if lines := strings.Split(tail, "\n"); len(lines) > 4 {
		tail = strings.Join(lines[len(lines)-4:], "\n")
	}
	return fmt.Errorf("%s: %v: %s", p.name, err, tail)
}

// stopAll ends procs that still run (SIGTERM to their process groups, as
// a ctx cancel does) and waits for them.
func stopAll(procs []*labProc) {
	for _, p := range procs {
		if p.cmd.ProcessState == nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Wait() // its failure, if any, is reported by the caller
		}
	}
}

// waitAll waits for every labProc; the first failure (in rank order) is
// returned and the others are then ended.
func waitAll(procs []*labProc) error {
	errc := make(chan error, len(procs))
	for _, p := range procs {
		go func() {
			err := p.cmd.Wait()
			p.exited = time.Now()
			if err != nil {
				errc <- p.failure(err)
				return
			}
			errc <- nil
		}()
	}
	var first error
	for range procs {
		if err := <-errc; err != nil && first == nil {
			first = err
			for _, p := range procs { // the others would wait for the failed rank until their timeouts
				if p.cmd.Process != nil {
					_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
				}
			}
		}
	}
	return first
}

var switchDropsLine = regexp.MustCompile(`(?m)^\s*drops\s+\d+\s+\((.*)\)`)
var dropReason = regexp.MustCompile(`(\w+)=(\d+)`)

// runSwitchML runs one SwitchML job alone: session id 1, every worker on its
// first address. The row gets its result.
func (r *labRunner) runSwitchML(ctx context.Context, lab *netlab.Lab, row *labRow) error {
	jobs, drops, err := r.runSwitchMLJobs(ctx, lab, row, 1)
	if err != nil {
		return err
	}
	j := jobs[0]
	row.SwitchDrops = drops
	row.setTimes(j.MedianNs, j.MinNs, j.MaxNs)
	row.Packets, row.Retransmissions, row.resendCauses = j.Packets, j.Retransmissions, j.resendCauses
	row.CPUUserNs, row.CPUSysNs, row.SwitchCPUNs = j.CPUUserNs, j.CPUSysNs, j.switchCPU
	row.setMessages(j.Messages)
	row.ResultSHA256, row.Verified = j.ResultSHA256, true
	return nil
}

// runShared runs row.Jobs SwitchML jobs at once after the row's solo job
// (whose result row holds) and fills sh with them and their shares.
func (r *labRunner) runShared(ctx context.Context, lab *netlab.Lab, row *labRow, sh *labShared) error {
	jobs, drops, err := r.runSwitchMLJobs(ctx, lab, row, row.Jobs)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		// Every job's inputs are its ranks' (the same generator as the
		// solo job's), so every job's sum is the solo job's.
		if j.ResultSHA256 != row.ResultSHA256 {
			return fmt.Errorf("job %d: result digest %s differs from the solo job's %s", j.Job, j.ResultSHA256, row.ResultSHA256)
		}
	}
	sh.Jobs, sh.SwitchDrops = jobs, drops
	sh.setShares(row.ATEPerSec)
	return nil
}

// setShares fills the jobs' shares of alone (the solo job's ATE/s), their
// sum, extremes and fairness index.
func (sh *labShared) setShares(alone float64) {
	n := float64(len(sh.Jobs))
	var sum, sq float64
	sh.MinShare, sh.MaxShare = math.Inf(1), math.Inf(-1)
	for _, j := range sh.Jobs {
		j.Share = j.ATEPerSec / (alone / n)
		sh.MinShare, sh.MaxShare = min(sh.MinShare, j.Share), max(sh.MaxShare, j.Share)
		sum += j.ATEPerSec
		sq += j.ATEPerSec * j.ATEPerSec
	}
	sh.ATEPerSec, sh.VsAlone = sum, sum/alone
	if sq > 0 {
		sh.Jain = sum * sum / (n * sq)
	}
	sh.EqualShare = sh.MinShare >= 1-labShareTolerance && sh.MaxShare <= 1+labShareTolerance
}

// runSwitchMLJobs runs n SwitchML jobs at once on one switch daemon (a
// fresh one, so that its drops are these jobs'): job j (1 … n) is session
// j, its rank i the worker process in worker namespace i bound to that
// namespace's j-th address, calling the controller at the switch's j-th
// address (the controller listens on all of them): the lab routes that
// from the worker's j-th address, which the controller requires to be
// the RoCE address registered. Every process of every job is started before
// any is waited for, rank by rank, so the jobs start together. Each
// worker verifies its every result; the ranks of a job must agree on the
// result's digest. It returns each job's result and the switch's drops.
func (r *labRunner) runSwitchMLJobs(ctx context.Context, lab *netlab.Lab, row *labRow, n int) ([]*labJob, map[string]uint64, error) {
	if n > len(lab.Addrs) {
		return nil, nil, fmt.Errorf("%d jobs in a lab built with %d addresses per worker", n, len(lab.Addrs))
	}
	listen := fmt.Sprintf(":%d", labControllerPort) // every address of the switch namespace: the switch's
	sw, err := startLabProc(lab.Command(ctx, lab.Switch, r.exe, append([]string{"switch", "--addr", lab.SwitchAddr.String(), "--controller-addr", listen,
		"--log-level", "warn"}, r.cfg.switchArg...)...), "switch")
	if err != nil {
		return nil, nil, err
	}
	defer stopAll([]*labProc{sw})
	var all []*labProc
	defer func() { stopAll(all) }()
	byJob := make([][]*labProc, n)
	for i, ns := range lab.Workers {
		for j := range n {
			ctl := netip.AddrPortFrom(lab.SwitchAddrs[j], labControllerPort).String()
			args := append([]string{"worker", "--controller", ctl, "--session-id", strconv.Itoa(j + 1), "--addr", lab.Addrs[j][i].String(), "--rank", strconv.Itoa(i),
				"--workers", strconv.Itoa(row.Workers), "--size", strconv.Itoa(row.TensorBytes), "--iters", strconv.Itoa(row.Iters),
				"--warmup", strconv.Itoa(row.Warmup), "--packet-size", strconv.Itoa(r.cfg.packetSize), "--msg-size", strconv.Itoa(r.cfg.msgSize),
				"--json", "--log-level", "warn"}, r.cfg.workerArgs...)
			name := fmt.Sprintf("worker rank %d", i)
			if n > 1 {
				name = fmt.Sprintf("job %d worker rank %d", j+1, i)
			}
			p, err := startLabProc(lab.Command(ctx, ns, r.exe, args...), name)
			if err != nil {
				return nil, nil, err
			}
			all = append(all, p)
			byJob[j] = append(byJob[j], p)
		}
	}
	if err := waitAll(all); err != nil {
		return nil, nil, err
	}
	// The switch prints its final counters on SIGTERM.
	_ = syscall.Kill(-sw.cmd.Process.Pid, syscall.SIGTERM)
	if err := sw.cmd.Wait(); err != nil {
		return nil, nil, sw.failure(err)
	}
	var switchCPU int64
	if ps := sw.cmd.ProcessState; ps != nil {
		switchCPU = int64(ps.UserTime()+ps.SystemTime()) / int64(n*(row.Warmup+row.Iters))
	}
	var drops map[string]uint64
	if m := switchDropsLine.FindStringSubmatch(sw.stdout.String()); m != nil {
		drops = map[string]uint64{}
		for _, kv := range dropReason.FindAllStringSubmatch(m[1], -1) {
			if v, err := strconv.ParseUint(kv[2], 10, 64); err == nil && v > 0 {
				drops[kv[1]] = v
			}
		}
	}
	perCall := (row.TensorBytes + r.cfg.msgSize - 1) / r.cfg.msgSize
	jobs := make([]*labJob, n)
	for j, procs := range byJob {
		job := &labJob{Job: j + 1, SessionID: uint32(j + 1), switchCPU: switchCPU}
		var meds, mins, maxs []int64
		first, last := procs[0].started, procs[0].exited
		for _, p := range procs {
			var res workerResult
			if err := json.Unmarshal(p.stdout.Bytes(), &res); err != nil {
				return nil, nil, fmt.Errorf("%s: its JSON: %w", p.name, err)
			}
			if !res.Verified {
				return nil, nil, fmt.Errorf("%s: result not verified", p.name)
			}
			if job.ResultSHA256 == "" {
				job.ResultSHA256 = res.ResultSHA256
			} else if res.ResultSHA256 != job.ResultSHA256 {
				return nil, nil, fmt.Errorf("%s: result digest %s differs from rank 0's %s: ranks disagree", p.name, res.ResultSHA256, job.ResultSHA256)
			}
			meds, mins, maxs = append(meds, res.MedianNs), append(mins, res.MinNs), append(maxs, res.MaxNs)
			job.Packets += res.Packets
			job.Retransmissions += res.Retransmissions
			job.resendCauses.add(res.resendCauses)
			job.CPUUserNs += res.CPUUserNs / int64(row.Iters)
			job.CPUSysNs += res.CPUSysNs / int64(row.Iters)
			first, last = minTime(first, p.started), maxTime(last, p.exited)
		}
		job.MedianNs, job.MinNs, job.MaxNs = slices.Max(meds), slices.Min(mins), slices.Max(maxs)
		if job.MedianNs > 0 {
			job.ATEPerSec = float64(row.Elements) / time.Duration(job.MedianNs).Seconds()
		}
		job.SpanNs = int64(last.Sub(first))
		job.Messages = uint64(row.Workers * (row.Warmup + row.Iters) * perCall)
		if job.Messages > 0 {
			x := float64(job.Retransmissions) / float64(job.Messages)
			job.RetransmissionsPerMessage = &x
		}
		job.Verified = true
		jobs[j] = job
	}
	return jobs, drops, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (row *labRow) setMessages(n uint64) {
	row.Messages = n
	if n > 0 {
		x := float64(row.Retransmissions) / float64(n)
		row.RetransmissionsPerMessage = &x
	}
}

// glooResult is what gloo_allreduce.py prints.
type glooResult struct {
	Rank         int     `json:"rank"`
	TimesNs      []int64 `json:"times_ns"`
	ResultSHA256 string  `json:"result_sha256"`
	Verified     bool    `json:"verified"`
	Error        string  `json:"error"`
	CPUUserNs    int64   `json:"cpu_user_ns"`
	CPUSysNs     int64   `json:"cpu_sys_ns"`
}

func (r *labRunner) runGloo(ctx context.Context, lab *netlab.Lab, row *labRow) error {
	master := netip.AddrPortFrom(lab.WorkerAddrs[0], labGlooPort).String()
	var procs []*labProc
	defer func() { stopAll(procs) }()
	for i, ns := range lab.Workers {
		cmd := lab.Command(ctx, ns, r.cfg.python, r.glooScript, "--rank", strconv.Itoa(i), "--workers", strconv.Itoa(row.Workers),
			"--master", master, "--elements", strconv.Itoa(row.Elements), "--iters", strconv.Itoa(row.Iters), "--warmup", strconv.Itoa(row.Warmup),
			"--timeout", strconv.Itoa(int(math.Ceil(r.cfg.timeout.Seconds()))))
		cmd.Env = append(os.Environ(), "GLOO_SOCKET_IFNAME="+netlab.WorkerIf, "OMP_NUM_THREADS=1")
		p, err := startLabProc(cmd, fmt.Sprintf("gloo rank %d", i))
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	if err := waitAll(procs); err != nil {
		return err
	}
	var meds, mins, maxs []int64
	for _, p := range procs {
		var res glooResult
		if err := json.Unmarshal(bytes.TrimSpace(p.stdout.Bytes()), &res); err != nil {
			return fmt.Errorf("%s: its JSON: %w", p.name, err)
		}
		if res.Error != "" || !res.Verified || len(res.TimesNs) != row.Iters {
			return fmt.Errorf("%s: %s (verified %v, %d times)", p.name, res.Error, res.Verified, len(res.TimesNs))
		}
		if row.ResultSHA256 == "" {
			row.ResultSHA256 = res.ResultSHA256
		} else if res.ResultSHA256 != row.ResultSHA256 {
			return fmt.Errorf("%s: result digest %s differs from rank 0's %s: ranks disagree", p.name, res.ResultSHA256, row.ResultSHA256)
		}
		ts := make([]time.Duration, len(res.TimesNs))
		for i, t := range res.TimesNs {
			ts[i] = time.Duration(t)
		}
		s := benchmark.Summarize(ts, row.Elements)
		meds, mins, maxs = append(meds, int64(s.Median)), append(mins, int64(s.Min)), append(maxs, int64(s.Max))
		row.CPUUserNs += res.CPUUserNs / int64(row.Iters)
		row.CPUSysNs += res.CPUSysNs / int64(row.Iters)
	}
	row.setTimes(slices.Max(meds), slices.Min(mins), slices.Max(maxs))
	row.Verified = true
	return nil
}

// runRing runs the project's ring in this process over one userspace NIC
// per worker, each NIC's socket opened in its worker's namespace, so its
// packets take the same links.
func (r *labRunner) runRing(ctx context.Context, lab *netlab.Lab, row *labRow) error {
	devs := make([]verbs.Device, len(lab.Workers))
	defer func() {
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}()
	for i, ns := range lab.Workers {
		err := lab.Do(ns, func() error {
			var err error
			devs[i], err = join.OpenNIC(join.NICConfig{Kind: join.NICSoft, Addr: lab.WorkerAddrs[i]})
			return err
		})
		if err != nil {
			return fmt.Errorf("ring rank %d: %w", i, err)
		}
	}
	rg, err := ring.New(devs, ring.Config{MessageSize: r.cfg.msgSize, MTU: verbs.MTU(r.cfg.packetSize)})
	if err != nil {
		return err
	}
	defer rg.Close()
	reducers := make([]benchmark.AllReducer, len(devs))
	for i := range reducers {
		reducers[i] = rg.Rank(i)
	}
	stop := context.AfterFunc(ctx, func() { rg.Close() }) // a ring call may wait for a peer timeout otherwise
	defer stop()
	run, err := benchmark.Run(ctx, reducers, benchmark.Config{Workers: row.Workers, Elements: row.Elements, DType: wire.Float32,
		Warmup: row.Warmup, Iters: row.Iters, Bound: benchmark.Float32Bound, Label: "ring"})
	if err != nil {
		return err
	}
	st := rg.Stats()
	s := benchmark.Summarize(run.Times, row.Elements)
	row.setTimes(int64(s.Median), int64(s.Min), int64(s.Max))
	row.Packets, row.Retransmissions = st.Packets, st.Retransmissions
	row.setMessages(st.Messages)
	row.ResultSHA256, row.Verified = run.ResultSHA256, true
	return nil
}

func (row *labRow) setTimes(med, lo, hi int64) {
	row.MedianNs, row.MinNs, row.MaxNs = med, lo, hi
	if med > 0 {
		row.ATEPerSec = float64(row.Elements) / time.Duration(med).Seconds()
		row.Gbps = row.ATEPerSec * 32 / 1e9
	}
}

// compareRows fills the ceilings and the ratios of the systems of one row.
func compareRows(rows []*labRow, cfg labConfig) {
	var gloo *labRow
	for _, row := range rows {
		if row.System == sysGloo && row.Error == "" {
			gloo = row
		}
	}
	for _, row := range rows {
		c := netlab.LinkCeilings(float64(row.RateBps), row.Workers, cfg.packetSize, cfg.msgSize)
		switch row.System {
		case sysSwitchML:
			row.CeilingATEPerSec = c.SwitchML
		case sysGloo:
			row.CeilingATEPerSec = c.Gloo
		case sysRing:
			row.CeilingATEPerSec = c.Ring
		}
		if row.Error != "" {
			continue
		}
		if row.CeilingATEPerSec > 0 {
			x := row.ATEPerSec / row.CeilingATEPerSec
			row.OfCeiling = &x
			if sh := row.Shared; sh != nil {
				y := sh.ATEPerSec / row.CeilingATEPerSec
				sh.OfCeiling = &y
				for _, j := range sh.Jobs {
					z := j.ATEPerSec / (row.CeilingATEPerSec / float64(len(sh.Jobs)))
					j.LinkShare = &z
				}
			}
		}
		if gloo != nil && row != gloo {
			x := row.ATEPerSec / gloo.ATEPerSec
			row.VsGloo = &x
		}
	}
}

// lossInflation fills LossInflation of every lossy row that has a
// loss-free twin.
func lossInflation(rows []*labRow) {
	for _, r := range rows {
		if r.Loss == 0 || r.Error != "" {
			continue
		}
		for _, z := range rows {
			if z.Loss == 0 && z.Error == "" && z.System == r.System && z.Workers == r.Workers && z.RateBps == r.RateBps && z.TensorBytes == r.TensorBytes {
				x := float64(r.MedianNs) / float64(z.MedianNs)
				r.LossInflation = &x
			}
		}
	}
}

func printLab(out io.Writer, rep labReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(out, "Network lab (testbed/netlab): kernel %s, %d CPUs, load average %s at the start and %s at the end; queue %v per link direction; packet %d B, message %d B",
		rep.Kernel, rep.CPUs, rep.LoadAvgStart, rep.LoadAvgEnd, time.Duration(rep.QueueNs), rep.PacketSize, rep.MessageSize)
	if len(rep.WorkerArgs) > 0 {
		fmt.Fprintf(out, "; worker flags %s", strings.Join(rep.WorkerArgs, " "))
	}
	if rep.WirePackets {
		fmt.Fprint(out, "; wire packets (GSO/TSO cut before the links, for per-packet loss)")
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workers\trate\tloss\tsize\tsystem\tmedian\tmin\tmax\tATE/s\tceiling\tof ceiling\tvs Gloo\tvs loss-free\tretransmissions\tretx/msg\tswitch drops\tsocket drops (switch)\tqueue drops\tloss drops\tCPU/call user+sys (switch)\tverified\t")
	d := func(ns int64) string { return time.Duration(ns).Round(10 * time.Microsecond).String() }
	ratio := func(x *float64) string {
		if x == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f×", *x)
	}
	for _, r := range rep.Rows {
		ceiling := "-"
		if r.CeilingATEPerSec > 0 {
			ceiling = formatSI(r.CeilingATEPerSec)
		}
		drops := "-"
		if r.System == sysSwitchML && r.Error == "" {
			drops = formatDrops(r.SwitchDrops)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "%d\t%s\t%g\t%s\t%s\t%s\t\t\t\t%s\t\t\t\t\t\t\t%d (%d)\t%d\t%d\t\tFAILED\t\n", r.Workers, netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), r.System,
				"-", ceiling, r.UDPRcvbufErrors, r.SwitchUDPRcvbufErrors, r.QueueDrops, r.LossDrops)
			continue
		}
		perMsg := "-"
		if r.RetransmissionsPerMessage != nil {
			perMsg = fmt.Sprintf("%.3f", *r.RetransmissionsPerMessage)
		}
		cpu := "-"
		if r.CPUUserNs+r.CPUSysNs > 0 {
			cpu = d(r.CPUUserNs) + "+" + d(r.CPUSysNs)
			if r.SwitchCPUNs > 0 {
				cpu += " (" + d(r.SwitchCPUNs) + ")"
			}
		}
		fmt.Fprintf(w, "%d\t%s\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d (%d)\t%d\t%d\t%s\t%v\t\n", r.Workers, netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), r.System,
			d(r.MedianNs), d(r.MinNs), d(r.MaxNs), formatSI(r.ATEPerSec), ceiling, ratio(r.OfCeiling), ratio(r.VsGloo), ratio(r.LossInflation), r.Retransmissions, perMsg, drops,
			r.UDPRcvbufErrors, r.SwitchUDPRcvbufErrors, r.QueueDrops, r.LossDrops, cpu, r.Verified)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(out, "FAILED: %s, %d workers, %s, loss %g, %s: %s\n", r.System, r.Workers, netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), r.Error)
		}
	}
	fmt.Fprintln(out, "median: the slowest rank's median time per all-reduce. ceiling: ATE/s at the link rate (SwitchML: rate × payload ÷ wire bytes ÷ 32;")
	fmt.Fprintln(out, "Gloo and ring: rate ÷ (2(N−1)/N) ÷ 32 × payload ÷ wire). retransmissions: SwitchML and ring messages resent, Gloo TCP segments.")
	fmt.Fprintln(out, "CPU/call: the workers' (Gloo: the ranks') CPU inside the measured all-reduces, summed, per all-reduce, user+kernel; the switch")
	fmt.Fprintln(out, "daemon's over its life per all-reduce it served in parentheses; the ring (in this process) is not measured.")
	return printShared(out, rep.Rows)
}

// printShared prints, for the SwitchML rows with --jobs N > 1, the solo
// job and each of the N jobs run at once with its share, then a line per
// row with the jobs together.
func printShared(out io.Writer, rows []*labRow) error {
	var shared []*labRow
	for _, r := range rows {
		if r.Shared != nil {
			shared = append(shared, r)
		}
	}
	if len(shared) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\nSwitchML jobs sharing the switch and the links: in each row one job alone (the row above), then %d at once (sessions 1 … %d,\n", shared[0].Jobs, shared[0].Jobs)
	fmt.Fprintln(out, "each job's workers on their own addresses). share: the job's ATE/s ÷ (the solo job's ATE/s ÷ jobs); target: each within 20 % of 1.")
	fmt.Fprintln(out, "link share: the job's ATE/s ÷ (the ceiling ÷ jobs).")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workers\trate\tloss\tsize\tjob\tsession\tmedian\tmin\tmax\tATE/s\tshare\tlink share\tspan\tretransmissions\tretx/msg\tverified\t")
	d := func(ns int64) string { return time.Duration(ns).Round(10 * time.Microsecond).String() }
	perMsg := func(x *float64) string {
		if x == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f", *x)
	}
	for _, r := range shared {
		head := fmt.Sprintf("%d\t%s\t%g\t%s", r.Workers, netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes))
		fmt.Fprintf(w, "%s\talone\t1\t%s\t%s\t%s\t%s\t-\t-\t-\t%d\t%s\t%v\t\n", head, d(r.MedianNs), d(r.MinNs), d(r.MaxNs), formatSI(r.ATEPerSec),
			r.Retransmissions, perMsg(r.RetransmissionsPerMessage), r.Verified)
		for _, j := range r.Shared.Jobs {
			link := "-"
			if j.LinkShare != nil {
				link = fmt.Sprintf("%.2f", *j.LinkShare)
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%d\t%s\t%v\t\n", head, j.Job, j.SessionID, d(j.MedianNs), d(j.MinNs), d(j.MaxNs), formatSI(j.ATEPerSec),
				j.Share, link, d(j.SpanNs), j.Retransmissions, perMsg(j.RetransmissionsPerMessage), j.Verified)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range shared {
		sh := r.Shared
		if len(sh.Jobs) == 0 {
			continue // failed: the FAILED line above says why
		}
		verdict := "each within 20 % of an equal share"
		if !sh.EqualShare {
			verdict = "NOT each within 20 % of an equal share"
		}
		ofCeiling := ""
		if sh.OfCeiling != nil {
			ofCeiling = fmt.Sprintf("%.2f of the ceiling, ", *sh.OfCeiling)
		}
		fmt.Fprintf(out, "%d workers, %s, loss %g, %s: %d jobs at once %s ATE/s (%s%.2f× one job alone); shares %.2f–%.2f, Jain index %.3f: %s; switch drops %s, socket drops %d (%d), queue drops %d, loss drops %d\n",
			r.Workers, netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), len(sh.Jobs), formatSI(sh.ATEPerSec), ofCeiling, sh.VsAlone,
			sh.MinShare, sh.MaxShare, sh.Jain, verdict, formatDrops(sh.SwitchDrops), sh.UDPRcvbufErrors, sh.SwitchUDPRcvbufErrors, sh.QueueDrops, sh.LossDrops)
	}
	fmt.Fprintln(out, "span: first start to last exit of the job's worker processes; where spans differ, the slower job's last all-reduces may have run alone.")
	return nil
}

func formatDrops(m map[string]uint64) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// labSeries names each system's series in the plot and gives its color.
var labSeries = map[string]plotSeries{
	sysSwitchML: {name: "SwitchML", color: colorSwitchML},
	sysGloo:     {name: "Gloo", color: colorGloo},
	sysRing:     {name: "ring", color: colorRing},
}

// writeLabPlots draws one plot per (rate, loss, size) of the report:
// time and ATE/s against workers per system, with each system's ceiling
// dashed. With several, path gets a suffix per plot.
func writeLabPlots(path string, rep labReport) error {
	type key struct {
		rate uint64
		loss float64
		size int
	}
	var keys []key
	for _, r := range rep.Rows {
		if k := (key{r.RateBps, r.Loss, r.TensorBytes}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		var series []plotSeries
		for _, sys := range labSystems {
			s := labSeries[sys]
			ceil := plotSeries{name: s.name + " ceiling", color: s.color, dashed: true}
			for _, r := range rep.Rows {
				if r.System != sys || (key{r.RateBps, r.Loss, r.TensorBytes}) != k {
					continue
				}
				if r.CeilingATEPerSec > 0 {
					t := float64(r.Elements) / r.CeilingATEPerSec * 1e3 // ms at the ceiling
					ceil.pts = append(ceil.pts, plotPoint{x: float64(r.Workers), ate: r.CeilingATEPerSec, ms: t, msLo: t, msHi: t})
				}
				if r.Error == "" {
					s.pts = append(s.pts, plotPoint{x: float64(r.Workers), ate: r.ATEPerSec, ms: ms(r.MedianNs), msLo: ms(r.MinNs), msHi: ms(r.MaxNs)})
				}
			}
			if len(s.pts) > 0 {
				series = append(series, s)
			}
			if len(ceil.pts) > 0 {
				series = append(series, ceil)
			}
		}
		if len(series) == 0 {
			continue
		}
		for i := range series {
			slices.SortFunc(series[i].pts, func(a, b plotPoint) int { return cmp.Compare(a.x, b.x) })
		}
		title := fmt.Sprintf("swml-rdma lab: %s tensors, links %s each way, loss %g", humanBytes(k.size), netlab.FormatRate(k.rate), k.loss)
		ax := plotAxes{x: "workers", logX: true, right: "ATE/s (tensor elements reduced per second)", rightFormat: formatSI}
		p := path
		if len(keys) > 1 {
			p = strings.TrimSuffix(path, filepath.Ext(path)) + fmt.Sprintf("-%s-loss%g-%s", netlab.FormatRate(k.rate), k.loss, strings.ReplaceAll(humanBytes(k.size), " ", "")) + filepath.Ext(path)
		}
		if err := writeSVGPlot(p, layoutPlot(title, ax, series)); err != nil {
			return err
		}
	}
	return nil
}

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

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return strings.TrimSpace(string(b))
}
