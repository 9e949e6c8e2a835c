package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/axon-kv/axon/storage"
)

// Run runs the conformance suite. open must return a new, empty engine for
// each call; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) storage.Engine) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, e storage.Engine)
	}{
		{"PointReadWrite", testPointReadWrite},
		{"ReadYourWrites/Get", testReadYourWritesGet},
		{"ReadYourWrites/Iter", testReadYourWritesIter},
		{"ReadYourWrites/IterAfterRewrite", testReadYourWritesAfterRewrite},
		{"SnapshotIsolation", testSnapshotIsolation},
		{"Conflict/WriteWrite", testWriteWriteConflict},
		{"Conflict/DisjointKeysBothCommit", testDisjoint},
		{"Conflict/Lock", testLock},
		{"Iter/Bounds", testIterBounds},
		{"Iter/LimitIsAHint", testIterLimit},
		{"Iter/ShortValues", testIterShort},
		{"Iter/LongScanKeepsSnapshot", testIterLongScan},
		{"Ownership", testOwnership},
		{"StartTS", testStartTS},
		{"Closed/Txn", testClosedTxn},
		{"Closed/Engine", testClosedEngine},
		{"Concurrent/Counters", testConcurrentCounters},
		{"Concurrent/CASWithSnapshotChurn", testConcurrentCAS},
		{"Insert", testInsert},
		{"ReadBatch", testReadBatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t)
			t.Cleanup(func() {
				if err := e.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, e)
		})
	}
}

// kv is a key and value pair as returned by scan.
type kv struct{ k, v []byte }

func (p kv) String() string { return fmt.Sprintf("%q=%q", p.k, p.v) }

func begin(t *testing.T, e storage.Engine) storage.Txn {
	t.Helper()
	tx, err := e.Begin(t.Context())
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

func commit(t *testing.T, tx storage.Txn) {
	t.Helper()
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func set(t *testing.T, tx storage.Txn, k, v string) {
	t.Helper()
	if err := tx.Set([]byte(k), []byte(v)); err != nil {
		t.Fatalf("Set(%q): %v", k, err)
	}
}

func del(t *testing.T, tx storage.Txn, k string) {
	t.Helper()
	if err := tx.Delete([]byte(k)); err != nil {
		t.Fatalf("Delete(%q): %v", k, err)
	}
}

func lock(t *testing.T, tx storage.Txn, keys ...string) {
	t.Helper()
	bs := make([][]byte, len(keys))
	for i, k := range keys {
		bs[i] = []byte(k)
	}
	if err := tx.Lock(bs...); err != nil {
		t.Fatalf("Lock(%q): %v", keys, err)
	}
}

// put commits the pairs k1, v1, k2, v2, ... in one transaction.
func put(t *testing.T, e storage.Engine, pairs ...string) {
	t.Helper()
	tx := begin(t, e)
	for i := 0; i+1 < len(pairs); i += 2 {
		set(t, tx, pairs[i], pairs[i+1])
	}
	commit(t, tx)
}

// wantGet checks what tx reads for k; want nil means ErrNotFound.
func wantGet(t *testing.T, tx storage.Txn, k string, want *string) {
	t.Helper()
	got, err := tx.Get([]byte(k))
	switch {
	case want == nil && !errors.Is(err, storage.ErrNotFound):
		t.Errorf("Get(%q) = %q, %v; want ErrNotFound", k, got, err)
	case want != nil && err != nil:
		t.Errorf("Get(%q): %v; want %q", k, err, *want)
	case want != nil && string(got) != *want:
		t.Errorf("Get(%q) = %q; want %q", k, got, *want)
	}
}

// wantLatest checks the committed value of k in a fresh transaction.
func wantLatest(t *testing.T, e storage.Engine, k string, want *string) {
	t.Helper()
	tx := begin(t, e)
	defer tx.Rollback()
	wantGet(t, tx, k, want)
}

func str(s string) *string { return &s }

func scan(t *testing.T, tx storage.Txn, opts storage.IterOptions) []kv {
	t.Helper()
	it, err := tx.Iter(opts)
	if err != nil {
		t.Fatalf("Iter(%+v): %v", opts, err)
	}
	defer it.Close()
	var out []kv
	for it.Next() {
		out = append(out, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Iter(%+v).Err: %v", opts, err)
	}
	return out
}

func equalKVs(a, b []kv) bool {
	return slices.EqualFunc(a, b, func(x, y kv) bool {
		return bytes.Equal(x.k, y.k) && bytes.Equal(x.v, y.v)
	})
}

func wantScan(t *testing.T, tx storage.Txn, opts storage.IterOptions, want []kv) {
	t.Helper()
	if got := scan(t, tx, opts); !equalKVs(got, want) {
		t.Errorf("Iter(lower=%q upper=%q reverse=%v limit=%d)\n got %v\nwant %v",
			opts.Lower, opts.Upper, opts.Reverse, opts.Limit, got, want)
	}
}

func kvs(pairs ...string) []kv {
	var out []kv
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, kv{[]byte(pairs[i]), []byte(pairs[i+1])})
	}
	return out
}

func testPointReadWrite(t *testing.T, e storage.Engine) {
	tests := []struct {
		name       string
		key, value string
	}{
		{"ascii", "a", "1"},
		{"zero byte key", "\x00", "zero"},
		{"0xFF key", "\xff\xff", "ff"},
		{"mixed binary", "\x00\xff\x00\x01", "\x00\xff"},
		{"empty value", "empty", ""},
		{"large value", "large", string(bytes.Repeat([]byte("0123456789abcdef"), 1<<12))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantLatest(t, e, tc.key, nil)
			put(t, e, tc.key, tc.value)
			wantLatest(t, e, tc.key, &tc.value)

			tx := begin(t, e)
			del(t, tx, tc.key)
			commit(t, tx)
			wantLatest(t, e, tc.key, nil)
		})
	}
	t.Run("delete of a missing key", func(t *testing.T) {
		tx := begin(t, e)
		del(t, tx, "never-written")
		commit(t, tx)
		wantLatest(t, e, "never-written", nil)
	})
	t.Run("overwrite", func(t *testing.T) {
		put(t, e, "o", "1")
		put(t, e, "o", "2")
		wantLatest(t, e, "o", str("2"))
	})
	t.Run("rollback applies nothing", func(t *testing.T) {
		tx := begin(t, e)
		set(t, tx, "rolled-back", "x")
		tx.Rollback()
		wantLatest(t, e, "rolled-back", nil)
	})
}

