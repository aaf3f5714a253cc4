package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// Bench tests send traffic only to 127.13.2.1, 127.13.3.1 and
// 127.13.32.0 – 127.13.47.255 (switch at .1, workers at .2, …), or
// over in-memory links (--link, the default), which use no socket.

func TestBenchJSON(t *testing.T) {
	for i, dtype := range []string{"float32", "int32"} {
		t.Run(dtype, func(t *testing.T) {
			addr := []string{"127.13.2.1", "127.13.32.1"}[i]
			out, _, err := run(t, "bench", "--workers", "3", "--size", "40000", "--iters", "2", "--warmup", "1",
				"--packet-size", "256", "--msg-size", "1KiB", "--qps", "2", "--dtype", dtype, "--json", "--switch-addr", addr)
			if err != nil {
				t.Fatal(err)
			}
			checkBenchSchema(t, out, true)
			var rep benchReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if rep.SchemaVersion != 1 || len(rep.Runs) != 1 {
				t.Fatalf("report %+v", rep)
			}
			r := rep.Runs[0]
			if !r.Verified || r.Workers != 3 || r.Elements != 10000 || r.Iters != 2 || r.Warmup != 1 || r.DType != dtype || r.Packets == 0 ||
				r.MedianNs < r.MinNs || r.MaxNs < r.MedianNs || r.ATEPerSec <= 0 {
				t.Fatalf("result %+v", r)
			}
			b := r.Baseline
			if b == nil || b.Name != "ring" || !b.Verified || b.Packets == 0 || b.MedianNs < b.MinNs || b.MaxNs < b.MedianNs || b.ATEPerSec <= 0 || b.WindowMessages <= 0 {
				t.Fatalf("baseline %+v", b)
			}
			if r.ATERatio == nil || *r.ATERatio != r.ATEPerSec/b.ATEPerSec {
				t.Fatalf("ate_ratio %v, want %v", r.ATERatio, r.ATEPerSec/b.ATEPerSec)
			}
			if r.Switch != "software" || r.Engine != nil {
				t.Fatalf("switch %q, engine %+v: want software and null", r.Switch, r.Engine)
			}
		})
	}
}

