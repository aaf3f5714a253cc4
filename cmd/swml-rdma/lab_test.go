package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
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
		{[]string{"--jobs", "2", "--systems", "gloo,ring"}, "add switchml to --systems"},
		// 62 workers × 4 addresses + 3 more of the switch: 251 > 250.
		{[]string{"--jobs", "4", "--workers", "2,62"}, "--jobs 4 with --workers 62"},
		{[]string{"extra"}, "no arguments"},
	} {
		wantUsageError(t, append([]string{"lab"}, tc.args...), tc.want)
	}
}

// labFlagsOf parses args as lab's flags, running nothing.
func labFlagsOf(t *testing.T, args ...string) (labConfig, error) {
	t.Helper()
	cmd := labCommand()
	var cfg labConfig
	var perr error
	cmd.Action = func(c *cli.Context) error { cfg, perr = labFlags(c); return nil }
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
		if err != nil || cfg.jobs != tc.want {
			t.Errorf("%v: jobs %d, %v; want %d", tc.args, cfg.jobs, err, tc.want)
		}
	}
}

// TestLabShares: each job's share is its ATE/s ÷ (the solo job's ÷ N),
// the target is every share within 20 % of 1, Jain's index is
// (Σx)²/(N·Σx²), and the link share is of the ceiling ÷ N.
func TestLabShares(t *testing.T) {
	for _, tc := range []struct {
		alone      float64
		jobs       []float64
		shares     []float64
		equal      bool
		jain, sum  float64
		vsAlone    float64
		minS, maxS float64
	}{
		// Two jobs splitting what one job reached alone: 1 each.
		{alone: 4e6, jobs: []float64{2e6, 2e6}, shares: []float64{1, 1}, equal: true, jain: 1, sum: 4e6, vsAlone: 1, minS: 1, maxS: 1},
		// One starved: 0.5 and 1.5, Jain 0.8.
		{alone: 4e6, jobs: []float64{1e6, 3e6}, shares: []float64{0.5, 1.5}, jain: 0.8, sum: 4e6, vsAlone: 1, minS: 0.5, maxS: 1.5},
		// Equal between themselves but both above solo ÷ 2 by 25 %: the
		// solo job did not fill the links; outside the target all the same.
		{alone: 4e6, jobs: []float64{2.5e6, 2.5e6}, shares: []float64{1.25, 1.25}, jain: 1, sum: 5e6, vsAlone: 1.25, minS: 1.25, maxS: 1.25},
		// Three jobs within 20 %: 0.9, 1.05, 1.15.
		{alone: 3e6, jobs: []float64{0.9e6, 1.05e6, 1.15e6}, shares: []float64{0.9, 1.05, 1.15}, equal: true,
			jain: 3.1 * 3.1 / (3 * (0.81 + 1.1025 + 1.3225)), sum: 3.1e6, vsAlone: 3.1 / 3, minS: 0.9, maxS: 1.15},
	} {
		sh := &labShared{}
		for i, x := range tc.jobs {
			sh.Jobs = append(sh.Jobs, &labJob{Job: i + 1, ATEPerSec: x})
		}
		sh.setShares(tc.alone)
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
		for i, j := range sh.Jobs {
			if !near(j.Share, tc.shares[i]) {
				t.Errorf("alone %g, jobs %v: job %d share %g, want %g", tc.alone, tc.jobs, i+1, j.Share, tc.shares[i])
			}
		}
		if sh.EqualShare != tc.equal || !near(sh.Jain, tc.jain) || !near(sh.ATEPerSec, tc.sum) || !near(sh.VsAlone, tc.vsAlone) ||
			!near(sh.MinShare, tc.minS) || !near(sh.MaxShare, tc.maxS) {
			t.Errorf("alone %g, jobs %v: equal %v, Jain %g, sum %g, vs alone %g, shares %g–%g; want %v, %g, %g, %g, %g–%g", tc.alone, tc.jobs,
				sh.EqualShare, sh.Jain, sh.ATEPerSec, sh.VsAlone, sh.MinShare, sh.MaxShare, tc.equal, tc.jain, tc.sum, tc.vsAlone, tc.minS, tc.maxS)
		}
	}
}