func testReadYourWritesGet(t *testing.T, e storage.Engine) {
	put(t, e, "a", "1", "b", "2")
	tx := begin(t, e)
	steps := []struct {
		name string
		do   func()
		key  string
		want *string
	}{
		{"committed value", func() {}, "a", str("1")},
		{"own overwrite", func() { set(t, tx, "a", "10") }, "a", str("10")},
		{"own delete of committed key", func() { del(t, tx, "b") }, "b", nil},
		{"own insert", func() { set(t, tx, "c", "3") }, "c", str("3")},
		{"own delete of own insert", func() { del(t, tx, "c") }, "c", nil},
		{"set after own delete", func() { set(t, tx, "b", "20") }, "b", str("20")},
		{"own empty value", func() { set(t, tx, "e", "") }, "e", str("")},
	}
	for _, s := range steps {
		s.do()
		t.Run(s.name, func(t *testing.T) { wantGet(t, tx, s.key, s.want) })
	}
	tx.Rollback()
	wantLatest(t, e, "a", str("1"))
	wantLatest(t, e, "b", str("2"))
	wantLatest(t, e, "c", nil)
}

func testReadYourWritesIter(t *testing.T, e storage.Engine) {
	put(t, e, "a", "A", "c", "C", "e", "E", "g", "G")
	tx := begin(t, e)
	defer tx.Rollback()
	set(t, tx, "b", "B")
	del(t, tx, "c")
	set(t, tx, "e", "E2")
	set(t, tx, "h", "H")
	del(t, tx, "d") // never existed
	set(t, tx, "f", "")

	all := kvs("a", "A", "b", "B", "e", "E2", "f", "", "g", "G", "h", "H")
	tests := []struct {
		name         string
		lower, upper string // "" means nil
		want         []kv
	}{
		{"unbounded", "", "", all},
		{"lower is an own write", "b", "", all[1:]},
		{"upper is an own write", "", "h", all[:5]},
		{"upper is an own delete", "", "c", all[:2]},
		{"both bounds are own writes", "b", "h", all[1:5]},
		{"lower is an own delete", "c", "g", all[2:4]},
	}
	for _, tc := range tests {
		for _, reverse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reverse=%v", tc.name, reverse), func(t *testing.T) {
				opts := storage.IterOptions{Reverse: reverse}
				if tc.lower != "" {
					opts.Lower = []byte(tc.lower)
				}
				if tc.upper != "" {
					opts.Upper = []byte(tc.upper)
				}
				want := slices.Clone(tc.want)
				if reverse {
					slices.Reverse(want)
				}
				wantScan(t, tx, opts, want)
			})
		}
	}
}

// testReadYourWritesAfterRewrite: an iterator sees the newest write of a
// key written, read by an iterator and written again in one transaction
// (a batch of requests on one key, each ranging over what the one before
// wrote).
func testReadYourWritesAfterRewrite(t *testing.T, e storage.Engine) {
	put(t, e, "a", "A")
	tx := begin(t, e)
	defer tx.Rollback()
	set(t, tx, "a", "A1")
	set(t, tx, "b", "B1")
	wantScan(t, tx, storage.IterOptions{}, kvs("a", "A1", "b", "B1"))
	set(t, tx, "a", "A2")
	del(t, tx, "b")
	set(t, tx, "c", "C")
	wantScan(t, tx, storage.IterOptions{}, kvs("a", "A2", "c", "C"))
	set(t, tx, "b", "B3")
	del(t, tx, "a")
	wantScan(t, tx, storage.IterOptions{Reverse: true}, kvs("c", "C", "b", "B3"))
	wantGet(t, tx, "a", nil)
	wantGet(t, tx, "b", str("B3"))
}

