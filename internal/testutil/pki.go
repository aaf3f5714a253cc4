package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// PKI is a throw-away public key infrastructure in PEM files: a CA, a
// server certificate it signed for 127.0.0.1 (and the IPs given to
// WritePKI), a client certificate it signed, and a second CA with a client
// certificate of its own, for the tests of a client or server that trusts
// the wrong one.
type PKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	OtherCA, OtherClientCert, OtherClientKey         string
}

// WritePKI writes a PKI into a temporary directory of t.
func WritePKI(t testing.TB, serverIPs ...net.IP) PKI {
	t.Helper()
	dir := t.TempDir()
	p := PKI{
		CA: filepath.Join(dir, "ca.pem"), ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client.key"),
		OtherCA: filepath.Join(dir, "other-ca.pem"), OtherClientCert: filepath.Join(dir, "other-client.pem"), OtherClientKey: filepath.Join(dir, "other-client.key"),
	}
	ca, caKey := issue(t, p.CA, "", &x509.Certificate{Subject: pkix.Name{CommonName: "swml-rdma test CA"}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}, nil, nil)
	issue(t, p.ServerCert, p.ServerKey, &x509.Certificate{Subject: pkix.Name{CommonName: "swml-rdma test controller"},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, serverIPs...), DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	issue(t, p.ClientCert, p.ClientKey, &x509.Certificate{Subject: pkix.Name{CommonName: "swml-rdma test worker"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, caKey)
	other, otherKey := issue(t, p.OtherCA, "", &x509.Certificate{Subject: pkix.Name{CommonName: "another CA"}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}, nil, nil)
	issue(t, p.OtherClientCert, p.OtherClientKey, &x509.Certificate{Subject: pkix.Name{CommonName: "a stranger"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, other, otherKey)
	return p
}

// serial numbers the certificates of a test binary (WritePKI may run in
// parallel tests).
var serial atomic.Int64

// issue signs tmpl with parent's key (itself when parent is nil), writes the
// certificate to certFile and, if keyFile is set, its key to keyFile.
func issue(t testing.TB, certFile, keyFile string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	if keyFile != "" {
		b, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "PRIVATE KEY", b)
	}
	return cert, key
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
