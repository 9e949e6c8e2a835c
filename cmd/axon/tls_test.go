package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/internal/testpki"
)

// serveInProcess runs `axon serve` with args until the test ends.
func serveInProcess(t *testing.T, args ...string) {
	t.Helper()
	cmd := serveCmd()
	cmd.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// tlsClient is a clientv3 of addr; nil cfg speaks plaintext.
func tlsClient(t *testing.T, addr string, cfg *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(), TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// awaitPut puts until the server answers (it is starting).
func awaitPut(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := cli.Put(ctx, "/tls", "v")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("put: %v", err)
		}
	}
}

// TestClientTLS serves https with --client-cert-auth and a CRL beside a
// plaintext listener, and checks who gets in: a client with a
// certificate of the trusted CA does; plaintext, no certificate, a
// certificate of another CA and a revoked one do not. A certificate
// rotated on disk is served from the next handshake, without a restart,
// and so is a CRL. The metrics URL is https with the same files.
func TestClientTLS(t *testing.T) {
	ca, other := testpki.NewCA(t, "axon-ca"), testpki.NewCA(t, "other-ca")
	srvCert, srvKey := ca.Issue(t, 10, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.Issue(t, 11, x509.ExtKeyUsageClientAuth)
	badCert, badKey := other.Issue(t, 12, x509.ExtKeyUsageClientAuth)
	revCert, revKey := ca.Issue(t, 13, x509.ExtKeyUsageClientAuth)
	dir := testpki.WriteFiles(t, t.TempDir(), map[string][]byte{"ca.pem": ca.PEM, "server.pem": srvCert, "server-key.pem": srvKey,
		"crl.der": ca.CRL(t, 13)})
	addr, plain, metrics := freeAddr(t), freeAddr(t), freeAddr(t)
	serveInProcess(t, "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://"+addr+",http://"+plain, "--listen-metrics-urls", "https://"+metrics,
		"--cert-file", filepath.Join(dir, "server.pem"), "--key-file", filepath.Join(dir, "server-key.pem"),
		"--trusted-ca-file", filepath.Join(dir, "ca.pem"), "--client-cert-auth", "--client-crl-file", filepath.Join(dir, "crl.der"))

	roots := testpki.Pool(ca)
	withCert := func(c tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{c}}
	}
	good := tlsClient(t, addr, withCert(testpki.Pair(t, cliCert, cliKey)))
	awaitPut(t, good)
	ctx := t.Context()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if _, err := tlsClient(t, plain, nil).Get(pctx, "/tls"); err != nil {
		t.Errorf("the plaintext listener beside the https one: %v", err)
	}
	refused := []struct {
		name string
		cli  *clientv3.Client
	}{
		{"plaintext", tlsClient(t, addr, nil)},
		{"no client certificate", tlsClient(t, addr, &tls.Config{RootCAs: roots})},
		{"a certificate of another CA", tlsClient(t, addr, withCert(testpki.Pair(t, badCert, badKey)))},
		{"a revoked certificate", tlsClient(t, addr, withCert(testpki.Pair(t, revCert, revKey)))},
	}
	for _, r := range refused {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.cli.Get(cctx, "/tls")
		ccancel()
		if err == nil {
			t.Errorf("%s: the server answered", r.name)
		}
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: withCert(testpki.Pair(t, cliCert, cliKey))}, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + metrics + "/health")
	if err != nil {
		t.Fatalf("https metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"health":"true"`) {
		t.Errorf("https /health: %d %s", resp.StatusCode, body)
	}

	serial := func() int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{testpki.Pair(t, cliCert, cliKey)}, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != 10 {
		t.Fatalf("served certificate serial %d, want 10", got)
	}
	newCert, newKey := ca.Issue(t, 20, x509.ExtKeyUsageServerAuth)
	testpki.WriteFiles(t, dir, map[string][]byte{"server-key.pem": newKey, "server.pem": newCert})
	if got := serial(); got != 20 {
		t.Fatalf("after rotation the server still serves serial %d, want 20", got)
	}
	// Revoking the good client's certificate takes effect at its next
	// connection.
	testpki.WriteFiles(t, dir, map[string][]byte{"crl.der": ca.CRL(t, 11, 13)})
	late := tlsClient(t, addr, withCert(testpki.Pair(t, cliCert, cliKey)))
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	if _, err := late.Get(cctx, "/tls"); err == nil {
		t.Error("a certificate revoked after start-up still gets in")
	}
}