// TestBenchEngineAlone: --switch instant runs the engine alone (no
// sockets), exits 0 and prints the ratio to the memory-bandwidth limit.
func TestBenchEngineAlone(t *testing.T) {
	out, _, err := run(t, "bench", "--switch", "instant", "--size", "64KiB", "--iters", "2", "--warmup", "1", "--packet-size", "256", "--msg-size", "4KiB", "--qps", "2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "engine alone") || !strings.Contains(lines[1], "vs 2 × copy") || !strings.Contains(lines[1], "allocs/message") ||
		!strings.Contains(lines[1], "Gbit/s per core") || !strings.Contains(lines[2], "×") || !strings.HasSuffix(strings.TrimSpace(lines[2]), "true") {
		t.Fatalf("table:\n%s", out)
	}
	// 16384 elements in 1024-element messages, 2 QPs: 16 messages and 2
	// exponent rounds per call.
	if f := strings.Fields(lines[2]); len(f) != 11 || f[6] != "18" {
		t.Fatalf("row %q: want 11 columns, 18 messages per call", lines[2])
	}
}

func TestBenchEngineAloneJSON(t *testing.T) {
	for _, dtype := range []string{"float32", "int32"} {
		t.Run(dtype, func(t *testing.T) {
			out, _, err := run(t, "bench", "--switch", "instant", "--size", "40000", "--iters", "2", "--warmup", "1", "--packet-size", "256", "--msg-size", "1KiB",
				"--qps", "2", "--writes", "packet", "--dtype", dtype, "--json")
			if err != nil {
				t.Fatal(err)
			}
			checkBenchSchema(t, out, false)
			var rep benchReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			r := rep.Runs[0]
			if len(rep.Runs) != 1 || r.Switch != "instant" || r.Workers != 1 || r.DType != dtype || !r.Verified || r.Writes != "packet" || r.PacketWriteCalls != 3 {
				t.Fatalf("run %+v", r)
			}
			// 10000 elements in 256-element messages: 40 messages and 2
			// exponent rounds per call, 4 packets each (and any spurious
			// resend's).
			e := r.Engine
			if e == nil || e.Messages != 2*42 || r.Packets < 3*42*4 || e.CopyLimitNs <= 0 || e.CopyLimitRatio <= 0 || e.AllocsPerMessage != float64(e.Allocs)/float64(e.Messages) {
				t.Fatalf("engine %+v, packets %d", e, r.Packets)
			}
			var doc struct {
				Runs []map[string]json.RawMessage `json:"runs"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatal(err)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(doc.Runs[0]["engine"], &got); err != nil {
				t.Fatal(err)
			}
			if want := docEngineKeys(t); !slices.Equal(sortedKeys(got), want) {
				t.Fatalf("engine keys %v, docs/bench.md shows %v", sortedKeys(got), want)
			}
		})
	}
}

// docEngineKeys are the keys of docs/bench.md's engine example (the
// first JSON block under "## Engine alone").
func docEngineKeys(t *testing.T) []string {
	t.Helper()
	md, err := os.ReadFile("../../docs/bench.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(md), "## Engine alone")
	if ok {
		_, after, ok = strings.Cut(after, "```json\n")
	}
	example, _, ok2 := strings.Cut(after, "```")
	var doc map[string]json.RawMessage
	if !ok || !ok2 || json.Unmarshal([]byte(example), &doc) != nil {
		t.Fatal("docs/bench.md has no engine JSON example under \"## Engine alone\"")
	}
	return sortedKeys(doc)
}

// docBenchKeys are the keys of docs/bench.md's JSON example: the
// document's, its first run's and that run's baseline's.
func docBenchKeys(t *testing.T) (top, run, baseline []string) {
	t.Helper()
	md, err := os.ReadFile("../../docs/bench.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(md), "## JSON")
	if ok {
		_, after, ok = strings.Cut(after, "```json\n")
	}
	example, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/bench.md has no ```json example under \"## JSON\"")
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(example), &doc); err != nil {
		t.Fatalf("docs/bench.md's JSON example does not parse: %v", err)
	}
	var runs []map[string]json.RawMessage
	if err := json.Unmarshal(doc["runs"], &runs); err != nil || len(runs) == 0 {
		t.Fatalf("docs/bench.md's example has no runs: %v", err)
	}
	var b map[string]json.RawMessage
	if err := json.Unmarshal(runs[0]["baseline"], &b); err != nil {
		t.Fatalf("docs/bench.md's example run has no baseline object: %v", err)
	}
	return sortedKeys(doc), sortedKeys(runs[0]), sortedKeys(b)
}

// checkBenchSchema checks that the output has the keys of docs/bench.md's
// JSON example, so a renamed field fails here and not in someone's
// script, and the document cannot drift from the output.
func checkBenchSchema(t *testing.T, out string, withBaseline bool) {
	t.Helper()
	topKeys, runKeys, baseKeys := docBenchKeys(t)
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got := sortedKeys(doc); !slices.Equal(got, topKeys) {
		t.Fatalf("top-level keys %v, docs/bench.md shows %v", got, topKeys)
	}
	var runs []map[string]json.RawMessage
	if err := json.Unmarshal(doc["runs"], &runs); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if got := sortedKeys(r); !slices.Equal(got, runKeys) {
			t.Fatalf("run keys %v, docs/bench.md shows %v", got, runKeys)
		}
		if !withBaseline {
			if string(r["baseline"]) != "null" || string(r["ate_ratio"]) != "null" {
				t.Fatalf("without a baseline: baseline %s, ate_ratio %s; want null", r["baseline"], r["ate_ratio"])
			}
			continue
		}
		var b map[string]json.RawMessage
		if err := json.Unmarshal(r["baseline"], &b); err != nil {
			t.Fatal(err)
		}
		if got := sortedKeys(b); !slices.Equal(got, baseKeys) {
			t.Fatalf("baseline keys %v, docs/bench.md shows %v", got, baseKeys)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// TestBenchTableWithLoss also runs the plain (no GSO/GRO) socket path.
func TestBenchTableWithLoss(t *testing.T) {
	out, _, err := run(t, "bench", "--link", "none", "--workers", "2", "--size", "64KiB", "--iters", "2", "--loss", "0.02", "--msg-size", "4KiB", "--switch-addr", "127.13.3.1", "--offload", "off")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on loopback", "2 workers", "loss 0.02", "ATE/s", "retransmissions", "true", "switchml", "ring", "×", "ATE/s ratio", "sending and the receiving NIC", "host-bound: loopback, no link"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchBaselineNone(t *testing.T) {
	out, stderr, err := run(t, "bench", "--workers", "2", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--baseline", "none", "--json", "--switch-addr", "127.13.33.1")
	if err != nil {
		t.Fatal(err)
	}
	checkBenchSchema(t, out, false)
	if stderr != "" {
		t.Fatalf("stderr is not a terminal, yet got %q", stderr)
	}
	out, _, err = run(t, "bench", "--workers", "2", "--size", "16KiB", "--iters", "1", "--baseline", "none", "--switch-addr", "127.13.33.1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "ring") || !strings.Contains(out, "switchml") {
		t.Fatalf("table with --baseline none:\n%s", out)
	}
}

func TestBenchSweepPlot(t *testing.T) {
	dir := t.TempDir()
	svgPath := filepath.Join(dir, "sweep.svg")
	out, _, err := run(t, "bench", "--workers", "2,3,4", "--size", "20000", "--iters", "2", "--warmup", "1", "--packet-size", "256", "--msg-size", "1KiB",
		"--switch-addr", "127.13.34.1", "--plot", svgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2,3,4 workers"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	for _, w := range []string{"2", "3", "4"} {
		for _, alg := range []string{"switchml", "ring"} {
			found := false
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) > 4 && f[0] == w && f[3] == alg {
					found = true
				}
			}
			if !found {
				t.Fatalf("no %s row for %s workers:\n%s", alg, w, out)
			}
		}
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var texts []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			for _, a := range el.Attr {
				if a.Name.Local == "class" {
					series[a.Value]++
				}
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	if series["series-SwitchML"] < 6 || series["series-ring"] < 6 {
		t.Fatalf("SVG series elements %v: want both series with a point per worker count", series)
	}
	all := strings.Join(texts, "|")
	// Over the default links each algorithm's ceiling is drawn too.
	for _, want := range []string{"workers", "time per all-reduce", "ATE/s", "SwitchML", "ring", "SwitchML ceiling", "ring ceiling", defaultLink + " links"} {
		if !strings.Contains(all, want) {
			t.Fatalf("SVG text lacks %q: %s", want, all)
		}
	}

}

func TestBenchCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	if _, _, err := run(t, "bench", "--workers", "2", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--baseline", "none",
		"--switch-addr", "127.13.36.1", "--cpuprofile", path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile %s: %v, %v", path, st, err)
	}
}

func TestBenchBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"workers", []string{"--workers", "0"}, "1 to 250 workers"},
		{"workers list", []string{"--workers", "2,x"}, "comma list such as 2,4,8,16"},
		{"workers list zero", []string{"--workers", "2,0"}, "1 to 250 workers"},
		{"workers list empty", []string{"--workers", ""}, "comma list"},
		{"workers past .254", []string{"--workers", "2,200", "--switch-addr", "127.0.0.100"}, "past .254"},
		{"size zero", []string{"--size", "0"}, "positive byte count"},
		{"size odd", []string{"--size", "10"}, "multiple of 4"},
		{"packet size", []string{"--packet-size", "1000"}, "256, 512, 1024, 2048 and 4096"},
		{"msg size", []string{"--msg-size", "3000"}, "power of two"},
		{"dtype", []string{"--dtype", "float16"}, "use float32 or int32"},
		{"wire", []string{"--wire", "24"}, "give 32 (int32 lanes) or 16"},
		{"wire twice", []string{"--wire", "16,16"}, "16 twice"},
		{"wire int32", []string{"--wire", "32,16", "--dtype", "int32"}, "--wire 16: int32 needs the 32-bit wire"},
		{"wire plot", []string{"--wire", "32,16", "--plot", "x.svg"}, "--plot draws one --wire width"},
		{"wire instant", []string{"--switch", "instant", "--wire", "32,16"}, "the engine alone runs one width"},
		{"wire controller", []string{"--controller", "127.0.0.1:1", "--rank", "0", "--workers", "2", "--wire", "32,16"}, "a job has one element width"},
		{"loss", []string{"--loss", "0.9"}, "[0, 0.5)"},
		{"positional", []string{"extra"}, "takes no arguments"},
		{"switch addr", []string{"--switch-addr", "::1"}, "IPv4 address"},
		{"controller with baseline", []string{"--controller", "127.0.0.1:1", "--rank", "0", "--baseline", "ring"}, "--baseline does not apply with --controller"},
		{"controller with sweep", []string{"--controller", "127.0.0.1:1", "--rank", "0", "--workers", "2,4"}, "give one number"},
		{"controller without rank", []string{"--controller", "127.0.0.1:1", "--workers", "2"}, "no rank"},
		{"rank without controller", []string{"--rank", "1"}, "pass --controller ADDR too"},
		{"offload", []string{"--offload", "gso"}, "use auto, on"},
		{"baseline", []string{"--baseline", "tree"}, "use ring"},
		{"plot", []string{"--plot", "out.jpg"}, "ending in .svg"},
		{"plot png", []string{"--plot", "out.png"}, "SVG only: give a file name ending in .svg"},
		{"cpuprofile", []string{"--cpuprofile", "/nonexistent-dir/cpu.prof"}, "writable file"},
		{"switch", []string{"--switch", "tofino"}, `--switch "tofino": use software`},
		{"instant workers", []string{"--switch", "instant", "--workers", "4"}, "the engine alone is one worker"},
		{"instant loss", []string{"--switch", "instant", "--loss", "0.01"}, "--loss does not apply with --switch instant"},
		{"instant baseline", []string{"--switch", "instant", "--baseline", "ring"}, "--baseline does not apply with --switch instant"},
		{"instant switch addr", []string{"--switch", "instant", "--switch-addr", "127.0.0.1"}, "--switch-addr does not apply with --switch instant"},
		{"instant job flags", []string{"--switch", "instant", "--msg-size", "3000"}, "power of two"},
		{"controller with switch", []string{"--controller", "127.0.0.1:1", "--rank", "0", "--switch", "instant"}, "--switch does not apply with --controller"},
		{"link", []string{"--link", "fast"}, `--link: rate "fast": give bits per second as tc writes them`},
		{"link too slow", []string{"--link", "10kbit"}, "below 100kbit"},
		{"link with offload", []string{"--link", "1gbit", "--offload", "off"}, "--offload does not apply with --link 1gbit"},
		{"instant link", []string{"--switch", "instant", "--link", "1gbit"}, "--link does not apply with --switch instant"},
		{"controller with link", []string{"--controller", "127.0.0.1:1", "--rank", "0", "--link", "1gbit"}, "--link does not apply with --controller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"bench"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	if newProgress(&buf, 10) != nil {
		t.Fatal("progress bar on a buffer, which is not a terminal")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("a regular file is not a terminal")
	}
	var nilBar *progress
	nilBar.step("x") // a nil bar is silent
	nilBar.clear()
	p := newProgressTo(&buf, 3)
	for range 3 {
		p.step("SwitchML, 2 workers")
	}
	p.clear()
	s := buf.String()
	if !strings.HasPrefix(s, "\r[") || !strings.Contains(s, "100%") || !strings.Contains(s, "3/3") || !strings.HasSuffix(s, "\r") {
		t.Fatalf("progress output %q", s)
	}
	// Rate-bounded: the first and the last step draw, the middle one (within
	// 100 ms) does not.
	if n := strings.Count(s, "\r["); n != 2 {
		t.Fatalf("%d redraws for 3 quick steps, want 2: %q", n, s)
	}
}

// TestBenchGapNotices: under loss with packet writes the switch's gap
// notices reach the workers and they send tail probes; --gap-notices=false
// turns both off, and the sums are right either way.
func TestBenchGapNotices(t *testing.T) {
	for _, on := range []bool{true, false} {
		out, _, err := run(t, "bench", "--link", "none", "--workers", "2", "--size", "256KiB", "--iters", "2", "--warmup", "1", "--loss", "0.1",
			"--msg-size", "4KiB", "--writes", "packet", "--baseline", "none", "--switch-addr", "127.13.36.1", "--gap-notices="+strconv.FormatBool(on), "--json")
		if err != nil {
			t.Fatal(err)
		}
		var rep benchReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		r := rep.Runs[0]
		if !r.Verified || r.Retransmissions == 0 {
			t.Fatalf("--gap-notices=%v: verified %v, %d resends", on, r.Verified, r.Retransmissions)
		}
		if got := r.GapNotices > 0 && r.NoticeResends > 0 && r.TailProbes > 0; got != on {
			t.Errorf("--gap-notices=%v: %d notices, %d packets resent on them, %d tail probes", on, r.GapNotices, r.NoticeResends, r.TailProbes)
		}
		if !on && (r.GapNotices != 0 || r.TailProbes != 0) {
			t.Errorf("--gap-notices=false: %d notices, %d tail probes", r.GapNotices, r.TailProbes)
		}
	}
}

// TestBenchLossSweep: --loss takes a list like --workers; every row after
// the loss-free one gets its inflation, the ring runs under the same loss
// (at its NICs), and the switch's drop counters show the loss happened.
func TestBenchLossSweep(t *testing.T) {
	out, _, err := run(t, "bench", "--link", "none", "--workers", "2", "--size", "64KiB", "--iters", "2", "--warmup", "1", "--loss", "0,0.02",
		"--msg-size", "4KiB", "--switch-addr", "127.13.35.1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	checkBenchSchema(t, out, true)
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Loss != 0 || rep.Runs[1].Loss != 0.02 {
		t.Fatalf("runs %+v, want loss 0 then 0.02", rep.Runs)
	}
	lossy := rep.Runs[1]
	if lossy.LossInflation == nil || lossy.Baseline == nil || lossy.Baseline.LossInflation == nil {
		t.Fatalf("lossy run has no inflation over the loss-free one: %+v", lossy)
	}
	if lossy.SwitchDrops["ingress_loss"] == 0 || lossy.SwitchDrops["egress_loss"] == 0 || lossy.Retransmissions == 0 || lossy.RetransmissionsPerMessage <= 0 {
		t.Fatalf("loss not exercised: drops %v, %d retransmissions", lossy.SwitchDrops, lossy.Retransmissions)
	}
	if rep.Runs[0].SwitchDrops["ingress_loss"] != 0 || !lossy.Verified || !lossy.Baseline.Verified {
		t.Fatalf("loss-free run dropped %v; verified %v/%v", rep.Runs[0].SwitchDrops, lossy.Verified, lossy.Baseline.Verified)
	}
}

// TestBenchWireSweep: --wire 32,16 runs both widths in one run, a row
// each, every result verified against its own bound; the 16-bit rows send
// half the tensor packets (128 values per 256-byte payload instead of 64).
func TestBenchWireSweep(t *testing.T) {
	out, _, err := run(t, "bench", "--workers", "2", "--size", "64KiB", "--iters", "2", "--warmup", "1", "--wire", "32,16",
		"--packet-size", "256", "--msg-size", "1KiB", "--qps", "2", "--baseline", "none", "--switch-addr", "127.13.80.1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	checkBenchSchema(t, out, false)
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].WireBits != 32 || rep.Runs[1].WireBits != 16 || !rep.Runs[0].Verified || !rep.Runs[1].Verified {
		t.Fatalf("runs %+v, want a verified 32-bit then 16-bit row", rep.Runs)
	}
	// Per worker and call: 256 tensor packets on the 32-bit wire, 128 on
	// the 16-bit one, plus round 0 on each QP (a message of 4 packets),
	// plus resends (at most a message each).
	for _, r := range rep.Runs {
		calls := uint64(r.Iters + r.Warmup)
		want := calls * 2 * (256*uint64(r.WireBits)/32 + 2*4)
		if r.Packets < want || r.Packets > want+4*r.Retransmissions {
			t.Fatalf("%d-bit wire: %d packets with %d resent messages, want %d sent once", r.WireBits, r.Packets, r.Retransmissions, want)
		}
	}
}

func TestBenchLossFlagErrors(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"NaN", `"NaN" is not a loss probability in [0, 0.5)`},
		{"0,0.5", `"0.5" is not a loss probability`},
		{"-0.1", `"-0.1" is not a loss probability`},
		{"0.01,x", `"x" is not a loss probability`},
	} {
		_, stderr, err := run(t, "bench", "--loss", tc.arg)
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != 2 {
			t.Fatalf("--loss %s: error %v, want exit status 2", tc.arg, err)
		}
		if !strings.Contains(err.Error()+stderr, tc.want) {
			t.Fatalf("--loss %s: %q lacks %q", tc.arg, err.Error()+stderr, tc.want)
		}
	}
}

func FuzzParseLosses(f *testing.F) {
	for _, s := range []string{"0", "0.01", "0,0.001,0.01,0.05", "NaN", "1e-3", "-0", ",", "0.4999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := parseLosses(s)
		if err != nil {
			return
		}
		for _, l := range ls {
			if !(l >= 0 && l < 0.5) {
				t.Fatalf("parseLosses(%q) accepted %v", s, l)
			}
		}
	})
}

// TestBenchLossSweepPlot: a --loss sweep at one worker count is drawn
// against the loss rate, with the inflation panel.
func TestBenchLossSweepPlot(t *testing.T) {
	svgPath := filepath.Join(t.TempDir(), "loss.svg")
	_, _, err := run(t, "bench", "--workers", "2", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--loss", "0,0.01",
		"--msg-size", "4KiB", "--switch-addr", "127.13.36.1", "--plot", svgPath)
	if err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	for _, want := range []string{"loss probability", "loss-free time", ">0.01<", "SwitchML", "ring"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if _, _, err := run(t, "bench", "--workers", "2,3", "--loss", "0,0.01", "--plot", svgPath); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both sweeps with --plot: %v, want a refusal", err)
	}
}

// TestBenchEdges: the rough edges of #23. Addresses: 127.13.50.x, 127.13.51.x.
func TestBenchEdges(t *testing.T) {
	clearLaunchEnv(t)
	t.Run("log level", func(t *testing.T) {
		// One validator: bench refuses what switch and worker refuse.
		_, _, err := run(t, "bench", "--log-level", "loud")
		if err == nil || !strings.Contains(err.Error(), `--log-level "loud": use debug, info, warn or error`) {
			t.Fatalf("bench --log-level loud: %v", err)
		}
	})
	t.Run("metrics addr example", func(t *testing.T) {
		_, _, err := run(t, "worker", "--rank", "0", "--workers", "1", "--metrics-addr", "foo")
		if err == nil || !strings.Contains(err.Error(), "e.g. 127.0.0.1:9100") || strings.Contains(err.Error(), "50099") {
			t.Fatalf("--metrics-addr foo: %v, want the metrics port as the example, not the controller's", err)
		}
	})
	t.Run("worker cpuprofile", func(t *testing.T) {
		_, _, err := run(t, "worker", "--rank", "0", "--workers", "1", "--cpuprofile", "/nonexistent-dir/w{rank}.prof")
		if err == nil || !strings.Contains(err.Error(), "/nonexistent-dir/w0.prof") || !strings.Contains(err.Error(), "writable file") {
			t.Fatalf("worker --cpuprofile in a missing directory: %v, want the path with the rank and the fix", err)
		}
	})
	t.Run("peer timeout flag", func(t *testing.T) {
		_, _, err := run(t, "bench", "--peer-timeout", "0s")
		if err == nil || !strings.Contains(err.Error(), "--peer-timeout 0s") {
			t.Fatalf("bench --peer-timeout 0s: %v", err)
		}
		if !strings.Contains(remedy(fmt.Errorf("x: %w", aggregation.ErrPeerTimeout)), "--peer-timeout") {
			t.Fatal("a peer timeout's remedy does not name --peer-timeout")
		}
	})
	t.Run("exported SWML_CONTROLLER", func(t *testing.T) {
		// A controller exported for a job's workers does not make a plain
		// bench one of them: it runs the embedded bench.
		t.Setenv("SWML_CONTROLLER", "127.0.0.1:1")
		out, _, err := run(t, "bench", "--workers", "1", "--baseline", "none", "--size", "4KiB", "--iters", "1", "--warmup", "0", "--switch-addr", "127.13.50.1")
		if err != nil || !strings.Contains(out, "SwitchML all-reduce over "+defaultLink+" links") {
			t.Fatalf("bench with SWML_CONTROLLER exported: %v\n%s", err, out)
		}
	})
	t.Run("failed sweep keeps its rows", func(t *testing.T) {
		// The 2-worker row needs 127.13.51.3, which this socket holds; the
		// 1-worker row before it finished and is printed.
		hold, err := net.ListenPacket("udp", "127.13.51.3:4791")
		if err != nil {
			t.Skipf("cannot hold the address: %v", err)
		}
		defer hold.Close()
		out, _, err := run(t, "bench", "--link", "none", "--workers", "1,2", "--baseline", "none", "--size", "4KiB", "--iters", "1", "--warmup", "0", "--switch-addr", "127.13.51.1", "--json")
		if err == nil || !strings.Contains(err.Error(), "the 1 finished rows are printed") {
			t.Fatalf("sweep with the second row failing: %v", err)
		}
		var rep benchReport
		if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || len(rep.Runs) != 1 || rep.Runs[0].Workers != 1 {
			t.Fatalf("stdout %q (%v), want the JSON report of the 1-worker row", out, jerr)
		}
	})
	t.Run("exported SWML_NIC", func(t *testing.T) {
		// Not through an app: a flag set from the environment stays set in
		// the command's flag objects, which every app of this package's
		// tests shares.
		t.Setenv("SWML_NIC", "ibverbs")
		if got := envSource("nic", "ibverbs"); got != " (from $SWML_NIC)" {
			t.Fatalf("envSource(nic) = %q with SWML_NIC exported", got)
		}
		if got := envSource("nic", "soft"); got != "" {
			t.Fatalf("envSource(nic, soft) = %q: the flag's value is not the variable's", got)
		}
	})
	t.Run("SWML_WORKERS not a number", func(t *testing.T) {
		t.Setenv("SWML_WORKERS", "x")
		_, err := parseWorkers("x")
		if err == nil || !strings.Contains(fmt.Sprintf("%v%s", err, envSource("workers", "x")), `--workers "x": "x" is not a number; give a count such as 4 or a comma list such as 2,4,8,16 (from $SWML_WORKERS)`) {
			t.Fatalf("parseWorkers(x): %v", err)
		}
	})
}

// TestProgressPhase: a phase draws at once, before its first step ends.
func TestProgressPhase(t *testing.T) {
	var buf bytes.Buffer
	p := newProgressTo(&buf, 4)
	p.phase("starting 32 workers")
	if s := buf.String(); !strings.Contains(s, "0/4") || !strings.Contains(s, "starting 32 workers") {
		t.Fatalf("phase drew %q", s)
	}
}

// TestBenchLink: the linked mode's JSON — the rate, each algorithm's
// ceiling (netlab.LinkCeilings: SwitchML's for any worker count, the
// ring's for this one), ATE/s ÷ it, at most 1 (the ring's up to its
// acknowledgements' share of the wire, which ride links of their own:
// docs/bench.md "Linked mode"), the regime that fraction implies and the
// links each used; the table says so too. --link none: no rate, ceiling
// or links, host-bound.
func TestBenchLink(t *testing.T) {
	const workers, packet, msg = 3, 256, 1024
	out, _, err := run(t, "bench", "--link", "100mbit", "--workers", "3", "--size", "40000", "--iters", "2", "--warmup", "1",
		"--packet-size", "256", "--msg-size", "1KiB", "--qps", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	checkBenchSchema(t, out, true)
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Runs[0]
	want := netlab.LinkCeilings(100e6, workers, packet, msg)
	ackShare := float64(netlab.RoCEMessageWire(0, 1)) / float64(netlab.RoCEMessageWire(packet, msg/packet))
	for _, c := range []struct {
		name         string
		l            linkResult
		ate, ceiling float64
		most         float64
	}{
		{"switchml", r.linkResult, r.ATEPerSec, want.SwitchML, 1.001},
		{"ring", r.Baseline.linkResult, r.Baseline.ATEPerSec, want.Ring, 1.001 + ackShare},
	} {
		l := c.l
		if l.RateBps != 100e6 || l.CeilingATEPerSec != c.ceiling || l.OfCeiling == nil || *l.OfCeiling != c.ate/c.ceiling {
			t.Fatalf("%s: rate %d, ceiling %v (want %v), of ceiling %v (ATE/s %v)", c.name, l.RateBps, l.CeilingATEPerSec, c.ceiling, l.OfCeiling, c.ate)
		}
		if f := *l.OfCeiling; f <= 0 || f > c.most {
			t.Fatalf("%s: %.4f of the ceiling, want (0, %.4f]", c.name, f, c.most)
		}
		if wantRegime := map[bool]string{true: regimeLink, false: regimeHost}[*l.OfCeiling >= linkBoundFraction]; l.Regime != wantRegime {
			t.Fatalf("%s: regime %q at %.2f of the ceiling, want %q", c.name, l.Regime, *l.OfCeiling, wantRegime)
		}
		if l.Links == nil || l.Links.Links != 2*workers || l.Links.Packets == 0 || l.Links.Loss != 0 {
			t.Fatalf("%s: links %+v, want %d used, none lost", c.name, l.Links, 2*workers)
		}
	}

	out, _, err = run(t, "bench", "--link", "100mbit", "--workers", "2", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--msg-size", "4KiB")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"over 100mbit links (in memory", "ceiling", "of ceiling", "2 workers, 32-bit wire, loss 0: SwitchML "} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}

	// A 16-bit wire carries two elements per four payload bytes: twice
	// the ceiling.
	out, _, err = run(t, "bench", "--link", "100mbit", "--workers", "2", "--size", "64KiB", "--iters", "1", "--warmup", "0", "--wire", "16",
		"--msg-size", "4KiB", "--baseline", "none", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	r16, want16 := rep.Runs[0], 2*netlab.LinkCeilings(100e6, 2, 1024, 4096).SwitchML
	if r16.WireBits != 16 || r16.CeilingATEPerSec != want16 || r16.OfCeiling == nil || *r16.OfCeiling <= 0 || *r16.OfCeiling > 1.001 {
		t.Fatalf("16-bit wire: ceiling %v (want %v), of ceiling %v", r16.CeilingATEPerSec, want16, r16.OfCeiling)
	}

	out, _, err = run(t, "bench", "--link", "none", "--workers", "2", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--json", "--switch-addr", "127.13.37.1")
	if err != nil {
		t.Fatal(err)
	}
	checkBenchSchema(t, out, true)
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, l := range []linkResult{rep.Runs[0].linkResult, rep.Runs[0].Baseline.linkResult} {
		if l.RateBps != 0 || l.CeilingATEPerSec != 0 || l.OfCeiling != nil || l.Links != nil || l.Regime != regimeHost {
			t.Fatalf("--link none: %+v, want no rate, ceiling or links, host-bound", l)
		}
	}
}

// TestJobGeometry: --qps and --msg-size not given take
// aggregation.DefaultGeometry's values for the job's size (a bench sweep:
// its largest), each flag on its own; given, they stay as given.
func TestJobGeometry(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		workers          int
		wantQPs, wantMsg int
	}{
		{nil, 32, 8, 16 << 10},
		{nil, 33, 32, 4 << 10},
		{[]string{"--qps", "8"}, 64, 8, 4 << 10},
		{[]string{"--msg-size", "16KiB"}, 64, 32, 16 << 10},
		{[]string{"--packet-size", "256"}, 64, 32, 1 << 10},
		{[]string{"--qps", "16"}, 4, 16, 16 << 10},
	} {
		var j jobSpec
		app := &cli.App{Flags: allReduceFlags("job"), Action: func(c *cli.Context) (err error) {
			j, err = parseJobFlags(c, tc.workers)
			return err
		}}
		if err := app.Run(append([]string{"swml-rdma"}, tc.args...)); err != nil {
			t.Fatalf("%v at %d workers: %v", tc.args, tc.workers, err)
		}
		if j.qps != tc.wantQPs || j.msgSize != tc.wantMsg {
			t.Errorf("%v at %d workers: --qps %d, --msg-size %d; want %d and %d", tc.args, tc.workers, j.qps, j.msgSize, tc.wantQPs, tc.wantMsg)
		}
	}
}
