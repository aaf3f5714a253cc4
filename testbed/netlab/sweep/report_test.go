package sweep

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestShares: each job's share is its ATE/s ÷ (the solo job's ÷ N), the
// target is every share within 20 % of 1, and Jain's index is
// (Σx)²/(N·Σx²).
func TestShares(t *testing.T) {
	for _, tc := range []struct {
		name       string
		alone      float64
		jobs       []float64
		shares     []float64
		equal      bool
		jain, sum  float64
		vsAlone    float64
		minS, maxS float64
	}{
		{name: "two jobs split what one reached alone", alone: 4e6, jobs: []float64{2e6, 2e6}, shares: []float64{1, 1}, equal: true,
			jain: 1, sum: 4e6, vsAlone: 1, minS: 1, maxS: 1},
		{name: "one starved", alone: 4e6, jobs: []float64{1e6, 3e6}, shares: []float64{0.5, 1.5}, jain: 0.8, sum: 4e6, vsAlone: 1, minS: 0.5, maxS: 1.5},
		// Equal between themselves but both above solo ÷ 2 by 25 %: the
		// solo job did not fill the links; outside the target all the same.
		{name: "both above an equal share", alone: 4e6, jobs: []float64{2.5e6, 2.5e6}, shares: []float64{1.25, 1.25}, jain: 1, sum: 5e6,
			vsAlone: 1.25, minS: 1.25, maxS: 1.25},
		{name: "three within 20 %", alone: 3e6, jobs: []float64{0.9e6, 1.05e6, 1.15e6}, shares: []float64{0.9, 1.05, 1.15}, equal: true,
			jain: 3.1 * 3.1 / (3 * (0.81 + 1.1025 + 1.3225)), sum: 3.1e6, vsAlone: 3.1 / 3, minS: 0.9, maxS: 1.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := &Shared{}
			for i, x := range tc.jobs {
				j := &Job{Job: i + 1}
				j.ATEPerSec = x
				sh.Jobs = append(sh.Jobs, j)
			}
			sh.setShares(tc.alone)
			for i, j := range sh.Jobs {
				if !near(j.Share, tc.shares[i]) {
					t.Errorf("job %d share %g, want %g", i+1, j.Share, tc.shares[i])
				}
			}
			if sh.EqualShare != tc.equal || !near(sh.Jain, tc.jain) || !near(sh.ATEPerSec, tc.sum) || !near(sh.VsAlone, tc.vsAlone) ||
				!near(sh.MinShare, tc.minS) || !near(sh.MaxShare, tc.maxS) {
				t.Errorf("equal %v, Jain %g, sum %g, vs alone %g, shares %g–%g; want %v, %g, %g, %g, %g–%g",
					sh.EqualShare, sh.Jain, sh.ATEPerSec, sh.VsAlone, sh.MinShare, sh.MaxShare, tc.equal, tc.jain, tc.sum, tc.vsAlone, tc.minS, tc.maxS)
			}
		})
	}
}

// testRows is one row of a sweep at 4 workers, 200 Mbit/s, 16 MiB:
// SwitchML at 2 s per all-reduce with two jobs sharing (job 2 starved,
// 8 s against job 1's 3 s), Gloo at 1 s, the ring failed; compared as a
// sweep of 1 KiB packets in 16 KiB messages compares them.
func testRows() []*Row {
	const elements = 4 << 20
	rows := []*Row{
		{System: SwitchML, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: elements, Iters: 5, Verified: true, Retransmissions: 12, Jobs: 2},
		{System: Gloo, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: elements, Iters: 5, Verified: true, Jobs: 1},
		{System: Ring, Workers: 4, RateBps: 200e6, TensorBytes: 16 << 20, Elements: elements, Iters: 5, Error: "not done within 5m0s", Jobs: 1},
	}
	rows[0].setTimes(2*time.Second, 1900*time.Millisecond, 2500*time.Millisecond)
	rows[0].setMessages(1200)
	rows[1].setTimes(time.Second, 900*time.Millisecond, 1100*time.Millisecond)
	job := func(n int, median time.Duration, span int64) *Job {
		j := &Job{Job: n, SessionID: uint32(n), SpanNs: span, Verified: true}
		j.MedianNs, j.ATEPerSec = int64(median), elements/median.Seconds()
		return j
	}
	rows[0].Shared = &Shared{Jobs: []*Job{job(1, 3*time.Second, 18e9), job(2, 8*time.Second, 48e9)}}
	rows[0].Shared.setShares(rows[0].ATEPerSec)
	compareRows(rows, 1024, 16384)
	return rows
}