func testSnapshotIsolation(t *testing.T, e storage.Engine) {
	put(t, e, "k", "old")
	early := begin(t, e)
	defer early.Rollback()
	readFirst := begin(t, e)
	defer readFirst.Rollback()
	wantGet(t, readFirst, "k", str("old"))

	w := begin(t, e)
	set(t, w, "k", "new")
	set(t, w, "n", "fresh")
	commit(t, w)

	for name, tx := range map[string]storage.Txn{"begun before, no reads": early, "begun before, read before": readFirst} {
		t.Run(name, func(t *testing.T) {
			wantGet(t, tx, "k", str("old"))
			wantGet(t, tx, "n", nil)
			wantScan(t, tx, storage.IterOptions{}, kvs("k", "old"))
			wantScan(t, tx, storage.IterOptions{Reverse: true}, kvs("k", "old"))
		})
	}
	t.Run("begun after", func(t *testing.T) {
		late := begin(t, e)
		defer late.Rollback()
		wantGet(t, late, "k", str("new"))
		wantGet(t, late, "n", str("fresh"))
		wantScan(t, late, storage.IterOptions{}, kvs("k", "new", "n", "fresh"))
	})
}

func testWriteWriteConflict(t *testing.T, e storage.Engine) {
	type write func(t *testing.T, tx storage.Txn, k string)
	setW := func(v string) write { return func(t *testing.T, tx storage.Txn, k string) { set(t, tx, k, v) } }
	delW := write(func(t *testing.T, tx storage.Txn, k string) { del(t, tx, k) })
	tests := []struct {
		name          string
		exists        bool // the key is committed before both begin
		first, second write
		want          *string // committed value afterwards
		secondEarly   bool    // second buffers its write before first commits
	}{
		{"set vs set", true, setW("first"), setW("second"), str("first"), false},
		{"set vs set, second wrote early", true, setW("first"), setW("second"), str("first"), true},
		{"set vs set on a new key", false, setW("first"), setW("second"), str("first"), false},
		{"delete vs set", true, delW, setW("second"), nil, false},
		{"set vs delete", true, setW("first"), delW, str("first"), true},
		{"delete vs delete", true, delW, delW, nil, false},
		{"delete vs delete of a missing key", false, delW, delW, nil, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := fmt.Sprintf("k%d", i)
			other := fmt.Sprintf("other%d", i)
			if tc.exists {
				put(t, e, k, "orig")
			}
			first, second := begin(t, e), begin(t, e)
			defer second.Rollback()
			set(t, second, other, "x")
			if tc.secondEarly {
				tc.second(t, second, k)
			}
			tc.first(t, first, k)
			commit(t, first)
			if !tc.secondEarly {
				tc.second(t, second, k)
			}
			if err := second.Commit(t.Context()); !errors.Is(err, storage.ErrConflict) {
				t.Fatalf("second Commit = %v; want ErrConflict", err)
			}
			wantLatest(t, e, k, tc.want)
			wantLatest(t, e, other, nil)
		})
	}
}

func testDisjoint(t *testing.T, e storage.Engine) {
	for _, firstCommitsFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits first=%v", firstCommitsFirst), func(t *testing.T) {
			a, b := begin(t, e), begin(t, e)
			suffix := strconv.FormatBool(firstCommitsFirst)
			set(t, a, "a"+suffix, "A")
			set(t, b, "b"+suffix, "B")
			if firstCommitsFirst {
				commit(t, a)
				commit(t, b)
			} else {
				commit(t, b)
				commit(t, a)
			}
			wantLatest(t, e, "a"+suffix, str("A"))
			wantLatest(t, e, "b"+suffix, str("B"))
		})
	}
}

