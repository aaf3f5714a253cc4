package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// scrape GETs a /metrics URL and returns the text exposition.
func scrape(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s, %v\n%s", url, resp.Status, err, body)
	}
	return string(body)
}

// sample returns the value of the series name whose labels include the
// given name/value pairs; it fails the test if there is none.
func sample(t *testing.T, body, name string, labels ...string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		series, value := line[:sp], line[sp+1:]
		got, rest, _ := strings.Cut(series, "{")
		if got != name {
			continue
		}
		have := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				have[k] = strings.Trim(v, `"`)
			}
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if match {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no sample %s%v in:\n%s", name, labels, body)
	return 0
}

// lint fails the test on every promlint problem in a scrape.
func lint(t *testing.T, what, body string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("%s: promlint: %v", what, err)
	}
	for _, p := range problems {
		t.Errorf("%s: promlint: %s: %s", what, p.Metric, p.Text)
	}
}

// runInProcess runs the CLI with args until it returns or ctx ends; its
// stdout and stderr can be read while it runs.
func runInProcess(ctx context.Context, args ...string) (stdout, stderr *testutil.SyncBuffer, done chan error) {
	app := newApp()
	stdout, stderr = &testutil.SyncBuffer{}, &testutil.SyncBuffer{}
	app.Writer, app.ErrWriter = stdout, stderr
	app.ExitErrHandler = func(*cli.Context, error) {}
	done = make(chan error, 1)
	go func() { done <- app.RunContext(ctx, append([]string{"swml-rdma"}, args...)) }()
	return stdout, stderr, done
}

// TestMetricsEndToEnd runs the switch daemon in this process and a worker
// through runWorkerBench, scrapes both /metrics endpoints over HTTP, checks
// that the counters moved, and lints every swml_ family (switch, controller,
// worker, NIC) and the Go and process collectors with promlint.
// Addresses: 127.13.21.x.
func TestMetricsEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	swCtx, stopSwitch := context.WithCancel(ctx)
	defer stopSwitch()
	stdout, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.21.1", "--controller-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--json")
	exited := make(chan struct{})
	var runErr error
	go func() { runErr = <-done; close(exited) }()
	ctl := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]
	swURL := waitForLine(t, "switch", stderr, metricsRE, exited, time.Second)[1]

	before := scrape(t, swURL)
	if v := sample(t, before, "swml_switch_packets_total", "direction", "in"); v != 0 {
		t.Fatalf("packets in before the job: %v", v)
	}
	if v := sample(t, before, "swml_controller_sessions_total"); v != 0 {
		t.Fatalf("sessions before the job: %v", v)
	}

	reg := newMetricsRegistry()
	cfg := workerConfig{controller: ctl, connectTimeout: 30 * time.Second, sessionID: 7, rank: 0, workers: 1,
		nic: "soft", addr: mustAddr(t, "127.13.21.2"), registry: reg,
		jobSpec: jobSpec{size: 32 << 10, iters: 3, warmup: 1, packetSize: 1024, qps: 2, msgSize: 4096, dtype: wire.Float32}}
	res, err := runWorkerBench(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.Packets == 0 {
		t.Fatalf("result %+v", res)
	}
	ms, err := startMetricsServer("metrics-addr", "127.0.0.1:0", reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	worker := scrape(t, "http://"+ms.Addr()+"/metrics")
	job := strconv.FormatUint(uint64(res.JobID), 10)
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"swml_worker_allreduces_total", []string{"job_id", job, "rank", "0"}, 4},
		{"swml_worker_allreduce_duration_seconds_count", []string{"job_id", job, "rank", "0"}, 4},
		{"swml_worker_packets_total", []string{"rank", "0"}, 4 * 32},
		{"swml_worker_bytes_total", []string{"direction", "in"}, 4 * 32 << 10},
		{"swml_nic_packets_total", []string{"device", "soft:127.13.21.2", "direction", "out"}, 4 * 32},
		{"swml_nic_packets_total", []string{"direction", "in"}, 4 * 32},
		{"go_goroutines", nil, 1},
	} {
		if v := sample(t, worker, c.name, c.labels...); v < c.min {
			t.Errorf("%s%v = %v, want ≥ %v", c.name, c.labels, v, c.min)
		}
	}
	if v := sample(t, worker, "swml_worker_allreduces_total"); v != 4 {
		t.Errorf("all-reduces %v, want 4", v)
	}
	if v := sample(t, worker, "swml_nic_drops_total", "reason", "icrc"); v != 0 {
		t.Errorf("NIC ICRC drops %v", v)
	}

	after := scrape(t, swURL)
	if v := sample(t, after, "swml_switch_packets_total", "direction", "in"); v < 4*32 {
		t.Errorf("switch packets in %v, want ≥ %d", v, 4*32)
	}
	if v := sample(t, after, "swml_switch_aggregated_total"); v < 4*32 {
		t.Errorf("switch aggregated %v, want ≥ %d", v, 4*32)
	}
	if v := sample(t, after, "swml_controller_sessions_total"); v != 1 {
		t.Errorf("controller sessions %v, want 1", v)
	}
	if v := sample(t, after, "process_open_fds"); v <= 0 {
		t.Errorf("process_open_fds %v", v)
	}
	lint(t, "switch", after)
	lint(t, "worker", worker)
	checkDashboard(t, after+worker)

	stopSwitch()
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatal("switch did not stop")
	}
	if runErr != nil {
		t.Fatalf("switch: %v\n%s", runErr, stderr)
	}
	// --json: the final counters as docs/operations.md lists them, every
	// drop reason of swml_switch_drops_total among them.
	dec := json.NewDecoder(strings.NewReader(stdout.String()))
	dec.DisallowUnknownFields()
	var rep switchReport
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("final counters: %v\n%s", err, stdout)
	}
	if rep.Addr != "127.13.21.1:4791" || rep.PacketsIn == 0 || rep.PacketsOut == 0 || rep.Aggregated == 0 || rep.JobsStarted != 1 || rep.JobsEnded != 1 ||
		len(rep.Drops) != int(switchmodel.NumDropReasons)-1 || rep.Drops["unknown_qp"] != 0 {
		t.Errorf("final counters: %s", stdout)
	}
	if got, want := jsonKeys(reflect.TypeFor[switchReport]()), docSwitchKeys(t); !slices.Equal(got, want) {
		t.Errorf("the final counters' keys %v, docs/operations.md lists %v", got, want)
	}
	// Its listeners are gone.
	if c, err := net.DialTimeout("tcp", ctl, time.Second); err == nil {
		c.Close()
		t.Errorf("controller %s still accepts after shutdown", ctl)
	}
}