// TestCompareRows: the ceilings of netlab.LinkCeilings, the ratios to the
// ceiling and to Gloo, none for a failed row or for Gloo against itself,
// and the jobs' link shares of the ceiling ÷ N.
func TestCompareRows(t *testing.T) {
	rows := testRows()
	sw, gloo, ring := rows[0], rows[1], rows[2]
	if sw.VsGloo == nil || *sw.VsGloo != 0.5 {
		t.Errorf("SwitchML vs Gloo = %v, want 0.5 (2 s against 1 s)", sw.VsGloo)
	}
	if gloo.VsGloo != nil || ring.VsGloo != nil || ring.OfCeiling != nil {
		t.Errorf("Gloo against itself or a failed row got ratios: %v %v %v", gloo.VsGloo, ring.VsGloo, ring.OfCeiling)
	}
	// 16 KiB in 17 332 wire bytes at 200 Mbit/s ÷ 32 bits per element.
	if want := 200e6 * 16384 / 17332 / 32; !near(sw.CeilingATEPerSec, want) || sw.OfCeiling == nil || !near(*sw.OfCeiling, sw.ATEPerSec/want) {
		t.Errorf("SwitchML's ceiling at 200 Mbit/s: %g (of ceiling %v), want %g", sw.CeilingATEPerSec, sw.OfCeiling, want)
	}
	if ring.CeilingATEPerSec == 0 {
		t.Error("a failed row lost its ceiling")
	}
	j1, j2 := sw.Shared.Jobs[0], sw.Shared.Jobs[1]
	if j2.Share != 0.5 || !near(j1.Share, 4.0/3) {
		t.Errorf("shares %g and %g, want 4/3 and 0.5 (3 s and 8 s against 2 s alone ÷ 2)", j1.Share, j2.Share)
	}
	if j1.LinkShare == nil || !near(*j1.LinkShare, j1.ATEPerSec/(sw.CeilingATEPerSec/2)) || sw.Shared.OfCeiling == nil ||
		!near(*sw.Shared.OfCeiling, sw.Shared.ATEPerSec/sw.CeilingATEPerSec) {
		t.Errorf("link share %v, of ceiling %v: not filled from the ceiling", j1.LinkShare, sw.Shared.OfCeiling)
	}
	if sw.RetransmissionsPerMessage == nil || *sw.RetransmissionsPerMessage != 0.01 {
		t.Errorf("retransmissions per message %v, want 0.01 (12 of 1200)", sw.RetransmissionsPerMessage)
	}
	if sw.Gbps != sw.ATEPerSec*32/1e9 {
		t.Errorf("Gbit/s %g at %g ATE/s", sw.Gbps, sw.ATEPerSec)
	}
	// The 16-bit wire carries twice the elements per byte: twice the
	// ceiling of the 32-bit wire's row beside it.
	w32 := &Row{System: SwitchML, WireBits: 32, Workers: 4, RateBps: 200e6}
	w16 := &Row{System: SwitchML, WireBits: 16, Workers: 4, RateBps: 200e6}
	compareRows([]*Row{w32, w16}, 1024, 16384)
	if w32.CeilingATEPerSec != sw.CeilingATEPerSec || !near(w16.CeilingATEPerSec, 2*w32.CeilingATEPerSec) {
		t.Errorf("ceilings: 32-bit wire %g, 16-bit %g; want %g and twice it", w32.CeilingATEPerSec, w16.CeilingATEPerSec, sw.CeilingATEPerSec)
	}
}