func testLock(t *testing.T, e storage.Engine) {
	tests := []struct {
		name        string
		lockerFirst bool // the locker commits before the writer
		lockerWrite bool // the locker also writes an unrelated key
		sameKey     bool // the writer writes the locked key
		beginAfter  bool // the writer begins after the locker committed
		wantErr     error
	}{
		{"writer commits first, locker conflicts", false, true, true, false, storage.ErrConflict},
		{"writer commits first, lock-only locker conflicts", false, false, true, false, storage.ErrConflict},
		{"locker commits first, writer conflicts", true, true, true, false, storage.ErrConflict},
		{"lock-only locker commits first, writer conflicts", true, false, true, false, storage.ErrConflict},
		{"writer begun after the locker committed", true, false, true, true, nil},
		{"disjoint keys, writer first", false, true, false, false, nil},
		{"disjoint keys, locker first", true, true, false, false, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, j, x := fmt.Sprintf("k%d", i), fmt.Sprintf("j%d", i), fmt.Sprintf("x%d", i)
			put(t, e, k, "orig")
			locker := begin(t, e)
			defer locker.Rollback()
			lock(t, locker, k)
			if tc.lockerWrite {
				set(t, locker, x, "locker")
			}
			wk := j
			if tc.sameKey {
				wk = k
			}
			var writer storage.Txn
			if !tc.beginAfter {
				writer = begin(t, e)
				defer writer.Rollback()
				set(t, writer, wk, "writer")
			}
			var lockErr, writeErr error
			if tc.lockerFirst {
				lockErr = locker.Commit(t.Context())
				if tc.beginAfter {
					writer = begin(t, e)
					defer writer.Rollback()
					set(t, writer, wk, "writer")
				}
				writeErr = writer.Commit(t.Context())
			} else {
				writeErr = writer.Commit(t.Context())
				lockErr = locker.Commit(t.Context())
			}
			loser, winner := lockErr, writeErr
			if tc.lockerFirst {
				loser, winner = writeErr, lockErr
			}
			if winner != nil {
				t.Fatalf("first committer: %v", winner)
			}
			if !errors.Is(loser, tc.wantErr) || (tc.wantErr == nil) != (loser == nil) {
				t.Fatalf("second committer: %v; want %v", loser, tc.wantErr)
			}
			// The lock itself never changes the locked key.
			wantK := str("orig")
			if tc.sameKey && writeErr == nil {
				wantK = str("writer")
			}
			wantLatest(t, e, k, wantK)
			if tc.lockerWrite {
				var wantX *string
				if lockErr == nil {
					wantX = str("locker")
				}
				wantLatest(t, e, x, wantX)
			}
		})
	}
	t.Run("locking a missing key creates nothing", func(t *testing.T) {
		tx := begin(t, e)
		lock(t, tx, "missing")
		wantGet(t, tx, "missing", nil)
		commit(t, tx)
		wantLatest(t, e, "missing", nil)
	})
	t.Run("lock then write the same key", func(t *testing.T) {
		put(t, e, "lw", "orig")
		tx := begin(t, e)
		lock(t, tx, "lw")
		wantGet(t, tx, "lw", str("orig"))
		set(t, tx, "lw", "new")
		wantGet(t, tx, "lw", str("new"))
		commit(t, tx)
		wantLatest(t, e, "lw", str("new"))
	})
	t.Run("write then lock the same key", func(t *testing.T) {
		tx := begin(t, e)
		set(t, tx, "wl", "new")
		lock(t, tx, "wl")
		wantGet(t, tx, "wl", str("new"))
		commit(t, tx)
		wantLatest(t, e, "wl", str("new"))
	})
}

// boundKeys are the keys of the bounds tests, in order, with binary bytes
// around every bound used.
var boundKeys = []string{
	"\x00", "\x00\x00", "\x00\x01", "a", "a\x00", "ab", "a\xff", "b", "\xff", "\xff\x00", "\xff\xff",
}

func boundValue(i int) string {
	if i == 5 { // "ab" has an empty value
		return ""
	}
	return fmt.Sprintf("v%d", i)
}

func testIterBounds(t *testing.T, e storage.Engine) {
	if !slices.IsSorted(boundKeys) {
		t.Fatal("boundKeys not sorted")
	}
	// Modes decide which keys are committed and which are buffered in the
	// iterating transaction; the result must not depend on it. Keys of
	// the form "<key>-gone" are committed and then deleted inside the
	// transaction, so they must never appear.
	modes := []struct {
		name      string
		committed func(i int) bool
	}{
		{"committed", func(int) bool { return true }},
		{"buffered", func(int) bool { return false }},
		{"mixed", func(i int) bool { return i%2 == 0 }},
	}
	b := func(s string) []byte { return []byte(s) }
	cases := []struct {
		name         string
		lower, upper []byte
	}{
		{"unbounded", nil, nil},
		{"empty lower", []byte{}, nil},
		{"lower equals a key", b("a"), nil},
		{"lower between keys", b("a\x01"), nil},
		{"lower is 0x00", b("\x00"), nil},
		{"lower past the last key", b("\xff\xff\x00"), nil},
		{"lower is the last key", b("\xff\xff"), nil},
		{"upper equals a key", nil, b("a")},
		{"upper just after a key", nil, b("a\x00")},
		{"upper is 0xFF", nil, b("\xff")},
		{"upper is the last key", nil, b("\xff\xff")},
		{"upper past the last key", nil, b("\xff\xff\xff")},
		{"upper is 0x00", nil, b("\x00")},
		{"single key range", b("a"), b("a\x00")},
		{"zero-byte range", b("\x00"), b("\x00\x00")},
		{"both bounds are keys", b("a\x00"), b("b")},
		{"both bounds between keys", b("\x00\x00\x00"), b("a\xfe")},
		{"lower equals upper", b("b"), b("b")},
		{"lower above upper", b("b"), b("a")},
	}
	gone := func(i int) string { return boundKeys[i] + "-gone" }
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			tx := begin(t, e)
			for i, k := range boundKeys {
				if mode.committed(i) {
					set(t, tx, k, boundValue(i))
				} else {
					del(t, tx, k)
				}
				set(t, tx, gone(i), "deleted")
			}
			commit(t, tx)

			tx = begin(t, e)
			defer tx.Rollback()
			for i, k := range boundKeys {
				if !mode.committed(i) {
					set(t, tx, k, boundValue(i))
				}
				del(t, tx, gone(i))
			}
			for _, c := range cases {
				var want []kv
				for i, k := range boundKeys {
					if bytes.Compare([]byte(k), c.lower) >= 0 && (c.upper == nil || bytes.Compare([]byte(k), c.upper) < 0) {
						want = append(want, kv{[]byte(k), []byte(boundValue(i))})
					}
				}
				for _, reverse := range []bool{false, true} {
					for _, limit := range []int{0, 1, 2} {
						name := fmt.Sprintf("%s/reverse=%v/limit=%d", c.name, reverse, limit)
						t.Run(name, func(t *testing.T) {
							w := slices.Clone(want)
							if reverse {
								slices.Reverse(w)
							}
							wantScan(t, tx, storage.IterOptions{Lower: c.lower, Upper: c.upper, Reverse: reverse, Limit: limit}, w)
						})
					}
				}
			}
		})
	}
}

