package main

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/swml-rdma/swml-rdma/aggregation/control"
	pb "github.com/swml-rdma/swml-rdma/aggregation/control/switchmlpb"
	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// writeTestCert writes a server certificate for 127.0.0.1 and its key as
// PEM files (testutil.WritePKI) and returns their paths and a pool of the
// CA that signed it.
func writeTestCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	p := testutil.WritePKI(t)
	ca, err := os.ReadFile(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("%s holds no certificate", p.CA)
	}
	return p.ServerCert, p.ServerKey, pool
}

func TestSwitchSecurityBadFlags(t *testing.T) {
	cert, key, _ := writeTestCert(t)
	dir := t.TempDir()
	short := filepath.Join(dir, "short.token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, "long.token")
	if err := os.WriteFile(long, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--tls-cert", cert}, "--tls-cert and --tls-key go together"},
		{"key without cert", []string{"--tls-key", key}, "--tls-cert and --tls-key go together"},
		{"cert is the key", []string{"--tls-cert", key, "--tls-key", key}, "--tls-cert " + key},
		{"missing token file", []string{"--operator-token-file", filepath.Join(dir, "none")}, "--operator-token-file"},
		{"short token", []string{"--operator-token-file", short}, "use at least 16 random ones"},
		{"pending sessions", []string{"--max-pending-sessions", "0"}, "--max-pending-sessions 0"},
		{"idle timeout", []string{"--idle-timeout", "-1s"}, "--idle-timeout -1s"},
		{"short registration token", []string{"--registration-token-file", short}, "--registration-token-file " + short},
		{"one token for both", []string{"--registration-token-file", long, "--operator-token-file", long}, "hold the same token"},
		{"zero share", []string{"--client-pool-share", "0"}, "--client-pool-share 0: give a fraction in (0, 1]"},
		{"share above 1", []string{"--client-pool-share", "1.5"}, "--client-pool-share 1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runSwitchBounded(t, append([]string{"--addr", "127.13.40.9", "--controller-addr", "127.0.0.1:0"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestSwitchTLSOperator runs `switch --tls-cert --tls-key
// --operator-token-file` and lists jobs over TLS with the operator token.
// Addresses: 127.13.40.x.
func TestSwitchTLSOperator(t *testing.T) {
	cert, key, pool := writeTestCert(t)
	const token = "0123456789abcdef0123456789abcdef"
	tokFile := filepath.Join(t.TempDir(), "operator.token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	swCtx, stop := context.WithCancel(ctx)
	defer stop()
	_, stderr, done := runInProcess(swCtx, "switch", "--addr", "127.13.40.1", "--controller-addr", "127.0.0.1:0",
		"--tls-cert", cert, "--tls-key", key, "--operator-token-file", tokFile)
	exited := make(chan struct{})
	var runErr error
	go func() { runErr = <-done; close(exited) }()
	addr := waitForLine(t, "switch", stderr, readyRE, exited, 30*time.Second)[1]

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")),
		grpc.WithPerRPCCredentials(control.OperatorCredentials(token, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	if _, err := pb.NewJobClient(conn).ListJobs(cctx, &pb.ListJobsRequest{}); err != nil {
		t.Fatalf("ListJobs over TLS with the operator token: %v", err)
	}
	stop()
	<-exited
	if runErr != nil {
		t.Fatalf("switch: %v\n%s", runErr, stderr)
	}
}