// TestTreeCeiling: a tree's SwitchML ceiling is the workers' links' unless
// its leaf–spine links are slower: there every slot goes up as a one-packet
// WRITE ONLY WITH IMMEDIATE (1024 B of payload in 1102 B).
func TestTreeCeiling(t *testing.T) {
	flat := &Row{System: SwitchML, WireBits: 32, Workers: 8, RateBps: 200e6}
	unshaped := &Row{System: SwitchML, WireBits: 32, Workers: 8, RateBps: 200e6, Leaves: 2}
	slow := &Row{System: SwitchML, WireBits: 32, Workers: 8, RateBps: 200e6, Leaves: 2, SpineRateBps: 100e6}
	slow16 := &Row{System: SwitchML, WireBits: 16, Workers: 8, RateBps: 200e6, Leaves: 2, SpineRateBps: 100e6}
	fast := &Row{System: SwitchML, WireBits: 32, Workers: 8, RateBps: 200e6, Leaves: 2, SpineRateBps: 400e6}
	onlySpine := &Row{System: SwitchML, WireBits: 32, Workers: 8, Leaves: 2, SpineRateBps: 100e6}
	compareRows([]*Row{flat, unshaped, slow, slow16, fast, onlySpine}, 1024, 16384)
	up := 100e6 * 1024 / 1102 / 32
	switch {
	case unshaped.CeilingATEPerSec != flat.CeilingATEPerSec || fast.CeilingATEPerSec != flat.CeilingATEPerSec:
		t.Errorf("unshaped or faster spine links: ceilings %g, %g, want the flat %g", unshaped.CeilingATEPerSec, fast.CeilingATEPerSec, flat.CeilingATEPerSec)
	case !near(slow.CeilingATEPerSec, up) || !near(onlySpine.CeilingATEPerSec, up):
		t.Errorf("100 Mbit/s spine links: ceilings %g and %g (unshaped workers), want %g", slow.CeilingATEPerSec, onlySpine.CeilingATEPerSec, up)
	case !near(slow16.CeilingATEPerSec, 2*up):
		t.Errorf("16-bit wire, 100 Mbit/s spine links: ceiling %g, want %g", slow16.CeilingATEPerSec, 2*up)
	}
}

// TestReportJSON: the keys a reader of the JSON relies on, nulls where a
// ratio has nothing to divide by, and what is left out when empty.
func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(Report{SchemaVersion: SchemaVersion, Rows: testRows()})
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 3 || back.Rows[0]["vs_gloo"] != 0.5 || back.Rows[2]["error"] == nil || back.Rows[1]["rate_bps"] != 2e8 ||
		back.Rows[1]["of_ceiling"] == nil || back.Rows[2]["of_ceiling"] != nil {
		t.Errorf("JSON rows: %v", back.Rows)
	}
	shared, _ := back.Rows[0]["shared"].(map[string]any)
	jobs, _ := shared["jobs"].([]any)
	if back.Rows[0]["jobs"] != 2.0 || back.Rows[1]["jobs"] != 1.0 || len(jobs) != 2 || shared["equal_share"] != false || shared["min_share"] != 0.5 {
		t.Fatalf("JSON jobs %v, shared %v", back.Rows[0]["jobs"], shared)
	}
	for _, k := range []string{"shared", "switch_drops", "result_sha256", "error"} {
		if _, ok := back.Rows[1][k]; ok {
			t.Errorf("Gloo's row has %q, which is left out when empty", k)
		}
	}
	if j, _ := jobs[1].(map[string]any); j["share"] != 0.5 || j["session_id"] != 2.0 || j["span_ns"] != 48e9 || j["link_share"] == nil {
		t.Errorf("JSON job 2: %v", j)
	}
}

