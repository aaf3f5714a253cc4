package control

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// startTLSController starts a controller serving TLS with pki's server
// certificate; with mutual, it requires client certificates signed by
// pki's CA.
func startTLSController(t *testing.T, pki testutil.PKI, mutual bool) *testEnv {
	t.Helper()
	s := ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}
	if mutual {
		s.ClientCAFile = pki.CA
	}
	opt, err := s.ServerOption()
	if err != nil {
		t.Fatal(err)
	}
	return startController(t, func(c *Config) { c.ServerOptions = append(c.ServerOptions, opt) })
}

// registerOver registers ranks 0 and 1 of session sid, each on its own
// client built from cfg, and ends the job.
func registerOver(t *testing.T, e *testEnv, sid uint32, cfg ClientConfig) {
	t.Helper()
	cfg.Addr = e.addr
	as := make([]*Assignment, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		c, err := NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() { as[r], errs[r] = c.RegisterRDMA(context.Background(), testReg(sid, r, 2, 1)) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d over TLS: %v", r, err)
		}
	}
	endOver(t, e, cfg, as)
}

func endOver(t *testing.T, e *testEnv, cfg ClientConfig, as []*Assignment) {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range as {
		if err := c.EndSession(context.Background(), a); err != nil {
			t.Fatalf("end rank %d over TLS: %v", a.Rank, err)
		}
	}
	if n := e.metric(t, "swml_controller_sessions_ended_total", "reason", "end"); n != 1 {
		t.Errorf("%v jobs ended cleanly; want the one both ranks ended", n)
	}
}

// Workers reach a TLS controller with the CA that signed its certificate,
// and a controller that verifies clients with a client certificate; the
// pool share then counts the certificate as the client.
func TestClientTLS(t *testing.T) {
	testutil.NoLeaks(t)
	pki := testutil.WritePKI(t)
	t.Run("server only", func(t *testing.T) {
		e := startTLSController(t, pki, false)
		registerOver(t, e, 1, ClientConfig{TLS: &ClientTLS{CAFile: pki.CA}})
	})
	t.Run("server name", func(t *testing.T) {
		e := startTLSController(t, pki, false)
		registerOver(t, e, 1, ClientConfig{TLS: &ClientTLS{CAFile: pki.CA, ServerName: "localhost"}})
	})
	t.Run("mutual", func(t *testing.T) {
		e := startTLSController(t, pki, true)
		registerOver(t, e, 1, ClientConfig{TLS: &ClientTLS{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}})
	})
}

// Every way a client and a controller can miss each other in TLS fails
// the first call with an error that wraps ErrTLS and names the problem,
// never as an unreachable controller.
func TestClientTLSErrors(t *testing.T) {
	testutil.NoLeaks(t)
	pki := testutil.WritePKI(t)
	plain := startController(t, nil)
	serverOnly := startTLSController(t, pki, false)
	mutual := startTLSController(t, pki, true)
	for _, tc := range []struct {
		name    string
		e       *testEnv
		tls     *ClientTLS
		problem TLSProblem
		text    string
	}{
		{"plaintext client, TLS controller", serverOnly, nil, TLSControllerSpeaksTLS, "speaks TLS; this client dials plaintext"},
		{"plaintext client, mutual TLS controller", mutual, nil, TLSControllerSpeaksTLS, "speaks TLS"},
		{"TLS client, plaintext controller", plain, &ClientTLS{CAFile: pki.CA}, TLSControllerPlaintext, "speaks plaintext; this client dials TLS"},
		{"wrong CA", serverOnly, &ClientTLS{CAFile: pki.OtherCA}, TLSUnknownAuthority, "signed by no CA this client trusts"},
		{"host's roots", serverOnly, &ClientTLS{}, TLSUnknownAuthority, "signed by no CA"},
		{"name mismatch", serverOnly, &ClientTLS{CAFile: pki.CA, ServerName: "switch9.example"}, TLSNameMismatch, "does not hold the name dialed"},
		{"no client certificate", mutual, &ClientTLS{CAFile: pki.CA}, TLSClientCertRequired, "requires a client certificate"},
		{"client certificate of another CA", mutual, &ClientTLS{CAFile: pki.CA, CertFile: pki.OtherClientCert, KeyFile: pki.OtherClientKey}, TLSClientCertRefused, "refused this client's certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClient(ClientConfig{Addr: tc.e.addr, TLS: tc.tls})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
			defer cancel()
			_, err = c.RegisterRDMA(ctx, testReg(1, 0, 2, 1))
			var te *TLSError
			if !errors.Is(err, ErrTLS) || !errors.As(err, &te) || te.Problem != tc.problem || te.Addr != tc.e.addr {
				t.Fatalf("register: %v; want a *TLSError %q for %s", err, tc.problem, tc.e.addr)
			}
			if errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), tc.text) || !strings.HasPrefix(err.Error(), "control: register: controller "+tc.e.addr) {
				t.Errorf("error %q: want it to start with the operation and the controller, say %q and not wrap ErrUnreachable", err, tc.text)
			}
		})
	}
}

// A plaintext client of a controller that is not there is unreachable,
// not a TLS problem: the probe finds no TLS server either.
func TestClientTLSNotBlamedWhenDown(t *testing.T) {
	testutil.NoLeaks(t)
	e := startController(t, nil)
	addr := e.addr
	e.ctl.Close()
	c, err := NewClient(ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.RegisterRDMA(context.Background(), testReg(1, 0, 1, 1))
	if !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrTLS) {
		t.Fatalf("register at a stopped controller: %v; want ErrUnreachable, not ErrTLS", err)
	}
}

// Bad files are refused when the client or server is built, naming the
// file.
func TestTLSFilesRefused(t *testing.T) {
	pki := testutil.WritePKI(t)
	for _, tc := range []struct {
		name string
		tls  ClientTLS
		want string
	}{
		{"missing CA", ClientTLS{CAFile: pki.CA + ".missing"}, "control: TLS CA: open " + pki.CA + ".missing"},
		{"CA is a key", ClientTLS{CAFile: pki.ServerKey}, "no PEM certificate in it"},
		{"cert without key", ClientTLS{CertFile: pki.ClientCert}, "need both the certificate and its key"},
		{"key of another cert", ClientTLS{CertFile: pki.ClientCert, KeyFile: pki.ServerKey}, "control: TLS client certificate " + pki.ClientCert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClient(ClientConfig{Addr: "127.0.0.1:1", TLS: &tc.tls})
			if err == nil {
				c.Close()
				t.Fatal("NewClient accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewClient: %v; want %q", err, tc.want)
			}
		})
	}
	if _, err := (ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.ServerKey}).ServerOption(); err == nil || !strings.Contains(err.Error(), "client CA "+pki.ServerKey+": no PEM certificate") {
		t.Errorf("ServerOption with a key as client CA: %v", err)
	}
}
