package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/internal/plot"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
	"github.com/swml-rdma/swml-rdma/testbed/netlab/sweep"
)

// `swml-rdma lab`: the flags of a sweep of the network lab
// (testbed/netlab/sweep, docs/netlab.md), its table, JSON and plots.

// systemName is a row's system as the table prints it: SwitchML with its
// wire when that is not the default 32 bits.
func systemName(r *sweep.Row) string {
	if r.DDP != nil {
		return fmt.Sprintf("%s %s", r.System, r.DDP.DType)
	}
	if r.System == sweep.SwitchML && r.WireBits != 0 && r.WireBits != 32 {
		return fmt.Sprintf("%s/%d", r.System, r.WireBits)
	}
	return string(r.System)
}

// labWorkers is a row's workers as the table prints them: the count, and
// on a tree its leaves × workers per leaf and the leaf–spine links' rate
// ("8 (2×4, spine 100mbit)").
func labWorkers(r *sweep.Row) string {
	if r.Leaves == 0 {
		return strconv.Itoa(r.Workers)
	}
	return fmt.Sprintf("%d (%d×%d, spine %s)", r.Workers, r.Leaves, r.Workers/r.Leaves, netlab.FormatRate(r.SpineRateBps))
}

// labShape is a row's workers in a sentence: "4 workers", "8 workers (2
// leaves × 4, spine links 0)".
func labShape(r *sweep.Row) string {
	if r.Leaves == 0 {
		return r.Shape()
	}
	return fmt.Sprintf("%d workers (%d leaves × %d, spine links %s)", r.Workers, r.Leaves, r.Workers/r.Leaves, netlab.FormatRate(r.SpineRateBps))
}

