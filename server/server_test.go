package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// start runs an Axon server over Badger in dir on a loopback port and
// returns a clientv3 client for it.
func start(t *testing.T, dir string) *clientv3.Client {
	t.Helper()
	return startWith(t, dir, server.Config{Core: core.Config{RingSize: 16}, MemberID: 1, ClusterID: 2, Name: "test"})
}

func startWith(t *testing.T, dir string, cfg server.Config) *clientv3.Client {
	t.Helper()
	_, cli := startServerIn(t, dir, cfg)
	return cli
}

// startServer runs an Axon server with its metrics interceptors over
// Badger in a temp dir, with the gRPC receive limit axon serve sets, and
// returns it with a clientv3 client.
func startServer(t testing.TB, cfg server.Config) (*server.Server, *clientv3.Client) {
	t.Helper()
	return startServerIn(t, t.TempDir(), cfg)
}

// startServerIn is startServer on a given data dir.
func startServerIn(t testing.TB, dir string, cfg server.Config) (*server.Server, *clientv3.Client) {
	t.Helper()
	eng, err := badgerkv.Open(dir, badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, cli, _ := serveEngine(t, eng, cfg)
	return srv, cli
}

// serveEngine serves eng as the only instance on a port of the OS's and
// returns a client of it, and stop, which stops the server (it runs at
// cleanup too; the caller closes the engine).
func serveEngine(t testing.TB, eng storage.Engine, cfg server.Config) (*server.Server, *clientv3.Client, func()) {
	t.Helper()
	cfg.Exclusive = true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // keeps benchmark output clean
	}
	srv, err := server.New(cfg, eng)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			g.Stop()
			srv.Close()
		})
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{lis.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.Close()
		stop()
	})
	return srv, cli, stop
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestPutGetDeleteOverClientv3(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	p1, err := cli.Put(ctx, "/registry/pods/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := cli.Put(ctx, "/registry/pods/b", "2", clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	if p2.Header.Revision <= p1.Header.Revision {
		t.Fatalf("revisions did not increase: %d then %d", p1.Header.Revision, p2.Header.Revision)
	}
	g, err := cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if g.Count != 2 || string(g.Kvs[0].Value) != "1" || string(g.Kvs[1].Value) != "2" || g.Header.Revision < p2.Header.Revision {
		t.Fatalf("get: %+v", g)
	}
	old, err := cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(p1.Header.Revision))
	if err != nil || old.Count != 1 {
		t.Fatalf("get at r%d: %v %+v", p1.Header.Revision, err, old)
	}
	d, err := cli.Delete(ctx, "/registry/pods/a", clientv3.WithPrevKV())
	if err != nil || d.Deleted != 1 || string(d.PrevKvs[0].Value) != "1" {
		t.Fatalf("delete: %v %+v", err, d)
	}
	if _, err := cli.Get(ctx, "x", clientv3.WithRev(d.Header.Revision+100)); err != rpctypes.ErrFutureRev {
		t.Fatalf("future revision: got %v", err)
	}
	if _, err := cli.Put(ctx, "", "v"); err != rpctypes.ErrEmptyKey {
		t.Fatalf("empty key: got %v", err)
	}
}

func TestKubernetesCreateAndCASOverClientv3(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	key := "/registry/configmaps/default/x"
	create := func() *clientv3.TxnResponse {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "v1")).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := create()
	if !r.Succeeded {
		t.Fatal("first create failed")
	}
	rev := r.Responses[0].GetResponsePut().Header.Revision
	if rev != r.Header.Revision {
		t.Fatalf("put header r%d, txn header r%d", rev, r.Header.Revision)
	}
	if r2 := create(); r2.Succeeded || r2.Responses[0].GetResponseRange().Kvs[0].ModRevision != rev {
		t.Fatalf("second create: %+v", r2)
	}
	upd, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, "v2")).Else(clientv3.OpGet(key)).Commit()
	if err != nil || !upd.Succeeded {
		t.Fatalf("CAS update: %v %+v", err, upd)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("k", "1"), clientv3.OpPut("k", "2")).Commit(); err != rpctypes.ErrDuplicateKey {
		t.Fatalf("duplicate key: got %v", err)
	}
}

func TestWatchFromOldRevisionAndCompaction(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	var first int64
	for i := 0; i < 40; i++ { // more than the ring holds
		r, err := cli.Put(ctx, "/w/k", string(rune('a'+i%26)))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Header.Revision
		}
	}
	wch := cli.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(first), clientv3.WithPrevKV())
	got := 0
	for got < 40 {
		wr := <-wch
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision != first+int64(got) {
				t.Fatalf("event %d at r%d, want r%d", got, ev.Kv.ModRevision, first+int64(got))
			}
			if got > 0 && ev.PrevKv == nil {
				t.Fatalf("event %d has no prev_kv", got)
			}
			got++
		}
	}
	if _, err := cli.Put(ctx, "/w/live", "x"); err != nil {
		t.Fatal(err)
	}
	if wr := <-wch; len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "/w/live" {
		t.Fatalf("live event: %+v", wr)
	}
	if _, err := cli.Compact(ctx, first+10); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "/w/k", clientv3.WithRev(first)); err != rpctypes.ErrCompacted {
		t.Fatalf("get below compact: %v", err)
	}
	wr := <-cli.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(first))
	if wr.CompactRevision != first+10 || !wr.Canceled {
		t.Fatalf("watch below compact: %+v", wr)
	}
}