func labTestReport() labReport {
	rows := []*labRow{
		{System: sysSwitchML, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: 4 << 20, Iters: 5, Verified: true,
			Retransmissions: 12, SwitchDrops: map[string]uint64{"psn": 3, "stale_psn": 1}},
		{System: sysGloo, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: 4 << 20, Iters: 5, Verified: true},
		{System: sysRing, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: 4 << 20, Iters: 5, Error: "not done within --timeout 5m0s"},
	}
	rows[0].setTimes(2e9, 1.9e9, 2.5e9)
	rows[0].setMessages(1200)
	rows[1].setTimes(1e9, 0.9e9, 1.1e9)
	// Two jobs at once after the solo one (2 s per all-reduce): job 2 is
	// starved (8 s against job 1's 3 s).
	rows[0].Jobs = 2
	rows[0].Shared = &labShared{Jobs: []*labJob{
		{Job: 1, SessionID: 1, MedianNs: 3e9, ATEPerSec: float64(4<<20) / 3, SpanNs: 18e9, Verified: true},
		{Job: 2, SessionID: 2, MedianNs: 8e9, ATEPerSec: float64(4<<20) / 8, SpanNs: 48e9, Verified: true},
	}}
	rows[0].Shared.setShares(rows[0].ATEPerSec)
	rows[1].Jobs, rows[2].Jobs = 1, 1
	compareRows(rows, labConfig{packetSize: 1024, msgSize: 16384})
	return labReport{SchemaVersion: labSchemaVersion, Kernel: "test", CPUs: 2, PacketSize: 1024, MessageSize: 16384, Rows: rows}
}

func TestLabReport(t *testing.T) {
	rep := labTestReport()
	sw, gloo, ring := rep.Rows[0], rep.Rows[1], rep.Rows[2]
	if sw.VsGloo == nil || *sw.VsGloo != 0.5 {
		t.Errorf("SwitchML vs Gloo = %v, want 0.5 (2 s against 1 s)", sw.VsGloo)
	}
	if gloo.VsGloo != nil || ring.VsGloo != nil || ring.OfCeiling != nil {
		t.Errorf("Gloo against itself or a failed row got ratios: %v %v %v", gloo.VsGloo, ring.VsGloo, ring.OfCeiling)
	}
	if !(sw.CeilingATEPerSec > 5.9e6 && sw.CeilingATEPerSec < 5.92e6) || sw.OfCeiling == nil {
		t.Errorf("SwitchML's ceiling at 200 Mbit/s: %g (of ceiling %v), want 5.91e6", sw.CeilingATEPerSec, sw.OfCeiling)
	}
	if ring.CeilingATEPerSec == 0 {
		t.Error("a failed row lost its ceiling")
	}
	// The jobs: shares 4/3 and 1/2 of the solo job's 2 s; link shares of
	// the ceiling ÷ 2.
	j1, j2 := sw.Shared.Jobs[0], sw.Shared.Jobs[1]
	if j2.Share != 0.5 {
		t.Errorf("job 2: share %g, want 0.5 (8 s against 2 s alone ÷ 2)", j2.Share)
	}
	if j1.LinkShare == nil || math.Abs(*j1.LinkShare-j1.ATEPerSec/(sw.CeilingATEPerSec/2)) > 1e-12 || sw.Shared.OfCeiling == nil {
		t.Errorf("link share %v, of ceiling %v: not filled from the ceiling", j1.LinkShare, sw.Shared.OfCeiling)
	}
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
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 3 || back.Rows[0]["vs_gloo"] != 0.5 || back.Rows[2]["error"] == nil || back.Rows[1]["rate_bps"] != 2e8 {
		t.Errorf("JSON rows: %v", back.Rows)
	}
	shared, _ := back.Rows[0]["shared"].(map[string]any)
	jobs, _ := shared["jobs"].([]any)
	if back.Rows[0]["jobs"] != 2.0 || back.Rows[1]["jobs"] != 1.0 || back.Rows[1]["shared"] != nil || len(jobs) != 2 ||
		shared["equal_share"] != false || shared["min_share"] != 0.5 {
		t.Fatalf("JSON jobs %v, shared %v", back.Rows[0]["jobs"], shared)
	}
	if j, _ := jobs[1].(map[string]any); j["share"] != 0.5 || j["session_id"] != 2.0 || j["span_ns"] != 48e9 || j["link_share"] == nil {
		t.Errorf("JSON job 2: %v", j)
	}
}

func TestLabLossInflation(t *testing.T) {
	free := &labRow{System: sysGloo, Workers: 4, RateBps: 200e6, TensorBytes: 1 << 20, MedianNs: 100}
	lossy := &labRow{System: sysGloo, Workers: 4, RateBps: 200e6, TensorBytes: 1 << 20, Loss: 0.01, MedianNs: 150}
	other := &labRow{System: sysRing, Workers: 4, RateBps: 200e6, TensorBytes: 1 << 20, Loss: 0.01, MedianNs: 300}
	lossInflation([]*labRow{free, lossy, other})
	if lossy.LossInflation == nil || *lossy.LossInflation != 1.5 {
		t.Errorf("Gloo at 1%%: inflation %v, want 1.5", lossy.LossInflation)
	}
	if free.LossInflation != nil || other.LossInflation != nil {
		t.Errorf("loss-free row or a row without a loss-free twin got an inflation: %v %v", free.LossInflation, other.LossInflation)
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