// labSystemList is the all-reduce systems, as --systems takes them: its
// default.
func labSystemList() string {
	var names []string
	for _, s := range sweep.AllReduces {
		names = append(names, string(s))
	}
	return strings.Join(names, ",")
}

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
			"project's ring over userspace NICs in the worker namespaces; with --systems ddp-swml,ddp-gloo, PyTorch DDP\n" +
			"training of a multi-layer perceptron through the swml backend (the switch daemon, libswml) and through Gloo,\n" +
			"one rank per worker namespace (--ddp-…). Every result is verified. Prints a table (or\n" +
			"--json) with each system's ATE/s, its link-rate ceiling, retransmissions and drops; --plot draws ATE/s\n" +
			"against workers with the ceilings. With --leaves K ≥ 2 the workers are split over K leaf namespaces (each one's\n" +
			"switch namespace) under a spine namespace, SwitchML runs a leaf switch in each and the spine switch above them,\n" +
			"and its result must be the one switch's bit for bit. Everything is removed on exit and on Ctrl-C; --cleanup removes what a\n" +
			"killed run left. See docs/netlab.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workers", Value: "2,4", Usage: "worker counts to sweep, e.g. 2,4,8", EnvVars: []string{"SWML_LAB_WORKERS"}, Category: "sweep"},
			&cli.StringFlag{Name: "rate", Value: "200mbit", Usage: "link rates to sweep, each direction (tc units: 200mbit, 1gbit; 0 = unshaped), e.g. 0,200mbit,1gbit", EnvVars: []string{"SWML_LAB_RATE"}, Category: "sweep"},
			&cli.StringFlag{Name: "loss", Value: "0", Usage: "loss probabilities to sweep, per packet and link direction, e.g. 0,0.01", EnvVars: []string{"SWML_LAB_LOSS"}, Category: "sweep"},
			&cli.StringFlag{Name: "size", Value: "4MiB", Usage: "tensor sizes to sweep (float32), e.g. 4MiB,16MiB", EnvVars: []string{"SWML_LAB_SIZE"}, Category: "sweep"},
			&cli.StringFlag{Name: "systems", Value: labSystemList(), Usage: "what to run in each row: switchml, gloo, ring (all-reduces of each --size); ddp-swml, ddp-gloo (DDP training, --ddp-…)", EnvVars: []string{"SWML_LAB_SYSTEMS"}, Category: "sweep"},
			&cli.StringFlag{Name: "leaves", Value: "0", Usage: "switch shapes to sweep for each worker count: 0 = one switch, K ≥ 2 = K leaf switches of workers ÷ K each under a spine (SwitchML only; docs/switch.md \"Switch hierarchy\"), e.g. 0,2", EnvVars: []string{"SWML_LAB_LEAVES"}, Category: "sweep"},
			&cli.StringFlag{Name: "spine-rate", Value: "0", Usage: "rate of every leaf–spine link with --leaves, each direction (tc units; 0 = unshaped, so the workers' links are the bottleneck)", EnvVars: []string{"SWML_LAB_SPINE_RATE"}, Category: "links"},
			&cli.IntFlag{Name: "jobs", Value: 1, Usage: "SwitchML jobs sharing the switch and the links (1 to 4): with N > 1 each row runs one job alone, then N jobs at once, and reports each job's share of what one job reaches alone ÷ N (Gloo and the ring run as one job)", EnvVars: []string{"SWML_LAB_JOBS"}, Category: "sweep"},
			&cli.IntFlag{Name: "iters", Value: 5, Usage: "measured all-reduces per system and row", EnvVars: []string{"SWML_ITERS"}, Category: "sweep"},
			&cli.IntFlag{Name: "warmup", Value: 1, Usage: "unmeasured all-reduces first", EnvVars: []string{"SWML_WARMUP"}, Category: "sweep"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "bound on each system's run in a row (its processes are ended after it)", EnvVars: []string{"SWML_LAB_TIMEOUT"}, Category: "sweep"},
			&cli.DurationFlag{Name: "queue", Value: netlab.DefaultQueue, Usage: "each shaped link direction's queue, as time to drain it at --rate (tbf limit)", EnvVars: []string{"SWML_LAB_QUEUE"}, Category: "links"},
			&cli.IntFlag{Name: "packet-size", Value: 1024, Usage: "SwitchML's and the ring's payload bytes per packet", EnvVars: []string{"SWML_PACKET_SIZE"}, Category: "protocol"},
			&cli.StringFlag{Name: "msg-size", Value: "16KiB", Usage: "SwitchML's and the ring's message size", EnvVars: []string{"SWML_MSG_SIZE"}, Category: "protocol"},
			&cli.StringFlag{Name: "wire", Value: "32", Usage: "SwitchML's bits per element on the wire, or a comma list to run each in every row: 32, 16 (twice the elements per packet; docs/protocol.md \"The 16-bit wire\")", EnvVars: []string{"SWML_LAB_WIRE"}, Category: "protocol"},
			&cli.StringFlag{Name: "worker-args", Usage: "more flags for every `swml-rdma worker`, space-separated, e.g. \"--writes packet --qps 4\"", EnvVars: []string{"SWML_LAB_WORKER_ARGS"}, Category: "protocol"},
			&cli.IntFlag{Name: "gomaxprocs", Usage: "GOMAXPROCS of every switch, worker and ddp-swml rank the lab starts (0: each its share of the host, CPUs ÷ (workers × jobs + switches), at least 1)", EnvVars: []string{"SWML_LAB_GOMAXPROCS"}, Category: "protocol"},
			&cli.StringFlag{Name: "switch-args", Usage: "more flags for `swml-rdma switch`, space-separated", EnvVars: []string{"SWML_LAB_SWITCH_ARGS"}, Category: "protocol"},
			&cli.StringFlag{Name: "python", Value: "/usr/bin/python3", Usage: "the Python with torch (Debian's python3-torch) that runs Gloo and DDP", EnvVars: []string{"SWML_LAB_PYTHON"}, Category: "gloo"},
			&cli.StringFlag{Name: "ddp-dtype", Value: sweep.DTypeFloat32, Usage: "the DDP systems' gradient dtypes in the all-reduce, a row each: float32, bf16, fp16 (ddp-gloo's bf16: fp16, which Gloo can sum)", EnvVars: []string{"SWML_LAB_DDP_DTYPE"}, Category: "ddp"},
			&cli.IntFlag{Name: "ddp-steps", Value: 10, Usage: "timed training steps per DDP row", EnvVars: []string{"SWML_LAB_DDP_STEPS"}, Category: "ddp"},
			&cli.IntFlag{Name: "ddp-warmup", Value: 2, Usage: "untimed training steps first", EnvVars: []string{"SWML_LAB_DDP_WARMUP"}, Category: "ddp"},
			&cli.IntFlag{Name: "ddp-compute-steps", Value: 3, Usage: "forward and backward passes without the all-reduce (no_sync) after the timed steps: the arithmetic alone", EnvVars: []string{"SWML_LAB_DDP_COMPUTE_STEPS"}, Category: "ddp"},
			&cli.IntFlag{Name: "ddp-layers", Value: 4, Usage: "hidden Linear(width, width) layers of the model (4 × 1024: 16.3 MiB of float32 parameters)", EnvVars: []string{"SWML_LAB_DDP_LAYERS"}, Category: "ddp"},
			&cli.IntFlag{Name: "ddp-width", Value: 1024, Usage: "the model's hidden width", EnvVars: []string{"SWML_LAB_DDP_WIDTH"}, Category: "ddp"},
			&cli.IntFlag{Name: "ddp-batch", Value: 4, Usage: "samples per rank and step", EnvVars: []string{"SWML_LAB_DDP_BATCH"}, Category: "ddp"},
			&cli.StringFlag{Name: "swml-pythonpath", Usage: "directory holding the swml package, prepended to PYTHONPATH of ddp-swml's ranks (default: python/ beside this program's bin/, if there; none for a pip-installed --python)", EnvVars: []string{"SWML_LAB_PYTHONPATH"}, Category: "ddp"},
			&cli.StringFlag{Name: "libswml", Usage: "libswml.so for ddp-swml's ranks (SWML_LIB; default: what the swml package finds: beside it, or the repository's bin/)", EnvVars: []string{"SWML_LIB"}, Category: "ddp"},
			&cli.StringFlag{Name: "prefix", Value: netlab.DefaultPrefix, Usage: "first part of every namespace name (<prefix><pid>-sw, <prefix><pid>-w0, …)", EnvVars: []string{"SWML_LAB_PREFIX"}, Category: "links"},
			&cli.BoolFlag{Name: "cleanup", Usage: "only remove the namespaces (and their processes) of labs whose process is gone, then exit", Category: "links"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (schema in docs/netlab.md)", EnvVars: []string{"SWML_JSON"}, Category: "output"},
			&cli.StringFlag{Name: "plot", Usage: "draw time and ATE/s against workers, with the link-rate ceilings, into `FILE` (.svg; one file per rate, loss and size, suffixed, when there are several)", EnvVars: []string{"SWML_PLOT"}, Category: "output"},
		},
		Action: runLab,
	}
}

