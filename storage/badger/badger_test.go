package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/axon-kv/axon/internal/fsutil"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/storagetest"
)

// quiet discards badger's warnings in tests unless -v is given.
func quiet() Options {
	if testing.Verbose() {
		return Options{}
	}
	return Options{Logger: slog.New(slog.DiscardHandler)}
}

func open(t testing.TB, dir string) *Engine {
	t.Helper()
	return openWith(t, dir, quiet())
}

func openWith(t testing.TB, dir string, opts Options) *Engine {
	t.Helper()
	e, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return e
}

// valuesInTheTables opens engines that keep every value in the tables
// (--badger-value-threshold 1048576, and the default for compressed
// tables); by default values over DefaultValueThreshold go to the log.
func valuesInTheTables() Options {
	o := quiet()
	o.ValueThreshold = MaxValueThreshold
	return o
}

// TestBadgerLogsThroughSlog: badger's warnings reach the engine's
// logger, tagged as badger's, and its info does not.
func TestBadgerLogsThroughSlog(t *testing.T) {
	var buf bytes.Buffer
	e := openWith(t, t.TempDir(), Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	defer e.Close()
	l := e.db.Opts().Logger
	l.Warningf("table %d is odd\n", 7)
	l.Infof("chatter")
	got := buf.String()
	if !strings.Contains(got, `level=WARN msg="table 7 is odd" component=badger`) {
		t.Errorf("badger's warning did not reach slog as one; the log has:\n%s", got)
	}
	if strings.Contains(got, "chatter") {
		t.Errorf("badger's info reached slog:\n%s", got)
	}
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine { return open(t, t.TempDir()) })
}

// TestConformanceValuesInTheTables runs the contract with every value in
// the tables, as compressed stores keep them.
func TestConformanceValuesInTheTables(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine { return openWith(t, t.TempDir(), valuesInTheTables()) })
}

// TestConformancePruningEveryGroup runs the suite with the conflict state
// pruned after every commit group, so that a commit still waiting for its
// check meets a prune as often as possible.
func TestConformancePruningEveryGroup(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine {
		opts := quiet()
		opts.PruneEvery = 1
		e, err := Open(t.TempDir(), opts)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return e
	})
}

