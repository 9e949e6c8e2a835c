package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/internal/testpki"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/memkv"
)

// errRefused stands for any refusal.
var errRefused = errors.New("any refusal")

// TestTheClientCertificateNamesTheUser runs three instances that serve
// clients over mutual TLS with --client-cert-auth: a call without a
// token runs as its certificate's CommonName, on the leader and through
// a follower (which vouches for the name to the leader: the leader sees
// the follower's own certificate, whose name is a root user here and
// must gain nobody anything), and a client's own vouch headers count
// for nothing.
func TestTheClientCertificateNamesTheUser(t *testing.T) {
	ca := testpki.NewCA(t, "client-ca")
	peerPEM, peerKey := ca.IssueFor(t, "axon-peer", 1)
	srvCert := testpki.Pair(t, peerPEM, peerKey)
	c := newCluster(t, memkv.New(), 3)
	c.clientTLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: testpki.Pool(ca),
		ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	c.tweak = func(cfg *server.Config) {
		cfg.ClientCertAuth = true
		cfg.Auth = server.AuthConfig{BcryptCost: 4}
		// Instances dial each other with a certificate named after a
		// root user: were its name taken, every forwarded call would be
		// root's.
		cfg.PeerTLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, RootCAs: testpki.Pool(ca), MinVersion: tls.VersionTLS12}
	}
	c.startAll()
	l := c.awaitLeader()
	as := func(i int, cn string) *grpc.ClientConn {
		certPEM, keyPEM := ca.IssueFor(t, cn, time.Now().UnixNano())
		cert := testpki.Pair(t, certPEM, keyPEM)
		conn, err := grpc.NewClient(c.ins[i].addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert}, RootCAs: testpki.Pool(ca), MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx := ctxT(t)
	root := as(l, "root")
	setUpAlice(t, ctx, pb.NewAuthClient(root), []*authpb.Permission{readwrite("k", "")}, "axon-peer")
	follower := (l + 1) % 3
	for _, i := range []int{l, follower} {
		alice, carol := as(i, "alice"), as(i, "carol")
		put := func(conn *grpc.ClientConn, ctx context.Context) error {
			_, err := pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			return err
		}
		get := func(conn *grpc.ClientConn, ctx context.Context) error {
			_, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("k")})
			return err
		}
		for _, tc := range []struct {
			what string
			err  error
			want error
		}{
			{"alice puts k", put(alice, ctx), nil},
			{"alice reads k", get(alice, ctx), nil},
			{"carol puts k", put(carol, ctx), rpctypes.ErrGRPCPermissionDenied},
			{"carol reads k", get(carol, ctx), rpctypes.ErrGRPCPermissionDenied},
			{"root lists users", func() error {
				_, err := pb.NewAuthClient(as(i, "root")).UserList(ctx, &pb.AuthUserListRequest{})
				return err
			}(), nil},
			{"alice lists users", func() error { _, err := pb.NewAuthClient(alice).UserList(ctx, &pb.AuthUserListRequest{}); return err }(), rpctypes.ErrGRPCPermissionDenied},
			// Not forwarded again by a follower, served as nobody's by the
			// leader: refused either way.
			{"carol vouches for root", put(carol, metadata.AppendToOutgoingContext(ctx, "axon-forwarded", "1", "axon-vouched-user", "root")), errRefused},
			{"carol proves herself an instance vouching for root", put(carol, metadata.AppendToOutgoingContext(ctx, server.PeerProofKey,
				auth.SealPeerProof([]byte("a guess"), auth.PeerProof{Instance: "x", User: "root", Expires: time.Now().Add(time.Minute).UnixNano()}))), errRefused},
			{"alice watches k", func() error {
				w, err := pb.NewWatchClient(alice).Watch(ctx)
				if err == nil {
					err = w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}})
				}
				if err != nil {
					return err
				}
				r, err := w.Recv()
				if err == nil && r.Canceled {
					err = errors.New(r.CancelReason)
				}
				return err
			}(), nil},
		} {
			switch {
			case tc.want == errRefused && tc.err != nil:
			case !errors.Is(tc.err, tc.want):
				t.Errorf("instance %d: %s: %v, want %v", i, tc.what, tc.err, tc.want)
			}
		}
		// A token goes before the certificate, as in etcd.
		r, err := pb.NewAuthClient(carol).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
		if err != nil {
			t.Fatal(err)
		}
		if err := put(carol, metadata.AppendToOutgoingContext(ctx, "token", r.Token)); err != nil {
			t.Errorf("instance %d: carol's certificate with alice's token: %v", i, err)
		}
	}
}
