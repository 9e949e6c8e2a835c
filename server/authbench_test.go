package server_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/server"
)

// authedClient sets auth up on the server cli reaches (root; alice with
// readwrite on /registry/ among nine other permissions) and returns a
// client logged in as alice.
func authedClient(b *testing.B, cli *clientv3.Client) *clientv3.Client {
	b.Helper()
	perms := []*authpb.Permission{readwrite("/registry/", "/registry0")}
	for i := range 9 {
		perms = append(perms, &authpb.Permission{PermType: authpb.Permission_READ, Key: fmt.Appendf(nil, "/other/%d/", i), RangeEnd: fmt.Appendf(nil, "/other/%d0", i)})
	}
	setUpAlice(b, b.Context(), pb.NewAuthClient(cli.ActiveConnection()), perms)
	alice, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second, Username: "alice", Password: "alicepw", Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { alice.Close() })
	return alice
}

// authBench runs op from 64 clients on a server with auth off, and on
// one with auth on as a user with permissions (the goal: ≥ 0.95× of off).
func authBench(b *testing.B, op func(b *testing.B, cli *clientv3.Client, n int64)) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "auth=off", true: "auth=on"}[on], func(b *testing.B) {
			_, cli := startServer(b, server.Config{Auth: server.AuthConfig{BcryptCost: 4}})
			if on {
				cli = authedClient(b, cli)
			}
			if _, err := cli.Put(b.Context(), "/registry/get", strings.Repeat("v", 512)); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(32) // × GOMAXPROCS(2) = 64 clients
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					op(b, cli, n.Add(1))
				}
			})
		})
	}
}

// BenchmarkAuthCreate is BenchmarkCreate with auth off and on.
func BenchmarkAuthCreate(b *testing.B) {
	value := strings.Repeat("v", 512)
	authBench(b, func(b *testing.B, cli *clientv3.Client, n int64) {
		key := fmt.Sprintf("/registry/pods/ns/pod-%08d", n)
		resp, err := cli.Txn(b.Context()).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit()
		if err != nil || !resp.Succeeded {
			b.Fatalf("create %s: %v %v", key, resp, err)
		}
	})
}

// BenchmarkAuthGet is BenchmarkGet with auth off and on.
func BenchmarkAuthGet(b *testing.B) {
	authBench(b, func(b *testing.B, cli *clientv3.Client, _ int64) {
		if _, err := cli.Get(b.Context(), "/registry/get"); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkAuthenticate is Authenticate from 4 clients at bcrypt's
// default cost (etcd's), on Axon and on embedded etcd.
func BenchmarkAuthenticate(b *testing.B) {
	for _, sys := range []string{"axon", "etcd"} {
		b.Run(sys, func(b *testing.B) {
			var cli *clientv3.Client
			if sys == "axon" {
				_, cli = startServer(b, server.Config{})
			} else {
				var err error
				cli, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdtest.Start(b).Host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cli.Close() })
			}
			authedClient(b, cli)
			a := pb.NewAuthClient(cli.ActiveConnection())
			b.SetParallelism(2)
			b.ResetTimer()
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					if _, err := a.Authenticate(b.Context(), &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
