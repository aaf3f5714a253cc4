package control

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ClientTLS is how a Client verifies the controller's certificate and, for
// a controller that verifies its clients (mutual TLS), which certificate it
// presents (docs/security.md "TLS for remote workers").
type ClientTLS struct {
	// CAFile holds the PEM certificates of the CAs that may sign the
	// controller's certificate; "" trusts the host's roots.
	CAFile string
	// CertFile and KeyFile are this client's certificate and key (PEM):
	// both or neither.
	CertFile, KeyFile string
	// ServerName is the name the controller's certificate must hold; ""
	// is the host of the controller's address.
	ServerName string
}

// ErrTLS is wrapped by Client errors when the connection to the controller
// failed in its TLS handshake, or because one side speaks TLS and the other
// does not; errors.As to *TLSError says which.
var ErrTLS = errors.New("TLS")

// TLSProblem is what went wrong between a Client and a controller in TLS.
type TLSProblem uint8

// TLS problems a Client tells apart.
const (
	// TLSHandshake is any other handshake failure (TLSError.Err says it).
	TLSHandshake TLSProblem = iota
	// TLSControllerSpeaksTLS: the client dials plaintext, the controller
	// answers in TLS.
	TLSControllerSpeaksTLS
	// TLSControllerPlaintext: the client dials TLS, the controller
	// answers in plaintext.
	TLSControllerPlaintext
	// TLSUnknownAuthority: no CA the client trusts signed the
	// controller's certificate.
	TLSUnknownAuthority
	// TLSNameMismatch: the controller's certificate does not hold the
	// name or address the client dialed (or ClientTLS.ServerName).
	TLSNameMismatch
	// TLSClientCertRequired: the controller verifies clients and this
	// one presented no certificate.
	TLSClientCertRequired
	// TLSClientCertRefused: the controller refused this client's
	// certificate (not signed by a CA it trusts, expired, …).
	TLSClientCertRefused
)

var tlsProblemText = [...]string{
	TLSHandshake:           "TLS handshake failed",
	TLSControllerSpeaksTLS: "speaks TLS; this client dials plaintext",
	TLSControllerPlaintext: "speaks plaintext; this client dials TLS",
	TLSUnknownAuthority:    "certificate is signed by no CA this client trusts",
	TLSNameMismatch:        "certificate does not hold the name dialed",
	TLSClientCertRequired:  "requires a client certificate; this client has none",
	TLSClientCertRefused:   "refused this client's certificate",
}

func (p TLSProblem) String() string {
	if int(p) < len(tlsProblemText) {
		return tlsProblemText[p]
	}
	return fmt.Sprintf("TLSProblem(%d)", uint8(p))
}

// TLSError says why a Client could not talk to the controller at Addr in
// or without TLS. Err is what the TLS stack reported, if anything.
type TLSError struct {
	Addr    string
	Problem TLSProblem
	Err     error
}

func (e *TLSError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("controller %s %v", e.Addr, e.Problem)
	}
	return fmt.Sprintf("controller %s %v: %v", e.Addr, e.Problem, e.Err)
}

// Is makes errors.Is(err, ErrTLS) true.
func (e *TLSError) Is(target error) bool { return target == ErrTLS }

// Unwrap gives errors.As what the TLS stack reported (x509 errors, …).
func (e *TLSError) Unwrap() error { return e.Err }

// Config loads the files and returns the client's tls.Config.
func (t *ClientTLS) Config() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("control: TLS CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("control: TLS CA %s: no PEM certificate in it", t.CAFile)
		}
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return nil, errors.New("control: TLS client certificate: need both the certificate and its key")
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("control: TLS client certificate %s: %w", t.CertFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// diagCreds are a Client's transport credentials (TLS or plaintext) that
// remember how the last connection failed, so that Client errors can say
// "the controller speaks TLS" instead of gRPC's "error reading server
// preface: EOF". Clones share what they remember.
type diagCreds struct {
	credentials.TransportCredentials
	addr string
	tls  *tls.Config // nil: plaintext
	last *lastFailure
}

type lastFailure struct {
	mu  sync.Mutex
	err *TLSError // the last handshake's failure
	// silent: the last connection failed before the controller sent a
	// byte. A TLS server closes a plaintext client's connection so, and
	// under TLS 1.3 a controller refuses a client certificate after the
	// client's side of the handshake is done (RFC 8446 section 4.4.2.4):
	// diagnose probes to tell.
	silent bool
}

func newDiagCreds(addr string, t *ClientTLS) (*diagCreds, error) {
	d := &diagCreds{addr: addr, last: &lastFailure{}}
	if t == nil {
		d.TransportCredentials = insecure.NewCredentials()
		return d, nil
	}
	cfg, err := t.Config()
	if err != nil {
		return nil, err
	}
	d.TransportCredentials, d.tls = credentials.NewTLS(cfg), cfg
	return d, nil
}

func (d *diagCreds) set(err *TLSError, silent bool) {
	d.last.mu.Lock()
	d.last.err, d.last.silent = err, silent
	d.last.mu.Unlock()
}

func (d *diagCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := d.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		if d.tls != nil && ctx.Err() == nil {
			d.set(d.classify(err), false)
		}
		return nil, nil, err
	}
	d.set(nil, false)
	return &diagConn{Conn: conn, d: d}, info, nil
}