func set(t testing.TB, e storage.Engine, pairs ...[]byte) {
	t.Helper()
	tx, err := e.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := tx.Set(pairs[i], pairs[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func scanAll(t testing.TB, e storage.Engine, opts storage.IterOptions) []string {
	t.Helper()
	tx, err := e.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	it, err := tx.Iter(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.Next() {
		out = append(out, string(it.Key()))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReverseSeek pins down badger's reverse Seek: bounds equal to a key,
// one byte around a key, and with several versions of the bound key (the
// reverse seek lands among a key's versions).
func TestReverseSeek(t *testing.T) {
	e := open(t, t.TempDir())
	defer e.Close()
	keys := []string{"b", "b\x00", "b\x01", "c", "c\xff", "d"}
	for range 3 { // several versions of every key
		for _, k := range keys {
			set(t, e, []byte(k), []byte("v"))
		}
	}
	tests := []struct {
		lower, upper string // "-" means nil
		want         []string
	}{
		{"-", "c", []string{"b\x01", "b\x00", "b"}},
		{"-", "c\x00", []string{"c", "b\x01", "b\x00", "b"}},
		{"-", "b\xff", []string{"b\x01", "b\x00", "b"}},
		{"-", "b\x00", []string{"b"}},
		{"-", "b", nil},
		{"-", "a", nil},
		{"-", "e", []string{"d", "c\xff", "c", "b\x01", "b\x00", "b"}},
		{"-", "-", []string{"d", "c\xff", "c", "b\x01", "b\x00", "b"}},
		{"b\x00", "c\xff", []string{"c", "b\x01", "b\x00"}},
		{"b\x01", "b\x02", []string{"b\x01"}},
		{"c", "c\xff\x00", []string{"c\xff", "c"}},
		{"c\x00", "c\xff", nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("[%q,%q)", tc.lower, tc.upper), func(t *testing.T) {
			opts := storage.IterOptions{Reverse: true}
			if tc.lower != "-" {
				opts.Lower = []byte(tc.lower)
			}
			if tc.upper != "-" {
				opts.Upper = []byte(tc.upper)
			}
			if got := scanAll(t, e, opts); !slices.Equal(got, tc.want) {
				t.Errorf("reverse = %q; want %q", got, tc.want)
			}
			opts.Reverse = false
			want := slices.Clone(tc.want)
			slices.Reverse(want)
			if got := scanAll(t, e, opts); !slices.Equal(got, want) {
				t.Errorf("forward = %q; want %q", got, want)
			}
		})
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir)
	set(t, e, []byte("k"), []byte("v"), []byte("\x00\xff"), []byte(""))
	tx, _ := e.Begin(t.Context())
	_ = tx.Set([]byte("gone"), []byte("x"))
	tx.Rollback()
	ts := func(e *Engine) uint64 {
		tx, err := e.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		return tx.StartTS()
	}
	before := ts(e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, dir)
	defer e.Close()
	if got := scanAll(t, e, storage.IterOptions{}); !slices.Equal(got, []string{"\x00\xff", "k"}) {
		t.Errorf("after reopen: keys %q", got)
	}
	if after := ts(e); after < before {
		t.Errorf("StartTS went back across reopen: %d -> %d", before, after)
	}
}

// TestReopenKeepsEveryCommit commits many transactions from several
// goroutines, closes, reopens, and finds every acknowledged write.
func TestReopenKeepsEveryCommit(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir)
	const workers, perW = 8, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perW {
				tx, err := e.Begin(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				k := fmt.Appendf(nil, "w%d/%04d", w, i)
				if err := tx.Set(k, k); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 9 { // and delete an earlier key now and then
					if err := tx.Delete(fmt.Appendf(nil, "w%d/%04d", w, i-9)); err != nil {
						t.Error(err)
						return
					}
				}
				if err := tx.Commit(t.Context()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, dir)
	defer e.Close()
	var want []string
	for w := range workers {
		for i := range perW {
			if i%10 != 0 {
				want = append(want, fmt.Sprintf("w%d/%04d", w, i))
			}
		}
	}
	if got := scanAll(t, e, storage.IterOptions{}); !slices.Equal(got, want) {
		t.Errorf("after reopen: %d keys; want %d", len(got), len(want))
	}
}

func TestErrors(t *testing.T) {
	e := open(t, t.TempDir())
	defer e.Close()
	tests := []struct {
		name    string
		do      func(tx storage.Txn) error
		wantErr error
	}{
		{"empty key", func(tx storage.Txn) error { return tx.Set(nil, []byte("v")) }, bdb.ErrEmptyKey},
		{"reserved prefix", func(tx storage.Txn) error { return tx.Set([]byte("!badger!x"), nil) }, bdb.ErrInvalidKey},
		{"too big", func(tx storage.Txn) error {
			v := make([]byte, 100<<10) // below the value threshold, so it counts in full
			for i := 0; ; i++ {
				if err := tx.Set(fmt.Appendf(nil, "big%d", i), v); err != nil {
					return err
				}
			}
		}, bdb.ErrTxnTooBig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := e.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			err = tc.do(tx)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v; want %v", err, tc.wantErr)
			}
			for _, s := range []error{storage.ErrConflict, storage.ErrUncertain, storage.ErrUnavailable} {
				if errors.Is(err, s) {
					t.Errorf("err = %v; matches %v", err, s)
				}
			}
		})
	}
}

// TestReadsDoNotConflict pins the contract exactly: only keys written or
// locked conflict; a key the transaction only read does not (callers
// Lock what they compare).
func TestReadsDoNotConflict(t *testing.T) {
	e := open(t, t.TempDir())
	defer e.Close()
	set(t, e, []byte("r"), []byte("0"))
	reader, err := e.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Get([]byte("r")); err != nil {
		t.Fatal(err)
	}
	set(t, e, []byte("r"), []byte("1"))
	if err := reader.Set([]byte("w"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := reader.Commit(t.Context()); err != nil {
		t.Errorf("Commit = %v; want nil", err)
	}
}

func benchCommit(b *testing.B, e *Engine, key []byte, val []byte) {
	tx, err := e.Begin(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	if err := tx.Set(key, val); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(b.Context()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCommit commits one 100-byte value per transaction, synced.
func BenchmarkCommit(b *testing.B) {
	e := open(b, b.TempDir())
	defer e.Close()
	val := bytes.Repeat([]byte("v"), 100)
	for i := 0; b.Loop(); i++ {
		benchCommit(b, e, fmt.Appendf(nil, "key%06d", i%10000), val)
	}
}

// BenchmarkCommitParallel does the same from GOMAXPROCS goroutines (times
// -cpu), on distinct keys: ns/op below BenchmarkCommit's shows commits
// sharing badger's write batches.
func BenchmarkCommitParallel(b *testing.B) {
	e := open(b, b.TempDir())
	defer e.Close()
	val := bytes.Repeat([]byte("v"), 100)
	var worker atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS: 64 writers on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		for i := 0; pb.Next(); i++ {
			benchCommit(b, e, fmt.Appendf(nil, "w%d/key%06d", w, i%10000), val)
		}
	})
}

// BenchmarkGroupCommit is BenchmarkCommitParallel's load (64 writers,
// 100-byte values, synced) through the engine's committer ("engine":
// one badger write and one sync for every transaction queued meanwhile)
// and through badger's own transactions ("badger": db.Update from each
// writer, badger detecting conflicts, one WAL sync per transaction), the
// alternative the committer replaces.
func BenchmarkGroupCommit(b *testing.B) {
	val := bytes.Repeat([]byte("v"), 100)
	b.Run("engine", func(b *testing.B) {
		e := open(b, b.TempDir())
		defer e.Close()
		var worker atomic.Int64
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			w := worker.Add(1)
			for i := 0; pb.Next(); i++ {
				benchCommit(b, e, fmt.Appendf(nil, "w%d/key%06d", w, i%10000), val)
			}
		})
	})
	b.Run("badger", func(b *testing.B) {
		db, err := bdb.Open(bdb.DefaultOptions(b.TempDir()).
			WithSyncWrites(true).
			WithMemTableSize(64 << 20).
			WithNumMemtables(3).
			WithLoggingLevel(bdb.WARNING))
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		var worker atomic.Int64
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			w := worker.Add(1)
			for i := 0; pb.Next(); i++ {
				key := fmt.Appendf(nil, "w%d/key%06d", w, i%10000)
				if err := db.Update(func(tx *bdb.Txn) error { return tx.Set(key, val) }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestDefragGivesBackSpace: 60 MiB of incompressible values, deleted,
// stay on disk until Defrag, which gives the space back while a reader
// and a writer go on; what was not deleted is still there. So with the
// values in the tables and in the value log.
func TestDefragGivesBackSpace(t *testing.T) {
	t.Run("values in the tables", func(t *testing.T) { testDefragGivesBackSpace(t, valuesInTheTables()) })
	t.Run("values in the log", func(t *testing.T) { testDefragGivesBackSpace(t, quiet()) })
}

func testDefragGivesBackSpace(t *testing.T, opts Options) {
	dir := t.TempDir()
	e := openWith(t, dir, opts)
	defer e.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	value := func() []byte {
		v := make([]byte, 100<<10)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	kept := value()
	set(t, e, []byte("kept"), kept)
	for i := range 600 {
		set(t, e, fmt.Appendf(nil, "k%04d", i), value())
	}
	for i := range 600 {
		if err := put(e, fmt.Appendf(nil, "k%04d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := diskUsage(t, dir)
	// A writer and a reader run through the defragmentation.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := put(e, fmt.Appendf(nil, "during%06d", i), []byte("v")); err != nil {
				t.Errorf("write during defrag: %v", err)
				return
			}
			writes.Add(1)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v, err := read(e, []byte("kept")); err != nil || !bytes.Equal(v, kept) {
				t.Errorf("kept: %d bytes during defrag: %v", len(v), err)
				return
			}
		}
	})
	if err := e.Defrag(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	after := diskUsage(t, dir)
	t.Logf("disk usage %d MiB before defrag, %d MiB after; %d writes during it", before>>20, after>>20, writes.Load())
	if before < 50<<20 || after > before/4 {
		t.Fatalf("disk usage %d bytes before defrag, %d after: want a quarter or less", before, after)
	}
	if v, err := read(e, []byte("kept")); err != nil || !bytes.Equal(v, kept) {
		t.Fatalf("kept: %d bytes after defrag: %v", len(v), err)
	}
	if n := writes.Load(); n > 0 {
		if v, err := read(e, fmt.Appendf(nil, "during%06d", n-1)); err != nil || string(v) != "v" {
			t.Fatalf("last write during defrag: %q, %v", v, err)
		}
	}
	if got, err := read(e, defragKey); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the defrag marker is visible: %q, %v", got, err)
	}
}

// diskUsage is fsutil.DiskUsage, failing the test on an error.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	used, err := fsutil.DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// put writes value under key in a transaction of its own; nil deletes.
func put(e storage.Engine, key, value []byte) error {
	tx, err := e.Begin(context.Background())
	if err != nil {
		return err
	}
	if value == nil {
		err = tx.Delete(key)
	} else {
		err = tx.Set(key, value)
	}
	if err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit(context.Background())
}

// read reads key in a transaction of its own.
func read(e storage.Engine, key []byte) ([]byte, error) {
	tx, err := e.Begin(context.Background())
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	return tx.Get(key)
}

// TestSizesForKeepBadgerWithinTheBudget: from a budget, three memtables
// and a flush's builder (eight memtables), the block cache and a full
// level 0 fit in the budget, level 0 leaves room for a flush, and no
// budget keeps badger's defaults.
func TestSizesForKeepBadgerWithinTheBudget(t *testing.T) {
	if got := sizesFor(0); got.memTable != 64<<20 || got.l0Stall != maxL0Stall {
		t.Errorf("no budget: %+v, want 64 MiB memtables and badger's stall of %d", got, maxL0Stall)
	}
	for _, budget := range []int64{1 << 30, 2 << 30, 12 << 30, 64 << 30} {
		sz := sizesFor(budget)
		if held := (3+8)*sz.memTable + sz.blockCache; held > budget/2 {
			t.Errorf("budget %d MiB: memtables, a flush and the block cache hold %d MiB, over half", budget>>20, held>>20)
		}
		if l0 := int64(sz.l0Stall) * sz.memTable; l0 > budget/16 {
			t.Errorf("budget %d MiB: level 0 may hold %d MiB, over 1/16", budget>>20, l0>>20)
		}
		if sz.l0Stall < minL0Stall || sz.l0Stall > maxL0Stall {
			t.Errorf("budget %d MiB: level-0 stall at %d tables, want %d to %d", budget>>20, sz.l0Stall, minL0Stall, maxL0Stall)
		}
	}
	if sz := sizesFor(1); sz.memTable != minMemTable || sz.l0Stall != minL0Stall {
		t.Errorf("a tiny budget: %+v, want the smallest memtable and level 0", sz)
	}
}

// TestSizeShowsWritesAtOnce writes a few MiB to a new store: Size (what
// Status and a directory-less quota read) counts them at once, though
// Badger's own count would show them only at its next minutely refresh.
func TestSizeShowsWritesAtOnce(t *testing.T) {
	e, err := Open(t.TempDir(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const n, size = 512, 8 << 10
	src := rand.NewChaCha8([32]byte{})
	value := make([]byte, size)
	for i := range n {
		_, _ = src.Read(value) // incompressible, though tables are plain
		set(t, e, fmt.Appendf(nil, "k%04d", i), value)
	}
	if got := e.Size(); got < n*size {
		t.Errorf("Size after writing %d bytes: %d", n*size, got)
	}
}

// TestValueThresholdKeepsValuesOutOfTheTables: by default the tables
// hold pointers, the value log the values, and the values survive a
// reopen from the log; with MaxValueThreshold, or compressed tables and
// no threshold asked for, the tables hold the values and the log none.
func TestValueThresholdKeepsValuesOutOfTheTables(t *testing.T) {
	const keys, size = 2000, 1 << 10
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([][]byte, keys)
	for i := range values {
		values[i] = make([]byte, size)
		for j := range values[i] {
			values[i][j] = byte(rng.Uint32())
		}
	}
	snappy := quiet()
	snappy.Compression = CompressionSnappy
	for _, tc := range []struct {
		name            string
		opts            Options
		inTables, inLog bool
	}{
		{"default", quiet(), false, true},
		{"every value in the tables", valuesInTheTables(), true, false},
		{"compressed tables", snappy, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := openWith(t, dir, tc.opts)
			for i, v := range values {
				set(t, e, fmt.Appendf(nil, "k%05d", i), v)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openWith(t, dir, tc.opts)
			defer e.Close()
			for i, v := range values {
				if got, err := read(e, fmt.Appendf(nil, "k%05d", i)); err != nil || !bytes.Equal(got, v) {
					t.Fatalf("key %d after reopen: %d bytes, %v", i, len(got), err)
				}
			}
			f, err := e.files()
			if err != nil {
				t.Fatal(err)
			}
			tables, log := float64(f.tables)/(keys*size), float64(f.vlog)/(keys*size)
			t.Logf("tables take %.2f of the values' bytes, the value log %.2f", tables, log)
			if got := tables > 0.9; got != tc.inTables {
				t.Errorf("tables take %.2f of the values' bytes: values in the tables %v, want %v", tables, got, tc.inTables)
			}
			if got := log > 0.9; got != tc.inLog {
				t.Errorf("the value log takes %.2f of the values' bytes: values in the log %v, want %v", log, got, tc.inLog)
			}
		})
	}
}

// TestShortScanLeavesLoggedValuesUnread: with IterOptions.Short, a value
// in the value log is not read (Value is nil), while a short value, in
// the tables, is.
func TestShortScanLeavesLoggedValuesUnread(t *testing.T) {
	e := open(t, t.TempDir())
	defer e.Close()
	long := bytes.Repeat([]byte("v"), 1024)
	set(t, e, []byte("a-long"), long, []byte("b-short"), []byte("tiny"))
	tx, err := e.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	got := map[string][]byte{}
	err = storage.NewReader(tx).ScanShort(nil, nil, 0, 51, func(k, v []byte) bool {
		got[string(k)] = bytes.Clone(v)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got["a-long"]; !ok || v != nil {
		t.Errorf("the logged value: listed %v, %d bytes (nil %v); want it listed and unread", ok, len(v), v == nil)
	}
	if v := got["b-short"]; string(v) != "tiny" {
		t.Errorf("the short value: %q, want tiny", v)
	}
}
