package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

func TestResolve(t *testing.T) {
	for _, e := range []string{"SWML_CONTROLLER", "SWML_SESSION_ID", "SWML_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SWML_WORKERS", "WORLD_SIZE",
		"OMPI_COMM_WORLD_SIZE", "SWML_NIC", "SWML_ADDR", "SWML_DEVICE", "SWML_PEER_TIMEOUT", "SWML_QPS", "SWML_THREADS", "SWML_PACKET_SIZE", "SWML_MSG_SIZE", "SWML_WRITES", "SWML_WIRE", "SWML_GAP_NOTICES", "SWML_BUSY_POLL"} {
		t.Setenv(e, "")
	}
	// torchrun's environment fills rank and size; the address follows the rank.
	t.Setenv("RANK", "2")
	t.Setenv("WORLD_SIZE", "4")
	o := openArgs{sessionID: -1, rank: -1, workers: -1}
	if err := o.resolve(); err != nil {
		t.Fatal(err)
	}
	if o.rank != 2 || o.workers != 4 || o.addr != "127.0.0.4" || o.nic != "soft" || o.controller != control.DefaultAddr || o.sessionID != 1 || o.dtypes != 3 || o.wire != wireAuto {
		t.Errorf("resolved %+v", o)
	}
	// Under mpirun a stray RANK loses to Open MPI's rank, as in the CLI
	// (join.Member is the one rule); SWML_RANK wins over both.
	t.Setenv("OMPI_COMM_WORLD_RANK", "3")
	if o := (openArgs{sessionID: 1, rank: -1, workers: -1}); o.resolve() != nil || o.rank != 3 {
		t.Errorf("RANK=2 with OMPI_COMM_WORLD_RANK=3 resolved to rank %d, want 3", o.rank)
	}
	t.Setenv("SWML_RANK", "1")
	if o := (openArgs{sessionID: 1, rank: -1, workers: -1}); o.resolve() != nil || o.rank != 1 {
		t.Errorf("SWML_RANK=1 resolved to rank %d", o.rank)
	}
	t.Setenv("SWML_RANK", "")
	t.Setenv("OMPI_COMM_WORLD_RANK", "")
	t.Setenv("SWML_WRITES", "packet")
	if o := (openArgs{sessionID: 1, rank: 0, workers: 1}); o.resolve() != nil || o.writes != aggregation.PacketWrites {
		t.Errorf("SWML_WRITES=packet resolved to %v", o.writes)
	}
	t.Setenv("SWML_WRITES", "")
	if o := (openArgs{sessionID: 1, rank: 0, workers: 1}); o.resolve() != nil || o.config().NoGapNotices {
		t.Error("gap notices off by default")
	}
	t.Setenv("SWML_GAP_NOTICES", "false")
	if o := (openArgs{sessionID: 1, rank: 0, workers: 1}); o.resolve() != nil || !o.config().NoGapNotices {
		t.Error("SWML_GAP_NOTICES=false left gap notices on")
	}
	t.Setenv("SWML_GAP_NOTICES", "")
	// The userspace NIC of a training process does not busy-poll unless
	// asked; an ibverbs device keeps its own default.
	if o := (openArgs{sessionID: 1, rank: 0, workers: 1}); o.resolve() != nil || o.busyPoll >= 0 {
		t.Errorf("soft NIC busy-polls %v by default, want off (negative)", o.busyPoll)
	}
	if o := (openArgs{sessionID: 1, rank: 0, workers: 1, nic: "ibverbs", addr: "10.0.0.1"}); o.resolve() != nil || o.busyPoll != 0 {
		t.Errorf("ibverbs busy-poll %v by default, want 0 (the device's default)", o.busyPoll)
	}
	t.Setenv("SWML_BUSY_POLL", "50us")
	if o := (openArgs{sessionID: 1, rank: 0, workers: 1}); o.resolve() != nil || o.busyPoll != 50*time.Microsecond {
		t.Errorf("SWML_BUSY_POLL=50us resolved to %v", o.busyPoll)
	}
	t.Setenv("SWML_BUSY_POLL", "")
	bad := []struct {
		env  [2]string
		o    openArgs
		want string
	}{
		{[2]string{"RANK", "x"}, openArgs{sessionID: 1, rank: -1, workers: 2}, `$RANK "x" is not a number`},
		{[2]string{"SWML_WORKERS", "x"}, openArgs{sessionID: 1, rank: 0, workers: -1}, `$SWML_WORKERS "x" is not a number`},
		{[2]string{}, openArgs{sessionID: 1, rank: 4, workers: 4}, "rank 4 with world size 4: ranks are 0 … 3"},
		{[2]string{}, openArgs{sessionID: 1, rank: 253, workers: 256}, "no default NIC address past 127.0.0.254; set SWML_ADDR"},
		{[2]string{"SWML_MSG_SIZE", "3072"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "SWML_MSG_SIZE: message size 3072: not the packet size times a power of two"},
		{[2]string{"SWML_QPS", "5000"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "SWML_QPS: QPs is 5000: use 1 to 4096"},
		{[2]string{"SWML_THREADS", "-2"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "SWML_THREADS: Threads is -2"},
		{[2]string{"SWML_THREADS", "two"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "SWML_THREADS"},
		{[2]string{}, openArgs{sessionID: 1, rank: 0, workers: 0}, "world size 0: a job has 1 to"},
		{[2]string{}, openArgs{sessionID: 1 << 31, rank: 0, workers: 1}, "session id"},
		{[2]string{}, openArgs{sessionID: 1, rank: 0, workers: 1, nic: "tcp"}, `nic "tcp"`},
		{[2]string{}, openArgs{sessionID: 1, rank: 0, workers: 1, nic: "ibverbs"}, "needs an address"},
		{[2]string{}, openArgs{sessionID: 1, rank: 0, workers: 1, addr: "0.0.0.0"}, "own IP"},
		{[2]string{}, openArgs{sessionID: 1, rank: 0, workers: 1, controller: "nohost"}, "host:port"},
		{[2]string{"SWML_PACKET_SIZE", "1000"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "packet size"},
		{[2]string{"SWML_PEER_TIMEOUT", "soon"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "SWML_PEER_TIMEOUT"},
		{[2]string{"SWML_WRITES", "whole"}, openArgs{sessionID: 1, rank: 0, workers: 1}, "SWML_WRITES"},
		{[2]string{"SWML_GAP_NOTICES", "maybe"}, openArgs{sessionID: 1, rank: 0, workers: 1}, `SWML_GAP_NOTICES "maybe": give true or false`},
		{[2]string{"SWML_BUSY_POLL", "fast"}, openArgs{sessionID: 1, rank: 0, workers: 1}, `SWML_BUSY_POLL="fast": give a positive duration (e.g. 20us), off, or auto`},
		{[2]string{"SWML_WIRE", "8"}, openArgs{sessionID: 1, rank: 0, workers: 1}, `SWML_WIRE="8": use auto`},
		{[2]string{"SWML_WIRE", "16"}, openArgs{sessionID: 1, rank: 0, workers: 1 << 15}, "SWML_WORKERS: Workers is 32768: the 16-bit wire holds at most 16384"},
		{[2]string{}, openArgs{sessionID: 1 << 30, rank: 0, workers: 1}, "session id"},
	}
	for _, b := range bad {
		t.Run(b.want, func(t *testing.T) {
			if b.env[0] != "" {
				t.Setenv(b.env[0], b.env[1])
			}
			err := b.o.resolve()
			if err == nil || !strings.Contains(err.Error(), b.want) || code(err) != codeInval {
				t.Errorf("resolve(%+v) = %v (code %d), want an EINVAL naming %q", b.o, err, code(err), b.want)
			}
		})
	}
}

func TestCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", aggregation.ErrClosed), codeClosed},
		{fmt.Errorf("x: %w: %w", aggregation.ErrBroken, aggregation.ErrPeerTimeout), codeBroken},
		{fmt.Errorf("x: %w", control.ErrJobEnded), codePeer},
		{fmt.Errorf("x: %w", aggregation.ErrSwitchGone), codePeer},
		{context.DeadlineExceeded, codeTimeout},
		{fmt.Errorf("x: %w", aggregation.ErrLengthMismatch), codeMismatch},
		{fmt.Errorf("other"), codeFail},
	} {
		if got := code(c.err); got != c.want {
			t.Errorf("code(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestHandlesAndSessions(t *testing.T) {
	if _, err := allReduceAsync(12345, nil, 1, dtypeFloat32); code(err) != codeHandle {
		t.Errorf("all-reduce on an unknown session: %v", err)
	}
	if _, err := wait(12345, 0); code(err) != codeHandle {
		t.Errorf("wait on an unknown handle: %v", err)
	}
	if err := closeSession(12345, ""); code(err) != codeHandle {
		t.Errorf("close of an unknown session: %v", err)
	}
}

// TestConnectTimeout: with no controller, joining waits
// $SWML_CONNECT_TIMEOUT (not the caller's whole timeout, e.g. torch's
// 30 minutes) and then fails naming the address and what to start.
func TestConnectTimeout(t *testing.T) {
	t.Setenv("SWML_CONNECT_TIMEOUT", "300ms")
	o := openArgs{controller: "127.0.0.1:1", rank: 0, workers: 1, addr: "127.15.9.2", timeout: time.Hour}
	_, err := open(o)
	if code(err) != codeTimeout || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "start `swml-rdma switch") ||
		!strings.Contains(err.Error(), "SWML_CONNECT_TIMEOUT") {
		t.Fatalf("no controller: %v (code %d)", err, code(err))
	}
	t.Setenv("SWML_CONNECT_TIMEOUT", "soon")
	if _, err := open(o); code(err) != codeInval || !strings.Contains(err.Error(), "SWML_CONNECT_TIMEOUT") {
		t.Fatalf("SWML_CONNECT_TIMEOUT=soon: %v", err)
	}
}

// TestControllerAccessEnv: SWML_TLS_* and SWML_REGISTRATION_TOKEN_FILE are
// read by resolve; what is wrong with them is an EINVAL naming the
// variable.
func TestControllerAccessEnv(t *testing.T) {
	pki := testutil.WritePKI(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := []string{"SWML_TLS_CA", "SWML_TLS_CERT", "SWML_TLS_KEY", "SWML_TLS_SERVER_NAME", "SWML_REGISTRATION_TOKEN_FILE"}
	for _, tc := range []struct {
		name string
		env  []string // values of vars
		want string   // "" resolves
	}{
		{"plaintext", []string{"", "", "", "", ""}, ""},
		{"TLS", []string{pki.CA, "", "", "", ""}, ""},
		{"mutual TLS and a token", []string{pki.CA, pki.ClientCert, pki.ClientKey, "localhost", tok}, ""},
		{"cert without key", []string{pki.CA, pki.ClientCert, "", "", ""}, "SWML_TLS_CERT and SWML_TLS_KEY go together"},
		{"server name alone", []string{"", "", "", "switch1", ""}, "SWML_TLS_SERVER_NAME applies to TLS: set SWML_TLS_CA too"},
		{"CA not PEM", []string{pki.ServerKey, "", "", "", ""}, "no PEM certificate in it"},
		{"token file missing", []string{"", "", "", "", tok + ".missing"}, "SWML_REGISTRATION_TOKEN_FILE: open"},
		{"token file empty", []string{"", "", "", "", empty}, "the first line is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, v := range vars {
				t.Setenv(v, tc.env[i])
			}
			o := openArgs{sessionID: 1, rank: 0, workers: 1, controller: "127.0.0.1:1"}
			err := o.resolve()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if (o.tls != nil) != (tc.env[0] != "") || o.tls != nil && (o.tls.CertFile != tc.env[1] || o.tls.ServerName != tc.env[3]) {
					t.Errorf("resolved TLS %+v from %q", o.tls, tc.env)
				}
				if want := map[bool]string{true: "0123456789abcdef0123", false: ""}[tc.env[4] != ""]; o.registrationToken != want {
					t.Errorf("registration token %q, want %q", o.registrationToken, want)
				}
				return
			}
			if err == nil || code(err) != codeInval || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("resolve: %v (code %d), want an EINVAL saying %q", err, code(err), tc.want)
			}
		})
	}
}

// TestRemedy: the errors of joining a job whose fix is the caller's get
// it in terms of the environment.
func TestRemedy(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&control.TLSError{Addr: "a:1", Problem: control.TLSControllerSpeaksTLS}, "; set SWML_TLS_CA to the CA that signed the switch's --tls-cert"},
		{&control.TLSError{Addr: "a:1", Problem: control.TLSClientCertRequired}, "set SWML_TLS_CERT and SWML_TLS_KEY"},
		{fmt.Errorf("x: %w", &control.MismatchError{Param: "qps"}), "; set the same SWML_QPS on every rank"},
		{fmt.Errorf("x: %w", control.ErrSessionRunning), "set SWML_SESSION_ID to another id"},
		{fmt.Errorf("x: %w", control.ErrRegistrationTokenWrong), "SWML_REGISTRATION_TOKEN_FILE holds another token"},
		{fmt.Errorf("x: %w", control.ErrRegistrationTokenMissing), "set SWML_REGISTRATION_TOKEN_FILE"},
	} {
		if got := remedy(c.err); !strings.Contains(got, c.want) {
			t.Errorf("remedy(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if got := remedy(errors.New("other")); got != "" {
		t.Errorf("an unrelated error got %q", got)
	}
}