func testIterLimit(t *testing.T, e storage.Engine) {
	tx := begin(t, e)
	var all []kv
	for i := range 50 {
		k, v := fmt.Sprintf("key%03d", i), fmt.Sprintf("val%d", i)
		set(t, tx, k, v)
		all = append(all, kv{[]byte(k), []byte(v)})
	}
	commit(t, tx)
	tx = begin(t, e)
	defer tx.Rollback()
	for _, limit := range []int{1, 7, 49, 50, 1000} {
		for _, reverse := range []bool{false, true} {
			t.Run(fmt.Sprintf("limit=%d/reverse=%v", limit, reverse), func(t *testing.T) {
				want := slices.Clone(all)
				if reverse {
					slices.Reverse(want)
				}
				wantScan(t, tx, storage.IterOptions{Limit: limit, Reverse: reverse}, want)
			})
		}
	}
}

// testIterShort: with IterOptions.Short every key is still listed, every
// value up to Short is returned whole, and a longer one is returned whole
// or left out (nil), committed or written by the transaction itself.
func testIterShort(t *testing.T, e storage.Engine) {
	const short = 51
	lens := []int{1, short, short + 1, 100, 300, 4096, 70000}
	value := func(i, n int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, n) }
	tx := begin(t, e)
	for i, n := range lens {
		set(t, tx, fmt.Sprintf("committed%d", i), string(value(i, n)))
	}
	commit(t, tx)
	tx = begin(t, e)
	defer tx.Rollback()
	for i, n := range lens {
		set(t, tx, fmt.Sprintf("pending%d", i), string(value(i, n)))
	}
	for _, prefix := range []string{"committed", "pending"} {
		it, err := tx.Iter(storage.IterOptions{Lower: []byte(prefix), Upper: []byte(prefix + "~"), Short: short})
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for ; it.Next(); i++ {
			if want := fmt.Sprintf("%s%d", prefix, i); string(it.Key()) != want {
				t.Fatalf("key %d is %q, want %q", i, it.Key(), want)
			}
			v := it.Value()
			if v == nil && lens[i] > short {
				continue
			}
			if !bytes.Equal(v, value(i, lens[i])) {
				t.Errorf("%s%d: %d bytes (nil %v), want its %d (Short %d)", prefix, i, len(v), v == nil, lens[i], short)
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		it.Close()
		if i != len(lens) {
			t.Errorf("%s: %d keys listed, want %d", prefix, i, len(lens))
		}
	}
}

// testIterLongScan walks more keys than any engine batches at once while
// another transaction commits changes inside the range, and while the
// iterating transaction itself reads.
func testIterLongScan(t *testing.T, e storage.Engine) {
	const n = 600
	key := func(i int) string { return fmt.Sprintf("scan%04d", i) }
	tx := begin(t, e)
	for i := range n {
		set(t, tx, key(i), strconv.Itoa(i))
	}
	commit(t, tx)

	for _, reverse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reverse=%v", reverse), func(t *testing.T) {
			tx := begin(t, e)
			defer tx.Rollback()
			it, err := tx.Iter(storage.IterOptions{Lower: []byte("scan"), Upper: []byte("scan\xff"), Reverse: reverse})
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			var got int
			for it.Next() {
				i := got
				if reverse {
					i = n - 1 - got
				}
				if string(it.Key()) != key(i) || string(it.Value()) != strconv.Itoa(i) {
					t.Fatalf("row %d = %q=%q; want %q=%q", got, it.Key(), it.Value(), key(i), strconv.Itoa(i))
				}
				got++
				if got == 10 {
					w := begin(t, e)
					for _, j := range []int{0, 100, 300, 599} {
						del(t, w, key(j))
					}
					set(t, w, key(200)+"x", "new")
					commit(t, w)
				}
				if got%50 == 0 {
					wantGet(t, tx, key(300), str("300"))
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			if got != n {
				t.Fatalf("scanned %d rows; want %d", got, n)
			}
			// Restore the keys for the next direction.
			w := begin(t, e)
			for _, j := range []int{0, 100, 300, 599} {
				set(t, w, key(j), strconv.Itoa(j))
			}
			del(t, w, key(200)+"x")
			commit(t, w)
		})
	}
}

