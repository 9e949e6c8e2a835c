package conformance

import (
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
	"github.com/axon-kv/axon/storage/tikv"
)

// backendOptions are per-test knobs a backend may honour.
type backendOptions struct {
	// progressNotifyInterval asks the server for periodic progress
	// notifications on watches that requested them (etcd's
	// --experimental-watch-progress-notify-interval). Zero keeps the
	// server default.
	progressNotifyInterval time.Duration
}

// backend starts one fresh server for a test and returns a client for it.
// The server and client are torn down by t.Cleanup.
type backend struct {
	name  string
	start func(t testing.TB, opts backendOptions) *kubernetes.Client
}

var backends = []backend{
	{name: "axon", start: startAxon},
	{name: "axon-tikv-follower", start: startAxonFollower},
	{name: "etcd", start: startEtcd},
}

func newClient(t testing.TB, endpoint string) *kubernetes.Client {
	t.Helper()
	c, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAxon runs an Axon server over Badger in a fresh directory on a
// loopback port chosen by the OS.
func startAxon(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		MemberID: 1, ClusterID: 2, Name: "conformance", Core: core.Config{}, Exclusive: true,
		Logger: slog.New(slog.DiscardHandler), ProgressNotifyInterval: opts.progressNotifyInterval,
	}, eng)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		eng.Close()
		t.Fatal(err)
	}
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	srv.SetClientURLs([]string{"http://" + lis.Addr().String()})
	c := newClient(t, lis.Addr().String())
	t.Cleanup(func() {
		c.Close()
		g.Stop()
		srv.Close()
		eng.Close()
	})
	return c
}

// startAxonFollower runs three Axon instances over one in-process mock
// TiKV cluster (several regions) and returns a client of a follower, so
// every write, lease and watch of the suite is forwarded to the leader
// and every read goes through the read index.
func startAxonFollower(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	base, err := tikv.NewMock(tikv.MockOptions{Regions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Close() })
	type instance struct {
		srv  *server.Server
		addr string
	}
	var ins []instance
	for i := range 3 {
		eng, err := base.Share()
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(server.Config{
			ClusterID: 2, Name: "conformance-" + strconv.Itoa(i), ClientURLs: []string{"http://" + lis.Addr().String()},
			Lease: 2 * time.Second, TickInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler), ProgressNotifyInterval: opts.progressNotifyInterval,
		}, eng)
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer(srv.ServerOptions()...)
		srv.Register(g)
		go func() { _ = g.Serve(lis) }()
		t.Cleanup(func() {
			g.Stop()
			srv.Close()
			eng.Close()
		})
		ins = append(ins, instance{srv, lis.Addr().String()})
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for i, in := range ins {
			if in.srv.Leading() {
				c := newClient(t, ins[(i+1)%len(ins)].addr)
				t.Cleanup(func() { c.Close() })
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader among three instances after 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// etcdPortMu serialises picking free ports and binding them in embed, so
// two embedded servers started concurrently cannot pick the same port.
var etcdPortMu sync.Mutex

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs a single-member embedded etcd on 127.0.0.1 with ports
// from the OS and its data in t.TempDir().
func startEtcd(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	etcdPortMu.Lock()
	defer etcdPortMu.Unlock()

	cfg := embed.NewConfig()
	cfg.Name = "conformance"
	cfg.Dir = t.TempDir()
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.UnsafeNoFsync = true // throw-away test data
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.progressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = opts.progressNotifyInterval
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		t.Fatal("embedded etcd did not become ready")
	}
	c := newClient(t, clientURL.Host)
	t.Cleanup(func() {
		c.Close()
		e.Close()
	})
	return c
}
