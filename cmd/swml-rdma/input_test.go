package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// exitCode is the status main would exit with for err.
func exitCode(err error) int {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

// wantUsageError checks that a command line is refused the way every bad
// input must be: one line naming the flag (and no library Config field),
// exit status 2, nothing on stdout (no help dump).
func wantUsageError(t *testing.T, args []string, want ...string) {
	t.Helper()
	out, _, err := run(t, args...)
	if err == nil {
		t.Fatalf("%v: accepted, want an error mentioning %q", args, want)
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%v: error %q, want it to mention %q", args, msg, w)
		}
	}
	if code := exitCode(err); code != exitUsage {
		t.Errorf("%v: exit status %d, want %d (error %q)", args, code, exitUsage, msg)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("%v: error spans lines, want one:\n%s", args, msg)
	}
	if strings.Contains(msg, "Config.") {
		t.Errorf("%v: error names a library field instead of the flag: %q", args, msg)
	}
	if out != "" {
		t.Errorf("%v: printed to stdout (help dump?):\n%s", args, out)
	}
}

// TestSizeOverflow: sizes whose byte count overflows int64 (or exceeds the
// limit) are refused naming --size, in every command that takes one; they
// used to panic, run a 1 GiB tensor or become 0.
func TestSizeOverflow(t *testing.T) {
	clearLaunchEnv(t)
	for _, size := range []string{"8589934592GiB", "17179869185G", "17179869184GiB", "9223372036854775807", "99999999999999999999", "1025GiB", "2TiB"} {
		for _, cmd := range [][]string{{"bench"}, {"worker", "--rank", "0", "--workers", "2"}, {"write-bw"}} {
			t.Run(cmd[0]+"/"+size, func(t *testing.T) {
				wantUsageError(t, append(cmd, "--size", size), "--size", strconv.Quote(size), "limit of 1 TiB")
			})
		}
	}
}

// TestParseSize: accepted spellings give the exact byte count; the largest
// accepted size is 1 TiB, one byte more is refused.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4096": 4096, "64KiB": 65536, "64K": 65536, "1MiB": 1 << 20, "2MB": 2000000, "256 MiB": 256 << 20,
		"1gib": 1 << 30, "1TiB": 1 << 40, "1099511627776": 1 << 40, "1024GiB": 1 << 40, " 8B ": 8, "1000GB": 1000000000000} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "-8GiB", "+5", "1.5GiB", "0x10", "GiB", "lots", "1099511627777", "1025GiB", "1100GB", "17179869184GiB", "1 2"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestFlagErrors: one case per bad input that once slipped through (and its neighbours);
