package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/internal/testpki"
)

// peerPKI is the set-up etcd's TLS guide recommends: one CA for clients,
// another for members, each server with a certificate of both.
type peerPKI struct {
	clientCA, peerCA *testpki.CA
	dir              string
}

func newPeerPKI(t *testing.T) *peerPKI {
	p := &peerPKI{clientCA: testpki.NewCA(t, "client-ca"), peerCA: testpki.NewCA(t, "peer-ca"), dir: t.TempDir()}
	srvCert, srvKey := p.clientCA.IssueFor(t, "server", 2)
	peerCert, peerKey := p.peerCA.IssueFor(t, "member", 3)
	testpki.WriteFiles(t, p.dir, map[string][]byte{"client-ca.pem": p.clientCA.PEM, "peer-ca.pem": p.peerCA.PEM,
		"server.pem": srvCert, "server-key.pem": srvKey, "peer.pem": peerCert, "peer-key.pem": peerKey})
	return p
}

func (p *peerPKI) file(name string) string { return filepath.Join(p.dir, name) }

// creds is the TLS of a caller: a certificate named cn from ca (none for
// a nil ca), trusting both CAs.
func (p *peerPKI) creds(t *testing.T, ca *testpki.CA, cn string) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: testpki.Pool(p.clientCA, p.peerCA), MinVersion: tls.VersionTLS12}
	if ca != nil {
		certPEM, keyPEM := ca.IssueFor(t, cn, time.Now().UnixNano())
		cfg.Certificates = []tls.Certificate{testpki.Pair(t, certPEM, keyPEM)}
	}
	return credentials.NewTLS(cfg)
}

// rawConn is a gRPC connection with etcd's generated stubs only:
// clientv3's retries would hide answers.
func rawConn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// peerProbe is what a caller got: the gRPC code and message, or ok with
// what it saw.
func peerProbe(err error, ok ...any) string {
	if err != nil {
		st := status.Convert(err)
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return strings.TrimSpace(fmt.Sprint(append([]any{"ok"}, ok...)...))
}

// refusedOrNot folds an answer where etcd has no such service at all
// (its peer port speaks raft over HTTP, not the client API) into whether
// the caller was refused.
func refusedOrNot(answer string) string {
	if strings.HasPrefix(answer, "ok") {
		return answer
	}
	return "refused"
}

// callsAsACaller sends what a caller can try on a port: read a prefix no
// user may read, list users, add one.
func callsAsACaller(ctx context.Context, conn *grpc.ClientConn) []string {
	r, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("secret/"), RangeEnd: []byte("secret0")})
	rng := peerProbe(err)
	if err == nil {
		rng = peerProbe(nil, len(r.Kvs), "keys")
	}
	_, err = pb.NewAuthClient(conn).UserList(ctx, &pb.AuthUserListRequest{})
	list := peerProbe(err)
	_, err = pb.NewAuthClient(conn).UserAdd(ctx, &pb.AuthUserAddRequest{Name: "evil", Password: "evil"})
	add := peerProbe(err)
	_, err = pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("secret/evil"), Value: []byte("v")})
	put := peerProbe(err)
	return []string{"range: " + rng, "user list: " + list, "user add: " + add, "put: " + put}
}

// callPeerService calls the instances' own service as a client would.
func callPeerService(ctx context.Context, conn *grpc.ClientConn) []string {
	var out []string
	for _, m := range []string{"ReadIndex", "Nudge"} {
		err := conn.Invoke(ctx, "/axon.Peer/"+m, &pb.StatusRequest{}, &pb.ResponseHeader{})
		out = append(out, "axon.Peer/"+m+": "+peerProbe(err))
	}
	return out
}

