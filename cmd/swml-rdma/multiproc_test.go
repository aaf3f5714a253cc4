package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/benchmark"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// testMainEnv makes the test binary act as swml-rdma: the multi-process
// tests re-execute it, so they need no `go build`.
const testMainEnv = "SWML_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// waitForLine polls buf until re matches (returning the submatches), done
// is closed, or timeout passes.
func waitForLine(t *testing.T, what string, buf *testutil.SyncBuffer, re *regexp.Regexp, done <-chan struct{}, timeout time.Duration) []string {
	t.Helper()
	var m []string
	ended := false
	if !testutil.Poll(timeout, func() bool {
		select {
		case <-done:
			ended = true
		default:
		}
		m = re.FindStringSubmatch(buf.String())
		return m != nil || ended
	}) {
		t.Fatalf("%s did not log %q within %v:\n%s", what, re, timeout, buf)
	}
	if m == nil {
		t.Fatalf("%s ended before logging %q:\n%s", what, re, buf)
	}
	return m
}

// waitAllReduced waits until every worker, started with --metrics-addr,
// has finished an all-reduce: the job is under way on every rank.
func waitAllReduced(t *testing.T, workers []*proc) {
	t.Helper()
	for r, w := range workers {
		name := fmt.Sprintf("worker %d", r)
		u := waitForLine(t, name, w.stderr, metricsRE, w.done, 60*time.Second)
		if !testutil.Poll(60*time.Second, func() bool { return finishedAllReduceRE.MatchString(tryScrape(u[1])) }) {
			t.Fatalf("%s finished no all-reduce in 60s:\n%s", name, w.stderr)
		}
	}
}

var (
	readyRE   = regexp.MustCompile(`msg="switch ready".* controller=(\S+)`)
	metricsRE = regexp.MustCompile(`metrics=(http://\S+)`)
	joinedRE  = regexp.MustCompile(`msg="joined job"`)
	// benchStepRE: the bench's progress bar once an all-reduce has
	// finished ("[==   ]   0%  3/100000000  …").
	benchStepRE = regexp.MustCompile(`\] +[0-9]+%  [1-9][0-9]*/`)
	// finishedAllReduceRE: a worker's /metrics once it has finished an
	// all-reduce (the series appears when the session joins, at 0).
	finishedAllReduceRE = regexp.MustCompile(`(?m)^swml_worker_allreduces_total(\{[^}]*\})? [1-9]`)
)

// proc is a swml-rdma process: the test binary re-executed.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *testutil.SyncBuffer
	done           chan struct{}
	err            error // valid after done
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcWith(t, name, nil, nil, args...)
}