// each is refused before anything is opened, in one line that names the
// flag and the fix, with exit status 2.
func TestFlagErrors(t *testing.T) {
	clearLaunchEnv(t)
	w := []string{"worker", "--rank", "0", "--workers", "2"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"bench writes", []string{"bench", "--writes", "whole"}, []string{"--writes", `"whole"`, "auto", "message", "packet"}},
		{"bench packet writes past the packet id", []string{"bench", "--writes", "packet", "--msg-size", "128KiB"}, []string{"--msg-size 128 KiB (128 packets of --packet-size 1024) with --writes packet", "64 packets", "--msg-size 64 KiB or less", "--writes auto"}},
		{"bench msg-size past the packet limit", []string{"bench", "--msg-size", "1GiB"}, []string{"--msg-size 1 GiB (1048576 packets", "at most 16384 packets", "give --msg-size 16 MiB or less"}},
		{"bench msg-size small packets", []string{"bench", "--packet-size", "256", "--msg-size", "256MiB"}, []string{"--msg-size", "--packet-size 256", "4 MiB or less"}},
		{"worker msg-size past the packet limit", append(w, "--msg-size", "1GiB"), []string{"--msg-size 1 GiB", "at most 16384 packets"}},
		{"bench qps too many", []string{"bench", "--qps", "5000"}, []string{"--qps 5000", "give 1 to 256 queue pairs", "a QP holds 16 switch slots", "default --pool-size has 4096"}},
		{"bench qps zero, small messages", []string{"bench", "--qps", "0", "--msg-size", "1KiB", "--packet-size", "1024"}, []string{"--qps 0: give 1 to 4096 queue pairs (a QP holds 1 switch slot with --msg-size 1 KiB"}},
		{"worker qps too many", append(w, "--qps", "5000"), []string{"--qps 5000", "give 1 to 256 queue pairs"}},
		{"bench job larger than the switch pool", []string{"bench", "--qps", "64", "--msg-size", "1MiB"}, []string{"--qps 64", "65536 switch slots", "lower --qps or --msg-size"}},
		{"bench one worker with the ring", []string{"bench", "--workers", "1"}, []string{"--workers 1 with --baseline ring", "--baseline none"}},
		{"bench one worker in a sweep with the ring", []string{"bench", "--workers", "1,2"}, []string{"--workers 1 with --baseline ring"}},
		{"write-bw message past the socket buffer", []string{"write-bw", "--size", "16MiB"}, []string{"--size 16 MiB", "4 MiB socket buffer", "give --size 4 MiB or less"}},
		{"write-bw window past the socket buffer", []string{"write-bw", "--size", "1MiB", "--tx-depth", "32"}, []string{"--size 1 MiB × --tx-depth 32", "give --tx-depth 4 or less"}},
		{"write-bw tx-depth zero", []string{"write-bw", "--tx-depth", "0"}, []string{"--tx-depth 0", "give 1 to 4096"}},
		{"write-bw tx-depth negative", []string{"write-bw", "--tx-depth", "-3"}, []string{"--tx-depth -3"}},
		{"bench iters not a number", []string{"bench", "--iters", "abc"}, []string{"--iters", `"abc"`, "swml-rdma bench --help"}},
		{"bench unknown flag", []string{"bench", "--iterations", "3"}, []string{"--iterations", "swml-rdma bench --help"}},
		{"worker rank not a number", []string{"worker", "--rank", "first"}, []string{"--rank", "swml-rdma worker --help"}},
		{"switch pool-size not a number", []string{"switch", "--pool-size", "-1"}, []string{"--pool-size", "swml-rdma switch --help"}},
		{"write-bw flag without value", []string{"write-bw", "--mtu"}, []string{"--mtu", "swml-rdma write-bw --help"}},
		{"global unknown flag", []string{"--verbose"}, []string{"--verbose", "swml-rdma --help"}},
		{"controller required flags", []string{"controller", "--p4info", "x.txt"}, []string{"swml-rdma controller needs --p4runtime, --switch-mac, --switch-ip"}},
		{"controller pool-size past 32 bits", append(ctlOK(), "--pool-size", "4294967296"), []string{"--pool-size 4294967296", "1 to 2^30-1"}},
		{"controller drop NaN", append(ctlOK(), "--drop-ingress", "NaN"), []string{"--drop-ingress NaN", "probability from 0 to 1"}},
		{"controller drop above 1", append(ctlOK(), "--drop-egress", "1.5"), []string{"--drop-egress 1.5"}},
		{"controller port", append(ctlOK(), "--port", "10.0.0.2=99999999999"), []string{"--port", "not a port number"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantUsageError(t, tt.args, tt.want...) })
	}
}

// ctlOK is a controller command line whose required flags are all set.
func ctlOK() []string {
	return []string{"controller", "--p4runtime", "127.0.0.1:1", "--p4info", "no-such.p4info.txt", "--switch-mac", "02:00:00:00:00:01", "--switch-ip", "10.0.0.1"}
}

// TestEnvErrors: a SWML_ variable that does not parse is refused like the
// flag it stands for.
func TestEnvErrors(t *testing.T) {
	t.Setenv("SWML_ITERS", "abc")
	wantUsageError(t, []string{"bench"}, "SWML_ITERS", "for --iters", "swml-rdma bench --help")
	t.Setenv("SWML_ITERS", "")
	t.Setenv("SWML_SIZE", "17179869184GiB")
	wantUsageError(t, []string{"bench"}, "--size", "limit of 1 TiB")
}