func TestRevisionsContinueAfterRestart(t *testing.T) {
	dir := t.TempDir()
	var last int64
	func() {
		eng, err := badgerkv.Open(dir, badgerkv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		srv, err := server.New(server.Config{Exclusive: true}, eng)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		lis, _ := net.Listen("tcp", "127.0.0.1:0")
		g := grpc.NewServer()
		srv.Register(g)
		go func() { _ = g.Serve(lis) }()
		defer g.Stop()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{lis.Addr().String()}, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		for i := 0; i < 5; i++ {
			r, err := cli.Put(ctxT(t), "k", "v")
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		}
	}()
	cli := start(t, dir)
	g, err := cli.Get(ctxT(t), "k")
	if err != nil || g.Header.Revision != last || g.Kvs[0].Version != 5 {
		t.Fatalf("after restart: %v %+v (want revision %d)", err, g, last)
	}
	r, err := cli.Put(ctxT(t), "k", "w")
	if err != nil || r.Header.Revision <= last {
		t.Fatalf("put after restart: %v r%d, last r%d", err, r.Header.Revision, last)
	}
}

func TestLeaseExpiryDeletesKeysAndEmitsEvents(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 1) // raised to the 2 s minimum
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 {
		t.Fatalf("granted TTL %d, want 2", g.TTL)
	}
	if _, err := cli.Put(ctx, "/l/a", "1", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	ttl, err := cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 1 || ttl.GrantedTTL != 2 {
		t.Fatalf("time to live: %v %+v", err, ttl)
	}
	wch := cli.Watch(ctx, "/l/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if _, err := cli.Put(ctx, "/l/b", "2", clientv3.WithLease(0x7fff)); err != rpctypes.ErrLeaseNotFound {
		t.Fatalf("put with unknown lease: %v", err)
	}
	// No keepalive: the lease expires within TTL plus a tick.
	wr := <-wch
	if len(wr.Events) != 1 || wr.Events[0].Type != clientv3.EventTypeDelete || string(wr.Events[0].PrevKv.Value) != "1" {
		t.Fatalf("expiry event: %+v", wr)
	}
	if r, err := cli.Get(ctx, "/l/a"); err != nil || r.Count != 0 {
		t.Fatalf("key after expiry: %v %+v", err, r)
	}
	if ttl, err := cli.TimeToLive(ctx, g.ID); err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live after expiry: %v %+v", err, ttl)
	}
}

func TestLeaseKeepAliveAndRevoke(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := cli.KeepAliveOnce(ctx, g.ID)
	if err != nil || ka.TTL != 30 {
		t.Fatalf("keepalive: %v %+v", err, ka)
	}
	if _, err := cli.Put(ctx, "k", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	ls, err := cli.Leases(ctx)
	if err != nil || len(ls.Leases) != 1 || ls.Leases[0].ID != g.ID {
		t.Fatalf("leases: %v %+v", err, ls)
	}
	if _, err := cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if r, _ := cli.Get(ctx, "k"); r.Count != 0 {
		t.Fatalf("key survived revoke: %+v", r)
	}
	if _, err := cli.Revoke(ctx, g.ID); err != rpctypes.ErrLeaseNotFound {
		t.Fatalf("second revoke: %v", err)
	}
}

func TestMaintenanceHashKVAlarmMoveLeader(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	p1, _ := cli.Put(ctx, "a", "1")
	ep := cli.Endpoints()[0]
	h1, err := cli.HashKV(ctx, ep, p1.Header.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "a", "2"); err != nil {
		t.Fatal(err)
	}
	again, err := cli.HashKV(ctx, ep, p1.Header.Revision)
	if err != nil || again.Hash != h1.Hash || again.HashRevision != p1.Header.Revision {
		t.Fatalf("HashKV at r%d changed after a later write: %v %+v vs %+v", p1.Header.Revision, err, again, h1)
	}
	now, err := cli.HashKV(ctx, ep, 0)
	if err != nil || now.Hash == h1.Hash {
		t.Fatalf("HashKV now: %v %+v", err, now)
	}
	// etcdctl's status table divides by db size: it must not be 0.
	if st, err := cli.Status(ctx, ep); err != nil || st.DbSize <= 0 || st.Version < "3.5.13" {
		t.Fatalf("status: %v %+v", err, st)
	}
	if al, err := cli.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarms: %v %+v", err, al)
	}
	if _, err := cli.MoveLeader(ctx, 99); err != rpctypes.ErrBadLeaderTransferee {
		t.Fatalf("move leader to a stranger: %v", err)
	}
	if _, err := cli.MoveLeader(ctx, 1); err != nil {
		t.Fatalf("move leader to itself: %v", err)
	}
}