func testOwnership(t *testing.T, e storage.Engine) {
	t.Run("Set copies its arguments", func(t *testing.T) {
		k, v := []byte("own-k"), []byte("own-v")
		tx := begin(t, e)
		if err := tx.Set(k, v); err != nil {
			t.Fatal(err)
		}
		copy(k, "XXXXX")
		copy(v, "YYYYY")
		wantGet(t, tx, "own-k", str("own-v"))
		commit(t, tx)
		wantLatest(t, e, "own-k", str("own-v"))
		wantLatest(t, e, "XXXXX", nil)
	})
	t.Run("Get returns a copy", func(t *testing.T) {
		put(t, e, "g", "value")
		tx := begin(t, e)
		defer tx.Rollback()
		got, err := tx.Get([]byte("g"))
		if err != nil {
			t.Fatal(err)
		}
		copy(got, "XXXXX")
		wantGet(t, tx, "g", str("value"))
		set(t, tx, "g", "mine")
		got, err = tx.Get([]byte("g"))
		if err != nil {
			t.Fatal(err)
		}
		copy(got, "XXXX")
		wantGet(t, tx, "g", str("mine"))
		wantLatest(t, e, "g", str("value"))
	})
	t.Run("iterator rows stay right until Next and are not the engine's", func(t *testing.T) {
		put(t, e, "it1", "one", "it2", "two", "it3", "three")
		tx := begin(t, e)
		defer tx.Rollback()
		set(t, tx, "it4", "four")
		it, err := tx.Iter(storage.IterOptions{Lower: []byte("it"), Upper: []byte("iu")})
		if err != nil {
			t.Fatal(err)
		}
		var got []kv
		for it.Next() {
			k, v := it.Key(), it.Value()
			got = append(got, kv{bytes.Clone(k), bytes.Clone(v)})
			for i := range k {
				k[i] = '#'
			}
			for i := range v {
				v[i] = '#'
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		it.Close()
		if want := kvs("it1", "one", "it2", "two", "it3", "three", "it4", "four"); !equalKVs(got, want) {
			t.Fatalf("got %v; want %v", got, want)
		}
		wantGet(t, tx, "it2", str("two"))
		wantGet(t, tx, "it4", str("four"))
		wantLatest(t, e, "it3", str("three"))
	})
}

func testStartTS(t *testing.T, e storage.Engine) {
	a, b := begin(t, e), begin(t, e)
	if a.StartTS() > b.StartTS() {
		t.Errorf("StartTS went back without commits: %d then %d", a.StartTS(), b.StartTS())
	}
	if ts := a.StartTS(); a.StartTS() != ts {
		t.Errorf("StartTS not stable")
	}
	a.Rollback()
	b.Rollback()

	commits := []struct {
		name string
		do   func(tx storage.Txn)
	}{
		{"set", func(tx storage.Txn) { set(t, tx, "ts", "1") }},
		{"delete", func(tx storage.Txn) { del(t, tx, "ts") }},
		{"lock only", func(tx storage.Txn) { lock(t, tx, "ts") }},
		{"several keys", func(tx storage.Txn) { set(t, tx, "ts1", "1"); set(t, tx, "ts2", "2") }},
	}
	prev := begin(t, e)
	for _, c := range commits {
		t.Run(c.name, func(t *testing.T) {
			c.do(prev)
			before := prev.StartTS()
			commit(t, prev)
			prev = begin(t, e)
			if prev.StartTS() <= before {
				t.Errorf("StartTS after a %s commit = %d; want > %d", c.name, prev.StartTS(), before)
			}
		})
	}
	prev.Rollback()
}

func testClosedTxn(t *testing.T, e storage.Engine) {
	ops := []struct {
		name string
		do   func(tx storage.Txn) error
	}{
		{"Get", func(tx storage.Txn) error { _, err := tx.Get([]byte("k")); return err }},
		{"Set", func(tx storage.Txn) error { return tx.Set([]byte("k"), []byte("v")) }},
		{"Delete", func(tx storage.Txn) error { return tx.Delete([]byte("k")) }},
		{"Lock", func(tx storage.Txn) error { return tx.Lock([]byte("k")) }},
		{"Iter", func(tx storage.Txn) error { _, err := tx.Iter(storage.IterOptions{}); return err }},
		{"Commit", func(tx storage.Txn) error { return tx.Commit(t.Context()) }},
	}
	ends := []struct {
		name string
		end  func(t *testing.T, tx storage.Txn)
	}{
		{"after Commit", func(t *testing.T, tx storage.Txn) { commit(t, tx) }},
		{"after Rollback", func(t *testing.T, tx storage.Txn) { tx.Rollback() }},
	}
	put(t, e, "k", "v0")
	for _, end := range ends {
		for _, op := range ops {
			t.Run(end.name+"/"+op.name, func(t *testing.T) {
				tx := begin(t, e)
				set(t, tx, "other", "x")
				it, err := tx.Iter(storage.IterOptions{})
				if err != nil {
					t.Fatal(err)
				}
				end.end(t, tx)
				if err := op.do(tx); !errors.Is(err, storage.ErrClosed) {
					t.Errorf("%s = %v; want ErrClosed", op.name, err)
				}
				if it.Next() {
					t.Errorf("iterator opened before the end still yields %q", it.Key())
				} else if !errors.Is(it.Err(), storage.ErrClosed) {
					t.Errorf("iterator Err = %v; want ErrClosed", it.Err())
				}
				it.Close()
				tx.Rollback() // harmless, also after Commit
				tx.Rollback()
			})
		}
	}
	wantLatest(t, e, "k", str("v0"))
	wantLatest(t, e, "other", str("x"))
}

func testClosedEngine(t *testing.T, e storage.Engine) {
	put(t, e, "k", "v")
	open := begin(t, e)
	set(t, open, "k2", "v2")
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := e.Begin(t.Context()); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Begin after Close = %v; want ErrClosed", err)
	}
	if _, err := open.Get([]byte("k")); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Get on an open txn after Close = %v; want ErrClosed", err)
	}
	if err := open.Commit(t.Context()); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Commit on an open txn after Close = %v; want ErrClosed", err)
	}
	open.Rollback()
	if err := e.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
}