// startProcOnTTY is startProc with the process's standard error on a
// pseudo-terminal, copied into p.stderr: what a user's terminal shows,
// the progress bar included (commands draw it on a terminal only).
func startProcOnTTY(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	ctl, term, err := openPTY()
	if err != nil {
		if runtime.GOOS != "linux" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	drained := make(chan struct{})
	p := startProcWith(t, name, term, drained, args...)
	term.Close() // the process holds its copy: reading ctl ends when it exits
	go func() {
		defer close(drained)
		io.Copy(p.stderr, ctl)
		ctl.Close()
	}()
	return p
}

// startProcWith starts the process with its standard error on stderr
// when not nil; p.done waits for drained too, when not nil.
func startProcWith(t *testing.T, name string, stderr *os.File, drained <-chan struct{}, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: exec.Command(exe, args...), stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	env := []string{testMainEnv + "=1"}
	for _, kv := range os.Environ() {
		// The job's rank and size come from flags only.
		if !strings.HasPrefix(kv, "SWML_") && !strings.HasPrefix(kv, "RANK=") && !strings.HasPrefix(kv, "WORLD_SIZE=") && !strings.HasPrefix(kv, "OMPI_COMM_WORLD_") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if stderr != nil {
		p.cmd.Stderr = stderr
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		if drained != nil {
			<-drained
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait returns the exit code, killing the process (and failing) after
// timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s still running after %v; killed.\nstdout:\n%s\nstderr:\n%s", p.name, timeout, p.stdout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
}

// startSwitchProc starts a switch daemon on addr with its controller (and
// metrics) on free loopback ports, and returns it with the controller's
// address and the metrics URL.
func startSwitchProc(t *testing.T, addr string) (sw *proc, controller, metricsURL string) {
	t.Helper()
	sw = startProc(t, "switch", "switch", "--addr", addr, "--controller-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	m := waitForLine(t, "switch", sw.stderr, readyRE, sw.done, 60*time.Second)
	u := waitForLine(t, "switch", sw.stderr, metricsRE, sw.done, time.Second)
	return sw, m[1], u[1]
}

// stopSwitchProc sends SIGTERM and checks a clean exit with final counters.
func stopSwitchProc(t *testing.T, sw *proc) string {
	t.Helper()
	sw.signal(t, syscall.SIGTERM)
	if code := sw.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("switch exited %d after SIGTERM:\n%s", code, sw.stderr)
	}
	out := sw.stdout.String()
	for _, want := range []string{"final counters", "packets in", "packets out", "aggregated", "retransmissions", "drops", "unknown_qp=", "jobs"} {
		if !strings.Contains(out, want) {
			t.Fatalf("switch's final counters lack %q:\n%s", want, out)
		}
	}
	return out
}

func workerArgs(controller, addr string, rank, workers int, extra ...string) []string {
	return append([]string{"worker", "--controller", controller, "--connect-timeout", "60s", "--addr", addr,
		"--rank", fmt.Sprint(rank), "--workers", fmt.Sprint(workers), "--packet-size", "1024", "--msg-size", "4KiB", "--qps", "2"}, extra...)
}

// TestMultiProcess runs a switch daemon and three worker processes on
// loopback (127.13.16.x), the last one as `bench --controller`: every
// worker verifies its results and exits 0, the
// switch's metrics count the traffic, and SIGTERM stops the switch cleanly.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	sw, ctl, metricsURL := startSwitchProc(t, "127.13.16.1")
	before := scrape(t, metricsURL)
	if v := sample(t, before, "swml_switch_packets_total", "direction", "in"); v != 0 {
		t.Fatalf("switch counted %v packets before any worker", v)
	}
	const n = 3
	workers := make([]*proc, n)
	for r := range n {
		args := workerArgs(ctl, fmt.Sprintf("127.13.16.%d", 2+r), r, n, "--size", "64KiB", "--iters", "3", "--warmup", "1", "--json")
		if r == n-1 {
			args[0] = "bench" // bench --controller is the same worker
		}
		workers[r] = startProc(t, fmt.Sprintf("%s %d", args[0], r), args...)
	}
	var digest0 string
	for r, w := range workers {
		if code := w.wait(t, 120*time.Second); code != 0 {
			t.Fatalf("worker %d exited %d:\n%s", r, code, w.stderr)
		}
		var res benchmark.WorkerRecord
		if err := json.Unmarshal([]byte(w.stdout.String()), &res); err != nil {
			t.Fatalf("worker %d: not JSON: %v\n%s", r, err, w.stdout)
		}
		if !res.Verified || res.Rank != r || res.Workers != n || res.Iters != 3 || res.Elements != 16384 || res.Packets == 0 ||
			res.JobID == 0 || res.MedianNs < res.MinNs || res.MaxNs < res.MedianNs {
			t.Fatalf("worker %d result %+v", r, res)
		}
		// Every rank ends with the same bytes (bench --controller too).
		if len(res.ResultSHA256) != 64 || res.ResultSHA256 != digest0 && r > 0 {
			t.Fatalf("worker %d result digest %q, rank 0's %q", r, res.ResultSHA256, digest0)
		}
		if r == 0 {
			digest0 = res.ResultSHA256
		}
	}
	after := scrape(t, metricsURL)
	// 16384 elements = 64 packets of 1024 B per all-reduce and worker, 4
	// all-reduces, plus the exponent-only first round of each QP.
	if in := sample(t, after, "swml_switch_packets_total", "direction", "in"); in < n*4*64 {
		t.Errorf("switch received %v packets, want ≥ %d", in, n*4*64)
	}
	if v := sample(t, after, "swml_controller_sessions_total"); v != 1 {
		t.Errorf("controller started %v jobs, want 1", v)
	}
	if v := sample(t, after, "swml_controller_sessions_ended_total", "reason", "end"); v != 1 {
		t.Errorf("%v jobs ended cleanly, want 1", v)
	}
	out := stopSwitchProc(t, sw)
	if !regexp.MustCompile(`jobs\s+1\s`).MatchString(out) {
		t.Errorf("final counters do not show one job:\n%s", out)
	}
}

// TestMultiProcessWorkerDies kills (SIGKILL) or interrupts (SIGINT) one of
// three workers in the middle of a long run: the others fail with an error
// naming the abort within a bounded time, and the switch keeps serving.
func TestMultiProcessWorkerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, tc := range []struct {
		name   string
		net    string
		sig    os.Signal
		code   int    // the victim's exit status (-1: killed)
		reason string // in the survivors' error
	}{
		{"kill", "127.13.17", syscall.SIGKILL, -1, "keep-alive stream closed"},
		{"interrupt", "127.13.18", syscall.SIGINT, exitInterrupted, "rank 2 aborted the job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sw, ctl, _ := startSwitchProc(t, tc.net+".1")
			const n = 3
			workers := make([]*proc, n)
			for r := range n {
				workers[r] = startProc(t, fmt.Sprintf("worker %d", r),
					workerArgs(ctl, fmt.Sprintf("%s.%d", tc.net, 2+r), r, n, "--size", "16KiB", "--iters", "100000000", "--warmup", "0")...)
			}
			// Every rank has joined, its keep-alive stream attached: the
			// victim dies in the job, whatever all-reduce the others are at
			// (a rank's first call on a loaded race-detector host can take
			// longer than the peer timeout, so none is awaited).
			for r, w := range workers {
				waitForLine(t, fmt.Sprintf("worker %d", r), w.stderr, joinedRE, w.done, 60*time.Second)
			}
			victim := workers[n-1]
			victim.signal(t, tc.sig)
			if code := victim.wait(t, 60*time.Second); code != tc.code {
				t.Errorf("victim exited %d, want %d:\n%s", code, tc.code, victim.stderr)
			}
			if tc.sig == syscall.SIGINT && !strings.Contains(victim.stderr.String(), "interrupted") {
				t.Errorf("interrupted worker's error does not say so:\n%s", victim.stderr)
			}
			for r, w := range workers[:n-1] {
				if code := w.wait(t, 60*time.Second); code != 1 {
					t.Fatalf("worker %d exited %d, want 1:\n%s", r, code, w.stderr)
				}
				if s := w.stderr.String(); !strings.Contains(s, "the controller ended the job") || !strings.Contains(s, tc.reason) {
					t.Errorf("worker %d: error does not name the abort (%q):\n%s", r, tc.reason, s)
				}
			}
			stopSwitchProc(t, sw)
		})
	}
}

// TestMultiProcessWorkerStopped stops (SIGSTOP) one of three workers in
// the middle of a long run: its keep-alive stream and its socket stay open,
// so only the switch's slots tell it from a slow rank. The others fail
// after their peer timeout with an error that names it, its address and
// its silence, and says what to do (docs/control-plane.md "Who a stalled
// job waits for").
func TestMultiProcessWorkerStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	if testutil.Race {
		// scripts/test.sh runs it without the race detector.
		t.Skip("the stopped rank must be named before the controller's keep-alive ping ends the job (15 s): " +
			"race-detector processes beside other tests start and run too slowly for that margin")
	}
	const net = "127.13.61"
	sw, ctl, _ := startSwitchProc(t, net+".1")
	const n = 3
	// Long enough that a rank slow to start its first call on a loaded
	// host (a race-detector run beside others) does not fail the job
	// before every rank is running, and short of the controller's
	// keep-alive ping (10 s without traffic, then 5 s for the answer),
	// which ends the job once the stopped rank's stream goes silent
	// (docs/control-plane.md "Timeouts"). The ranks are all in steady
	// state when one is stopped (below), so the others' messages wait a
	// peer timeout from then, not from a slow start.
	peerTimeout := min(testutil.Scale(2*time.Second), 8*time.Second)
	workers := make([]*proc, n)
	for r := range n {
		workers[r] = startProc(t, fmt.Sprintf("worker %d", r),
			workerArgs(ctl, fmt.Sprintf("%s.%d", net, 2+r), r, n, "--size", "16KiB", "--iters", "100000000", "--warmup", "0",
				"--peer-timeout", peerTimeout.String(), "--metrics-addr", "127.0.0.1:0")...)
	}
	// Every rank has finished an all-reduce before one is stopped: a rank
	// slow to start its first call (a loaded race-detector run) would
	// otherwise be named too, rightly.
	waitAllReduced(t, workers)
	victim := workers[n-1]
	victim.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { victim.cmd.Process.Kill() }) // a stopped process dies of SIGKILL too
	// A survivor whose own timer had not fired yet reads the other's
	// error in the abort it sent, which this matches too.
	want := regexp.MustCompile(`no result from the switch for [0-9.]+s: rank 2 \(` + regexp.QuoteMeta(net) + `\.4\) silent [0-9.]+s; the rank named holds the job up: is its process stopped`)
	for r, w := range workers[:n-1] {
		if code := w.wait(t, peerTimeout+60*time.Second); code != 1 {
			t.Fatalf("worker %d exited %d, want 1:\n%s", r, code, w.stderr)
		}
		if s := w.stderr.String(); !want.MatchString(s) {
			t.Errorf("worker %d: error does not name the stopped rank (%q):\n%s", r, want, s)
		}
	}
	t.Log(workers[0].stderr)
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, 60*time.Second)
	stopSwitchProc(t, sw)
}