// TestMetricsAddrInUse: a taken --metrics-addr is an error naming the
// address and the fix.
func TestMetricsAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = startMetricsServer("metrics-addr", l.Addr().String(), newMetricsRegistry(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "pick a free port") {
		t.Fatalf("error %v", err)
	}
}

// checkDashboard checks that docs/grafana/swml-rdma.json is JSON with a
// Prometheus datasource variable and that every swml_ metric its queries
// use is one the daemons serve.
func checkDashboard(t *testing.T, scrapes string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana", "swml-rdma.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct{ Name, Type, Query any }
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana/swml-rdma.json: %v", err)
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		hasDS = hasDS || (v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasDS {
		t.Error("dashboard: no Prometheus datasource variable")
	}
	served := map[string]bool{}
	for _, line := range strings.Split(scrapes, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ = strings.Cut(name, " ")
			served[name] = true
		}
	}
	re := regexp.MustCompile(`swml_[a-z_]+`)
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			for _, m := range re.FindAllString(tg.Expr, -1) {
				if !served[strings.TrimSuffix(m, "_bucket")] {
					t.Errorf("dashboard panel %q uses %s, which no daemon serves", p.Title, m)
				}
			}
		}
	}
	if exprs < 10 {
		t.Errorf("dashboard has %d queries", exprs)
	}
}

// TestDashboardDoc reads docs/metrics.md "Grafana", a table of the
// dashboard's panels and the metrics each plots, and checks it against
// docs/grafana/swml-rdma.json panel by panel (titles in order, and the
// swml_ metrics of each panel's queries); and that every swml_worker_
// metric of docs/metrics.md's worker table is on a panel, so a counter the
// workers export is not left off the dashboard. TestMetricsEndToEnd checks
// that the dashboard's metrics are served.
func TestDashboardDoc(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana", "swml-rdma.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana/swml-rdma.json: %v", err)
	}
	md, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, grafana, ok := strings.Cut(string(md), "\n## Grafana\n")
	if !ok {
		t.Fatal("docs/metrics.md has no \"## Grafana\"")
	}
	name := regexp.MustCompile("`(swml_[a-z_]+)`")
	var doc []string
	for _, line := range strings.Split(grafana, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || strings.HasPrefix(cells[1], "---") || strings.TrimSpace(cells[1]) == "panel" {
			continue
		}
		title := strings.TrimSpace(cells[1])
		var ms []string
		for _, m := range name.FindAllStringSubmatch(cells[2], -1) {
			ms = append(ms, m[1])
		}
		doc = append(doc, title+": "+strings.Join(ms, ", "))
	}
	onPanel := map[string]bool{}
	var got []string
	metric := regexp.MustCompile(`swml_[a-z_]+`)
	for _, p := range dash.Panels {
		if p.Type == "row" {
			got = append(got, "**"+p.Title+"** (row): ")
			continue
		}
		var ms []string
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				m = strings.TrimSuffix(m, "_bucket")
				if !slices.Contains(ms, m) {
					ms = append(ms, m)
				}
				onPanel[m] = true
			}
		}
		got = append(got, p.Title+": "+strings.Join(ms, ", "))
	}
	if !slices.Equal(doc, got) {
		t.Errorf("docs/metrics.md \"Grafana\" lists the panels\n  %s\nthe dashboard has\n  %s", strings.Join(doc, "\n  "), strings.Join(got, "\n  "))
	}
	_, workers, _ := strings.Cut(string(md), "## Workers")
	workers, _, _ = strings.Cut(workers, "\n## ")
	n := 0
	for _, line := range strings.Split(workers, "\n") {
		if m := name.FindStringSubmatch(line); m != nil && strings.HasPrefix(line, "| `swml_worker_") {
			n++
			if !onPanel[m[1]] {
				t.Errorf("%s (docs/metrics.md) is on no panel of the dashboard", m[1])
			}
		}
	}
	if n < 10 {
		t.Errorf("docs/metrics.md's worker table lists %d metrics", n)
	}
}

// docSwitchKeys are the keys of the switch's final counters as
// docs/operations.md's "Shutdown" lists them: the code-spans of the
// bullet that starts "- JSON (`--json`):".
func docSwitchKeys(t *testing.T) []string {
	t.Helper()
	md, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^  JSON \(` + "`--json`" + `\) keys:((?:.*\n)(?:  .*\n)*)`).FindStringSubmatch(string(md))
	if m == nil {
		t.Fatal("docs/operations.md lists no JSON keys of the switch's final counters")
	}
	var keys []string
	for _, k := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(m[1], -1) {
		keys = append(keys, k[1])
	}
	return keys
}