// TestMemoryRefused: a tensor or a switch pool that cannot fit in this
// machine's available memory is refused before anything is allocated, with
// how much it needs, how much there is and what to lower. The sizes need
// terabytes, more than any machine that runs these tests has.
func TestMemoryRefused(t *testing.T) {
	clearLaunchEnv(t)
	if _, ok := availableMemory(); !ok {
		t.Skip("available memory unknown here (no /proc/meminfo): nothing is refused")
	}
	wantUsageError(t, []string{"bench", "--size", "1TiB", "--workers", "16", "--baseline", "none"},
		"--size 1 TiB with --workers 16 needs about 32.0 TiB of memory", "is available", "lower --size or --workers")
	wantUsageError(t, []string{"worker", "--rank", "0", "--workers", "64", "--size", "1TiB"},
		"--size 1 TiB with --workers 64 needs about 65.0 TiB", "every rank's input", "lower --size")
	_, err := runSwitchBounded(t, "--pool-size", strconv.Itoa(1<<30-1), "--addr", "127.13.40.1", "--controller-addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "--pool-size 1073741823 needs about 8.1 TiB") || exitCode(err) != exitUsage {
		t.Fatalf("switch --pool-size 2^30-1: %v (exit %d), want the memory it needs and exit status %d", err, exitCode(err), exitUsage)
	}
}

// TestMemoryModel: with the available memory pinned, the cases that once ran out of memory
// (bench --size 64GiB, switch --pool-size 100000000) are refused naming
// what they need, and a run that fits is let through.
func TestMemoryModel(t *testing.T) {
	saved := availableMemory
	t.Cleanup(func() { availableMemory = saved })
	availableMemory = func() (uint64, bool) { return 16 << 30, true }

	cfg := benchConfig{workers: 4, sweep: []int{4}, jobSpec: jobSpec{size: 64 << 30, packetSize: 1024, msgSize: 16 << 10, qps: 8}, baseline: "ring"}
	err := checkBench(cfg)
	if err == nil || !strings.Contains(err.Error(), "512.1 GiB of memory") || !strings.Contains(err.Error(), "but 16 GiB is available") {
		t.Fatalf("bench 64 GiB × 4 workers with 16 GiB: %v", err)
	}
	cfg.size = 1 << 30 // 4 × 2 × 1 GiB + overhead fits 16 GiB
	if err := checkBench(cfg); err != nil {
		t.Fatalf("bench 1 GiB × 4 workers with 16 GiB: %v", err)
	}
	if err := checkSwitchPool(100000000); err == nil || !strings.Contains(err.Error(), "--pool-size 100000000 needs about 770.5 GiB") {
		t.Fatalf("pool of 10^8 slots with 16 GiB: %v", err)
	}
	if err := checkSwitchPool(switchmodel.DefaultPoolSize); err != nil {
		t.Fatalf("default pool: %v", err)
	}
	// Over links the packets in flight count too: 4 NICs holding the
	// ring's window (256 packets and 16 acknowledgements) and the switch
	// every worker's 8 QPs × 16 packets, a slot each.
	cfg.link = 200e6
	if got, want := benchMemory(cfg).bytes-benchMemory(benchConfig{workers: 4, sweep: []int{4}, jobSpec: cfg.jobSpec, baseline: "ring"}).bytes,
		uint64(4*272+4*128)*memlink.DefaultMaxDatagram; got != want {
		t.Fatalf("links add %d bytes to the model, want %d", got, want)
	}
	availableMemory = func() (uint64, bool) { return 0, false }
	cfg.size = 64 << 30
	if err := checkBench(cfg); err != nil {
		t.Fatalf("unknown available memory must refuse nothing: %v", err)
	}
}

// TestBenchOneWorkerNoBaseline: one worker without the ring runs and
// prints no ratio. Addresses: 127.13.41.x.
func TestBenchOneWorkerNoBaseline(t *testing.T) {
	out, _, err := run(t, "bench", "--workers", "1", "--baseline", "none", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--switch-addr", "127.13.41.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "switchml") || strings.Contains(out, "ring") || strings.Contains(out, "0.00×") {
		t.Fatalf("output:\n%s", out)
	}
}