func (d *diagCreds) Clone() credentials.TransportCredentials {
	c := *d
	c.TransportCredentials = d.TransportCredentials.Clone()
	return &c
}

// classify names a failed TLS handshake.
func (d *diagCreds) classify(err error) *TLSError {
	var (
		rh      tls.RecordHeaderError
		ua      x509.UnknownAuthorityError
		hn      x509.HostnameError
		problem = TLSHandshake
	)
	switch {
	case errors.As(err, &rh):
		// "first record does not look like a TLS handshake" says no more.
		return &TLSError{Addr: d.addr, Problem: TLSControllerPlaintext}
	case errors.As(err, &ua):
		problem = TLSUnknownAuthority
	case errors.As(err, &hn):
		problem = TLSNameMismatch
	case isRemoteAlert(err):
		// Under TLS 1.2 the controller refuses a client certificate
		// inside the handshake.
		problem = TLSClientCertRequired
		if len(d.tls.Certificates) > 0 {
			problem = TLSClientCertRefused
		}
	}
	return &TLSError{Addr: d.addr, Problem: problem, Err: err}
}

// isRemoteAlert reports whether err is a TLS alert the peer sent (crypto/tls
// reports one as a *net.OpError with Op "remote error").
func isRemoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// diagConn notes a connection that failed before the controller sent a
// byte.
type diagConn struct {
	net.Conn
	d        *diagCreds
	answered atomic.Bool
}

func (c *diagConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered.Store(true)
	} else if err != nil && !c.answered.Load() {
		c.d.set(nil, true)
	}
	return n, err
}

func (c *diagConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && !c.answered.Load() {
		c.d.set(nil, true)
	}
	return n, err
}

// SyscallConn keeps gRPC's access to the socket (channelz, TCP options).
func (c *diagConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("control: not a socket")
}

// probeTimeout bounds diagnose's probe.
const probeTimeout = 2 * time.Second

// diagnose says why the last connection failed, if TLS explains it. A
// connection that failed silently is probed with a TLS handshake of its
// own: a plaintext client learns whether the controller answers in TLS;
// a TLS client reads the controller's first record, which is an alert if
// the controller refused the client's certificate.
func (d *diagCreds) diagnose() *TLSError {
	d.last.mu.Lock()
	err, silent := d.last.err, d.last.silent
	d.last.mu.Unlock()
	if err != nil || !silent {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cfg := &tls.Config{
		// A plaintext client's probe only asks whether the other side
		// answers a ClientHello with a certificate; nothing is sent.
		InsecureSkipVerify: true, //nolint:gosec // see above
	}
	if d.tls != nil {
		cfg = d.tls.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(d.addr)
	}
	certified := false
	cfg.NextProtos = []string{"h2"}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		certified = len(cs.PeerCertificates) > 0
		return nil
	}
	conn, perr := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", d.addr)
	if d.tls == nil {
		if perr == nil {
			conn.Close()
		}
		if !certified {
			return nil
		}
		return &TLSError{Addr: d.addr, Problem: TLSControllerSpeaksTLS}
	}
	if perr != nil {
		if ctx.Err() != nil {
			return nil
		}
		return d.classify(perr)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(probeTimeout))
	if _, rerr := conn.Read(make([]byte, 1)); isRemoteAlert(rerr) {
		return d.classify(rerr)
	}
	return nil
}

// ServerTLS is how a controller serves TLS: its certificate and key (PEM)
// and, for mutual TLS, the CAs whose certificates it requires of every
// client (docs/security.md "TLS for remote workers").
type ServerTLS struct {
	CertFile, KeyFile string
	// ClientCAFile holds the PEM certificates of the CAs that sign the
	// clients' certificates; "" accepts clients without one.
	ClientCAFile string
}

// ServerOption loads the files and returns the grpc.Creds option for
// Config.ServerOptions.
func (s ServerTLS) ServerOption() (grpc.ServerOption, error) {
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("control: TLS certificate %s: %w", s.CertFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if s.ClientCAFile != "" {
		pem, err := os.ReadFile(s.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("control: TLS client CA: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("control: TLS client CA %s: no PEM certificate in it", s.ClientCAFile)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}