// labFlagNames name the flag that sets each sweep.Config field, for the
// errors of Config.Validate (sweep.FieldError).
var labFlagNames = map[string]string{
	"Workers": "--workers", "Rates": "--rate", "Losses": "--loss", "Sizes": "--size", "Systems": "--systems", "Jobs": "--jobs",
	"Iters": "--iters", "Warmup": "--warmup", "Timeout": "--timeout", "Queue": "--queue", "PacketSize": "--packet-size",
	"MessageSize": "--msg-size", "Python": "--python", "GoMaxProcs": "--gomaxprocs", "Wires": "--wire", "Leaves": "--leaves", "SpineRate": "--spine-rate",
	"DDP.DTypes": "--ddp-dtype", "DDP.Steps": "--ddp-steps", "DDP.Warmup": "--ddp-warmup", "DDP.ComputeSteps": "--ddp-compute-steps",
	"DDP.Layers": "--ddp-layers", "DDP.Width": "--ddp-width", "DDP.Batch": "--ddp-batch",
}

// labFlags parses lab's flags into a sweep and validates it as sweep.Run
// will, in the terms of the flags. exe is this program (it runs the
// switch and the workers).
func labFlags(c *cli.Context, exe string) (sweep.Config, error) {
	cfg := sweep.Config{Jobs: c.Int("jobs"), Iters: c.Int("iters"), Warmup: c.Int("warmup"), Timeout: c.Duration("timeout"), Queue: c.Duration("queue"),
		PacketSize: c.Int("packet-size"), Python: c.String("python"), Prefix: c.String("prefix"), Exe: exe, GoMaxProcs: c.Int("gomaxprocs"),
		WorkerArgs: strings.Fields(c.String("worker-args")), SwitchArgs: strings.Fields(c.String("switch-args"))}
	var err error
	if cfg.Workers, err = parseWorkers(c.String("workers")); err != nil {
		return cfg, err
	}
	for _, f := range strings.Split(c.String("rate"), ",") {
		r, err := netlab.ParseRate(f)
		if err != nil {
			return cfg, fmt.Errorf("--rate: %v", err)
		}
		cfg.Rates = append(cfg.Rates, r)
	}
	for _, f := range strings.Split(c.String("leaves"), ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return cfg, fmt.Errorf("--leaves %q: give 0 (one switch) or leaf counts, e.g. 0,2", c.String("leaves"))
		}
		cfg.Leaves = append(cfg.Leaves, k)
	}
	if cfg.SpineRate, err = netlab.ParseRate(c.String("spine-rate")); err != nil {
		return cfg, fmt.Errorf("--spine-rate: %v", err)
	}
	for _, f := range strings.Split(c.String("loss"), ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return cfg, fmt.Errorf("--loss %q: give probabilities in [0, 0.5), e.g. 0,0.01", c.String("loss"))
		}
		cfg.Losses = append(cfg.Losses, p)
	}
	for _, f := range strings.Split(c.String("size"), ",") {
		n, err := parseSize(f)
		if err != nil {
			return cfg, fmt.Errorf("--size: %v", err)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	for _, f := range strings.Split(c.String("systems"), ",") {
		if s := sweep.System(strings.TrimSpace(f)); !slices.Contains(cfg.Systems, s) {
			cfg.Systems = append(cfg.Systems, s)
		}
	}
	for _, f := range strings.Split(c.String("wire"), ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return cfg, fmt.Errorf("--wire %q: give 32, 16 or a list such as 32,16", c.String("wire"))
		}
		cfg.Wires = append(cfg.Wires, w)
	}
	if cfg.MessageSize, err = parseSize(c.String("msg-size")); err != nil {
		return cfg, fmt.Errorf("--msg-size: %v", err)
	}
	cfg.DDP = sweep.DDPConfig{Steps: c.Int("ddp-steps"), Warmup: c.Int("ddp-warmup"), ComputeSteps: c.Int("ddp-compute-steps"),
		Layers: c.Int("ddp-layers"), Width: c.Int("ddp-width"), Batch: c.Int("ddp-batch"),
		SwmlPythonPath: c.String("swml-pythonpath"), LibSwml: c.String("libswml")}
	for _, f := range strings.Split(c.String("ddp-dtype"), ",") {
		cfg.DDP.DTypes = append(cfg.DDP.DTypes, strings.TrimSpace(f))
	}
	if cfg.DDP.SwmlPythonPath == "" {
		cfg.DDP.SwmlPythonPath = swmlPythonBeside(exe)
	}
	if err := cfg.Validate(); err != nil {
		var fe *sweep.FieldError
		if errors.As(err, &fe) && labFlagNames[fe.Field] != "" {
			return cfg, fmt.Errorf("%s %v: %s", labFlagNames[fe.Field], fe.Value, fe.Reason)
		}
		return cfg, err
	}
	if plot := c.String("plot"); plot != "" {
		if err := checkPlotPath(plot); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// swmlPythonBeside is the repository's python/ directory when exe is the
// repository's bin/swml-rdma (make build) and python/swml is there: where
// ddp-swml's ranks import the swml package from (it finds bin/libswml.so,
// make libswml, by itself); "" otherwise.
func swmlPythonBeside(exe string) string {
	dir := filepath.Join(filepath.Dir(filepath.Dir(exe)), "python")
	if _, err := os.Stat(filepath.Join(dir, "swml", "__init__.py")); err != nil {
		return ""
	}
	return dir
}

func runLab(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("lab takes no arguments (got %q): flags go before nothing, e.g. swml-rdma lab --workers 2,4", c.Args().Slice()), exitUsage)
	}
	exe, err := os.Executable()
	if err != nil {
		return cli.Exit("lab: the path of this program (it runs its own switch and worker): "+err.Error(), 1)
	}
	cfg, err := labFlags(c, exe)
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
	removed, err := netlab.Cleanup(cfg.Prefix)
	if len(removed) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "lab: removed %d namespaces of a lab whose process is gone: %s\n", len(removed), strings.Join(removed, " "))
	}
	if err != nil {
		return cli.Exit("lab: cleanup: "+err.Error(), 1)
	}
	if c.Bool("cleanup") {
		return nil
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg.Progress = func(row *sweep.Row, done bool) { printLabProgress(c.App.ErrWriter, row, done) }
	rep, runErr := sweep.Run(ctx, cfg)
	if plot := c.String("plot"); plot != "" && len(rep.Rows) > 0 {
		if err := writeLabPlots(plot, rep); err != nil {
			fmt.Fprintln(c.App.ErrWriter, "lab:", err)
		}
	}
	if err := printLab(c.App.Writer, rep, c.Bool("json")); err != nil {
		return err
	}
	// What is left after the run: nothing of this process's labs.
	if left, err := netlab.Namespaces(fmt.Sprintf("%s%d-", cfg.Prefix, os.Getpid())); err == nil && len(left) > 0 {
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
			return cli.Exit(fmt.Sprintf("lab: %s at %s, %s, loss %g, %s failed: %s", systemName(row), labShape(row),
				netlab.FormatRate(row.RateBps), row.Loss, humanBytes(row.TensorBytes), row.Error), 1)
		}
	}
	return nil
}

