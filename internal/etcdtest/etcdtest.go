// Package etcdtest starts an embedded etcd 3.7.3, the reference Axon's
// tests compare responses with.
package etcdtest

import (
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Start starts a one-member etcd on loopback ports of the OS's, stopped
// when the test ends, and returns its client URL (http; its client port
// serves gRPC and the JSON gateway).
func Start(t testing.TB) url.URL {
	t.Helper()
	cfg := config(t)
	cfg.Dir = t.TempDir()
	return start(t, cfg)
}

// StartWith is Start with cfg changed by change first (its ports and
// data directory are set already).
func StartWith(t testing.TB, change func(*embed.Config)) url.URL {
	t.Helper()
	cfg := config(t)
	cfg.Dir = t.TempDir()
	change(cfg)
	return start(t, cfg)
}

// StartFromSnapshot restores an etcd snapshot file as `etcdutl snapshot
// restore` does (its hash checked) and starts a one-member etcd on the
// restored data, as Start does.
func StartFromSnapshot(t testing.TB, snapshotPath string) url.URL {
	t.Helper()
	cfg := config(t)
	cfg.Dir = filepath.Join(t.TempDir(), "restored")
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                cfg.Name,
		OutputDataDir:       cfg.Dir,
		PeerURLs:            []string{cfg.AdvertisePeerUrls[0].String()},
		InitialCluster:      cfg.InitialCluster,
		InitialClusterToken: cfg.InitialClusterToken,
	})
	if err != nil {
		t.Fatalf("restore %s: %v", snapshotPath, err)
	}
	return start(t, cfg)
}

// config is a one-member configuration on fresh loopback ports, quiet.
func config(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return cfg
}

// start starts etcd on cfg, stopped when the test ends, and returns its
// client URL once it is ready.
func start(t testing.TB, cfg *embed.Config) url.URL {
	t.Helper()
	client := cfg.ListenClientUrls[0]
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready")
	}
	return client
}

// freeURL returns an http URL on a loopback port the OS just handed out.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// Compare fails t on every line of Axon's transcript got that differs
// from etcd's want, and logs got when verbose.
func Compare(t testing.TB, want, got []string) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("etcd gave %d lines, Axon %d", len(want), len(got))
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Errorf("line %d:\n etcd: %s\n axon: %s", i, want[i], got[i])
		}
	}
	if testing.Verbose() {
		t.Logf("transcript:\n%s", strings.Join(got, "\n"))
	}
}
