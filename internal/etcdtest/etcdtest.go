// Package etcdtest starts an embedded etcd 3.7.3, the reference Axon's
// tests compare responses with.
package etcdtest

import (
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Start starts a one-member etcd on loopback ports of the OS's, stopped
// when the test ends, and returns its client URL (http; its client port
// serves gRPC and the JSON gateway).
func Start(t testing.TB) url.URL {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
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
