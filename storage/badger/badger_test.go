package badger

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	bdb "github.com/dgraph-io/badger/v4"

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
	e, err := Open(dir, quiet())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return e
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine { return open(t, t.TempDir()) })
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

func scanAll(t *testing.T, e storage.Engine, opts storage.IterOptions) []string {
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