// testConcurrentCounters runs read-modify-write increments from several
// goroutines, retrying on conflict. Lost updates would make the counters sum
// to less than the number of successful commits; dirty commits, to more.
func testConcurrentCounters(t *testing.T, e storage.Engine) {
	const (
		workers  = 8
		counters = 3
		perW     = 25   // successful increments each worker aims for
		maxTries = 5000 // bound on each worker's attempts
	)
	key := func(c int) []byte { return fmt.Appendf(nil, "counter%d", c) }
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		successes int
		conflicts int
	)
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			done, tries := 0, 0
			for done < perW && tries < maxTries {
				tries++
				c := (w + done) % counters
				tx, err := e.Begin(ctx)
				if err != nil {
					t.Errorf("worker %d: Begin: %v", w, err)
					return
				}
				n := 0
				v, err := tx.Get(key(c))
				switch {
				case errors.Is(err, storage.ErrNotFound):
				case err != nil:
					tx.Rollback()
					t.Errorf("worker %d: Get: %v", w, err)
					return
				default:
					if n, err = strconv.Atoi(string(v)); err != nil {
						tx.Rollback()
						t.Errorf("worker %d: counter %d holds %q", w, c, v)
						return
					}
				}
				if err := tx.Set(key(c), strconv.AppendInt(nil, int64(n+1), 10)); err != nil {
					tx.Rollback()
					t.Errorf("worker %d: Set: %v", w, err)
					return
				}
				err = tx.Commit(ctx)
				switch {
				case err == nil:
					done++
				case errors.Is(err, storage.ErrConflict):
					mu.Lock()
					conflicts++
					mu.Unlock()
				default:
					t.Errorf("worker %d: Commit: %v", w, err)
					return
				}
			}
			mu.Lock()
			successes += done
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	tx := begin(t, e)
	defer tx.Rollback()
	sum := 0
	for c := range counters {
		v, err := tx.Get(key(c))
		if err != nil {
			t.Fatalf("counter %d: %v", c, err)
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			t.Fatalf("counter %d holds %q", c, v)
		}
		sum += n
	}
	t.Logf("%d commits, %d conflicts", successes, conflicts)
	if sum != successes {
		t.Errorf("counters sum to %d; %d increments committed", sum, successes)
	}
	if successes != workers*perW {
		t.Errorf("only %d of %d increments committed within %d attempts per worker", successes, workers*perW, maxTries)
	}
}