// TestTLSVersionsAndCipherSuites: --tls-max-version and --cipher-suites
// bound what a handshake may settle on, and bad combinations are refused
// at start-up with etcd's words.
func TestTLSVersionsAndCipherSuites(t *testing.T) {
	ca := testpki.NewCA(t, "axon-ca")
	srvCert, srvKey := ca.Issue(t, 10)
	dir := testpki.WriteFiles(t, t.TempDir(), map[string][]byte{"server.pem": srvCert, "server-key.pem": srvKey})
	files := []string{"--cert-file", filepath.Join(dir, "server.pem"), "--key-file", filepath.Join(dir, "server-key.pem")}
	const suite = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
	addr := freeAddr(t)
	serveInProcess(t, append(files, "--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", "https://"+addr,
		"--listen-metrics-urls", "http://"+freeAddr(t), "--tls-max-version", "TLS1.2", "--cipher-suites", suite)...)
	awaitPut(t, tlsClient(t, addr, &tls.Config{RootCAs: testpki.Pool(ca)}))

	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: testpki.Pool(ca), NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	st := conn.ConnectionState()
	conn.Close()
	if st.Version != tls.VersionTLS12 || tls.CipherSuiteName(st.CipherSuite) != suite {
		t.Errorf("negotiated %s %s, want TLS 1.2 %s", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), suite)
	}
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: testpki.Pool(ca), MinVersion: tls.VersionTLS13}); err == nil {
		conn.Close()
		t.Error("a TLS 1.3-only client got in past --tls-max-version TLS1.2")
	}

	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--tls-min-version", "TLS1.3", "--tls-max-version", "TLS1.2"}, "min version (TLS1.3) is greater than max version (TLS1.2)"},
		{[]string{"--tls-min-version", "TLS1.3", "--cipher-suites", suite}, "cipher suites cannot be configured when only TLS1.3 is enabled"},
		{[]string{"--cipher-suites", "TLS_NOT_A_SUITE"}, "TLS_NOT_A_SUITE"},
		{[]string{"--tls-min-version", "TLS1.1"}, "TLS1.1"},
		{nil, ""}, // https without certificates: see below
	}
	for _, b := range bad {
		args := append([]string{"--data-dir", filepath.Join(dir, "bad"), "--listen-client-urls", "https://" + freeAddr(t),
			"--listen-metrics-urls", "http://" + freeAddr(t)}, b.args...)
		if b.args != nil {
			args = append(args, files...)
		}
		cmd := serveCmd()
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.ExecuteContext(t.Context())
		want := b.want
		if b.args == nil {
			want = embed.ErrNoCert.Error()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve %v: %v, want an error with %q", b.args, err, want)
		}
	}
}

// TestAutoTLS: --auto-tls serves https with a self-signed certificate
// kept under the data directory, as etcd's.
func TestAutoTLS(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	serveInProcess(t, "--data-dir", dir, "--listen-client-urls", "https://"+addr, "--listen-metrics-urls", "http://"+freeAddr(t), "--auto-tls")
	awaitPut(t, tlsClient(t, addr, &tls.Config{InsecureSkipVerify: true}))
	for _, f := range []string{"cert.pem", "key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, "fixtures", "client", f)); err != nil {
			t.Errorf("auto-tls %s: %v", f, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := tlsClient(t, addr, nil).Get(ctx, "/tls"); err == nil {
		t.Error("plaintext got into the auto-tls listener")
	}
}