// TestSessionTimeoutNamesFlags: a worker whose peers never register gets
// the controller's error naming the flags to fix (--session-id,
// --workers, the switch's --session-timeout). Addresses: 127.13.42.x.
func TestSessionTimeoutNamesFlags(t *testing.T) {
	clearLaunchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	swCtx, stopSwitch := context.WithCancel(ctx)
	defer stopSwitch()
	_, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.42.1", "--controller-addr", "127.0.0.1:0", "--session-timeout", "300ms")
	exited := make(chan struct{})
	go func() { <-done; close(exited) }()
	ctl := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]
	_, _, err := run(t, "worker", "--rank", "0", "--workers", "2", "--controller", ctl, "--addr", "127.13.42.2", "--size", "16KiB", "--iters", "1", "--warmup", "0")
	if err == nil {
		t.Fatal("a worker of a 2-worker job ran alone")
	}
	for _, want := range []string{"rank 1 of 2 never registered", "--session-id and --workers", "--session-timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q, want it to mention %q", err, want)
		}
	}
	stopSwitch()
	<-exited
}

// TestSizeMismatchNamed: two workers of a job with different --size are
// both refused at registration, naming the tensor lengths (the
// job used to run and end in RESULT MISMATCH). Addresses: 127.13.52.x.
func TestSizeMismatchNamed(t *testing.T) {
	clearLaunchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	swCtx, stopSwitch := context.WithCancel(ctx)
	defer stopSwitch()
	_, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.52.1", "--controller-addr", "127.0.0.1:0")
	exited := make(chan struct{})
	go func() { <-done; close(exited) }()
	ctl := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]
	worker := func(r int, size string) []string {
		return []string{"worker", "--rank", strconv.Itoa(r), "--workers", "2", "--controller", ctl,
			"--addr", fmt.Sprintf("127.13.52.%d", 2+r), "--size", size, "--iters", "1", "--warmup", "0"}
	}
	// Rank 0 waits in its registration; rank 1 starts once rank 0's app is
	// set up (two urfave/cli apps must not set up at once: they share the
	// command definitions).
	_, stderr0, done0 := runInProcess(ctx, worker(0, "16KiB")...)
	exited0 := make(chan struct{})
	var err0 error
	go func() { err0 = <-done0; close(exited0) }()
	waitForLine(t, "worker 0", stderr0, regexp.MustCompile(`msg=joining`), exited0, 30*time.Second)
	_, _, err1 := run(t, worker(1, "32KiB")...)
	<-exited0
	for r, err := range []error{err0, err1} {
		if err == nil || !strings.Contains(err.Error(), "tensor length") || !strings.Contains(err.Error(), "16384 bytes") || !strings.Contains(err.Error(), "32768 bytes") {
			t.Errorf("rank %d: %v; want the tensor length mismatch named", r, err)
		}
	}
	stopSwitch()
	<-exited
}