// printLabProgress writes a line before each system's run in a row and
// its outcome after it.
func printLabProgress(w io.Writer, row *sweep.Row, done bool) {
	if !done {
		fmt.Fprintf(w, "lab: %s, %s, %s, loss %g, %s …\n", systemName(row), labShape(row), netlab.FormatRate(row.RateBps), row.Loss, humanBytes(row.TensorBytes))
		return
	}
	if row.MedianNs > 0 {
		alone := ""
		if row.Jobs > 1 {
			alone = " (one job alone)"
		}
		fmt.Fprintf(w, "lab:   median %v, %.3g ATE/s, %d retransmissions%s\n", time.Duration(row.MedianNs).Round(time.Microsecond), row.ATEPerSec,
			row.Retransmissions, alone)
	}
	if row.Shared != nil {
		for _, j := range row.Shared.Jobs {
			fmt.Fprintf(w, "lab:   job %d of %d together: median %v, %.3g ATE/s, share %.2f, %d retransmissions\n", j.Job, row.Jobs,
				time.Duration(j.MedianNs).Round(time.Microsecond), j.ATEPerSec, j.Share, j.Retransmissions)
		}
	}
	if row.Error != "" {
		fmt.Fprintf(w, "lab:   failed: %s\n", row.Error)
	}
}

