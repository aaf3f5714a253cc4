package main

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/join"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// clearLaunchEnv removes the launchers' rank variables for one test.
func clearLaunchEnv(t *testing.T) {
	for _, v := range append(append([]string{}, join.RankEnv...), join.WorldSizeEnv...) {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)  // unset, not empty: urfave/cli takes an empty bench $SWML_WORKERS as given
	}
}

// TestWorkerBadFlags: every flag error names the flag and the fix, before
// any socket is opened.
func TestWorkerBadFlags(t *testing.T) {
	clearLaunchEnv(t)
	ok := []string{"--rank", "0", "--workers", "2"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no rank", []string{"--workers", "2"}, "no rank (--rank, $SWML_RANK, $OMPI_COMM_WORLD_RANK or $RANK)"},
		{"no workers", []string{"--rank", "0"}, "no worker count (--workers, $SWML_WORKERS"},
		{"workers zero", []string{"--rank", "0", "--workers", "0"}, "--workers 0: a job has 1 to"},
		{"rank out of range", []string{"--rank", "3", "--workers", "3"}, "--rank 3 with --workers 3: ranks are 0 … 2"},
		{"rank negative", []string{"--rank", "-1", "--workers", "3"}, "--rank -1 with --workers 3: ranks are 0 … 2"},
		{"size zero", append(ok, "--size", "0"), "positive byte count"},
		{"size odd", append(ok, "--size", "10"), "multiple of 4"},
		{"iters", append(ok, "--iters", "0"), "--iters 0"},
		{"packet size", append(ok, "--packet-size", "1000"), "256, 512, 1024, 2048 and 4096"},
		{"msg size", append(ok, "--msg-size", "3000"), "times a power of two"},
		{"dtype", append(ok, "--dtype", "bf16"), "use float32 or int32"},
		{"wire", append(ok, "--wire", "8"), "give 32 (int32 lanes) or 16"},
		{"wire list", append(ok, "--wire", "32,16"), "a job has one element width"},
		{"wire int32", append(ok, "--wire", "16", "--dtype", "int32"), "--wire 16: int32 needs the 32-bit wire"},
		{"qps", append(ok, "--qps", "0"), "--qps 0"},
		{"controller", append(ok, "--controller", "ctl.example"), "give host:port"},
		{"connect timeout", append(ok, "--connect-timeout", "-1s"), "--connect-timeout"},
		{"nic", append(ok, "--nic", "dpdk"), "use soft (userspace NIC"},
		{"addr", append(ok, "--addr", "eth0"), "give this worker's own IP address"},
		{"gid index soft", append(ok, "--gid-index", "3"), "--nic soft: the userspace NIC has no GID table"},
		{"gid index junk", append(ok, "--gid-index", "first"), "use auto"},
		{"gid index ibverbs", append(ok, "--nic", "ibverbs", "--addr", "10.0.0.1", "--gid-index", "1"), "pass that GID's address as --addr"},
		{"ibverbs without addr", append(ok, "--nic", "ibverbs"), "--nic ibverbs needs --addr"},
		{"metrics addr", append(ok, "--metrics-addr", "9100"), "--metrics-addr \"9100\": give host:port"},
		{"log level", append(ok, "--log-level", "chatty"), "use debug, info, warn or error"},
		{"positional", append(ok, "go"), "takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"worker"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestWorkerRankFromEnv: explicit flags win over SWML_RANK/SWML_WORKERS,
// which win over Open MPI's variables, which win over torchrun's
// (join.Member, the rule libswml follows too). The resolved rank shows in the error of an
// ibverbs open, which fails on this machine (no device, or no -tags
// ibverbs) with the fixes.
func TestWorkerRankFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"torchrun", map[string]string{"RANK": "1", "WORLD_SIZE": "4"}, nil, "worker rank 1:"},
		{"mpirun over torchrun", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "RANK": "1", "WORLD_SIZE": "2"}, nil, "worker rank 2:"},
		{"flags over both", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "RANK": "1"}, []string{"--rank", "3"}, "worker rank 3:"},
		{"mixed sources", map[string]string{"RANK": "5", "OMPI_COMM_WORLD_SIZE": "4"}, nil, "$RANK 5 with $OMPI_COMM_WORLD_SIZE 4"},
		{"bad env", map[string]string{"RANK": "first", "WORLD_SIZE": "4"}, nil, `$RANK "first" is not a number`},
		{"SWML over mpirun", map[string]string{"SWML_RANK": "3", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, nil, "worker rank 3:"},
		{"SWML_WORKERS not a number", map[string]string{"SWML_WORKERS": "x", "RANK": "0"}, nil, `$SWML_WORKERS "x" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearLaunchEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string{"worker", "--nic", "ibverbs", "--addr", "127.13.19.250", "--connect-timeout", "0s"}, tt.args...)
			_, _, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestWorkerNoRDMADevice: --nic ibverbs without a device names the fixes.
func TestWorkerNoRDMADevice(t *testing.T) {
	clearLaunchEnv(t)
	_, _, err := run(t, "worker", "--rank", "0", "--workers", "1", "--nic", "ibverbs", "--device", "rxe0", "--addr", "127.13.19.251")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--nic ibverbs", "--nic soft", "-tags ibverbs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestWorkerControllerUnreachable: no controller → a clear error within
// --connect-timeout. Addresses: 127.13.19.x.
func TestWorkerControllerUnreachable(t *testing.T) {
	clearLaunchEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	start := time.Now()
	_, _, err = run(t, "worker", "--rank", "0", "--workers", "2", "--addr", "127.13.19.2", "--controller", closed, "--connect-timeout", "300ms")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"controller " + closed + ": unreachable after 300ms", "start `swml-rdma switch`", "--connect-timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if d := time.Since(start); d > testutil.Scale(20*time.Second) {
		t.Errorf("took %v", d) // generous: only a hang fails
	}
}

// TestWorkerAddrInUse: the worker's --addr and --metrics-addr already taken.
func TestWorkerAddrInUse(t *testing.T) {
	clearLaunchEnv(t)
	taken, err := soft.Open(soft.Config{Addr: mustAddr(t, "127.13.19.3")})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, _, err = run(t, "worker", "--rank", "0", "--workers", "2", "--addr", "127.13.19.3", "--connect-timeout", "0s")
	if err == nil || !strings.Contains(err.Error(), "--addr 127.13.19.3") || !strings.Contains(err.Error(), "give each endpoint its own address") {
		t.Fatalf("error %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, _, err = run(t, "worker", "--rank", "0", "--workers", "2", "--addr", "127.13.19.4", "--metrics-addr", l.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr "+l.Addr().String()+": address already in use") {
		t.Fatalf("error %v", err)
	}
}

// TestParseBusyPoll: --busy-poll takes auto (the device's default), off,
// or a positive duration, and names the choices for anything else.
func TestParseBusyPoll(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"auto", 0, false},
		{"", 0, false},
		{"off", -1, false},
		{"0", -1, false},
		{"1ms", time.Millisecond, false},
		{"20us", 20 * time.Microsecond, false},
		{"-5us", 0, true},
		{"fast", 0, true},
	} {
		got, err := parseBusyPoll(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseBusyPoll(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), "off, or auto") {
			t.Errorf("parseBusyPoll(%q): %v does not name the choices", tt.in, err)
		}
	}
}