// TestRegistrationTokenWorker: with `switch --registration-token-file`, a
// worker without the token, or with another, is refused saying which and
// naming the flag; one with
// --registration-token-file runs. Addresses: 127.13.53.x.
func TestRegistrationTokenWorker(t *testing.T) {
	clearLaunchEnv(t)
	tok := filepath.Join(t.TempDir(), "registration.token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	swCtx, stopSwitch := context.WithCancel(ctx)
	defer stopSwitch()
	_, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.53.1", "--controller-addr", "127.0.0.1:0", "--registration-token-file", tok)
	exited := make(chan struct{})
	go func() { <-done; close(exited) }()
	ctl := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]
	args := []string{"worker", "--rank", "0", "--workers", "1", "--controller", ctl, "--addr", "127.13.53.2", "--size", "16KiB", "--iters", "1", "--warmup", "0"}
	if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "requires its registration token and the call carried none") ||
		!strings.Contains(err.Error(), "pass --registration-token-file FILE") {
		t.Errorf("worker without the token: %v; want it refused naming the token and --registration-token-file", err)
	}
	wrong := filepath.Join(t.TempDir(), "wrong.token")
	if err := os.WriteFile(wrong, []byte("another-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, append(args, "--registration-token-file", wrong)...); err == nil || !strings.Contains(err.Error(), "is not this controller's registration token") ||
		!strings.Contains(err.Error(), "--registration-token-file holds another token than the switch's") {
		t.Errorf("worker with a wrong token: %v; want it told the token is wrong (not missing) and --registration-token-file", err)
	}
	if _, _, err := run(t, append(args, "--registration-token-file", tok)...); err != nil {
		t.Errorf("worker with the token: %v", err)
	}
	stopSwitch()
	<-exited
}

func TestParseLoopbackPorts(t *testing.T) {
	got, err := parseLoopbackPorts([]string{"136", "137, 138"})
	if err != nil || len(got) != 3 || got[0] != 136 || got[2] != 138 {
		t.Fatalf("parseLoopbackPorts: %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "-1", "1e3", "4294967296"} {
		if _, err := parseLoopbackPorts([]string{bad}); err == nil || !strings.Contains(err.Error(), "--loopback-port") {
			t.Errorf("parseLoopbackPorts(%q): %v, want an error naming the flag", bad, err)
		}
	}
}

// TestControllerRefusalsNameFlags: what the controller refuses is said
// with the worker's flag that changes it: a QP count other than the
// job's (--qps), and a session id a running job holds (--session-id).
// Addresses: 127.13.73.x.
func TestControllerRefusalsNameFlags(t *testing.T) {
	clearLaunchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	swCtx, stopSwitch := context.WithCancel(ctx)
	defer stopSwitch()
	_, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.73.1", "--controller-addr", "127.0.0.1:0")
	exited := make(chan struct{})
	go func() { <-done; close(exited) }()
	ctl := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]
	c, err := control.Dial(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := func(sid uint32, rank, workers, qps int) control.Registration {
		r := control.Registration{SessionID: sid, Rank: rank, NumWorkers: workers, Addr: netip.MustParseAddr("127.13.73.9"),
			PacketSize: 1024, MessageSize: 16 * 1024, NoKeepAlive: true}
		for i := range qps {
			r.QPNs, r.PSNs = append(r.QPNs, uint32(0x100+i)), append(r.PSNs, uint32(i))
		}
		return r
	}
	worker := func(sid string, rank, workers int) []string {
		return []string{"worker", "--rank", strconv.Itoa(rank), "--workers", strconv.Itoa(workers), "--controller", ctl, "--session-id", sid,
			"--addr", "127.13.73.2", "--size", "16KiB", "--iters", "1", "--warmup", "0", "--qps", "2"}
	}

	// Rank 0 of session 5 registers 1 QP; the worker (rank 1) comes with
	// --qps 2.
	first := make(chan error, 1)
	go func() {
		_, err := c.RegisterRDMA(ctx, reg(5, 0, 2, 1))
		first <- err
	}()
	// Whichever registers first, both are refused.
	_, _, err1 := run(t, worker("5", 1, 2)...)
	if err1 == nil || !strings.Contains(err1.Error(), "qps") || !strings.Contains(err1.Error(), "pass the same --qps to every worker of the job") {
		t.Errorf("worker with another QP count: %v; want the mismatch and --qps", err1)
	}
	if err := <-first; !errors.Is(err, control.ErrMismatch) {
		t.Errorf("rank 0: %v; want the mismatch too", err)
	}

	// Session 6 runs a 1-worker job; a worker joining it is told to pick
	// another --session-id.
	a, err := c.RegisterRDMA(ctx, reg(6, 0, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, worker("6", 0, 1)...)
	if err == nil || !strings.Contains(err.Error(), "session 6 is already running as job") || !strings.Contains(err.Error(), "pass another --session-id") {
		t.Errorf("worker in a running session: %v; want it told to pass another --session-id", err)
	}
	if err := c.EndSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	stopSwitch()
	<-exited
}