func printLab(out io.Writer, rep sweep.Report, asJSON bool) error {
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
	var procs []string
	for _, row := range rep.Rows {
		if p := strconv.Itoa(row.GoMaxProcs); row.GoMaxProcs > 0 && !slices.Contains(procs, p) {
			procs = append(procs, p)
		}
	}
	if len(procs) > 0 {
		fmt.Fprintf(out, "; GOMAXPROCS %s per SwitchML process", strings.Join(procs, ", "))
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
			ceiling = plot.FormatSI(r.CeilingATEPerSec)
		}
		drops := "-"
		if r.System == sweep.SwitchML && r.Error == "" {
			drops = formatDrops(r.SwitchDrops)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "%s\t%s\t%g\t%s\t%s\t%s\t\t\t\t%s\t\t\t\t\t\t\t%d (%d)\t%d\t%d\t\tFAILED\t\n", labWorkers(r), netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), systemName(r),
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
		fmt.Fprintf(w, "%s\t%s\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d (%d)\t%d\t%d\t%s\t%v\t\n", labWorkers(r), netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), systemName(r),
			d(r.MedianNs), d(r.MinNs), d(r.MaxNs), plot.FormatSI(r.ATEPerSec), ceiling, ratio(r.OfCeiling), ratio(r.VsGloo), ratio(r.LossInflation), r.Retransmissions, perMsg, drops,
			r.UDPRcvbufErrors, r.SwitchUDPRcvbufErrors, r.QueueDrops, r.LossDrops, cpu, r.Verified)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(out, "FAILED: %s, %s, %s, loss %g, %s: %s\n", systemName(r), labShape(r), netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), r.Error)
		}
	}
	printReproduced(out, rep.Rows)
	printDDP(out, rep.Rows)
	fmt.Fprintln(out, "median: the slowest rank's median time per all-reduce (DDP rows: per training step). ceiling: ATE/s at the link rate (SwitchML: rate × payload ÷ wire bytes ÷ 32;")
	fmt.Fprintln(out, "Gloo and ring: rate ÷ (2(N−1)/N) ÷ 32 × payload ÷ wire). retransmissions: SwitchML and ring messages resent, Gloo TCP segments.")
	fmt.Fprintln(out, "CPU/call: the workers' (Gloo: the ranks') CPU inside the measured all-reduces, summed, per all-reduce, user+kernel; the switch")
	fmt.Fprintln(out, "daemon's over its life per all-reduce it served in parentheses; the ring (in this process) is not measured.")
	return printShared(out, rep.Rows)
}

