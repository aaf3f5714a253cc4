package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs/soft"
)

// runSwitchBounded runs `switch args…` in this process for at most 30 s: a
// bad configuration must fail at start, never serve.
func runSwitchBounded(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, stderr, done := runInProcess(ctx, append([]string{"switch"}, args...)...)
	err := <-done
	if ctx.Err() != nil {
		t.Fatalf("switch %v served instead of failing:\n%s", args, stderr)
	}
	return stderr.String(), err
}

func TestSwitchBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"addr", []string{"--addr", "switch0"}, "give the switch's own IP address"},
		{"addr unspecified", []string{"--addr", "0.0.0.0"}, "give the switch's own IP address"},
		{"controller addr", []string{"--controller-addr", "localhost"}, "give host:port"},
		{"metrics addr", []string{"--metrics-addr", "9100"}, "give host:port"},
		{"pool size", []string{"--pool-size", "0"}, "--pool-size 0"},
		{"icrc", []string{"--icrc", "off"}, "use verify or verify-ipv6"},
		{"cores", []string{"--cores", "-1"}, "--cores -1"},
		{"offload", []string{"--offload", "yes"}, "use auto, on"},
		{"loss", []string{"--loss", "0.7"}, "[0, 0.5)"},
		{"session timeout", []string{"--session-timeout", "0s"}, "positive duration"},
		{"log level", []string{"--log-level", "loud"}, "use debug, info, warn or error"},
		{"positional", []string{"now"}, "takes no arguments"},
		{"leaf without upstream", []string{"--leaves", "2", "--leaf-index", "0", "--leaf-workers", "4"}, "give --upstream"},
		{"upstream addr", []string{"--upstream", "spine", "--leaves", "2", "--leaf-workers", "4"}, "give host:port"},
		{"leaf index", []string{"--upstream", "127.0.0.1:50099", "--leaves", "2", "--leaf-index", "2", "--leaf-workers", "4"}, "--leaves 2 --leaf-index 2"},
		{"no leaves", []string{"--upstream", "127.0.0.1:50099", "--leaf-workers", "4"}, "--leaves 0 --leaf-index 0"},
		{"leaf workers", []string{"--upstream", "127.0.0.1:50099", "--leaves", "2"}, "--leaf-workers 0"},
		{"pcap", []string{"--addr", "127.13.20.9", "--controller-addr", "127.0.0.1:0", "--pcap", filepath.Join(t.TempDir(), "no", "such", "dir.pcap")}, "--pcap"},
		{"cpuprofile", []string{"--addr", "127.13.20.9", "--controller-addr", "127.0.0.1:0", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "cpu.prof")}, "--cpuprofile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runSwitchBounded(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestSwitchAddressInUse: each of the switch's three listeners reports a
// taken address with the address and the fix. Addresses: 127.13.20.x.
func TestSwitchAddressInUse(t *testing.T) {
	taken, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.13.20.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	busy := tcp.Addr().String()

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"roce", []string{"--addr", "127.13.20.1", "--controller-addr", "127.0.0.1:0"}, []string{"--addr 127.13.20.1", "already uses this address"}},
		{"controller", []string{"--addr", "127.13.20.2", "--controller-addr", busy}, []string{"--controller-addr " + busy, "already in use", "pick a free port"}},
		{"metrics", []string{"--addr", "127.13.20.3", "--controller-addr", "127.0.0.1:0", "--metrics-addr", busy}, []string{"--metrics-addr " + busy, "already in use"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runSwitchBounded(t, tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestSwitchCPUProfile: --cpuprofile writes a pprof profile (gzip) of the
// daemon once it stops. Address: 127.13.20.11.
func TestSwitchCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switch.prof")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	swCtx, stopSwitch := context.WithCancel(ctx)
	_, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.20.11", "--controller-addr", "127.0.0.1:0", "--cpuprofile", path)
	exited := make(chan struct{})
	var runErr error
	go func() { runErr = <-done; close(exited) }()
	waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)
	stopSwitch()
	<-exited
	if runErr != nil {
		t.Fatalf("switch: %v\n%s", runErr, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("--cpuprofile %s: %d bytes, %v; want a gzip-compressed pprof profile", path, len(b), err)
	}
}
