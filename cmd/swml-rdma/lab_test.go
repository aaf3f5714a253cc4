package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{[]string{"extra"}, "no arguments"},
	} {
		wantUsageError(t, append([]string{"lab"}, tc.args...), tc.want)
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
	var out bytes.Buffer
	if err := printLab(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"switchml", "0.50×", "psn=3 stale_psn=1", "FAILED: ring, 4 workers, 200mbit", "5.91M", " 0.010 "} {
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