// setUpAuth adds root (with the root role) and alice, writes under
// secret/ and turns auth on, over conn as a caller everyone may be
// before that.
func setUpAuth(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	a := pb.NewAuthClient(conn)
	steps := []func() error{
		func() error {
			_, err := a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
			return err
		},
		func() error {
			_, err := a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
			return err
		},
		func() error {
			_, err := a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})
			return err
		},
		func() error {
			_, err := pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("secret/k"), Value: []byte("v")})
			return err
		},
		func() error { _, err := a.AuthEnable(ctx, &pb.AuthEnableRequest{}); return err },
	}
	for i, step := range steps {
		// The first call may meet a server still starting.
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := step()
			if err == nil {
				break
			}
			if i > 0 || time.Now().After(deadline) {
				t.Fatalf("auth set-up step %d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// probeCertSetup runs the probes of the client-CA/peer-CA set-up on a
// server with the client and peer addresses given; it returns what the
// callers got, folded where etcd has no such service.
func probeCertSetup(t *testing.T, p *peerPKI, client, peer string) []string {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rootClient := rawConn(t, client, p.creds(t, p.clientCA, "root"))
	setUpAuth(t, ctx, rootClient)
	var out []string
	note := func(who string, lines []string, fold bool) {
		for _, l := range lines {
			if fold {
				k, v, _ := strings.Cut(l, ": ")
				l = k + ": " + refusedOrNot(v)
			}
			out = append(out, who+": "+l)
		}
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }
	for _, c := range []struct {
		who   string
		addr  string
		creds credentials.TransportCredentials
		fold  bool
	}{
		{"peer port, peer CA's certificate CN=root", peer, p.creds(t, p.peerCA, "root"), true},
		{"peer port, client CA's certificate CN=root", peer, p.creds(t, p.clientCA, "root"), true},
		{"peer port, no certificate", peer, p.creds(t, nil, ""), true},
		{"client port, peer CA's certificate CN=root", client, p.creds(t, p.peerCA, "root"), true},
		{"client port, client CA's certificate CN=alice", client, p.creds(t, p.clientCA, "alice"), false},
	} {
		cctx, ccancel := short()
		note(c.who, callsAsACaller(cctx, rawConn(t, c.addr, c.creds)), c.fold)
		ccancel()
	}
	cctx, ccancel := short()
	note("client port, client CA's certificate CN=root", callPeerService(cctx, rootClient), false)
	ccancel()
	// Nothing the probes tried landed.
	users, err := pb.NewAuthClient(rootClient).UserList(ctx, &pb.AuthUserListRequest{})
	out = append(out, "root lists users: "+peerProbe(err, users.GetUsers()))
	r, err := pb.NewKVClient(rootClient).Range(ctx, &pb.RangeRequest{Key: []byte("secret/"), RangeEnd: []byte("secret0")})
	out = append(out, "root reads secret/: "+peerProbe(err, len(r.GetKvs()), "keys"))
	return out
}

// probePlainSetup runs the probes of a plaintext set-up with auth by
// tokens: the peer port takes no client call; MemberList wants a user;
// the instances' service is no client's; headers of Axon's own forwards
// sent by a client count for nothing.
func probePlainSetup(t *testing.T, client, peer string) []string {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn := rawConn(t, client, nil)
	setUpAuth(t, ctx, conn)
	auth, err := pb.NewAuthClient(conn).Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "rootpw"})
	if err != nil {
		t.Fatal(err)
	}
	root := metadata.AppendToOutgoingContext(ctx, "token", auth.Token)
	var out []string
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	for _, l := range callsAsACaller(pctx, rawConn(t, peer, nil)) {
		k, v, _ := strings.Cut(l, ": ")
		out = append(out, "peer port, no token: "+k+": "+refusedOrNot(v))
	}
	for _, l := range callsAsACaller(metadata.AppendToOutgoingContext(pctx, "token", auth.Token), rawConn(t, peer, nil)) {
		k, v, _ := strings.Cut(l, ": ")
		out = append(out, "peer port, root's token: "+k+": "+refusedOrNot(v))
	}
	pcancel()
	for _, c := range []struct {
		who string
		ctx context.Context
	}{
		{"no token", ctx},
		{"an invalid token", metadata.AppendToOutgoingContext(ctx, "token", "forged.token")},
	} {
		_, err := pb.NewClusterClient(conn).MemberList(c.ctx, &pb.MemberListRequest{})
		out = append(out, "member list, "+c.who+": "+peerProbe(err))
	}
	ml, err := pb.NewClusterClient(conn).MemberList(root, &pb.MemberListRequest{})
	out = append(out, "member list, root's token: "+peerProbe(err, len(ml.GetMembers()), "members"))
	for _, l := range callPeerService(ctx, conn) {
		out = append(out, "client port, no token: "+l)
	}
	for _, l := range callPeerService(root, conn) {
		out = append(out, "client port, root's token: "+l)
	}
	// What Axon's forwards carry, forged by a client: nobody's.
	forged := metadata.AppendToOutgoingContext(ctx, "axon-forwarded", "1", "axon-vouched-user", "root", "axon-peer-proof", "e30.AAAA")
	_, err = pb.NewKVClient(conn).Put(forged, &pb.PutRequest{Key: []byte("secret/evil"), Value: []byte("v")})
	out = append(out, "client port, forged forward headers: put: "+peerProbe(err))
	r, err := pb.NewKVClient(conn).Range(root, &pb.RangeRequest{Key: []byte("secret/"), RangeEnd: []byte("secret0")})
	out = append(out, "root reads secret/: "+peerProbe(err, len(r.GetKvs()), "keys"))
	return out
}

// TestPeerPortIsNoClientPort starts `axon serve` and etcd 3.7.3 in the
// same set-ups and sends both the same calls: a client CA for clients
// with --client-cert-auth and a peer CA for members with
// --peer-client-cert-auth (a peer certificate named root was root on
// Axon's peer port); and plaintext client and peer URLs with auth by
// token (the peer port served the client API to anyone).
func TestPeerPortIsNoClientPort(t *testing.T) {
	t.Run("client CA and peer CA", func(t *testing.T) {
		p := newPeerPKI(t)
		var etcdPeer string
		u := etcdtest.StartWith(t, func(cfg *embed.Config) {
			etcdPeer = cfg.ListenPeerUrls[0].Host
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: p.file("server.pem"), KeyFile: p.file("server-key.pem"),
				TrustedCAFile: p.file("client-ca.pem"), ClientCertAuth: true}
			cfg.PeerTLSInfo = transport.TLSInfo{CertFile: p.file("peer.pem"), KeyFile: p.file("peer-key.pem"),
				TrustedCAFile: p.file("peer-ca.pem"), ClientCertAuth: true}
			for _, urls := range [][]url.URL{cfg.ListenClientUrls, cfg.AdvertiseClientUrls, cfg.ListenPeerUrls, cfg.AdvertisePeerUrls} {
				urls[0].Scheme = "https"
			}
			cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		})
		want := probeCertSetup(t, p, u.Host, etcdPeer)
		client, peer := freeAddr(t), freeAddr(t)
		serveInProcess(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen-metrics-urls", "http://"+freeAddr(t),
			"--listen-client-urls", "https://"+client, "--cert-file", p.file("server.pem"), "--key-file", p.file("server-key.pem"),
			"--trusted-ca-file", p.file("client-ca.pem"), "--client-cert-auth",
			"--listen-peer-urls", "https://"+peer, "--peer-cert-file", p.file("peer.pem"), "--peer-key-file", p.file("peer-key.pem"),
			"--peer-trusted-ca-file", p.file("peer-ca.pem"), "--peer-client-cert-auth")
		etcdtest.Compare(t, want, probeCertSetup(t, p, client, peer))
	})
	t.Run("plaintext with tokens", func(t *testing.T) {
		var etcdPeer string
		u := etcdtest.StartWith(t, func(cfg *embed.Config) { etcdPeer = cfg.ListenPeerUrls[0].Host })
		want := probePlainSetup(t, u.Host, etcdPeer)
		client, peer := freeAddr(t), freeAddr(t)
		serveInProcess(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen-metrics-urls", "http://"+freeAddr(t),
			"--listen-client-urls", "http://"+client, "--listen-peer-urls", "http://"+peer)
		etcdtest.Compare(t, want, probePlainSetup(t, client, peer))
	})
}

