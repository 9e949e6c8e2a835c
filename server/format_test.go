package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/internal/fsutil"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// formatAnswers is testdata/formats/vN/answers.json: what the binary of
// format N answered about the store it wrote (README.md there).
type formatAnswers struct {
	Revision int64 `json:"revision"`
	Ranges   []struct {
		Revision       int64  `json:"revision"`
		HeaderRevision int64  `json:"header_revision"`
		Error          string `json:"error"`
		Code           string `json:"code"`
		Count          int64  `json:"count"`
		More           bool   `json:"more"`
		Kvs            []struct {
			Key            []byte `json:"key"`
			CreateRevision int64  `json:"create_revision"`
			ModRevision    int64  `json:"mod_revision"`
			Version        int64  `json:"version"`
			Value          []byte `json:"value"`
			Lease          int64  `json:"lease"`
		} `json:"kvs"`
	} `json:"ranges"`
	Leases []struct {
		ID         int64    `json:"id"`
		GrantedTTL int64    `json:"granted_ttl"`
		Keys       [][]byte `json:"keys"`
	} `json:"leases"`
}

// openFormatStore opens a copy of the store testdata/formats/vN holds.
func openFormatStore(t *testing.T, version int) (*badgerkv.Engine, string, *formatAnswers) {
	t.Helper()
	src := filepath.Join("testdata", "formats", fmt.Sprintf("v%d", version))
	b, err := os.ReadFile(filepath.Join(src, "answers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want formatAnswers
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(src, "data"))); err != nil {
		t.Fatal(err)
	}
	eng, err := badgerkv.Open(dir, badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng, dir, &want
}

// TestStoresOfEarlierFormatsUpgradeAndAnswerExactly: a store written by
// the binary of each earlier format is refused as it is, upgraded with
// UpgradeData, and then answers every key at every revision, and its
// leases, as that binary did; it goes on at the next revision. The
// format 4 store was written by the last binary that kept every value
// in its (uncompressed) tables: it opens as it is, and its new values go
// to the value log while the old ones are read from the tables.
func TestStoresOfEarlierFormatsUpgradeAndAnswerExactly(t *testing.T) {
	for _, version := range []int{1, 2, core.FormatNoAuth, core.FormatVersion} {
		t.Run(fmt.Sprintf("format %d", version), func(t *testing.T) {
			eng, dir, want := openFormatStore(t, version)
			cfg := server.Config{MemberID: 1, ClusterID: 2, Name: "test", Exclusive: true}
			// Format 3 is format 4 without the auth store: it opens as it
			// is, and becomes 4 with the first auth change.
			if version < core.FormatNoAuth {
				if _, err := server.New(cfg, eng); !errors.Is(err, core.ErrFormat) || !strings.Contains(err.Error(), "--upgrade-data") {
					t.Fatalf("a format %d store opens without an upgrade: %v", version, err)
				}
				cfg.UpgradeData = true
			}
			_, cli, stop := serveEngine(t, eng, cfg)
			ctx := ctxT(t)
			for _, w := range want.Ranges {
				resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(w.Revision))
				if w.Error != "" {
					var ee rpctypes.EtcdError
					if !errors.As(err, &ee) || ee.Error() != w.Error || ee.Code().String() != w.Code {
						t.Fatalf("r%d: %v; the format %d binary answered %q (%s)", w.Revision, err, version, w.Error, w.Code)
					}
					continue
				}
				if err != nil {
					t.Fatalf("r%d: %v", w.Revision, err)
				}
				if resp.Header.Revision != w.HeaderRevision || resp.Count != w.Count || resp.More != w.More || len(resp.Kvs) != len(w.Kvs) {
					t.Fatalf("r%d: header r%d, count %d, more %v, %d kvs; want r%d, %d, %v, %d", w.Revision, resp.Header.Revision, resp.Count, resp.More, len(resp.Kvs), w.HeaderRevision, w.Count, w.More, len(w.Kvs))
				}
				for i, kv := range resp.Kvs {
					wk := w.Kvs[i]
					if !bytes.Equal(kv.Key, wk.Key) || !bytes.Equal(kv.Value, wk.Value) || kv.CreateRevision != wk.CreateRevision ||
						kv.ModRevision != wk.ModRevision || kv.Version != wk.Version || kv.Lease != wk.Lease {
						t.Fatalf("r%d: kv %d is %v; want %+v", w.Revision, i, kv, wk)
					}
				}
			}
			ls, err := cli.Leases(ctx)
			if err != nil || len(ls.Leases) != len(want.Leases) {
				t.Fatalf("leases %v (%v); want %d", ls, err, len(want.Leases))
			}
			for _, wl := range want.Leases {
				ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(wl.ID), clientv3.WithAttachedKeys())
				if err != nil {
					t.Fatal(err)
				}
				slices.SortFunc(ttl.Keys, bytes.Compare)
				if ttl.GrantedTTL != wl.GrantedTTL || !slices.EqualFunc(ttl.Keys, wl.Keys, bytes.Equal) {
					t.Fatalf("lease %x: TTL %d, keys %q; want %d, %q", wl.ID, ttl.GrantedTTL, ttl.Keys, wl.GrantedTTL, wl.Keys)
				}
			}
			put, err := cli.Put(ctx, "after-upgrade", "v")
			if err != nil || put.Header.Revision != want.Revision+1 {
				t.Fatalf("the first write after the upgrade: %v, %v; want revision %d", put, err, want.Revision+1)
			}
			// A write over a key the old binary wrote reads no value; a
			// prev_kv watcher gets it, read from the old history record.
			live, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithLimit(1))
			if err != nil || len(live.Kvs) == 0 {
				t.Fatalf("a key of the old binary: %v, %v", live, err)
			}
			old := live.Kvs[0]
			wctx, wcancel := context.WithCancel(ctx)
			wch := cli.Watch(wctx, string(old.Key), clientv3.WithPrevKV(), clientv3.WithRev(put.Header.Revision+1))
			if _, err := cli.Put(ctx, string(old.Key), "over"); err != nil {
				t.Fatal(err)
			}
			wr := <-wch
			wcancel()
			if len(wr.Events) != 1 || wr.Events[0].PrevKv == nil || !bytes.Equal(wr.Events[0].PrevKv.Value, old.Value) ||
				wr.Events[0].PrevKv.ModRevision != old.ModRevision || wr.Events[0].PrevKv.Version != old.Version {
				t.Fatalf("the write over %q: watch %v (%v); want prev_kv %v", old.Key, wr.Events, wr.Err(), old)
			}
			if version == core.FormatNoAuth {
				if f := storeFormat(t, eng); f.Version != core.FormatNoAuth {
					t.Fatalf("a format 3 store with no auth change says %+v", f)
				}
				if _, err := cli.UserAdd(ctx, "alice", "secret"); err != nil {
					t.Fatal(err)
				}
			}
			f := storeFormat(t, eng)
			if version < core.FormatVersion && (f.Version != core.FormatVersion || f.By != server.BinaryVersion()) {
				t.Fatalf("after the upgrade the store says %+v", f)
			}
			// A large value written now goes to the value log if the
			// store's tables are plain, and into the tables if they are
			// compressed (the log would store it uncompressed).
			big := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
			if _, err := cli.Put(ctx, "big-after-upgrade", string(big)); err != nil {
				t.Fatal(err)
			}
			stop()
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			// Formats 1 to 3 were written Snappy-compressed; the table
			// this binary flushes at close must be too, or compaction
			// would grow an upgraded store past its quota. Format 4 was
			// written plain.
			wantC := badgerkv.CompressionSnappy
			if version == core.FormatVersion {
				wantC = badgerkv.CompressionNone
			}
			if c, ok, err := badgerkv.StoredCompression(dir); c != wantC || !ok || err != nil {
				t.Errorf("after the upgrade the newest table is %v (%v, %v); want %v, as the store's were", c, ok, err, wantC)
			}
			if inLog := valueLogBytes(t, dir) >= int64(len(big)); inLog != (wantC == badgerkv.CompressionNone) {
				t.Errorf("the %d-byte value written after the upgrade is in the value log: %v; want %v with %v tables", len(big), inLog, !inLog, wantC)
			}
			eng, err = badgerkv.Open(dir, badgerkv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			_, cli, _ = serveEngine(t, eng, server.Config{MemberID: 1, ClusterID: 2, Name: "test", Exclusive: true})
			for key, value := range map[string][]byte{"big-after-upgrade": big, string(old.Key): []byte("over")} {
				if got, err := cli.Get(ctx, key); err != nil || len(got.Kvs) != 1 || !bytes.Equal(got.Kvs[0].Value, value) {
					t.Fatalf("after a restart %q is %v (%v); want %d bytes", key, got, err, len(value))
				}
			}
		})
	}
}

