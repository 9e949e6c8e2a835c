package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for 127.0.0.1 with serial.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "axon-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClientTLS serves https with --client-cert-auth and checks who gets
// in: a client with a certificate of the trusted CA does; plaintext, no
// certificate and a certificate of another CA do not. A certificate
// rotated on disk is served from the next handshake, without a restart.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "axon-ca"), newCA(t, "other-ca")
	srvCert, srvKey := ca.issue(t, 10, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, 11, x509.ExtKeyUsageClientAuth)
	badCert, badKey := other.issue(t, 12, x509.ExtKeyUsageClientAuth)
	files := map[string][]byte{"ca.pem": ca.pem, "server.pem": srvCert, "server-key.pem": srvKey,
		"client.pem": cliCert, "client-key.pem": cliKey, "bad.pem": badCert, "bad-key.pem": badKey}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	addr := freeAddr(t)
	cmd := serveCmd()
	cmd.SetArgs([]string{"--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", "https://" + addr,
		"--listen-metrics-urls", "http://" + freeAddr(t),
		"--cert-file", filepath.Join(dir, "server.pem"), "--key-file", filepath.Join(dir, "server-key.pem"),
		"--trusted-ca-file", filepath.Join(dir, "ca.pem"), "--client-cert-auth"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	client := func(certs ...tls.Certificate) *clientv3.Client {
		cfg := clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
		if certs != nil {
			cfg.TLS = &tls.Config{RootCAs: roots, Certificates: certs}
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	pair := func(c, k []byte) tls.Certificate {
		p, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := client(pair(cliCert, cliKey))
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		_, err := good.Put(cctx, "/tls", "v")
		ccancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put with a trusted client certificate: %v", err)
		}
	}
	refused := []struct {
		name string
		cli  *clientv3.Client
	}{
		{"plaintext", client()},
		{"no client certificate", client(tls.Certificate{})},
		{"a certificate of another CA", client(pair(badCert, badKey))},
	}
	for _, r := range refused {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.cli.Get(cctx, "/tls")
		ccancel()
		if err == nil {
			t.Errorf("%s: the server answered", r.name)
		}
	}
	serial := func() int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair(cliCert, cliKey)}, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != 10 {
		t.Fatalf("served certificate serial %d, want 10", got)
	}
	newCert, newKey := ca.issue(t, 20, x509.ExtKeyUsageServerAuth)
	writeFile(t, filepath.Join(dir, "server-key.pem"), newKey)
	writeFile(t, filepath.Join(dir, "server.pem"), newCert)
	future := time.Now().Add(time.Second) // a new mtime even on coarse clocks
	for _, n := range []string{"server.pem", "server-key.pem"} {
		if err := os.Chtimes(filepath.Join(dir, n), future, future); err != nil {
			t.Fatal(err)
		}
	}
	if got := serial(); got != 20 {
		t.Fatalf("after rotation the server still serves serial %d, want 20", got)
	}
}