// TestCertAuthRefusesAnOpenPeerListener: with --client-cert-auth, a peer
// URL that takes instances without a certificate is refused at start,
// naming the flags to fix.
func TestCertAuthRefusesAnOpenPeerListener(t *testing.T) {
	p := newPeerPKI(t)
	client := []string{"--listen-client-urls", "https://" + freeAddr(t), "--cert-file", p.file("server.pem"), "--key-file", p.file("server-key.pem"),
		"--trusted-ca-file", p.file("client-ca.pem"), "--client-cert-auth", "--listen-metrics-urls", "http://" + freeAddr(t)}
	for _, tc := range []struct {
		name string
		peer []string
		want []string
	}{
		{"plain peer URL", []string{"--listen-peer-urls", "http://" + freeAddr(t)}, []string{"--client-cert-auth", "--listen-peer-urls", "--peer-client-cert-auth"}},
		{"https peer URL without peer certificates", []string{"--listen-peer-urls", "https://" + freeAddr(t),
			"--peer-cert-file", p.file("peer.pem"), "--peer-key-file", p.file("peer-key.pem"), "--peer-trusted-ca-file", p.file("peer-ca.pem")},
			[]string{"--client-cert-auth", "--listen-peer-urls", "--peer-client-cert-auth"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := serveCmd()
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			cmd.SetArgs(append(append([]string{"--data-dir", filepath.Join(t.TempDir(), "data")}, client...), tc.peer...))
			err := cmd.ExecuteContext(t.Context())
			if err == nil {
				t.Fatal("started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not name %s", err, w)
				}
			}
		})
	}
}