// testConcurrentCAS is the compare-and-swap shape Kubernetes relies on:
// workers read a counter, write it plus one, and commit; other goroutines
// keep opening and releasing snapshots meanwhile, so an engine that prunes
// its conflict state as snapshots end does so often. Every successful
// commit must have read a version of the key no other successful commit
// read (else one increment overwrote the other: a lost update), and each
// counter must end at the number of commits that wrote it.
func testConcurrentCAS(t *testing.T, e storage.Engine) {
	const (
		workers  = 16
		counters = 2
		perW     = 20
		maxTries = 20000
		churners = 4
	)
	key := func(c int) []byte { return fmt.Appendf(nil, "cas%d", c) }
	type read struct{ counter, value int }
	var (
		mu      sync.Mutex
		winners = map[read]int{} // successful commits per version read
		commits [counters]int
		stop    = make(chan struct{})
		churn   sync.WaitGroup
	)
	for range churners {
		churn.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := e.Begin(t.Context())
				if err != nil {
					t.Errorf("churn: Begin: %v", err)
					return
				}
				if _, err := tx.Get(key(i % counters)); err != nil && !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("churn: Get: %v", err)
				}
				tx.Rollback()
			}
		})
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			for done, tries := 0, 0; done < perW && tries < maxTries; tries++ {
				c := (w + tries) % counters
				tx, err := e.Begin(ctx)
				if err != nil {
					t.Errorf("worker %d: Begin: %v", w, err)
					return
				}
				n, err := counterValue(tx, key(c))
				if err == nil {
					err = tx.Set(key(c), strconv.AppendInt(nil, int64(n+1), 10))
				}
				if err != nil {
					tx.Rollback()
					t.Errorf("worker %d: %v", w, err)
					return
				}
				switch err := tx.Commit(ctx); {
				case err == nil:
					done++
					mu.Lock()
					winners[read{c, n}]++
					commits[c]++
					mu.Unlock()
				case errors.Is(err, storage.ErrConflict):
				default:
					t.Errorf("worker %d: Commit: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	for r, n := range winners {
		if n > 1 {
			t.Errorf("counter %d: %d commits both read %d and succeeded (a lost update)", r.counter, n, r.value)
		}
	}
	tx := begin(t, e)
	defer tx.Rollback()
	total := 0
	for c := range counters {
		n, err := counterValue(tx, key(c))
		if err != nil {
			t.Fatal(err)
		}
		if n != commits[c] {
			t.Errorf("counter %d is %d; %d commits incremented it", c, n, commits[c])
		}
		total += commits[c]
	}
	if total != workers*perW {
		t.Errorf("only %d of %d increments committed within %d attempts per worker", total, workers*perW, maxTries)
	}
}

// counterValue reads a decimal counter; a missing key counts as 0.
func counterValue(tx storage.Txn, key []byte) (int, error) {
	v, err := tx.Get(key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("Get(%q): %w", key, err)
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, fmt.Errorf("counter %q holds %q", key, v)
	}
	return n, nil
}

// testInsert checks storage.Inserter, for engines that have it: an
// inserted key that exists at commit fails it (definitely, ErrConflict),
// whether it existed before the transaction began or was committed
// while it ran; an absent one commits like Set.
func testInsert(t *testing.T, e storage.Engine) {
	probe := begin(t, e)
	_, ok := probe.(storage.Inserter)
	probe.Rollback()
	if !ok {
		t.Skip("engine has no Insert")
	}
	insert := func(t *testing.T, tx storage.Txn, k, v string) {
		t.Helper()
		if err := tx.(storage.Inserter).Insert([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("an absent key commits", func(t *testing.T) {
		tx := begin(t, e)
		insert(t, tx, "ins/a", "1")
		commit(t, tx)
		wantLatest(t, e, "ins/a", str("1"))
	})
	t.Run("a key there before the transaction fails it", func(t *testing.T) {
		put(t, e, "ins/b", "orig")
		tx := begin(t, e)
		defer tx.Rollback()
		set(t, tx, "ins/other", "x")
		insert(t, tx, "ins/b", "2")
		if err := tx.Commit(t.Context()); !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("Commit = %v; want ErrConflict", err)
		}
		wantLatest(t, e, "ins/b", str("orig"))
		wantLatest(t, e, "ins/other", nil)
	})
	t.Run("a key committed while it ran fails it", func(t *testing.T) {
		tx := begin(t, e)
		defer tx.Rollback()
		insert(t, tx, "ins/c", "mine")
		put(t, e, "ins/c", "theirs")
		if err := tx.Commit(t.Context()); !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("Commit = %v; want ErrConflict", err)
		}
		wantLatest(t, e, "ins/c", str("theirs"))
	})
	t.Run("a deleted key counts as absent", func(t *testing.T) {
		put(t, e, "ins/d", "old")
		tx := begin(t, e)
		del(t, tx, "ins/d")
		commit(t, tx)
		tx = begin(t, e)
		insert(t, tx, "ins/d", "new")
		commit(t, tx)
		wantLatest(t, e, "ins/d", str("new"))
	})
}

// testReadBatch checks storage.BatchReader, for engines that have it: it
// answers exactly what Get and Iter do, before and after the transaction
// buffers writes.
func testReadBatch(t *testing.T, e storage.Engine) {
	probe := begin(t, e)
	_, ok := probe.(storage.BatchReader)
	probe.Rollback()
	if !ok {
		t.Skip("engine has no ReadBatch")
	}
	put(t, e, "rb/a", "1", "rb/b/1", "x", "rb/b/2", "", "rb/c", "3")
	reads := []storage.Read{
		{Key: []byte("rb/a")},
		{Key: []byte("rb/missing")},
		{Key: []byte("rb/b/2")}, // an empty value is a value
		{Key: []byte("rb/b/"), Upper: []byte("rb/b0"), Last: true},
		{Key: []byte("rb/d"), Upper: []byte("rb/e"), Last: true},  // nothing there
		{Key: []byte("rb/"), Upper: []byte("rb/b/2"), Last: true}, // upper is exclusive
	}
	check := func(t *testing.T, tx storage.Txn) {
		t.Helper()
		got, err := tx.(storage.BatchReader).ReadBatch(reads)
		if err != nil {
			t.Fatal(err)
		}
		want, err := storage.ReadEach(tx, reads)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(reads) {
			t.Fatalf("%d results for %d reads", len(got), len(reads))
		}
		for i := range reads {
			if got[i].Found != want[i].Found || !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
				t.Errorf("read %d (%q): got %+v, Get/Iter say %+v", i, reads[i].Key, got[i], want[i])
			}
		}
	}
	tx := begin(t, e)
	defer tx.Rollback()
	check(t, tx)
	if got, _ := tx.(storage.BatchReader).ReadBatch(reads[:1]); len(got) != 1 || string(got[0].Value) != "1" || !got[0].Found {
		t.Fatalf("ReadBatch(rb/a) = %+v", got)
	}
	set(t, tx, "rb/a", "mine")
	set(t, tx, "rb/b/3", "new")
	del(t, tx, "rb/c")
	check(t, tx)
	if got, _ := tx.(storage.BatchReader).ReadBatch(reads[3:4]); !got[0].Found || string(got[0].Key) != "rb/b/3" {
		t.Fatalf("last in rb/b/ after a buffered write: %+v", got)
	}
}
