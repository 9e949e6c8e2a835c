package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	utl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdsnap"
	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	badgerkv "github.com/axon-kv/axon/storage/badger"
	"github.com/axon-kv/axon/storage/memkv"
	"github.com/axon-kv/axon/storage/tikv"
)

// saveSnapshot is `etcdctl snapshot save` against cli's endpoint: the
// file, and the storage version the server declared.
func saveSnapshot(t *testing.T, ctx context.Context, cli *clientv3.Client) (string, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	version, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second}, path)
	return path, version, err
}

// dial returns a client of the etcd at u, closed when the test ends.
func dial(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// everything reads every key at rev (0: the head).
func everything(ctx context.Context, cli *clientv3.Client, rev int64) ([]*mvccpb.KeyValue, error) {
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	return resp.Kvs, nil
}

// sameKVs fails unless the source's key-values (the store snapshotted)
// and the restored store's are the same.
func sameKVs(t *testing.T, what string, source, restored []*mvccpb.KeyValue) {
	t.Helper()
	if len(source) != len(restored) {
		t.Fatalf("%s: the source has %d keys, the restored store %d\nsource:   %v\nrestored: %v", what, len(source), len(restored), source, restored)
	}
	for i := range source {
		if !proto.Equal(source[i], restored[i]) {
			t.Fatalf("%s: key %d: the source has %v, the restored store %v", what, i, source[i], restored[i])
		}
	}
}

// putRev puts k=v through cli and returns the write's revision.
func putRev(t *testing.T, ctx context.Context, cli *clientv3.Client, k, v string, opts ...clientv3.OpOption) int64 {
	t.Helper()
	resp, err := cli.Put(ctx, k, v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// sameAt fails unless the restored store answers every key at each of
// revs as the source does.
func sameAt(t *testing.T, ctx context.Context, source, restored *clientv3.Client, revs ...int64) {
	t.Helper()
	for _, rev := range revs {
		want, err := everything(ctx, source, rev)
		if err != nil {
			t.Fatalf("the source at r%d: %v", rev, err)
		}
		got, err := everything(ctx, restored, rev)
		if err != nil {
			t.Fatalf("the restored store at r%d: %v", rev, err)
		}
		sameKVs(t, fmt.Sprintf("r%d", rev), want, got)
	}
}

// revisions lists [from, to].
func revisions(from, to int64) []int64 {
	var out []int64
	for r := from; r <= to; r++ {
		out = append(out, r)
	}
	return out
}

// TestSnapshotRestoresIntoEtcd: `etcdctl snapshot save` of Axon gives an
// etcd snapshot. etcdutl reads its status and restores it (hash
// checked), and an etcd started on it answers as Axon does: keys,
// values, revisions, versions and leases at every revision since the
// compaction, the compaction itself, the events of a multi-key txn in
// their order, and the lease's attached keys.
func TestSnapshotRestoresIntoEtcd(t *testing.T) {
	_, cli := startServer(t, server.Config{})
	ctx := t.Context()
	put := func(k, v string, opts ...clientv3.OpOption) int64 { return putRev(t, ctx, cli, k, v, opts...) }
	put("/a", "1")
	put("/b", "1")
	put("/c", "1")
	put("/gone", "1")
	if _, err := cli.Delete(ctx, "/gone"); err != nil {
		t.Fatal(err)
	}
	put("/a", "2")
	lease, err := cli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	put("/leased", "x", clientv3.WithLease(lease.ID))
	compacted := put("/a", "3")
	if _, err := cli.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	txn, err := cli.Txn(ctx).Then(clientv3.OpPut("/d", "1"), clientv3.OpDelete("/c"), clientv3.OpPut("/b", "2")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	put("/a", "4")
	if _, err := cli.Delete(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	head := put("/e", "\x00binary\xff")

	path, version, err := saveSnapshot(t, ctx, cli)
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	if version != "3.6.0" {
		t.Errorf("snapshot storage version %q, want 3.6.0", version)
	}
	st, err := utl.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	// Alive at the head: /a, /b, /leased, /e.
	if st.Revision != head || st.TotalKey != 4 || st.Version != "3.6.0" {
		t.Errorf("etcdutl snapshot status: %+v, want revision %d, 4 keys, version 3.6.0", st, head)
	}

	u := etcdtest.StartFromSnapshot(t, path)
	ecli := dial(t, u.String())
	sameAt(t, ctx, cli, ecli, revisions(compacted, head)...)
	for _, c := range []*clientv3.Client{cli, ecli} {
		if _, err := everything(ctx, c, compacted-1); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("read below the compact revision: %v, want %v", err, rpctypes.ErrCompacted)
		}
	}

	// The txn's events, from both, in the same order with the same
	// previous values.
	events := func(c *clientv3.Client) []*clientv3.Event {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var evs []*clientv3.Event
		for wr := range c.Watch(wctx, "/", clientv3.WithPrefix(), clientv3.WithRev(txn.Header.Revision), clientv3.WithPrevKV()) {
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, wr.Events...)
			if len(evs) > 0 && evs[len(evs)-1].Kv.ModRevision == head {
				return evs
			}
		}
		t.Fatalf("watch from r%d ended before r%d: %v", txn.Header.Revision, head, evs)
		return nil
	}
	got, want := events(ecli), events(cli)
	if len(got) != 6 || len(got) != len(want) {
		t.Fatalf("events from r%d: etcd %v, Axon %v", txn.Header.Revision, got, want)
	}
	for i := range got {
		if got[i].Type != want[i].Type || !proto.Equal(got[i].Kv, want[i].Kv) || !proto.Equal(got[i].PrevKv, want[i].PrevKv) {
			t.Fatalf("event %d: etcd %v, Axon %v", i, got[i], want[i])
		}
	}

	ttl, err := ecli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 300 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "/leased" {
		t.Errorf("restored lease %x: granted %ds, keys %q; want 300s and /leased", lease.ID, ttl.GrantedTTL, ttl.Keys)
	}
}

// TestSnapshotUnderWrites: a snapshot saved while clients keep writing
// holds one commit point: the restored etcd's head is exactly what Axon
// answers at the snapshot's revision, and no write after it.
func TestSnapshotUnderWrites(t *testing.T) {
	_, cli := startServer(t, server.Config{})
	ctx := t.Context()
	wctx, stop := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		writes atomic.Int64
	)
	for c := range 8 {
		wg.Go(func() {
			for i := 0; wctx.Err() == nil && i < 2000; i++ {
				key := fmt.Sprintf("/w/%d/%d", c, i%50)
				if _, err := cli.Put(wctx, key, fmt.Sprint(i)); err == nil {
					writes.Add(1)
				}
			}
		})
	}
	for writes.Load() < 200 {
		if _, err := cli.Get(ctx, "/w"); err != nil {
			t.Fatal(err)
		}
	}
	path, _, err := saveSnapshot(t, ctx, cli)
	// Writes go on past the snapshot before they stop (on a loaded
	// machine the writers may not have run while it was saved).
	for after := writes.Load() + 20; err == nil && writes.Load() < after; {
		if _, gerr := cli.Get(ctx, "/w"); gerr != nil {
			t.Fatal(gerr)
		}
	}
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	st, err := utl.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		t.Fatal(err)
	}
	head, err := cli.Get(ctx, "/w")
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision >= head.Header.Revision {
		t.Fatalf("snapshot at r%d, not before the writes that went on (head r%d)", st.Revision, head.Header.Revision)
	}
	want, err := everything(ctx, cli, st.Revision)
	if err != nil {
		t.Fatal(err)
	}
	u := etcdtest.StartFromSnapshot(t, path)
	got, err := everything(ctx, dial(t, u.String()), 0)
	if err != nil {
		t.Fatal(err)
	}
	sameKVs(t, fmt.Sprintf("Axon at r%d against the restored etcd's head", st.Revision), want, got)
}

// TestSnapshotCanceledLeavesNothing: a client that gives up in the middle
// of a snapshot leaves no scratch file behind.
func TestSnapshotCanceledLeavesNothing(t *testing.T) {
	_, cli := startServer(t, server.Config{})
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the server makes its scratch
	ctx := t.Context()
	value := string(make([]byte, 4096))
	for i := range 200 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	rc, err := cli.Snapshot(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Read(make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	cancel()
	rc.Close()
	// The server notices the cancellation at its next send; its scratch
	// directory goes when the handler returns.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("scratch left after a canceled snapshot: %v", left)
		}
		if _, err := cli.Get(ctx, "/k/000"); err != nil { // a round trip, not a sleep
			t.Fatal(err)
		}
	}
}

// TestSnapshotThroughAFollower: a follower of several instances over one
// engine serves the snapshot at the leader's commit point.
func TestSnapshotThroughAFollower(t *testing.T) {
	c := startCluster(t, memkv.New(), 3)
	l := c.awaitLeader()
	f := c.client(c.ins[(l+1)%3].addr)
	ctx := t.Context()
	var head int64
	for i := range 20 {
		resp, err := f.Put(ctx, fmt.Sprintf("/f/%02d", i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		head = resp.Header.Revision
	}
	path, _, err := saveSnapshot(t, ctx, f)
	if err != nil {
		t.Fatalf("snapshot save through a follower: %v", err)
	}
	st, err := utl.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != head || st.TotalKey != 20 {
		t.Fatalf("snapshot through a follower: %+v, want revision %d and 20 keys", st, head)
	}
}

// TestRestoreFromEtcd: an etcd snapshot (`etcdctl snapshot save` of a
// real etcd) restored into an empty Badger store gives an Axon that
// answers as that etcd does: every key at every revision since its
// compaction, the compaction, the events of a multi-key txn, the lease
// and its keys, and the next write at the revision etcd gives it.
func TestRestoreFromEtcd(t *testing.T) {
	u := etcdtest.Start(t)
	ecli := dial(t, u.String())
	ctx := t.Context()
	put := func(k, v string, opts ...clientv3.OpOption) int64 { return putRev(t, ctx, ecli, k, v, opts...) }
	lease, err := ecli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		put(fmt.Sprintf("/registry/pods/p%02d", i%7), fmt.Sprint(i))
	}
	put("/registry/leases/l", "held", clientv3.WithLease(lease.ID))
	if _, err := ecli.Delete(ctx, "/registry/pods/p03"); err != nil {
		t.Fatal(err)
	}
	compacted := put("/registry/pods/p00", "at-compaction")
	if _, err := ecli.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	txn, err := ecli.Txn(ctx).Then(clientv3.OpPut("/registry/x", "1"), clientv3.OpDelete("/registry/pods/p01"), clientv3.OpPut("/registry/pods/p02", "txn")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ecli.Delete(ctx, "/registry/pods/p04"); err != nil {
		t.Fatal(err)
	}
	head := put("/registry/pods/p05", "\x00last\xff")
	path, _, err := saveSnapshot(t, ctx, ecli)
	if err != nil {
		t.Fatal(err)
	}

	eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	r, err := etcdsnap.Restore(ctx, path, eng, etcdsnap.RestoreOptions{})
	if err != nil {
		t.Fatalf("restore an etcd snapshot: %v", err)
	}
	if r.Revision != head || r.Compacted != compacted || r.Leases != 1 {
		t.Errorf("restored %+v, want revision %d, compacted %d, 1 lease", r, head, compacted)
	}
	if _, err := etcdsnap.Restore(ctx, path, eng, etcdsnap.RestoreOptions{}); !errors.Is(err, etcdsnap.ErrNotEmpty) {
		t.Errorf("a second restore into the same store: %v, want %v", err, etcdsnap.ErrNotEmpty)
	}
	_, cli, _ := serveEngine(t, eng, server.Config{})

	sameAt(t, ctx, ecli, cli, revisions(compacted, head)...)
	if _, err := everything(ctx, cli, compacted-1); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("Axon below the compact revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wr := <-cli.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(txn.Header.Revision), clientv3.WithPrevKV())
	if len(wr.Events) < 3 || wr.Events[0].Kv.ModRevision != txn.Header.Revision ||
		string(wr.Events[0].Kv.Key) != "/registry/x" || wr.Events[1].Type != clientv3.EventTypeDelete || string(wr.Events[2].Kv.Value) != "txn" ||
		string(wr.Events[2].PrevKv.Value) != "23" {
		t.Errorf("Axon's events of the txn, as etcd ordered them: %v", wr.Events)
	}
	ttl, err := cli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 600 || len(ttl.Keys) != 1 {
		t.Errorf("the lease in Axon: %v %v", ttl, err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := cli.Get(ctx, "/registry/leases/l"); err != nil || len(got.Kvs) != 0 {
		t.Errorf("the leased key after the revoke: %v %v", got, err)
	}
	if _, err := ecli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	next, err := cli.Put(ctx, "/registry/after", "1")
	if err != nil {
		t.Fatal(err)
	}
	enext, err := ecli.Put(ctx, "/registry/after", "1")
	if err != nil {
		t.Fatal(err)
	}
	if next.Header.Revision != enext.Header.Revision {
		t.Errorf("a write after the restore took r%d in Axon, r%d in etcd", next.Header.Revision, enext.Header.Revision)
	}
}

// TestRestoreRefusesBadFiles: a damaged, truncated or foreign file is
// refused with an error, and the store stays empty.
func TestRestoreRefusesBadFiles(t *testing.T) {
	_, cli := startServer(t, server.Config{})
	ctx := t.Context()
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	path, _, err := saveSnapshot(t, ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff
	for _, tc := range []struct {
		name string
		file []byte
		skip bool
		want error
	}{
		{"a flipped byte", flipped, false, etcdsnap.ErrHashMismatch},
		{"cut short", good[:len(good)-100], false, etcdsnap.ErrNoHash},
		{"cut short, hash not checked", good[:4096*2], true, nil},
		{"garbage with a trailer's length", bytes.Repeat([]byte{0xab}, 4096+32), true, nil},
		{"empty", nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.db")
			if err := os.WriteFile(p, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			_, err = etcdsnap.Restore(ctx, p, eng, etcdsnap.RestoreOptions{SkipHashCheck: tc.skip})
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("restore: %v, want an error (%v)", err, tc.want)
			}
			txn, err := eng.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Rollback()
			if empty, err := core.IsEmpty(storage.NewReader(txn)); err != nil || !empty {
				t.Fatalf("the store after a refused restore: empty %v, %v", empty, err)
			}
		})
	}
}

// TestRestoreIntoTiKV: the restore writes through the engine contract, so
// a snapshot goes into TiKV (the mock cluster) as into Badger, and several
// instances serve it.
func TestRestoreIntoTiKV(t *testing.T) {
	_, src := startServer(t, server.Config{})
	ctx := t.Context()
	var mid int64
	for i := range 40 {
		resp, err := src.Put(ctx, fmt.Sprintf("/t/%02d", i%9), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 20 {
			mid = resp.Header.Revision
		}
	}
	if _, err := src.Compact(ctx, mid, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	path, _, err := saveSnapshot(t, ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := tikv.NewMock(tikv.MockOptions{Regions: 3, Layout: core.RegionSplits, Sample: [][]byte{[]byte("/t/02"), []byte("/t/05")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	if _, err := etcdsnap.Restore(ctx, path, eng, etcdsnap.RestoreOptions{BatchBytes: 512}); err != nil {
		t.Fatalf("restore into TiKV: %v", err)
	}
	c := startCluster(t, eng, 2)
	l := c.awaitLeader()
	cli := c.client(c.ins[(l+1)%2].addr)
	head, err := src.Get(ctx, "/t/00")
	if err != nil {
		t.Fatal(err)
	}
	sameAt(t, ctx, src, cli, mid, head.Header.Revision)
}
