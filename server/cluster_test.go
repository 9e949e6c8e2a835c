package server_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// instance is one Axon server of a test cluster, on its own listener.
type instance struct {
	name string
	addr string
	srv  *server.Server
	g    *grpc.Server
	// peer serves the peer listener, when there is one.
	peer     *grpc.Server
	peerAddr string
	up       bool
}

// stop kills the instance: its listener and every stream go at once,
// as with kill -9 (the engine is shared and stays).
func (in *instance) stop() {
	if !in.up {
		return
	}
	in.up = false
	in.g.Stop()
	if in.peer != nil {
		in.peer.Stop()
	}
	in.srv.Close()
}

// testCluster is several Axon instances over one engine.
type testCluster struct {
	t   testing.TB
	eng storage.Engine
	ins []*instance
	// peerTLS, when set before instances start, gives each instance a
	// peer listener of its own with this TLS, and dial says how
	// instance i dials the others.
	peerTLS *tls.Config
	dial    func(i int) *tls.Config
	// tweak, when set before instances start, changes each instance's
	// configuration.
	tweak func(*server.Config)
	// clientTLS, when set before instances start, serves each instance's
	// client listener (where the others forward to, without peerTLS)
	// with this TLS.
	clientTLS *tls.Config
}

// clusterTiming is short so that failovers take about a second.
func clusterConfig(name, addr string) server.Config {
	return server.Config{
		Core: core.Config{RingSize: 1024}, ClusterID: 7, Name: name, ClientURLs: []string{"http://" + addr},
		Lease: time.Second, RenewEvery: 250 * time.Millisecond, MaxDrift: 50 * time.Millisecond,
		EngineDeadline: 400 * time.Millisecond, TickInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
}

func startCluster(t testing.TB, eng storage.Engine, n int) *testCluster {
	t.Helper()
	return newCluster(t, eng, n).startAll()
}

func newCluster(t testing.TB, eng storage.Engine, n int) *testCluster {
	c := &testCluster{t: t, eng: eng}
	for i := range n {
		c.ins = append(c.ins, &instance{name: fmt.Sprintf("axon-%d", i)})
	}
	return c
}

// startAll starts every instance and waits for a leader.
func (c *testCluster) startAll() *testCluster {
	t := c.t
	t.Helper()
	for i := range c.ins {
		c.start(i)
	}
	t.Cleanup(func() {
		for _, in := range c.ins {
			in.stop()
		}
	})
	c.awaitLeader()
	return c
}

// start (re)starts instance i on a new port.
func (c *testCluster) start(i int) {
	c.t.Helper()
	in := c.ins[i]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	in.addr = lis.Addr().String()
	if c.clientTLS != nil {
		lis = tls.NewListener(lis, c.clientTLS)
	}
	cfg := clusterConfig(in.name, in.addr)
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	var peerLis net.Listener
	if c.peerTLS != nil {
		if peerLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			c.t.Fatal(err)
		}
		cfg.PeerURLs = []string{"https://" + peerLis.Addr().String()}
		cfg.PeerTLS = c.dial(i)
		peerLis = tls.NewListener(peerLis, c.peerTLS)
	}
	srv, err := server.New(cfg, c.eng)
	if err != nil {
		c.t.Fatal(err)
	}
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	in.peer, in.peerAddr = nil, ""
	if peerLis != nil {
		pg := grpc.NewServer(srv.PeerServerOptions()...)
		srv.Register(pg)
		go func() { _ = pg.Serve(peerLis) }()
		in.peer, in.peerAddr = pg, peerLis.Addr().String()
	}
	in.srv, in.g, in.up = srv, g, true
}