func TestLossInflation(t *testing.T) {
	row := func(sys System, loss float64, median int64) *Row {
		r := &Row{System: sys, Workers: 4, RateBps: 200e6, TensorBytes: 1 << 20, Loss: loss}
		r.MedianNs = median
		return r
	}
	free, lossy, other := row(Gloo, 0, 100), row(Gloo, 0.01, 150), row(Ring, 0.01, 300)
	failed := row(Gloo, 0.05, 0)
	failed.Error = "not done"
	lossInflation([]*Row{free, lossy, other, failed})
	if lossy.LossInflation == nil || *lossy.LossInflation != 1.5 {
		t.Errorf("Gloo at 1%%: inflation %v, want 1.5", lossy.LossInflation)
	}
	if free.LossInflation != nil || other.LossInflation != nil || failed.LossInflation != nil {
		t.Errorf("a loss-free row, a row without a loss-free twin or a failed row got an inflation: %v %v %v",
			free.LossInflation, other.LossInflation, failed.LossInflation)
	}
}

// TestReproduced: SwitchML rows of the same workers and size agree on the
// digest across rates and losses; one that differs fails with ErrMismatch
// and marks its group; other systems, failed rows and lone rows are left
// alone.
func TestReproduced(t *testing.T) {
	row := func(sys System, workers int, rate uint64, loss float64, digest string) *Row {
		return &Row{System: sys, Workers: workers, RateBps: rate, TensorBytes: 1 << 20, Loss: loss,
			Verified: true, ResultSHA256: digest}
	}
	a, b, c := row(SwitchML, 4, 200e6, 0, "aa"), row(SwitchML, 4, 0, 0.01, "aa"), row(SwitchML, 4, 200e6, 0.05, "aa")
	lone := row(SwitchML, 8, 200e6, 0, "cc")
	gloo := row(Gloo, 4, 200e6, 0.01, "dd")
	failed := row(SwitchML, 4, 200e6, 0.1, "ee")
	failed.Error = "timed out"
	if err := reproduced([]*Row{a, b, c, lone, gloo, failed}); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*Row{a, b, c} {
		if r.ResultReproduced == nil || !*r.ResultReproduced {
			t.Errorf("row %d: reproduced %v, want true", i, r.ResultReproduced)
		}
	}
	if lone.ResultReproduced != nil || gloo.ResultReproduced != nil || failed.ResultReproduced != nil {
		t.Errorf("a lone, a Gloo or a failed row was compared: %v %v %v", lone.ResultReproduced, gloo.ResultReproduced, failed.ResultReproduced)
	}

	// A tree's row is compared with the flat rows of the same workers.
	flat, tree := row(SwitchML, 4, 0, 0, "ff"), row(SwitchML, 4, 0, 0, "ff")
	tree.Leaves = 2
	if err := reproduced([]*Row{flat, tree}); err != nil || tree.ResultReproduced == nil || !*tree.ResultReproduced {
		t.Errorf("tree and flat rows of one digest: %v, reproduced %v", err, tree.ResultReproduced)
	}
	tree = row(SwitchML, 4, 0, 0, "fe")
	tree.Leaves = 2
	if err := reproduced([]*Row{row(SwitchML, 4, 0, 0, "ff"), tree}); !errors.Is(err, benchmark.ErrMismatch) || !strings.Contains(err.Error(), "(2 leaves × 2)") {
		t.Errorf("a tree's differing digest: %v, want ErrMismatch naming the tree", err)
	}

	a, b = row(SwitchML, 4, 200e6, 0, "aa"), row(SwitchML, 4, 200e6, 0.01, "ab")
	err := reproduced([]*Row{a, b})
	if !errors.Is(err, benchmark.ErrMismatch) {
		t.Fatalf("a differing digest: %v, want ErrMismatch", err)
	}
	if a.ResultReproduced == nil || *a.ResultReproduced || b.Error == "" || a.Error != "" {
		t.Errorf("after a mismatch: reproduced %v, errors %q %q", a.ResultReproduced, a.Error, b.Error)
	}
	t.Log(err)
}