// valueLogBytes is what the value log files in dir take on disk
// (allocated: badger preallocates them sparse).
func valueLogBytes(t *testing.T, dir string) int64 {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range logs {
		u, err := fsutil.DiskUsage(l)
		if err != nil {
			t.Fatal(err)
		}
		n += u
	}
	return n
}

func storeFormat(t *testing.T, eng storage.Engine) core.Format {
	t.Helper()
	txn, err := eng.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	f, err := core.ReadFormat(storage.NewReader(txn))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestANewStoreRecordsItsFormat and reopens without a flag.
func TestANewStoreRecordsItsFormat(t *testing.T) {
	dir := t.TempDir()
	eng, err := badgerkv.Open(dir, badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, cli, stop := serveEngine(t, eng, server.Config{MemberID: 1, Name: "test"})
	if _, err := cli.Put(ctxT(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
	stop()
	if f := storeFormat(t, eng); f.Version != core.FormatVersion || f.By != server.BinaryVersion() {
		t.Fatalf("a new store says %+v", f)
	}
	_, cli, _ = serveEngine(t, eng, server.Config{MemberID: 1, Name: "test"})
	if resp, err := cli.Get(ctxT(t), "k"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reopened: %v, %v", resp, err)
	}
	eng.Close()
}

// TestANewerFormatIsRefused, even with --upgrade-data, and the store is
// left as it was.
func TestANewerFormatIsRefused(t *testing.T) {
	eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	newer := core.Write{Key: core.MetaKey(core.MetaFormat), Value: core.AppendFormat(nil, core.Format{Version: core.FormatVersion + 1, By: "axon from the future"})}
	txn, err := eng.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := driver.Buffer(txn, []core.Write{newer}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, upgrade := range []bool{false, true} {
		_, err := server.New(server.Config{MemberID: 1, Name: "test", Exclusive: true, UpgradeData: upgrade}, eng)
		if !errors.Is(err, core.ErrFormat) || !strings.Contains(err.Error(), "axon from the future") || !strings.Contains(err.Error(), "newer binary") {
			t.Fatalf("upgrade=%v: a newer format opened: %v", upgrade, err)
		}
	}
	if f := storeFormat(t, eng); f.Version != core.FormatVersion+1 {
		t.Fatalf("the refused store now says %+v", f)
	}
}
