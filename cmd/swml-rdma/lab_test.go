package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/testbed/netlab/sweep"
)

// TestLabFlagsRefused: every bad sweep is refused before anything is
// built (and before the root check), naming the flag, with exit status 2.
func TestLabFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "1"}, "--workers 1"},
		{[]string{"--workers", "2,100"}, "--workers 100"},
		{[]string{"--rate", "fast"}, "--rate"},
		{[]string{"--rate", "500mbps"}, "--rate"},
		{[]string{"--loss", "0,0.7"}, "--loss"},
		{[]string{"--size", "6"}, "--size 6"},
		{[]string{"--systems", "switchml,mpi"}, "--systems"},
		{[]string{"--iters", "0"}, "--iters 0"},
		{[]string{"--iters", "5000"}, "--iters 5000"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"--queue", "0s"}, "--queue"},
		{[]string{"--msg-size", "3000"}, "--msg-size 3000"},
		{[]string{"--packet-size", "1000"}, "--packet-size"},
		{[]string{"--plot", "lab.png"}, "--plot"},
		{[]string{"--jobs", "0"}, "--jobs 0"},
		{[]string{"--jobs", "5"}, "--jobs 5"},
		{[]string{"--jobs", "2", "--systems", "gloo,ring"}, "--jobs 2: only SwitchML"},
		// 62 workers × 4 addresses + 3 more of the switch: 251 > 250.
		{[]string{"--jobs", "4", "--workers", "2,62"}, "--jobs 4: with 62 workers take 251 addresses"},
		{[]string{"--leaves", "two"}, "--leaves"},
		{[]string{"--leaves", "0,3", "--workers", "4", "--systems", "switchml"}, "--leaves 3: 4 workers"},
		{[]string{"--leaves", "1", "--systems", "switchml"}, "--leaves 1"},
		{[]string{"--leaves", "0,2"}, "--leaves 2: only SwitchML runs on a tree"},
		{[]string{"--leaves", "2", "--systems", "switchml", "--jobs", "2"}, "--leaves 2: a tree runs one SwitchML job"},
		{[]string{"--spine-rate", "100mbit"}, "--spine-rate 100000000: only a tree"},
		{[]string{"--leaves", "2", "--systems", "switchml", "--spine-rate", "fast"}, "--spine-rate"},
		{[]string{"extra"}, "no arguments"},
		{[]string{"--systems", "ddp-swml", "--ddp-dtype", "float64"}, "--ddp-dtype float64"},
		{[]string{"--systems", "ddp-gloo", "--ddp-steps", "0"}, "--ddp-steps 0"},
		{[]string{"--systems", "ddp-gloo", "--ddp-warmup", "-1"}, "--ddp-warmup -1"},
		{[]string{"--systems", "ddp-gloo", "--ddp-compute-steps", "0"}, "--ddp-compute-steps 0"},
		{[]string{"--systems", "ddp-gloo", "--ddp-batch", "0"}, "--ddp-batch 0"},
		{[]string{"--systems", "ddp-gloo", "--ddp-width", "0"}, "--ddp-width 0"},
		{[]string{"--systems", "ddp-gloo", "--ddp-layers", "64", "--ddp-width", "2048"}, "--ddp-layers 64"},
	} {
		wantUsageError(t, append([]string{"lab"}, tc.args...), tc.want)
	}
}

// labFlagsOf parses args as lab's flags, running nothing.
func labFlagsOf(t *testing.T, args ...string) (sweep.Config, error) {
	t.Helper()
	cmd := labCommand()
	var cfg sweep.Config
	var perr error
	cmd.Action = func(c *cli.Context) error { cfg, perr = labFlags(c, "swml-rdma"); return nil }
	app := &cli.App{Name: "swml-rdma", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run(append([]string{"swml-rdma", "lab"}, args...)); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cfg, perr
}

func TestLabFlagsJobs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 1},
		{[]string{"--jobs", "2"}, 2},
		{[]string{"--jobs", "4", "--workers", "2,61", "--systems", "switchml"}, 4}, // 61 × 4 + 3 = 247 addresses
	} {
		cfg, err := labFlagsOf(t, tc.args...)
		if err != nil || cfg.Jobs != tc.want {
			t.Errorf("%v: jobs %d, %v; want %d", tc.args, cfg.Jobs, err, tc.want)
		}
	}
}