// ddpResults are two ranks' records of 2 warm-up and 3 timed steps of a
// 100-parameter model: rank 1 is the slower, both end on the same
// parameters.
func ddpResults() []ddpResult {
	ms := func(xs ...int64) []int64 {
		for i := range xs {
			xs[i] *= 1e6
		}
		return xs
	}
	return []ddpResult{
		{Rank: 0, DType: DTypeBF16, WireBits: 16, Params: 100, StepNs: ms(100, 120, 110), FwdBwdNs: ms(90, 110, 100), OptimizerNs: ms(10, 10, 10),
			ComputeNs: ms(30, 40), Losses: []float64{1, 0.9, 0.8, 0.7, 0.6}, ParamsSHA256: "aa", ParamL2: 3, CPUUserNs: 300e6, CPUSysNs: 60e6},
		{Rank: 1, DType: DTypeBF16, WireBits: 16, Params: 100, StepNs: ms(130, 140, 200), FwdBwdNs: ms(120, 130, 190), OptimizerNs: ms(5, 20, 10),
			ComputeNs: ms(50), Losses: []float64{3, 2, 1, 0.5, 0.4}, ParamsSHA256: "aa", ParamL2: 3, CPUUserNs: 600e6, CPUSysNs: 0},
	}
}

func ddpTestRow(sys System) *Row {
	return &Row{System: sys, Workers: 2, RateBps: 200e6, Elements: 100, TensorBytes: 200, Iters: 3, Warmup: 2,
		DDP: &DDPRow{DType: DTypeBF16, Params: 100, AllReduceBytesPerStep: 200}}
}

// TestSetDDP: a DDP row is the slowest rank's median of each time, the
// extremes over the ranks, CPU per step summed and per rank, the mean
// loss of the first and the last step, the ranks' common digest; ranks
// that disagree, a rank's failure, a record of the wrong shape and a loss
// that did not decrease fail the row with ErrDDP.
func TestSetDDP(t *testing.T) {
	row := ddpTestRow(DDPSwml)
	if err := row.setDDP(ddpResults()); err != nil {
		t.Fatal(err)
	}
	d := row.DDP
	ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }
	switch {
	case row.MedianNs != int64(ms(140)) || row.MinNs != int64(ms(100)) || row.MaxNs != int64(ms(200)):
		t.Errorf("step times %v %v %v, want rank 1's median 140ms, 100ms, 200ms", row.MedianNs, row.MinNs, row.MaxNs)
	case !near(row.ATEPerSec, 100/0.14) || !near(row.Gbps, 100/0.14*16/1e9):
		t.Errorf("%g parameters/s, %g Gbit/s at 140 ms per step of 100 bf16 parameters", row.ATEPerSec, row.Gbps)
	case d.FwdBwdNs != int64(ms(130)) || d.OptimizerNs != int64(ms(10)) || d.ComputeNs != int64(ms(50)) || d.ExposedCommNs != int64(ms(80)):
		// Rank 0's compute median of an even count is the upper one (40).
		t.Errorf("fwd+bwd %d, optimizer %d, compute %d, exposed %d", d.FwdBwdNs, d.OptimizerNs, d.ComputeNs, d.ExposedCommNs)
	case row.CPUUserNs != 300e6 || row.CPUSysNs != 20e6 || d.CPUNsPerStepPerRank != 160e6:
		t.Errorf("CPU per step %d+%d, per rank %d; want 300ms+20ms, 160ms", row.CPUUserNs, row.CPUSysNs, d.CPUNsPerStepPerRank)
	case d.LossFirst != 2 || d.LossLast != 0.5 || d.ParamsSHA256 != "aa" || d.ParamL2 != 3 || row.WireBits != 16 || !row.Verified:
		t.Errorf("losses %g→%g, digest %q, L2 %g, wire %d, verified %v", d.LossFirst, d.LossLast, d.ParamsSHA256, d.ParamL2, row.WireBits, row.Verified)
	}
	for _, tc := range []struct {
		name string
		edit func([]ddpResult)
	}{
		{"ranks disagree", func(rs []ddpResult) { rs[1].ParamsSHA256 = "ab" }},
		{"wires disagree", func(rs []ddpResult) { rs[1].WireBits = 32 }},
		{"a rank failed", func(rs []ddpResult) { rs[0] = ddpResult{Rank: 0, Error: "SwmlError: peer gone"} }},
		{"another model", func(rs []ddpResult) { rs[1].Params = 99 }},
		{"a step missing", func(rs []ddpResult) { rs[0].StepNs = rs[0].StepNs[:2] }},
		{"a loss missing", func(rs []ddpResult) { rs[1].Losses = rs[1].Losses[1:] }},
		{"loss grew", func(rs []ddpResult) { rs[1].Losses[4] = 3.5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := ddpResults()
			tc.edit(rs)
			row := ddpTestRow(DDPSwml)
			err := row.setDDP(rs)
			if !errors.Is(err, ErrDDP) || row.Verified {
				t.Fatalf("error %v (verified %v), want ErrDDP", err, row.Verified)
			}
			t.Log(err)
		})
	}
}