// leader returns the index of the instance that leads, polling until
// one does.
func (c *testCluster) awaitLeader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, in := range c.ins {
			if in.up && in.srv.Leading() {
				return i
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatal("no leader after 10s")
	return -1
}

// Endpoints and Describe make a testCluster a faultload.Cluster.
func (c *testCluster) Endpoints() []string { return c.endpoints() }

func (c *testCluster) Describe() string {
	var state []string
	for _, in := range c.ins {
		state = append(state, fmt.Sprintf("%s up=%v leading=%v", in.name, in.up, in.up && in.srv.Leading()))
	}
	return strings.Join(state, ", ")
}

func (c *testCluster) endpoints() []string {
	var eps []string
	for _, in := range c.ins {
		if in.up {
			eps = append(eps, in.addr)
		}
	}
	return eps
}

func (c *testCluster) client(eps ...string) *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

func TestClusterFollowersServeEveryService(t *testing.T) {
	c := startCluster(t, memkv.New(), 3)
	l := c.awaitLeader()
	f1, f2 := c.ins[(l+1)%3], c.ins[(l+2)%3]
	w, r := c.client(f1.addr), c.client(f2.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	wch := r.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithPrevKV())
	put, err := w.Put(ctx, "k1", "v1")
	if err != nil {
		t.Fatalf("put through a follower: %v", err)
	}
	got, err := r.Get(ctx, "k1")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("linearizable get through the other follower: %v %v", got, err)
	}
	if got.Header.Revision < put.Header.Revision {
		t.Fatalf("read at %d after a write at %d", got.Header.Revision, put.Header.Revision)
	}
	select {
	case wr := <-wch:
		if len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "k1" || wr.Events[0].Kv.ModRevision != put.Header.Revision {
			t.Fatalf("watch through a follower: %+v", wr)
		}
	case <-ctx.Done():
		t.Fatal("no watch event through a follower")
	}
	txn, err := w.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("k1"), "=", put.Header.Revision)).Then(clientv3.OpPut("k1", "v2")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("txn through a follower: %v %v", txn, err)
	}
	lease, err := w.Grant(ctx, 30)
	if err != nil {
		t.Fatalf("grant through a follower: %v", err)
	}
	if _, err := w.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatalf("keepalive through a follower: %v", err)
	}
	ttl, err := r.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("time-to-live through a follower: %v %v", ttl, err)
	}
	if _, err := w.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("revoke through a follower: %v", err)
	}
	ml, err := r.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list: %v %v", ml, err)
	}
	var leaderID uint64
	for _, in := range c.ins {
		st, err := r.Status(ctx, in.addr)
		if err != nil {
			t.Fatalf("status of %s: %v", in.name, err)
		}
		if leaderID != 0 && st.Leader != leaderID {
			t.Fatalf("instances disagree on the leader: %x and %x", leaderID, st.Leader)
		}
		leaderID = st.Leader
	}
	if leaderID == 0 {
		t.Fatal("status names no leader")
	}
	if _, err := w.Compact(ctx, put.Header.Revision); err != nil {
		t.Fatalf("compact through a follower: %v", err)
	}
	if _, err := r.Get(ctx, "k1", clientv3.WithRev(put.Header.Revision-1)); err == nil {
		t.Fatal("read below the compact revision through a follower succeeded")
	}
}

func TestClusterMoveLeader(t *testing.T) {
	c := startCluster(t, memkv.New(), 3)
	l := c.awaitLeader()
	cli := c.client(c.ins[(l+1)%3].addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	to := c.ins[(l+2)%3]
	st, err := cli.Status(ctx, to.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.MoveLeader(ctx, st.Header.MemberId); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	if got := c.awaitLeader(); c.ins[got] != to {
		t.Fatalf("leader is %s, want %s", c.ins[got].name, to.name)
	}
	if _, err := cli.Put(ctx, "after", "move"); err != nil {
		t.Fatalf("put after the move: %v", err)
	}
}

// TestFollowerReadBehindACompaction: a follower's serializable read uses
// the commit point it last learned, which a compaction and its sweep may
// have passed: the version it would read there is gone, so it reads at
// the compact revision rather than answer that the key does not exist.
func TestFollowerReadBehindACompaction(t *testing.T) {
	c := startCluster(t, memkv.New(), 2)
	l := c.awaitLeader()
	fc, lc := c.client(c.ins[1-l].addr), c.client(c.ins[l].addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	first, err := fc.Put(ctx, "k", "1") // the follower learns this revision
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Put(ctx, "k", "2"); err != nil {
		t.Fatal(err)
	}
	last, err := lc.Put(ctx, "other", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Compact(ctx, last.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	r, err := fc.Get(ctx, "k", clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" || r.Header.Revision < last.Header.Revision {
		t.Fatalf("serializable get on the follower (it learned r%d; compacted at r%d): %v at r%d", first.Header.Revision, last.Header.Revision, r.Kvs, r.Header.Revision)
	}
}