// printReproduced says, per worker count and size with more than one
// SwitchML row, whether their results were bit-identical across the
// sweep's rates and losses.
func printReproduced(out io.Writer, rows []*sweep.Row) {
	type key struct{ workers, size, wire int }
	n := map[key]int{}
	var keys []key
	same := map[key]bool{}
	for _, r := range rows {
		if r.System != sweep.SwitchML || r.ResultReproduced == nil {
			continue
		}
		k := key{r.Workers, r.TensorBytes, r.WireBits}
		if n[k] == 0 {
			keys = append(keys, k)
		}
		n[k]++
		same[k] = *r.ResultReproduced
	}
	for _, k := range keys {
		verdict := "bit-identical"
		if !same[k] {
			verdict = "NOT identical"
		}
		wire := ""
		if k.wire != 0 && k.wire != 32 {
			wire = fmt.Sprintf(", %d-bit wire", k.wire)
		}
		fmt.Fprintf(out, "SwitchML results, %d workers, %s%s: %s across its %d rows (rates, losses, one switch or a tree)\n", k.workers, humanBytes(k.size), wire, verdict, n[k])
	}
}

// printDDP prints, for the DDP rows, where a training step's time goes,
// the CPU per step and rank, the losses and the trained parameters.
func printDDP(out io.Writer, rows []*sweep.Row) {
	var ddp []*sweep.Row
	for _, r := range rows {
		if r.DDP != nil {
			ddp = append(ddp, r)
		}
	}
	if len(ddp) == 0 {
		return
	}
	d0 := ddp[0].DDP
	fmt.Fprintf(out, "\nDDP training: %d parameters (%d hidden layers of %d), batch %d per rank, %d timed steps after %d; per step, the slowest rank's median:\n",
		d0.Params, d0.Layers, d0.Width, d0.Batch, ddp[0].Iters, ddp[0].Warmup)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workers\trate\tloss\tsystem\twire\tall-reduce/step\tstep\tvs Gloo\tfwd+bwd\tcompute\texposed comm\toptimizer\tCPU/step/rank\tswitch CPU/step\tloss first→last\tvs Gloo\tparams\t")
	d := func(ns int64) string { return time.Duration(ns).Round(100 * time.Microsecond).String() }
	for _, r := range ddp {
		x := r.DDP
		if r.Error != "" {
			fmt.Fprintf(w, "%d\t%s\t%g\t%s\t\t%s\t\t\t\t\t\t\t\t\t\t\tFAILED\t\n", r.Workers, netlab.FormatRate(r.RateBps), r.Loss, systemName(r),
				humanBytes(x.AllReduceBytesPerStep))
			continue
		}
		wire, vs, lossVs, sw := "-", "-", "-", "-"
		if r.WireBits != 0 {
			wire = fmt.Sprintf("%d-bit", r.WireBits)
		}
		if r.VsGloo != nil {
			vs = fmt.Sprintf("%.2f×", *r.VsGloo)
		}
		if x.LossVsGloo != nil {
			lossVs = fmt.Sprintf("%.4f×", *x.LossVsGloo)
		}
		if r.SwitchCPUNs > 0 {
			sw = d(r.SwitchCPUNs)
		}
		fmt.Fprintf(w, "%d\t%s\t%g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.5f→%.5f\t%s\t%.12s…\t\n", r.Workers, netlab.FormatRate(r.RateBps), r.Loss,
			systemName(r), wire, humanBytes(x.AllReduceBytesPerStep), d(r.MedianNs), vs, d(x.FwdBwdNs), d(x.ComputeNs), d(x.ExposedCommNs), d(x.OptimizerNs),
			d(x.CPUNsPerStepPerRank), sw, x.LossFirst, x.LossLast, lossVs, x.ParamsSHA256)
	}
	_ = w.Flush()
	fmt.Fprintln(out, "step: zero_grad to the optimizer's step; fwd+bwd: forward and backward (returns when DDP's all-reduces are done); compute: forward and")
	fmt.Fprintln(out, "backward without all-reduce (no_sync, every rank at once); exposed comm: fwd+bwd − compute. loss: the mean over the ranks of the first")
	fmt.Fprintln(out, "and the last step's. params: the final parameters' digest, the same on every rank. ddp-gloo's bf16 rows send fp16 (Gloo cannot sum bf16).")
}

