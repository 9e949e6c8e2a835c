package server_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/internal/faultload"
	"github.com/axon-kv/axon/internal/testpki"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/memkv"
)

// peerTLS returns the listener TLS of instances whose certificates the
// CA issued (peer certificates required), and a dialing TLS that
// presents such a certificate and trusts roots.
func peerTLS(t *testing.T, ca *testpki.CA, roots *testpki.CA) (listen *tls.Config, dial func(int) *tls.Config) {
	certPEM, keyPEM := ca.Issue(t, 10)
	cert := testpki.Pair(t, certPEM, keyPEM)
	listen = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: testpki.Pool(ca),
		ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	dial = func(int) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: testpki.Pool(roots), MinVersion: tls.VersionTLS12}
	}
	return listen, dial
}

// TestFailoverKillLeaderPeerTLS is TestFailoverKillLeader with the
// instances forwarding to each other over mutual TLS on peer listeners
// of their own.
func TestFailoverKillLeaderPeerTLS(t *testing.T) {
	c := newCluster(t, newEngine(t), 3)
	ca := testpki.NewCA(t, "peer-ca")
	c.peerTLS, c.dial = peerTLS(t, ca, ca)
	c.startAll()
	ml, err := c.client(c.endpoints()...).MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if len(m.PeerURLs) != 1 || !strings.HasPrefix(m.PeerURLs[0], "https://") {
			t.Fatalf("%s advertises peer URLs %v, want one https URL", m.Name, m.PeerURLs)
		}
	}
	killLeaders(t, c, faultload.EnvInt(t, "AXON_FAILOVER_KILLS", 2))
}

// TestPeerTLSRefusesAnUntrustedLeader: a follower whose trusted CA did
// not sign the leader's certificate does not talk to it: writes through
// that follower fail as never applied (Unavailable) and nothing lands,
// while a follower that trusts the leader forwards.
func TestPeerTLSRefusesAnUntrustedLeader(t *testing.T) {
	eng := memkv.New()
	c := newCluster(t, eng, 3)
	ca, other := testpki.NewCA(t, "peer-ca"), testpki.NewCA(t, "other-ca")
	listen, good := peerTLS(t, ca, ca)
	_, bad := peerTLS(t, ca, other)
	c.peerTLS, c.dial = listen, good
	c.startAll()
	// Restart a follower with a trusted CA that did not sign the
	// leader's certificate.
	l := c.awaitLeader()
	f := (l + 1) % 3
	trusting, distrusting := c.ins[(l+2)%3], c.ins[f]
	distrusting.stop()
	c.dial = func(i int) *tls.Config {
		if i == f {
			return bad(i)
		}
		return good(i)
	}
	c.start(f)
	if c.awaitLeader() != l {
		t.Fatal("leadership moved")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.client(trusting.addr).Put(ctx, "/via-trusting", "v"); err != nil {
		t.Fatalf("put through the trusting follower %s: %v", trusting.name, err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := c.client(distrusting.addr).Put(pctx, "/via-distrusting", "v")
	pcancel()
	if err == nil {
		t.Fatal("a follower that does not trust the leader's certificate forwarded a write")
	}
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("put through the distrusting follower: %v (code %v), want Unavailable", err, code)
	}
	resp, err := c.client(trusting.addr).Get(ctx, "/via-distrusting")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("the refused write landed: %v", resp.Kvs)
	}
}

// TestPeerListenerServesProvedCallsOnly: a peer listener serves the
// calls an instance seals with the secret the instances share in the
// engine, and nothing else, whatever certificate comes with them: no
// proof, a proof of another secret and an expired one are refused as a
// service that is not there, on the peer listener for every service and
// on the client listener for the instances' own.
func TestPeerListenerServesProvedCallsOnly(t *testing.T) {
	eng := memkv.New()
	c := newCluster(t, eng, 3)
	ca := testpki.NewCA(t, "peer-ca")
	c.peerTLS, c.dial = peerTLS(t, ca, ca)
	c.startAll()
	l := c.awaitLeader()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// A write through a follower: it seals its forward, making the secret.
	if _, err := c.client(c.ins[(l+1)%3].addr).Put(ctx, "/forwarded", "v"); err != nil {
		t.Fatal(err)
	}
	txn, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := txn.Get(core.MetaKey(server.PeerSecretKey))
	txn.Rollback()
	if err != nil || len(secret) < 32 {
		t.Fatalf("the instances' secret: %x, %v", secret, err)
	}
	conn := func(addr string) *grpc.ClientConn {
		creds := insecure.NewCredentials() // the client listener
		if addr == c.ins[l].peerAddr {
			creds = credentials.NewTLS(c.dial(0))
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	peer := conn(c.ins[l].peerAddr)
	in := func(d time.Duration) int64 { return time.Now().Add(d).UnixNano() }
	proved := func(secret []byte, expires int64) context.Context {
		return metadata.AppendToOutgoingContext(ctx, server.PeerProofKey, auth.SealPeerProof(secret, auth.PeerProof{Instance: "test", Expires: expires}))
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"no proof", ctx, codes.Unimplemented},
		{"another secret's proof", proved([]byte("not the store's"), in(time.Minute)), codes.Unimplemented},
		{"an expired proof", proved(secret, in(-time.Second)), codes.Unimplemented},
		{"a proof sealed for a day", proved(secret, in(24*time.Hour)), codes.Unimplemented},
		{"a proof", proved(secret, in(20*time.Second)), codes.OK},
	} {
		_, err := pb.NewKVClient(peer).Put(tc.ctx, &pb.PutRequest{Key: []byte("/peer"), Value: []byte(tc.name)})
		if got := status.Code(err); got != tc.want {
			t.Errorf("peer listener, put with %s: %v, want %v", tc.name, err, tc.want)
		}
		for _, addr := range []string{c.ins[l].peerAddr, c.ins[l].addr} {
			err := conn(addr).Invoke(tc.ctx, "/axon.Peer/ReadIndex", &pb.StatusRequest{}, &pb.ResponseHeader{})
			if got := status.Code(err); got != tc.want {
				t.Errorf("read index at %s with %s: %v, want %v", addr, tc.name, err, tc.want)
			}
		}
	}
	resp, err := c.client(c.ins[l].addr).Get(ctx, "/peer")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "a proof" {
		t.Errorf("/peer holds %v, want the proved put's value only", resp.Kvs)
	}
}