// TestLabFlagsLeaves: --leaves and --spine-rate fill sweep.Config; one
// switch by default.
func TestLabFlagsLeaves(t *testing.T) {
	cfg, err := labFlagsOf(t)
	if err != nil || !slices.Equal(cfg.Leaves, []int{0}) || cfg.SpineRate != 0 {
		t.Fatalf("default leaves %v, spine rate %d (%v); want [0], 0", cfg.Leaves, cfg.SpineRate, err)
	}
	cfg, err = labFlagsOf(t, "--workers", "4,8", "--leaves", "0, 2,4", "--spine-rate", "100mbit", "--systems", "switchml")
	if err != nil || !slices.Equal(cfg.Leaves, []int{0, 2, 4}) || cfg.SpineRate != 100e6 {
		t.Errorf("leaves %v, spine rate %d (%v); want [0 2 4], 100e6", cfg.Leaves, cfg.SpineRate, err)
	}
}

// TestLabPrintTree: a tree's row names its leaves, workers per leaf and
// leaf–spine rate in the table, and the reproducibility line counts it
// with the flat row.
func TestLabPrintTree(t *testing.T) {
	rep := labTestReport()
	flat := rep.Rows[0]
	flat.Shared, flat.Jobs = nil, 1
	tree := *flat
	tree.Leaves, tree.SpineRateBps = 2, 0
	same := true
	flat.ResultReproduced, tree.ResultReproduced = &same, &same
	tree.Error = "worker rank 0: exit status 1"
	rep.Rows = []*sweep.Row{flat, &tree}
	var out bytes.Buffer
	if err := printLab(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tree.Error = ""
	if err := writeLabPlots(filepath.Join(dir, "tree.svg"), rep); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "tree.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`class="series-SwitchML"`, `class="series-SwitchML-2-leaves"`} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("plot lacks %q: the tree's curve is not apart from the flat one", want)
		}
	}
	tree.Error = "worker rank 0: exit status 1"
	for _, want := range []string{"4 (2×2, spine unshaped)", "FAILED: switchml, 4 workers (2 leaves × 2, spine links unshaped), 200mbit",
		"SwitchML results, 4 workers, 16 MiB: bit-identical across its 2 rows"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLabFlagsDDP: the DDP flags fill sweep.Config.DDP; the default
// systems are the all-reduces alone; the swml package is looked for beside
// the program's bin/.
func TestLabFlagsDDP(t *testing.T) {
	cfg, err := labFlagsOf(t)
	if err != nil || !slices.Equal(cfg.Systems, sweep.AllReduces) {
		t.Fatalf("default systems %v (%v), want %v", cfg.Systems, err, sweep.AllReduces)
	}
	cfg, err = labFlagsOf(t, "--systems", "ddp-gloo,ddp-swml", "--ddp-dtype", "bf16,float32", "--ddp-steps", "7", "--ddp-warmup", "0",
		"--ddp-compute-steps", "2", "--ddp-layers", "3", "--ddp-width", "512", "--ddp-batch", "8", "--swml-pythonpath", "/opt/py", "--libswml", "/opt/libswml.so")
	want := sweep.DDPConfig{DTypes: []string{"bf16", "float32"}, Steps: 7, ComputeSteps: 2, Layers: 3, Width: 512, Batch: 8,
		SwmlPythonPath: "/opt/py", LibSwml: "/opt/libswml.so"}
	if err != nil || !slices.Equal(cfg.Systems, []sweep.System{sweep.DDPGloo, sweep.DDPSwml}) || !slices.Equal(cfg.DDP.DTypes, want.DTypes) {
		t.Fatalf("systems %v, dtypes %v (%v)", cfg.Systems, cfg.DDP.DTypes, err)
	}
	cfg.DDP.DTypes, want.DTypes = nil, nil
	if !reflect.DeepEqual(cfg.DDP, want) {
		t.Errorf("DDP %+v, want %+v", cfg.DDP, want)
	}
	// A checkout's bin/swml-rdma finds the checkout's python/.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "python", "swml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "python", "swml", "__init__.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := swmlPythonBeside(filepath.Join(root, "bin", "swml-rdma")); got != filepath.Join(root, "python") {
		t.Errorf("swml package beside bin/: %q", got)
	}
	if got := swmlPythonBeside(filepath.Join(root, "python", "x", "swml-rdma")); got != "" {
		t.Errorf("no swml package there, found %q", got)
	}
}