// printShared prints, for the SwitchML rows with --jobs N > 1, the solo
// job and each of the N jobs run at once with its share, then a line per
// row with the jobs together.
func printShared(out io.Writer, rows []*sweep.Row) error {
	var shared []*sweep.Row
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
		fmt.Fprintf(w, "%s\talone\t1\t%s\t%s\t%s\t%s\t-\t-\t-\t%d\t%s\t%v\t\n", head, d(r.MedianNs), d(r.MinNs), d(r.MaxNs), plot.FormatSI(r.ATEPerSec),
			r.Retransmissions, perMsg(r.RetransmissionsPerMessage), r.Verified)
		for _, j := range r.Shared.Jobs {
			link := "-"
			if j.LinkShare != nil {
				link = fmt.Sprintf("%.2f", *j.LinkShare)
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%d\t%s\t%v\t\n", head, j.Job, j.SessionID, d(j.MedianNs), d(j.MinNs), d(j.MaxNs), plot.FormatSI(j.ATEPerSec),
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
			r.Workers, netlab.FormatRate(r.RateBps), r.Loss, humanBytes(r.TensorBytes), len(sh.Jobs), plot.FormatSI(sh.ATEPerSec), ofCeiling, sh.VsAlone,
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
var labSeries = map[sweep.System]plot.Series{
	sweep.SwitchML: {Name: "SwitchML", Color: plot.ColorSwitchML},
	sweep.Gloo:     {Name: "Gloo", Color: plot.ColorGloo},
	sweep.Ring:     {Name: "ring", Color: plot.ColorRing},
}

// writeLabPlots draws one plot per (rate, loss, size) of the report:
// time and ATE/s against workers per system, with each system's ceiling
// dashed. With several, path gets a suffix per plot.
func writeLabPlots(path string, rep sweep.Report) error {
	type key struct {
		rate uint64
		loss float64
		size int
	}
	var keys []key
	for _, r := range rep.Rows {
		if r.DDP != nil {
			continue // a training step, not an all-reduce: the table's
		}
		if k := (key{r.RateBps, r.Loss, r.TensorBytes}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		var series []plot.Series
		type curve struct {
			sys          sweep.System
			wire, leaves int
		}
		var curves []curve
		for _, sys := range sweep.AllReduces {
			for _, r := range rep.Rows {
				if c := (curve{sys, r.WireBits, r.Leaves}); r.System == sys && !slices.Contains(curves, c) {
					curves = append(curves, c)
				}
			}
		}
		for _, cv := range curves {
			s := labSeries[cv.sys]
			if cv.sys == sweep.SwitchML && cv.wire == 16 {
				s = plot.Series{Name: "SwitchML 16-bit wire", Color: plot.ColorWire16}
			}
			if cv.leaves > 0 {
				// A tree's curve beside the flat one: the same color,
				// its own name (and class).
				s.Name += fmt.Sprintf(" %d leaves", cv.leaves)
			}
			ceil := plot.Series{Name: s.Name + " ceiling", Color: s.Color, Dashed: true}
			for _, r := range rep.Rows {
				if r.System != cv.sys || r.WireBits != cv.wire || r.Leaves != cv.leaves || (key{r.RateBps, r.Loss, r.TensorBytes}) != k {
					continue
				}
				if r.CeilingATEPerSec > 0 {
					ceil.Points = append(ceil.Points, plot.Bound(float64(r.Workers), r.Elements, r.CeilingATEPerSec))
				}
				if r.Error == "" {
					s.Points = append(s.Points, plot.Point{X: float64(r.Workers), Y: r.ATEPerSec, MS: ms(r.MedianNs), MSLow: ms(r.MinNs), MSHigh: ms(r.MaxNs)})
				}
			}
			if len(s.Points) > 0 {
				series = append(series, s)
			}
			if len(ceil.Points) > 0 {
				series = append(series, ceil)
			}
		}
		if len(series) == 0 {
			continue
		}
		plot.SortByX(series)
		title := fmt.Sprintf("swml-rdma lab: %s tensors, links %s each way, loss %g", humanBytes(k.size), netlab.FormatRate(k.rate), k.loss)
		p := path
		if len(keys) > 1 {
			p = strings.TrimSuffix(path, filepath.Ext(path)) + fmt.Sprintf("-%s-loss%g-%s", netlab.FormatRate(k.rate), k.loss, strings.ReplaceAll(humanBytes(k.size), " ", "")) + filepath.Ext(path)
		}
		if err := plot.WriteFile(p, title, plot.ATEAxes(), series); err != nil {
			return err
		}
	}
	return nil
}
