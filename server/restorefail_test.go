package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/storage/schema"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdsnap"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

var errInjected = errors.New("injected commit failure")

// flakyEngine counts commits and fails those after the first failAfter
// (failAfter < 0: none fails), only fails of them if fails > 0; onCommit, if set, runs before
// each. wrote counts the commits applied that set a key (the restore's,
// not its cleanup's).
type flakyEngine struct {
	storage.Engine
	failAfter int64
	fails     int64
	commits   atomic.Int64
	wrote     atomic.Int64
	onCommit  func(n int64)
}

func (e *flakyEngine) Begin(ctx context.Context) (storage.Txn, error) {
	txn, err := e.Engine.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &flakyTxn{Txn: txn, e: e}, nil
}

type flakyTxn struct {
	storage.Txn
	e    *flakyEngine
	sets bool
}

func (t *flakyTxn) Set(key, value []byte) error {
	t.sets = true
	return t.Txn.Set(key, value)
}

func (t *flakyTxn) Commit(ctx context.Context) error {
	n := t.e.commits.Add(1)
	if t.e.onCommit != nil {
		t.e.onCommit(n)
	}
	if t.e.failAfter >= 0 && n > t.e.failAfter && (t.e.fails == 0 || n <= t.e.failAfter+t.e.fails) {
		t.Txn.Rollback()
		return fmt.Errorf("commit %d: %w", n, errInjected)
	}
	err := t.Txn.Commit(ctx)
	if err == nil && t.sets {
		t.e.wrote.Add(1)
	}
	return err
}

// restoreSource is a store with versions, a lease and a compaction,
// saved as a snapshot: the source's client, the file and the
// revisions to compare at.
func restoreSource(t *testing.T) (*clientv3.Client, string, []int64) {
	t.Helper()
	_, src := startServer(t, server.Config{})
	ctx := t.Context()
	lease, err := src.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	var mid, head int64
	for i := range 60 {
		var opts []clientv3.OpOption
		if i%10 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		head = putRev(t, ctx, src, fmt.Sprintf("/r/%02d", i%13), strings.Repeat(fmt.Sprint(i), 20), opts...)
		if i == 20 {
			mid = head
		}
	}
	if _, err := src.Compact(ctx, mid, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	path, _, err := saveSnapshot(t, ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	return src, path, []int64{mid, (mid + head) / 2, head}
}

func isEmpty(t *testing.T, eng storage.Engine) bool {
	t.Helper()
	txn, err := eng.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	empty, err := core.IsEmpty(storage.NewReader(txn))
	if err != nil {
		t.Fatal(err)
	}
	return empty
}

// restoreAgain restores the good file into eng, which a failed restore
// left, and checks that it answers as the source.
func restoreAgain(t *testing.T, eng storage.Engine, path string, src *clientv3.Client, revs []int64) {
	t.Helper()
	if _, err := etcdsnap.Restore(t.Context(), path, eng, etcdsnap.RestoreOptions{BatchBytes: 512}); err != nil {
		t.Fatalf("a restore after the failed one: %v", err)
	}
	_, cli, _ := serveEngine(t, eng, server.Config{})
	sameAt(t, t.Context(), src, cli, revs...)
}

// damageLate copies the snapshot at path with the value of the last
// version of its key bucket replaced by one that does not decode: a
// file that restores part way before failing (its hash is not checked).
func damageLate(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "damaged.db")
	if err := os.WriteFile(p, b[:len(b)-32], 0o600); err != nil { // without the hash trailer
		t.Fatal(err)
	}
	db, err := bbolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		bk := tx.Bucket(schema.Key.Name())
		k, _ := bk.Cursor().Last()
		return bk.Put(k, []byte{0xff})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAFailedRestoreEmptiesTheStore: a restore that fails part way, after
// committing several transactions (an engine failure, a version that
// does not decode, the restore canceled), deletes what it wrote and says
// so; the store is empty and a second restore of a good file answers as
// the source.
func TestAFailedRestoreEmptiesTheStore(t *testing.T) {
	src, path, revs := restoreSource(t)
	damaged := damageLate(t, path)
	for _, tc := range []struct {
		name string
		file string
		// failAfter commits fail (-1: none); cancelAfter cancels the
		// restore's context at that commit (0: never).
		failAfter, cancelAfter int64
		want                   error
	}{
		{"the engine fails a commit", path, 4, 0, errInjected},
		{"a version does not decode", damaged, -1, 0, core.ErrBadRecord},
		{"canceled", path, -1, 4, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			base := memkv.New()
			eng := &flakyEngine{Engine: base, failAfter: tc.failAfter, fails: 1}
			if tc.cancelAfter > 0 {
				eng.onCommit = func(n int64) {
					if n == tc.cancelAfter {
						cancel()
					}
				}
			}
			_, err := etcdsnap.Restore(ctx, tc.file, eng, etcdsnap.RestoreOptions{BatchBytes: 512, SkipHashCheck: tc.file != path})
			if err == nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "the store was emptied") {
				t.Fatalf("restore: %v; want %v, saying the store was emptied", err, tc.want)
			}
			t.Logf("after %d commits: %v", eng.wrote.Load(), err)
			if n := eng.wrote.Load(); n < 3 {
				t.Fatalf("the restore failed after %d commits; the test wants it part way", n)
			}
			if !isEmpty(t, base) {
				t.Fatalf("the store after a failed restore (%v) is not empty", err)
			}
			restoreAgain(t, base, path, src, revs)
		})
	}
}