// labTestReport is a report of one row as sweep.Run fills it: SwitchML
// at 2 s per all-reduce with two jobs sharing (job 2 starved), Gloo at 1 s,
// the ring failed; ceilings and ratios as testbed/netlab/sweep computes
// them (tested there), written here as numbers.
func labTestReport() sweep.Report {
	const elements = 4 << 20
	ratio := func(x float64) *float64 { return &x }
	times := func(med, lo, hi time.Duration) benchmark.Times { return benchmark.TimesOf(med, lo, hi, elements) }
	ceiling := 200e6 * 16384 / 17332 / 32
	sw := &sweep.Row{System: sweep.SwitchML, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: elements, Iters: 5, Verified: true,
		Times: times(2*time.Second, 1900*time.Millisecond, 2500*time.Millisecond), CeilingATEPerSec: ceiling, VsGloo: ratio(0.5),
		Retransmissions: 12, Messages: 1200, RetransmissionsPerMessage: ratio(0.01), SwitchDrops: map[string]uint64{"psn": 3, "stale_psn": 1}, Jobs: 2}
	sw.OfCeiling = ratio(sw.ATEPerSec / ceiling)
	j1 := &sweep.Job{Job: 1, SessionID: 1, Times: times(3*time.Second, 3*time.Second, 3*time.Second), Share: 4.0 / 3, SpanNs: 18e9, Verified: true}
	j2 := &sweep.Job{Job: 2, SessionID: 2, Times: times(8*time.Second, 8*time.Second, 8*time.Second), Share: 0.5, SpanNs: 48e9, Verified: true}
	j1.LinkShare, j2.LinkShare = ratio(j1.ATEPerSec/(ceiling/2)), ratio(j2.ATEPerSec/(ceiling/2))
	sum := j1.ATEPerSec + j2.ATEPerSec
	sw.Shared = &sweep.Shared{Jobs: []*sweep.Job{j1, j2}, ATEPerSec: sum, OfCeiling: ratio(sum / ceiling), VsAlone: sum / sw.ATEPerSec,
		MinShare: 0.5, MaxShare: 4.0 / 3, Jain: sum * sum / (2 * (j1.ATEPerSec*j1.ATEPerSec + j2.ATEPerSec*j2.ATEPerSec))}
	gloo := &sweep.Row{System: sweep.Gloo, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: elements, Iters: 5, Verified: true,
		Times: times(time.Second, 900*time.Millisecond, 1100*time.Millisecond), CeilingATEPerSec: 200e6 / 1.5 / 32 * 1448 / 1514, Jobs: 1}
	gloo.OfCeiling = ratio(gloo.ATEPerSec / gloo.CeilingATEPerSec)
	ring := &sweep.Row{System: sweep.Ring, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: elements, Iters: 5,
		CeilingATEPerSec: 4e6, Error: "not done within 5m0s", Jobs: 1}
	return sweep.Report{SchemaVersion: sweep.SchemaVersion, Kernel: "test", CPUs: 2, PacketSize: 1024, MessageSize: 16384, Rows: []*sweep.Row{sw, gloo, ring}}
}

// TestLabPrint: the table shows each row's ratios, drops and failure, and
// the jobs' shares; the JSON is the report's.
func TestLabPrint(t *testing.T) {
	rep := labTestReport()
	var out bytes.Buffer
	if err := printLab(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"switchml", "0.50×", "psn=3 stale_psn=1", "FAILED: ring, 4 workers, 200mbit", "5.91M", " 0.010 ",
		"SwitchML jobs sharing the switch and the links", " alone ", " 1.33 ", " 0.50 ", "2 jobs at once 1.92M ATE/s", "shares 0.50–1.33",
		"NOT each within 20 % of an equal share", "Jain index 0.829"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printLab(&out, rep, true); err != nil {
		t.Fatal(err)
	}
	var back sweep.Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "SwitchML results,") {
		t.Errorf("a lone SwitchML row has a reproducibility line:\n%s", out.String())
	}
	if len(back.Rows) != 3 || *back.Rows[0].VsGloo != 0.5 || back.Rows[2].Error == "" || back.Rows[0].Shared.Jobs[1].SpanNs != 48e9 {
		t.Errorf("JSON: %s", out.Bytes())
	}
}

