package embed_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/internal/testpki"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// keptOpen is a shared engine that an instance's Close leaves open for
// the others.
type keptOpen struct{ storage.Engine }

func (keptOpen) Close() error { return nil }

// TestInstancesForwardOverUnixSockets: two instances of one engine with
// TLS peer URLs on unix sockets (unixs://) and clients on a unix socket
// (unix://): a write through the follower reaches the leader over its
// socket, with TLS, and every instance reads it.
func TestInstancesForwardOverUnixSockets(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "peer-ca")
	cert, key := ca.IssueFor(t, "member", 2)
	testpki.WriteFiles(t, dir, map[string][]byte{"ca.pem": ca.PEM, "peer.pem": cert, "peer-key.pem": key})
	eng := memkv.New()
	t.Cleanup(func() { eng.Close() })
	var instances []*embed.Axon
	for _, name := range []string{"a", "b"} {
		cfg := testConfig(filepath.Join(dir, name))
		cfg.Name, cfg.Engine = name, keptOpen{eng}
		cfg.ListenClientURLs = []string{"unix://" + filepath.Join(dir, name+".sock")}
		cfg.ListenPeerURLs = []string{"UNIXS://" + filepath.Join(dir, name+"-peer.sock")}
		cfg.PeerTLS = embed.TLSInfo{CertFile: filepath.Join(dir, "peer.pem"), KeyFile: filepath.Join(dir, "peer-key.pem"),
			TrustedCAFile: filepath.Join(dir, "ca.pem"), ClientCertAuth: true}
		cfg.LeaderLease, cfg.MaxClockDrift, cfg.EngineDeadline, cfg.TickInterval = time.Second, 50*time.Millisecond, 400*time.Millisecond, 20*time.Millisecond
		a := start(t, cfg)
		t.Cleanup(func() { a.Close() })
		instances = append(instances, a)
	}
	clients := make([]*clientv3.Client, len(instances))
	for i, name := range []string{"a", "b"} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(dir, name+".sock")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		clients[i] = cli
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// Await a leader through the first instance.
	for {
		c, done := context.WithTimeout(ctx, time.Second)
		_, err := clients[0].Put(c, "/awaited", "v")
		done()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no leader: %v", err)
		}
	}
	follower := 0
	if instances[0].Server().Leading() {
		follower = 1
	}
	if instances[follower].Server().Leading() {
		t.Fatal("both instances lead")
	}
	if _, err := clients[follower].Put(ctx, "/through-the-follower", "v"); err != nil {
		t.Fatalf("put through the follower: %v", err)
	}
	// The forward was sealed with the instances' secret, which it made.
	txn, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := txn.Get(core.MetaKey("peer-secret"))
	txn.Rollback()
	if err != nil || len(secret) == 0 {
		t.Errorf("no forward was sealed: the instances' secret is %x, %v", secret, err)
	}
	for i, cli := range clients {
		resp, err := cli.Get(ctx, "/through-the-follower")
		if err != nil || len(resp.Kvs) != 1 {
			t.Errorf("instance %d reads %v, %v", i, resp, err)
		}
	}
}