func TestCompactionSweepsOldVersions(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	var last int64
	for i := 0; i < 20; i++ {
		r, err := cli.Put(ctx, "k", string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	// Physical: the call returns once the sweep is done.
	if _, err := cli.Compact(ctx, last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	g, err := cli.Get(ctx, "k", clientv3.WithRev(last))
	if err != nil || string(g.Kvs[0].Value) != string(rune('a'+19)) || g.Kvs[0].Version != 20 {
		t.Fatalf("read at the compact revision: %v %+v", err, g)
	}
	if _, err := cli.Get(ctx, "k", clientv3.WithRev(last-1)); err != rpctypes.ErrCompacted {
		t.Fatalf("read below: %v", err)
	}
	if p, err := cli.Put(ctx, "k", "z"); err != nil || p.Header.Revision <= last {
		t.Fatalf("put after sweep: %v", err)
	}
}

// TestCompactionKeepsEachKeysNewestVersion: the sweep keeps every key's
// newest version at the compact revision, whether its value is small
// (in Badger's tables) or large (in its value log, which the sweep does
// not read), and drops a key deleted below it.
func TestCompactionKeepsEachKeysNewestVersion(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := ctxT(t)
	big := func(c byte) string { return strings.Repeat(string(c), 1024) }
	want := map[string]string{"live-small": "c", "live-big": big('c'), "later-big": big('b')}
	for _, kv := range [][2]string{
		{"live-small", "a"}, {"live-big", big('a')}, {"gone-big", big('a')}, {"later-big", big('a')},
		{"live-small", "b"}, {"live-big", big('b')}, {"later-big", big('b')},
		{"live-small", "c"}, {"live-big", big('c')},
	} {
		if _, err := cli.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	d, err := cli.Delete(ctx, "gone-big")
	if err != nil {
		t.Fatal(err)
	}
	at := d.Header.Revision
	if _, err := cli.Put(ctx, "later-big", big('z')); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, at, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	g, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(at))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range g.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if !maps.Equal(got, want) {
		t.Errorf("at the compact revision %d after the sweep: %d keys, want %d", at, len(got), len(want))
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %d bytes, want %d", k, len(got[k]), len(v))
			}
		}
	}
	if g, err := cli.Get(ctx, "later-big"); err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != big('z') {
		t.Errorf("the version above the compact revision: %v, %v", g, err)
	}
}

func TestWatchFragmentsLargeResponses(t *testing.T) {
	cli := startWith(t, t.TempDir(), server.Config{MemberID: 1, MaxRequestBytes: 1024})
	ctx := ctxT(t)
	big := strings.Repeat("x", 300)
	for i := 0; i < 5; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/f/%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	// A raw stream, to see the fragments clientv3 would put together.
	stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := &pb.WatchCreateRequest{Key: []byte("/f/"), RangeEnd: []byte("/f0"), PrevKv: true, Fragment: true}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || !r.Created {
		t.Fatalf("create: %v %+v", err, r)
	}
	d, err := cli.Delete(ctx, "/f/", clientv3.WithPrefix())
	if err != nil || d.Deleted != 5 {
		t.Fatalf("delete: %v %+v", err, d)
	}
	// Five deletes with 300-byte prev_kvs exceed 1 KiB: several parts,
	// every one but the last marked Fragment, each within the limit.
	var parts, events int
	for events < 5 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		parts++
		events += len(r.Events)
		if r.Fragment != (events < 5) {
			t.Fatalf("part %d with %d events so far: fragment=%v", parts, events, r.Fragment)
		}
		if proto.Size(r) > 1024+200 {
			t.Fatalf("part %d is %d bytes", parts, proto.Size(r))
		}
	}
	if parts < 2 {
		t.Fatalf("a %d-event response over the limit came in %d part", events, parts)
	}
	// clientv3 puts the parts back together.
	if _, err := cli.Put(ctx, "/f/0", big); err != nil {
		t.Fatal(err)
	}
	wr := <-cli.Watch(ctx, "/f/", clientv3.WithPrefix(), clientv3.WithRev(d.Header.Revision), clientv3.WithPrevKV(), clientv3.WithFragment())
	if err := wr.Err(); err != nil || len(wr.Events) < 5 || wr.Events[4].Type != clientv3.EventTypeDelete {
		t.Fatalf("clientv3 with fragments: %v, %d events", err, len(wr.Events))
	}
}

func TestPeriodicAutoCompaction(t *testing.T) {
	cli := startWith(t, t.TempDir(), server.Config{MemberID: 1, AutoCompaction: server.AutoCompaction{Mode: "periodic", Retention: 2 * time.Second}})
	ctx := ctxT(t)
	first, err := cli.Put(ctx, "k", "1")
	if err != nil {
		t.Fatal(err)
	}
	// The compactor samples the revision every second and compacts to the
	// sample that is 2 s old: within a few seconds, reads at the first
	// revision fail.
	deadline := time.Now().Add(8 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if _, err := cli.Put(ctx, "k", "more"); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
		if err == rpctypes.ErrCompacted {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no auto-compaction within 8 s of a 2 s retention")
		}
	}
}
