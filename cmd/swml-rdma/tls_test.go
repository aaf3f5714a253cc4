package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// TestWorkerTLS runs `swml-rdma switch` serving TLS (and mutual TLS) in
// this process, a 2-rank job of `worker` and `bench --controller` that
// dial it with --tls-ca (and a client certificate), and the clients that
// miss it: each fails at once saying what is wrong and which flag fixes
// it. Addresses: 127.13.71.x (TLS), 127.13.72.x (mutual TLS).
func TestWorkerTLS(t *testing.T) {
	clearLaunchEnv(t)
	pki := testutil.WritePKI(t)
	for _, tc := range []struct {
		name   string
		net    string
		server []string // the switch's TLS flags
		client []string // a good client's
		bad    []struct{ flags, want []string }
	}{
		{
			name: "TLS", net: "127.13.71",
			server: []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey},
			client: []string{"--tls-ca", pki.CA},
			bad: []struct{ flags, want []string }{
				{nil, []string{"speaks TLS; this client dials plaintext", "pass --tls-ca FILE, the CA that signed the switch's --tls-cert"}},
				{[]string{"--tls-ca", pki.OtherCA}, []string{"signed by no CA this client trusts", "pass --tls-ca FILE"}},
				{[]string{"--tls-ca", pki.CA, "--tls-server-name", "switch9.example"}, []string{"does not hold the name dialed", "--tls-server-name NAME"}},
			},
		},
		{
			name: "mutual TLS", net: "127.13.72",
			server: []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CA},
			client: []string{"--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey},
			bad: []struct{ flags, want []string }{
				{nil, []string{"speaks TLS", "pass --tls-ca"}},
				{[]string{"--tls-ca", pki.CA}, []string{"requires a client certificate; this client has none", "pass --tls-cert and --tls-key"}},
				{[]string{"--tls-ca", pki.CA, "--tls-cert", pki.OtherClientCert, "--tls-key", pki.OtherClientKey}, []string{"refused this client's certificate", "--tls-client-ca"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			swCtx, stopSwitch := context.WithCancel(ctx)
			defer stopSwitch()
			_, stderr, done := runInProcess(swCtx, append([]string{"switch", "--addr", tc.net + ".1", "--controller-addr", "127.0.0.1:0"}, tc.server...)...)
			exited := make(chan struct{})
			go func() { <-done; close(exited) }()
			ctl := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]
			job := func(cmd string, rank int, sid string, extra []string) []string {
				return append([]string{cmd, "--rank", fmt.Sprint(rank), "--workers", "2", "--controller", ctl, "--session-id", sid,
					"--addr", fmt.Sprintf("%s.%d", tc.net, 2+rank), "--size", "16KiB", "--iters", "2", "--warmup", "1", "--json"}, extra...)
			}
			// Rank 0 is a worker, waiting in its registration; rank 1 is
			// bench --controller, started once rank 0's app is set up.
			out0, stderr0, done0 := runInProcess(ctx, job("worker", 0, "1", tc.client)...)
			exited0 := make(chan struct{})
			var err0 error
			go func() { err0 = <-done0; close(exited0) }()
			waitForLine(t, "worker 0", stderr0, regexp.MustCompile(`msg=joining`), exited0, 30*time.Second)
			out1, _, err1 := run(t, job("bench", 1, "1", tc.client)...)
			<-exited0
			if err0 != nil || err1 != nil {
				t.Fatalf("worker rank 0: %v\nbench rank 1: %v", err0, err1)
			}
			for r, out := range []string{out0.String(), out1} {
				if !strings.Contains(out, `"verified": true`) {
					t.Errorf("rank %d over %s printed %s; want a verified result", r, tc.name, out)
				}
			}
			for i, b := range tc.bad {
				args := job("worker", 0, fmt.Sprint(10+i), b.flags)
				args[4] = "1" // --workers 1: nothing to wait for
				_, _, err := run(t, args...)
				if err == nil {
					t.Errorf("worker with %q ran", b.flags)
					continue
				}
				for _, want := range b.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("worker with %q: %v\nwant it to say %q", b.flags, err, want)
					}
				}
				if strings.Contains(err.Error(), "unreachable") {
					t.Errorf("worker with %q: %v; a running switch called unreachable", b.flags, err)
				}
			}
			stopSwitch()
			<-exited
		})
	}
}

// TestWorkerTLSFlags: the client TLS flags are checked before anything is
// opened, naming the flag.
func TestWorkerTLSFlags(t *testing.T) {
	clearLaunchEnv(t)
	pki := testutil.WritePKI(t)
	base := []string{"worker", "--rank", "0", "--workers", "1", "--controller", "127.0.0.1:1"}
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"cert without key", []string{"--tls-ca", pki.CA, "--tls-cert", pki.ClientCert}, "--tls-cert and --tls-key go together"},
		{"server name alone", []string{"--tls-server-name", "switch1"}, "--tls-server-name applies to TLS: pass --tls-ca FILE too"},
		{"missing CA file", []string{"--tls-ca", pki.CA + ".missing"}, "--tls-ca \"" + pki.CA + ".missing\""},
		{"CA not PEM", []string{"--tls-ca", pki.ServerKey}, "no PEM certificate in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, append(base, tc.flags...)...)
			if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v (exit %d); want exit %d saying %q", tc.flags, err, exitCode(err), exitUsage, tc.want)
			}
		})
	}
	_, _, err := run(t, "switch", "--tls-client-ca", pki.CA)
	if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--tls-client-ca needs TLS: pass --tls-cert and --tls-key too") {
		t.Errorf("switch --tls-client-ca alone: %v", err)
	}
}
