package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/credentials"

	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/internal/testpki"
)

// urlForms are the ways an operator may spell a listener's URL; sock is
// a unix socket's name in the server's working directory.
var urlForms = []struct {
	name string
	url  func(addr, sock string) string
}{
	{"https", func(addr, _ string) string { return "https://" + addr }},
	{"HTTPS", func(addr, _ string) string { return "HTTPS://" + addr }},
	{"HtTpS", func(addr, _ string) string { return "HtTpS://" + addr }},
	{"http", func(addr, _ string) string { return "http://" + addr }},
	{"scheme-less", func(addr, _ string) string { return addr }},
	{"unix", func(_, sock string) string { return "unix://" + sock }},
	// etcd 3.7.3 serves a unixs peer URL in plaintext; Axon serves TLS
	// there too (docs/security.md), so unixs is compared on clients only.
	{"unixs", func(_, sock string) string { return "unixs://" + sock }},
	{"unknown scheme", func(addr, _ string) string { return "tcp://" + addr }},
}

// refusals are etcd's words for URLs it will not start with; Axon's
// refusal must say the same.
var refusals = []string{
	"first path segment in URL cannot contain colon",
	"URL scheme must be http, https, unix, or unixs",
}

// TestListenURLsAgainstEtcd starts `axon serve` and etcd 3.7.3, each as a
// process with the same URL and TLS flags, for every URL form of the
// client and of the peer listener, with client certificates required and
// not, and sends both the same plaintext and TLS calls: a listener speaks
// TLS exactly when etcd's does, whatever the scheme's case, and a URL
// etcd refuses stops Axon from starting, in etcd's words.
func TestListenURLsAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary and etcd")
	}
	bin := buildAxon(t)
	p := newPeerPKI(t)
	for _, side := range []string{"client", "peer"} {
		for _, form := range urlForms {
			if side == "peer" && form.name == "unixs" {
				continue
			}
			for _, certAuth := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/cert-auth=%v", side, form.name, certAuth), func(t *testing.T) {
					t.Parallel()
					var transcripts [2][]string
					var outputs [2]string
					for i, sys := range []string{"etcd", "axon"} {
						transcripts[i], outputs[i] = probeListener(t, sys, bin, p, side, form.url, certAuth)
					}
					etcdtest.Compare(t, transcripts[0], transcripts[1])
					for _, r := range refusals {
						if strings.Contains(outputs[0], r) && !strings.Contains(outputs[1], r) {
							t.Errorf("etcd refused with %q; axon said:\n%s", r, outputs[1])
						}
					}
				})
			}
		}
	}
}

// probeListener starts sys with the listener of side at the URL form
// makes, and returns what the calls to it got, and the process's output.
func probeListener(t *testing.T, sys, bin string, p *peerPKI, side string, form func(addr, sock string) string, certAuth bool) ([]string, string) {
	u := form(freeAddr(t), side+".sock")
	plain, metrics := "http://"+freeAddr(t), "http://"+freeAddr(t)
	var args []string
	if side == "client" {
		args = []string{"--listen-client-urls", u, "--cert-file", p.file("server.pem"), "--key-file", p.file("server-key.pem")}
		if certAuth {
			args = append(args, "--trusted-ca-file", p.file("client-ca.pem"), "--client-cert-auth")
		}
		if sys == "etcd" {
			args = append(args, "--advertise-client-urls", u, "--listen-peer-urls", plain, "--initial-advertise-peer-urls", plain, "--initial-cluster", "default="+plain)
		}
	} else {
		args = []string{"--listen-peer-urls", u, "--peer-cert-file", p.file("peer.pem"), "--peer-key-file", p.file("peer-key.pem")}
		if certAuth {
			args = append(args, "--peer-trusted-ca-file", p.file("peer-ca.pem"), "--peer-client-cert-auth")
		}
		args = append(args, "--listen-client-urls", plain)
		if sys == "etcd" {
			args = append(args, "--advertise-client-urls", plain, "--initial-advertise-peer-urls", u, "--initial-cluster", "default="+u)
		}
	}
	args = append(args, "--listen-metrics-urls", metrics)
	s := startProcess(t, sys, bin, args...)
	if !s.awaitHealthy(t, metrics+"/health") {
		return []string{"start: refused"}, s.out.String()
	}
	network, addr := "tcp", strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(u), "https://"), "http://")
	if strings.HasPrefix(u, "unix") {
		network, addr = "unix", filepath.Join(s.dir, side+".sock")
	}
	out := []string{"start: ok"}
	if side == "client" {
		target := addr
		if network == "unix" {
			target = "unix://" + addr
		}
		ca := testpki.Pool(p.clientCA)
		out = append(out,
			"plaintext put: "+clientPut(t, target, nil),
			"tls put without a certificate: "+clientPut(t, target, &tls.Config{RootCAs: ca, ServerName: "localhost", MinVersion: tls.VersionTLS12}),
			"tls put with a client certificate: "+clientPut(t, target, withCert(t, p.clientCA)))
	} else {
		ca := testpki.Pool(p.peerCA)
		out = append(out,
			"plaintext: "+transportProbe(network, addr, nil),
			"tls without a certificate: "+transportProbe(network, addr, &tls.Config{RootCAs: ca, ServerName: "localhost", MinVersion: tls.VersionTLS12}),
			"tls with a peer certificate: "+transportProbe(network, addr, withCert(t, p.peerCA)))
	}
	return out, s.out.String()
}

// withCert is TLS that trusts ca and shows a certificate of ca's.
func withCert(t *testing.T, ca *testpki.CA) *tls.Config {
	certPEM, keyPEM := ca.IssueFor(t, "probe", time.Now().UnixNano())
	return &tls.Config{RootCAs: testpki.Pool(ca), ServerName: "localhost", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{testpki.Pair(t, certPEM, keyPEM)}}
}

// clientPut puts a key over gRPC at target, in plaintext for a nil cfg:
// ok, or refused (the two systems word a failed handshake differently).
func clientPut(t *testing.T, target string, cfg *tls.Config) string {
	var creds credentials.TransportCredentials
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := pb.NewKVClient(rawConn(t, target, creds)).Put(ctx, &pb.PutRequest{Key: []byte("/probe"), Value: []byte("v")})
	return refusedOrNot(peerProbe(err))
}

// http2Preface and an empty SETTINGS frame open a plaintext HTTP/2
// connection: a gRPC server answers with its SETTINGS, an HTTP/1 server
// with an error page; a TLS listener answers nothing a client can read.
const http2Open = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// transportProbe opens a connection to addr, in TLS with cfg (plaintext
// for nil), sends the opening of an HTTP/2 connection and says whether
// the listener answered: etcd's peer port speaks HTTP, Axon's gRPC, so
// this is the call both understand.
func transportProbe(network, addr string, cfg *tls.Config) string {
	d := net.Dialer{Timeout: 3 * time.Second}
	conn, err := d.Dial(network, addr)
	if err != nil {
		return "refused (dial)"
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2", "http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.Handshake(); err != nil {
			return "refused"
		}
		conn = tc
	}
	if _, err := conn.Write([]byte(http2Open)); err != nil {
		return "refused"
	}
	b := make([]byte, 1)
	n, err := conn.Read(b)
	if err != nil && !errors.Is(err, net.ErrClosed) && n == 0 {
		return "refused"
	}
	// A TLS listener that took the plaintext for a record answers an
	// alert (content type 21), which is no answer to a plaintext client.
	if cfg == nil && b[0] == 21 {
		return "refused"
	}
	return "answered"
}
