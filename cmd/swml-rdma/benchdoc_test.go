package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
)

// benchDocSection is the text of docs/bench.md's section that starts at
// heading and ends at the next "## " heading.
func benchDocSection(t *testing.T, heading string) string {
	t.Helper()
	md, err := os.ReadFile("../../docs/bench.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(md), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/bench.md has no %q", heading)
	}
	sec, _, _ := strings.Cut(after, "\n## ")
	return sec
}

// TestBenchDocTable reads docs/bench.md's table example and the bold
// column names under it: the example's header must be the columns bench
// prints, in order, and each column must be explained. printBench's own
// header is checked against benchColumns, so the document follows the
// output.
func TestBenchDocTable(t *testing.T) {
	sec := benchDocSection(t, "## Table")
	_, example, ok := strings.Cut(sec, "```\n")
	example, _, ok2 := strings.Cut(example, "```")
	if !ok || !ok2 {
		t.Fatal("docs/bench.md \"Table\" has no example block")
	}
	lines := strings.Split(example, "\n")
	if len(lines) < 3 {
		t.Fatalf("table example too short:\n%s", example)
	}
	cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(lines[1]), -1)
	if !slices.Equal(cols, benchColumns) {
		t.Fatalf("docs/bench.md's table header %q, bench prints %q", cols, benchColumns)
	}
	for _, row := range lines[2:4] {
		if f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(row), -1); len(f) != len(benchColumns) {
			t.Fatalf("docs/bench.md's table row has %d columns, want %d: %q", len(f), len(benchColumns), row)
		}
	}
	explained := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^- (\*\*[^\n]*?):`).FindAllStringSubmatch(sec, -1) {
		for _, b := range regexp.MustCompile(`\*\*([^*]+)\*\*`).FindAllStringSubmatch(m[1], -1) {
			for _, name := range strings.Split(b[1], " / ") {
				explained[name] = true
			}
		}
	}
	for _, c := range benchColumns {
		if !explained[c] {
			t.Errorf("docs/bench.md \"Table\" explains no column %q (a bullet \"- **%s**: …\")", c, c)
		}
		delete(explained, c)
	}
	for name := range explained {
		t.Errorf("docs/bench.md \"Table\" explains %q, which bench does not print", name)
	}

	var out bytes.Buffer
	one := 1.0
	rep := benchReport{Runs: []benchRun{{Record: benchmark.Record{Workers: 4, Iters: 10, Verified: true}, ATERatio: &one, LossInflation: &one,
		Baseline: &baselineResult{Name: "ring", Verified: true}}}}
	if err := printBench(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	header := strings.Split(out.String(), "\n")[1]
	if got := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(header), -1); !slices.Equal(got, benchColumns) {
		t.Fatalf("bench prints the header %q, benchColumns is %q", got, benchColumns)
	}
}

// TestBenchDocWorkerFields reads what docs/bench.md "JSON" says bench's
// run objects and `worker --json` do not share, and checks it against the
// two commands' JSON fields.
func TestBenchDocWorkerFields(t *testing.T) {
	sec := benchDocSection(t, "## JSON")
	_, text, ok := strings.Cut(sec, "only the\n  embedded bench has:")
	if !ok {
		_, text, ok = strings.Cut(sec, "only the embedded bench has:")
	}
	benchOnly, rest, ok2 := strings.Cut(text, "; and it adds")
	workerOnly, _, ok3 := strings.Cut(rest, ".\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/bench.md \"JSON\" does not say which fields only bench has (\"only the embedded bench has: …; and it adds …\")")
	}
	names := func(s string) []string {
		var k []string
		for _, m := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(s, -1) {
			k = append(k, m[1])
		}
		slices.Sort(k)
		return k
	}
	keys := func(v any) map[string]bool {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		k := map[string]bool{}
		for key := range m {
			k[key] = true
		}
		return k
	}
	bench, worker := keys(benchRun{}), keys(benchmark.WorkerRecord{})
	minus := func(a, b map[string]bool) []string {
		var d []string
		for k := range a {
			if !b[k] {
				d = append(d, k)
			}
		}
		slices.Sort(d)
		return d
	}
	if got, doc := minus(bench, worker), names(benchOnly); !slices.Equal(got, doc) {
		t.Errorf("fields only bench prints: %v; docs/bench.md says %v", got, doc)
	}
	if got, doc := minus(worker, bench), names(workerOnly); !slices.Equal(got, doc) {
		t.Errorf("fields only worker --json prints: %v; docs/bench.md says %v", got, doc)
	}
}
