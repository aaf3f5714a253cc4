package main

import (
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// peakRSS is the peak resident set of an exited process, in bytes.
func peakRSS(t *testing.T, p *proc) uint64 {
	t.Helper()
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok || ru.Maxrss <= 0 {
		t.Fatalf("%s: no peak RSS in its resource usage", p.name)
	}
	return uint64(ru.Maxrss) << 10 // kilobytes on Linux
}

// checkModel fails if a process's peak RSS exceeds the memory model's
// need, the amount the memory check refuses against: a run the check lets
// through must not be killed for memory. It also fails if the tensor is too
// small for the test to see one tensor the model leaves out (the model's
// fixed parts, the process and the switch pool, would hide it).
func checkModel(t *testing.T, what string, rss uint64, need memoryNeed, tensor uint64) {
	t.Helper()
	t.Logf("%s: peak RSS %s, modelled %s", what, approxBytes(rss), approxBytes(need.bytes))
	if rss > need.bytes {
		t.Errorf("%s: peak RSS %s exceeds the memory model's %s (%v)", what, approxBytes(rss), approxBytes(need.bytes), strings.Join(need.parts, " + "))
	}
	if rss+tensor <= need.bytes {
		t.Errorf("%s: a %s tensor is too small to show one the model leaves out (peak %s, model %s): raise the test's size",
			what, approxBytes(tensor), approxBytes(rss), approxBytes(need.bytes))
	}
}

// skipMeasuredRun skips a test that measures a process's memory where it
// cannot: with -short, off Linux (Maxrss is in kilobytes there), and under
// the race detector, whose shadow memory multiplies a process's RSS.
func skipMeasuredRun(t *testing.T) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("a measured run")
	case runtime.GOOS != "linux":
		t.Skip("peak RSS is read as Linux reports it (kilobytes)")
	case testutil.Race:
		t.Skip("the race detector's shadow memory multiplies the RSS the model describes")
	}
}

// jobFlags are the job flags the memory tests pass and model alike.
func jobFlags(size int) []string {
	return []string{"--size", fmt.Sprintf("%dMiB", size>>20), "--packet-size", "1024", "--msg-size", "16KiB", "--qps", "8", "--iters", "1", "--warmup", "0"}
}

// memoryTestSize is the tensor of the memory tests: large enough that one
// tensor more than the model counts exceeds the model's fixed parts.
const memoryTestSize = 96 << 20

// TestMemoryModelBench runs the embedded bench with one worker and checks
// its peak RSS against the model the memory check refuses with
// (docs/operations.md "Memory"). Addresses: 127.13.62.x.
func TestMemoryModelBench(t *testing.T) {
	skipMeasuredRun(t)
	args := append([]string{"bench", "--link", "none", "--workers", "1", "--baseline", "none", "--switch-addr", "127.13.62.1"}, jobFlags(memoryTestSize)...)
	p := startProc(t, "bench", args...)
	if code := p.wait(t, 300*time.Second); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, p.stderr)
	}
	cfg := benchConfig{workers: 1, sweep: []int{1}, baseline: "none",
		jobSpec: jobSpec{size: memoryTestSize, packetSize: 1024, msgSize: 16 << 10, qps: 8}}
	checkModel(t, "bench --workers 1", peakRSS(t, p), benchMemory(cfg), memoryTestSize)
}

// TestMemoryModelWorker runs a switch daemon and two worker processes and
// checks each worker's peak RSS against the model the memory check
// refuses with (docs/operations.md "Memory"). Addresses: 127.13.63.x.
func TestMemoryModelWorker(t *testing.T) {
	skipMeasuredRun(t)
	const net, n = "127.13.63", 2
	sw, ctl, _ := startSwitchProc(t, net+".1")
	workers := make([]*proc, n)
	for r := range n {
		args := []string{"worker", "--controller", ctl, "--connect-timeout", "60s", "--addr", fmt.Sprintf("%s.%d", net, 2+r),
			"--rank", fmt.Sprint(r), "--workers", fmt.Sprint(n)}
		workers[r] = startProc(t, fmt.Sprintf("worker %d", r), append(args, jobFlags(memoryTestSize)...)...)
	}
	cfg := &workerConfig{workers: n, jobSpec: jobSpec{size: memoryTestSize, packetSize: 1024, msgSize: 16 << 10, qps: 8}}
	for r, w := range workers {
		if code := w.wait(t, 300*time.Second); code != 0 {
			t.Fatalf("worker %d exited %d:\n%s", r, code, w.stderr)
		}
		checkModel(t, fmt.Sprintf("worker %d", r), peakRSS(t, w), workerMemory(cfg), memoryTestSize)
	}
	stopSwitchProc(t, sw)
}