// TestCompareDDP: DDP rows compare against DDPGloo's row beside them: the
// ratio of the step rates, the ceilings of the 16-bit gradients (the
// 16-bit wire; Gloo's 2-byte elements), and how far the losses and the
// parameters ended from Gloo's.
func TestCompareDDP(t *testing.T) {
	sw, gloo := ddpTestRow(DDPSwml), ddpTestRow(DDPGloo)
	gloo.DDP.DType = DTypeFP16
	if err := sw.setDDP(ddpResults()); err != nil {
		t.Fatal(err)
	}
	rs := ddpResults()
	for i := range rs {
		rs[i].DType, rs[i].WireBits, rs[i].ParamsSHA256, rs[i].ParamL2 = DTypeFP16, 0, "bb", 2.5
		rs[i].StepNs[1], rs[i].StepNs[2] = 280e6, 280e6 // rank 1's median: 280 ms, twice the swml row's
		rs[i].Losses[4] = 0.8                           // mean last loss 0.8 against 0.5
	}
	if err := gloo.setDDP(rs); err != nil {
		t.Fatal(err)
	}
	compareRows([]*Row{sw, gloo}, 1024, 16384)
	c := netlab.LinkCeilings(200e6, 2, 1024, 16384)
	switch {
	case sw.VsGloo == nil || !near(*sw.VsGloo, 2) || gloo.VsGloo != nil:
		t.Errorf("vs Gloo %v (Gloo's own %v), want 2", sw.VsGloo, gloo.VsGloo)
	case !near(sw.CeilingATEPerSec, 2*c.SwitchML) || !near(gloo.CeilingATEPerSec, 2*c.Gloo):
		t.Errorf("ceilings %g and %g, want twice the 4-byte ones %g and %g", sw.CeilingATEPerSec, gloo.CeilingATEPerSec, c.SwitchML, c.Gloo)
	case sw.DDP.LossVsGloo == nil || !near(*sw.DDP.LossVsGloo, 0.5/0.8) || sw.DDP.ParamL2VsGloo == nil || !near(*sw.DDP.ParamL2VsGloo, 0.2):
		t.Errorf("loss vs Gloo %v, parameters' L2 vs Gloo %v; want 0.5/0.8 and 0.2", sw.DDP.LossVsGloo, sw.DDP.ParamL2VsGloo)
	case gloo.DDP.LossVsGloo != nil:
		t.Error("Gloo's row compared with itself")
	}
	if got := ddpDType(DDPGloo, DTypeBF16); got != DTypeFP16 {
		t.Errorf("Gloo's bf16 row sends %s, want fp16 (Gloo cannot sum bf16)", got)
	}
	if got := ddpDType(DDPSwml, DTypeBF16); got != DTypeBF16 {
		t.Errorf("swml's bf16 row sends %s", got)
	}
}
