package server_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdsnap"
	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// setUpAuth gives the server at addr root, alice with readwrite on "k",
// and turns auth on; it returns the auth revision then.
func setUpAuth(t *testing.T, addr string) uint64 {
	t.Helper()
	conn := rawConn(t, addr)
	a, ctx := pb.NewAuthClient(conn), ctxT(t)
	if _, err := pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	setUpAlice(t, ctx, a, []*authpb.Permission{readwrite("k", "")})
	st, err := a.AuthStatus(ctx, &pb.AuthStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.AuthRevision
}

func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// checkAuthStore checks that the server at addr has what setUpAuth set
// up: auth on at rev, alice may read k and not z, root may list users.
func checkAuthStore(t *testing.T, who, addr string, rev uint64) {
	t.Helper()
	conn := rawConn(t, addr)
	a, kv, ctx := pb.NewAuthClient(conn), pb.NewKVClient(conn), ctxT(t)
	st, err := a.AuthStatus(ctx, &pb.AuthStatusRequest{})
	if err != nil || !st.Enabled || st.AuthRevision != rev {
		t.Errorf("%s: auth status %v %v, want enabled at revision %d", who, st, err, rev)
	}
	if _, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); !errors.Is(err, rpctypes.ErrGRPCUserEmpty) {
		t.Errorf("%s: a range without a token: %v", who, err)
	}
	login := func(user, pw string) context.Context {
		r, err := a.Authenticate(ctx, &pb.AuthenticateRequest{Name: user, Password: pw})
		if err != nil {
			t.Fatalf("%s: authenticate %s: %v", who, user, err)
		}
		return metadata.AppendToOutgoingContext(ctx, "token", r.Token)
	}
	alice := login("alice", "alicepw")
	if r, err := kv.Range(alice, &pb.RangeRequest{Key: []byte("k")}); err != nil || len(r.Kvs) != 1 {
		t.Errorf("%s: alice reads k: %v %v", who, r, err)
	}
	if _, err := kv.Range(alice, &pb.RangeRequest{Key: []byte("z")}); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Errorf("%s: alice reads z: %v, want permission denied", who, err)
	}
	if _, err := a.Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "wrong"}); !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
		t.Errorf("%s: a wrong password: %v", who, err)
	}
	if r, err := a.UserList(login("root", "rootpw"), &pb.AuthUserListRequest{}); err != nil || len(r.Users) != 2 {
		t.Errorf("%s: root lists users: %v %v", who, r, err)
	}
}

// saveAsRoot is `etcdctl --user root:rootpw snapshot save`.
func saveAsRoot(t *testing.T, addr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	cfg := clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Username: "root", Password: "rootpw", Logger: zap.NewNop()}
	if _, err := snapshot.SaveWithVersion(ctxT(t), zap.NewNop(), cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSnapshotsCarryAuthBothWays: a snapshot of Axon restored into etcd
// has its users, roles, permissions and enabled flag, and one of etcd
// restored into Axon has etcd's; passwords still work on both.
func TestSnapshotsCarryAuthBothWays(t *testing.T) {
	cost := func(cfg *embed.Config) { cfg.BcryptCost = 4 }
	t.Run("axon to etcd", func(t *testing.T) {
		_, cli := startServer(t, server.Config{Core: core.Config{RingSize: 64}, MemberID: 1, ClusterID: 2, Name: "snap", Auth: authConfig})
		addr := cli.Endpoints()[0]
		rev := setUpAuth(t, addr)
		u := etcdtest.StartFromSnapshot(t, saveAsRoot(t, addr))
		checkAuthStore(t, "etcd restored from axon", u.Host, rev)
	})
	t.Run("etcd to axon", func(t *testing.T) {
		u := etcdtest.StartWith(t, cost)
		rev := setUpAuth(t, u.Host)
		path := saveAsRoot(t, u.Host)
		eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		if _, err := etcdsnap.Restore(ctxT(t), path, eng, etcdsnap.RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		_, cli, _ := serveEngine(t, eng, server.Config{Core: core.Config{RingSize: 64}, MemberID: 1, ClusterID: 2, Name: "restored", Auth: authConfig})
		checkAuthStore(t, "axon restored from etcd", cli.Endpoints()[0], rev)
	})
}