// tryScrape is url's body, or "" while it does not answer.
func tryScrape(url string) string {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestReexec checks TestMain's re-execution: the child is swml-rdma.
func TestReexec(t *testing.T) {
	p := startProc(t, "version", "--version")
	if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.stdout.String(), version) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, p.stdout, p.stderr)
	}
}

// TestBenchInterrupted stops a long embedded bench with SIGINT or SIGTERM:
// it exits promptly with the interrupted status, saying so and how far it
// got, prints the measured all-reduces that finished as a row marked
// interrupted (JSON), and its switch's and workers' addresses are free
// again.
func TestBenchInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, tc := range []struct {
		name string
		net  string
		sig  os.Signal
	}{
		{"SIGINT", "127.13.48", syscall.SIGINT},
		{"SIGTERM", "127.13.49", syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// On a terminal the bench draws its progress bar, which counts
			// the all-reduces: once one has finished, the row below has a
			// measured call.
			p := startProcOnTTY(t, "bench", "bench", "--link", "none", "--switch-addr", tc.net+".1", "--workers", "3", "--size", "64KiB",
				"--iters", "100000000", "--warmup", "0", "--baseline", "none", "--json")
			waitForLine(t, "bench", p.stderr, benchStepRE, p.done, 60*time.Second)
			p.signal(t, tc.sig)
			if code := p.wait(t, 60*time.Second); code != exitInterrupted {
				t.Fatalf("bench exited %d after %v, want %d:\n%s", code, tc.sig, exitInterrupted, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), "interrupted") || !strings.Contains(p.stderr.String(), "SwitchML all-reduces") {
				t.Errorf("bench's error does not say it was interrupted and how far it got:\n%s", p.stderr)
			}
			var rep benchReport
			if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
				t.Fatalf("stdout is no JSON document: %v\n%s", err, p.stdout)
			}
			if len(rep.Runs) != 1 || !rep.Runs[0].Interrupted || rep.Runs[0].Iters < 1 || !rep.Runs[0].Verified || rep.Runs[0].MedianNs <= 0 {
				t.Fatalf("want one row marked interrupted with the measured all-reduces that finished, got %+v", rep.Runs)
			}
			for i := 1; i <= 4; i++ {
				addr := fmt.Sprintf("%s.%d:4791", tc.net, i)
				c, err := net.ListenPacket("udp4", addr)
				if err != nil {
					t.Fatalf("%s still taken after the bench exited: %v", addr, err)
				}
				c.Close()
			}
		})
	}
}