// TestLabPrintReproduced: a SwitchML row compared with others of its
// workers and size gets the verdict line.
func TestLabPrintReproduced(t *testing.T) {
	for _, same := range []bool{true, false} {
		rep := labTestReport()
		lossy := *rep.Rows[0]
		lossy.Loss, lossy.Shared = 0.01, nil
		rep.Rows = append(rep.Rows, &lossy)
		rep.Rows[0].ResultReproduced, lossy.ResultReproduced = &same, &same
		var out bytes.Buffer
		if err := printLab(&out, rep, false); err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{true: "SwitchML results, 4 workers, 16 MiB: bit-identical across its 2 rows",
			false: "SwitchML results, 4 workers, 16 MiB: NOT identical across its 2 rows"}[same]
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestLabPlot(t *testing.T) {
	rep := labTestReport()
	// A second rate: two plots, suffixed.
	more := labTestReport()
	for _, r := range more.Rows {
		r.RateBps = 1e9
	}
	rep.Rows = append(rep.Rows, more.Rows...)
	dir := t.TempDir()
	if err := writeLabPlots(filepath.Join(dir, "lab.svg"), rep); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lab-200mbit-loss0-16MiB.svg", "lab-1gbit-loss0-16MiB.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		// SwitchML and Gloo drawn with their ceilings dashed; the failed
		// ring has only its ceiling.
		for _, want := range []string{`class="series-SwitchML"`, `class="series-Gloo"`, `stroke-dasharray="6 4" class="series-SwitchML-ceiling"`,
			`class="series-ring-ceiling"`, "links " + strings.TrimSuffix(strings.TrimPrefix(name, "lab-"), "-loss0-16MiB.svg")} {
			if !strings.Contains(svg, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
		if strings.Contains(svg, `class="series-ring"`) {
			t.Errorf("%s draws the failed ring row", name)
		}
	}
}

// labDDPRows are a DDP comparison as sweep.Run fills it: the swml backend
// at 0.5 s per step on the 16-bit wire, Gloo at 1 s sending fp16, a failed
// float32 row.
func labDDPRows() []*sweep.Row {
	ratio := func(x float64) *float64 { return &x }
	const params = 4281360
	row := func(sys sweep.System, dtype string, wire int, step time.Duration) *sweep.Row {
		return &sweep.Row{System: sys, WireBits: wire, Workers: 4, RateBps: 200e6, Elements: params, TensorBytes: 2 * params, Iters: 10, Warmup: 2,
			Verified: true, Jobs: 1, Times: benchmark.TimesOf(step, step, step, params),
			DDP: &sweep.DDPRow{DType: dtype, Params: params, Layers: 4, Width: 1024, Batch: 4, AllReduceBytesPerStep: 2 * params,
				FwdBwdNs: int64(step) - 5e6, OptimizerNs: 5e6, ComputeNs: 100e6, ExposedCommNs: int64(step) - 105e6, CPUNsPerStepPerRank: 250e6,
				LossFirst: 0.39, LossLast: 0.38, ParamsSHA256: "0123456789abcdef", ParamL2: 41}}
	}
	sw, gloo := row(sweep.DDPSwml, "bf16", 16, 500*time.Millisecond), row(sweep.DDPGloo, "fp16", 0, time.Second)
	sw.VsGloo, sw.DDP.LossVsGloo, sw.DDP.ParamL2VsGloo, sw.SwitchCPUNs = ratio(2), ratio(1.001), ratio(1e-6), 80e6
	failed := row(sweep.DDPSwml, "float32", 32, 0)
	failed.Verified, failed.Error = false, "ddp-swml rank 1: DDP training failed: SwmlError: peer gone"
	return []*sweep.Row{sw, gloo, failed}
}

// TestLabPrintDDP: DDP rows get their own table — the wire, the bytes per
// step, step time against Gloo's, where it goes, CPU, losses, digest — and
// no plot.
func TestLabPrintDDP(t *testing.T) {
	rep := labTestReport()
	rep.Rows = append(rep.Rows, labDDPRows()...)
	var out bytes.Buffer
	if err := printLab(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DDP training: 4281360 parameters (4 hidden layers of 1024), batch 4 per rank, 10 timed steps after 2",
		"ddp-swml bf16", "ddp-gloo fp16", " 16-bit ", " 500ms ", " 2.00× ", " 395ms ", " 250ms ", " 80ms ", "0.39000→0.38000", "1.0010×",
		"0123456789ab…", "FAILED: ddp-swml float32, 4 workers, 200mbit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	dir := t.TempDir()
	if err := writeLabPlots(filepath.Join(dir, "lab.svg"), rep); err != nil {
		t.Fatal(err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*.svg")); len(names) != 1 {
		t.Errorf("plots %v, want the all-reduces' one (DDP rows are not plotted)", names)
	}
}