// TestARestoreThatCannotBeUndoneIsRefused: when the cleanup of a failed
// restore fails too, the store stays marked: the error says so, a second
// restore refuses it, and a server refuses to serve it, naming the
// interrupted restore (not as an old format to upgrade). Emptied by
// hand, it restores.
func TestARestoreThatCannotBeUndoneIsRefused(t *testing.T) {
	src, path, revs := restoreSource(t)
	ctx := t.Context()
	base := memkv.New()
	_, err := etcdsnap.Restore(ctx, path, &flakyEngine{Engine: base, failAfter: 4}, etcdsnap.RestoreOptions{BatchBytes: 512})
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "emptying the store failed too") || !strings.Contains(err.Error(), "interrupted restore") {
		t.Fatalf("restore: %v; want the injected failure, saying the cleanup failed too", err)
	}
	if isEmpty(t, base) {
		t.Fatal("the store is empty: the test wants a partial one")
	}
	if _, err := etcdsnap.Restore(ctx, path, base, etcdsnap.RestoreOptions{}); !errors.Is(err, etcdsnap.ErrNotEmpty) || !errors.Is(err, core.ErrRestoreInterrupted) {
		t.Errorf("a second restore into the partial store: %v; want %v naming the interrupted restore", err, etcdsnap.ErrNotEmpty)
	}
	for _, upgrade := range []bool{false, true} {
		srv, err := server.New(server.Config{Exclusive: true, UpgradeData: upgrade, Logger: slog.New(slog.DiscardHandler)}, base)
		if err == nil {
			srv.Close()
			t.Fatalf("server.New (upgrade %v) served a partial restore", upgrade)
		}
		if !errors.Is(err, core.ErrRestoreInterrupted) || !strings.Contains(err.Error(), "interrupted `axon snapshot restore`") || strings.Contains(err.Error(), "--upgrade-data") {
			t.Fatalf("server.New (upgrade %v) on a partial restore: %v; want a refusal naming the interrupted restore", upgrade, err)
		}
	}

	// Emptied (what deleting the data dir does), the store restores.
	lower, upper := core.Keyspace()
	txn, err := base.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys [][]byte
	if err := storage.NewReader(txn).Scan(lower, upper, false, 0, func(k, _ []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	restoreAgain(t, base, path, src, revs)
}
