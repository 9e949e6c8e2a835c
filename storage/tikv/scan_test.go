package tikv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	kvstore "github.com/tikv/client-go/v2/tikv"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

func podKey(i int) []byte { return fmt.Appendf(nil, DefaultSampleFormat, i) }

// pods returns n latest-space engine keys of pods and their values.
func pods(n int, value func(i int) []byte) (keys, values [][]byte, model []row) {
	for i := range n {
		k, v := core.LatestKey(podKey(i)), value(i)
		keys, values = append(keys, k), append(values, v)
		model = append(model, row{string(k), string(v)})
	}
	return keys, values, model
}

func smallValue(i int) []byte { return fmt.Appendf(nil, "v%d", i) }

// latestSpace is the engine range of all latest records.
var latestSpace = storage.IterOptions{Lower: core.LatestKey(nil), Upper: core.MetaKey("")}

// usesParallel reports whether it reads the snapshot region-parallel
// (after its first Next).
func usesParallel(it storage.Iterator) bool {
	_, ok := it.(*iterator).snap.(*parallelSource)
	return ok
}

func TestMockRegions(t *testing.T) {
	t.Run("default sample", func(t *testing.T) {
		e := newMock(t, MockOptions{Regions: 8})
		// The history and latest spaces split 8 ways each, the space
		// before them, the one after the latest; the revision space's
		// 8 shard starts and its end.
		if n, want := regionCount(e), 2*8+2+8+1; n != want {
			t.Fatalf("%d regions; want %d", n, want)
		}
		// The default sample's keys fall evenly into the latest regions.
		bounds, err := e.regionBounds(context.Background(), latestSpace.Lower, latestSpace.Upper)
		if err != nil {
			t.Fatal(err)
		}
		if len(bounds) != 7 {
			t.Fatalf("%d borders inside the latest space; want 7", len(bounds))
		}
		counts := make([]int, len(bounds)+1)
		for i := range DefaultSampleCount {
			k := core.LatestKey(podKey(i))
			j, _ := slices.BinarySearchFunc(bounds, k, func(b, k []byte) int {
				if bytes.Compare(b, k) <= 0 {
					return -1
				}
				return 1
			})
			counts[j]++
		}
		for j, c := range counts {
			if c != DefaultSampleCount/8 {
				t.Errorf("latest region %d holds %d sample keys; want %d (all: %v)", j, c, DefaultSampleCount/8, counts)
			}
		}
		// History keys split likewise.
		hb, err := e.regionBounds(context.Background(), core.HistoryKey(nil, 0), core.LatestKey(nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(hb) != 7 || !bytes.Equal(hb[3], core.HistoryKey(podKey(DefaultSampleCount/2), 0)) {
			t.Errorf("history borders %q", hb)
		}
	})
	t.Run("explicit sample", func(t *testing.T) {
		sample := [][]byte{[]byte("d"), []byte("a"), []byte("c"), []byte("b"), []byte("a")}
		keys, err := mockSplitKeys(MockOptions{Regions: 2, Sample: sample, Layout: core.RegionSplits})
		if err != nil {
			t.Fatal(err)
		}
		want := [][]byte{core.HistoryKey(nil, 0), core.HistoryKey([]byte("c"), 0), core.LatestKey(nil), core.LatestKey([]byte("c")), core.MetaKey("")}
		// The revision space sorts last: 2 of its shards each.
		want = append(want, core.RevisionShardStart(0), core.RevisionShardStart(core.RevisionShards/2), core.RevisionShardStart(core.RevisionShards))
		if !slices.EqualFunc(keys, want, bytes.Equal) {
			t.Errorf("split keys %q; want %q", keys, want)
		}
	})
	t.Run("layout of the caller", func(t *testing.T) {
		// The quantiles of the sample reach the layout as raw keys.
		sample := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
		var got [][]byte
		e := newMock(t, MockOptions{Regions: 4, Sample: sample, Layout: func(qs [][]byte, n int) [][]byte {
			got = qs
			return append([][]byte{[]byte(fmt.Sprint(n))}, qs...)
		}})
		if want := [][]byte{[]byte("b"), []byte("c"), []byte("d")}; !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("quantiles %q; want %q", got, want)
		}
		if n := regionCount(e); n != 5 {
			t.Errorf("%d regions; want 5", n)
		}
	})
	t.Run("regions need a layout", func(t *testing.T) {
		if _, err := mockSplitKeys(MockOptions{Regions: 2}); err == nil {
			t.Error("no error")
		}
	})
	t.Run("split keys win and are sorted", func(t *testing.T) {
		e := newMock(t, MockOptions{SplitKeys: [][]byte{[]byte("b"), []byte("a"), []byte("b")}, Regions: 8})
		if n := regionCount(e); n != 3 {
			t.Errorf("%d regions; want 3", n)
		}
	})
	t.Run("single region", func(t *testing.T) {
		e := newMock(t, MockOptions{Regions: 1})
		if n := regionCount(e); n != 1 {
			t.Errorf("%d regions; want 1", n)
		}
	})
}

// scanCases are ranges over pods(n) with borders of 8 regions inside.
func scanCases(n int) []storage.IterOptions {
	k := func(i int) []byte { return core.LatestKey(podKey(i)) }
	between := func(i int) []byte { return append(slices.Clip(k(i)), 0) }
	var out []storage.IterOptions
	for _, r := range []struct{ lower, upper []byte }{
		{nil, nil},
		{latestSpace.Lower, latestSpace.Upper},
		{k(0), k(n - 1)},
		{k(n / 8), k(n / 2)},         // both on region borders
		{between(n / 8), k(n/2 + 1)}, // just inside
		{k(n/8 - 1), between(n / 2)}, // just outside
		{k(3), k(5)},                 // one region
		{k(n / 4), nil},
		{nil, k(n / 4)},
		{k(n), nil}, // past the last key
	} {
		for _, reverse := range []bool{false, true} {
			for _, limit := range []int{0, 10, parallelMinLimit} {
				out = append(out, storage.IterOptions{Lower: r.lower, Upper: r.upper, Reverse: reverse, Limit: limit})
			}
		}
	}
	return out
}

func TestParallelScan(t *testing.T) {
	const n = 2000
	keys, values, model := pods(n, smallValue)
	sample := make([][]byte, n)
	for i := range n {
		sample[i] = podKey(i)
	}
	rec := newRecorder()
	e := newMock(t, MockOptions{Regions: 8, Sample: sample, WrapClient: rec.wrap})
	load(t, e, keys, values, 500)
	tx := begin(t, e)
	defer tx.Rollback()
	for _, opts := range scanCases(n) {
		name := fmt.Sprintf("lower=%q/upper=%q/reverse=%v/limit=%d", opts.Lower, opts.Upper, opts.Reverse, opts.Limit)
		t.Run(name, func(t *testing.T) {
			if d := diff(collect(t, tx, opts), inRange(model, opts)); d != "" {
				t.Fatal(d)
			}
		})
	}
	t.Run("parallel is used for large scans over several regions", func(t *testing.T) {
		for _, c := range []struct {
			opts storage.IterOptions
			want bool
		}{
			{storage.IterOptions{}, true},
			{storage.IterOptions{Reverse: true}, true},
			{storage.IterOptions{Limit: parallelMinLimit}, true},
			{storage.IterOptions{Limit: 10}, false},
			{storage.IterOptions{Lower: keys[3], Upper: keys[5]}, false}, // one region
		} {
			it, err := tx.Iter(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			it.Next()
			if got := usesParallel(it); got != c.want {
				t.Errorf("%+v: parallel = %v; want %v", c.opts, got, c.want)
			}
			it.Close()
		}
	})
	if got := rec.scannedRegions(); got < 8 {
		t.Errorf("scans reached %d regions; want at least 8", got)
	}
}

func TestParallelScanManyRegions(t *testing.T) {
	const n = 600
	keys, values, model := pods(n, smallValue)
	var splits [][]byte
	for i := 3; i < n; i += 3 {
		splits = append(splits, keys[i])
	}
	for _, conc := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			rec := newRecorder()
			e := newMock(t, MockOptions{SplitKeys: splits, ScanConcurrency: conc, WrapClient: rec.wrap})
			load(t, e, keys, values, 1000)
			tx := begin(t, e)
			defer tx.Rollback()
			for _, reverse := range []bool{false, true} {
				opts := storage.IterOptions{Reverse: reverse}
				if d := diff(collect(t, tx, opts), inRange(model, opts)); d != "" {
					t.Fatalf("reverse=%v: %s", reverse, d)
				}
			}
			if got, want := rec.scannedRegions(), len(splits)+1; got != want {
				t.Errorf("scans reached %d regions; want %d", got, want)
			}
		})
	}
}

// TestParallelScanReadYourWrites merges the transaction's own writes into
// a parallel scan, including writes made while it runs.
func TestParallelScanReadYourWrites(t *testing.T) {
	const n = 800
	keys, values, model := pods(n, smallValue)
	e := newMock(t, MockOptions{Regions: 8, Sample: func() (s [][]byte) {
		for i := range n {
			s = append(s, podKey(i))
		}
		return s
	}()})
	load(t, e, keys, values, 1000)
	tx := begin(t, e)
	defer tx.Rollback()
	rnd := rand.New(rand.NewPCG(1, 2))
	want := map[string]string{}
	for _, p := range model {
		want[p.k] = p.v
	}
	for range 200 {
		i := rnd.IntN(n + 50)
		k := string(core.LatestKey(podKey(i)))
		switch rnd.IntN(3) {
		case 0:
			if err := tx.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		default:
			v := fmt.Sprintf("own%d", rnd.IntN(1000))
			if rnd.IntN(10) == 0 {
				v = "" // empty values are values
			}
			if err := tx.Set([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	wantRows := func() []row {
		var rows []row
		for k, v := range want {
			rows = append(rows, row{k, v})
		}
		slices.SortFunc(rows, func(a, b row) int { return bytes.Compare([]byte(a.k), []byte(b.k)) })
		return rows
	}
	for _, opts := range scanCases(n) {
		t.Run(fmt.Sprintf("lower=%q/upper=%q/reverse=%v/limit=%d", opts.Lower, opts.Upper, opts.Reverse, opts.Limit), func(t *testing.T) {
			if d := diff(collect(t, tx, opts), inRange(wantRows(), opts)); d != "" {
				t.Fatal(d)
			}
		})
	}

	for _, reverse := range []bool{false, true} {
		t.Run(fmt.Sprintf("writes during the scan/reverse=%v", reverse), func(t *testing.T) {
			it, err := tx.Iter(storage.IterOptions{Reverse: reverse})
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			rows := wantRows()
			if reverse {
				slices.Reverse(rows)
			}
			var got []row
			for i := 0; it.Next(); i++ {
				got = append(got, row{string(it.Key()), string(it.Value())})
				if i == 100 {
					if !usesParallel(it) {
						t.Error("not a parallel scan")
					}
					// Ahead: an insert, an overwrite and a delete show;
					// behind: an insert does not.
					ahead := func(j int) string { return rows[j].k }
					for _, w := range []struct {
						k, v string
						del  bool
					}{
						{ahead(300) + "\x00", "inserted", false},
						{ahead(400), "overwritten", false},
						{ahead(500), "", true},
						{rows[50].k + "\x00", "behind", false},
					} {
						if w.del {
							err = tx.Delete([]byte(w.k))
						} else {
							err = tx.Set([]byte(w.k), []byte(w.v))
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					next := slices.Clone(rows[:101])
					for _, r := range rows[101:] {
						switch r.k {
						case ahead(300):
							if reverse {
								next = append(next, row{r.k + "\x00", "inserted"}, r)
							} else {
								next = append(next, r, row{r.k + "\x00", "inserted"})
							}
						case ahead(400):
							next = append(next, row{r.k, "overwritten"})
						case ahead(500):
						default:
							next = append(next, r)
						}
					}
					rows = next
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			if d := diff(got, rows); d != "" {
				t.Fatal(d)
			}
			// Restore the model for the other direction.
			want = map[string]string{}
			for _, r := range collect(t, tx, storage.IterOptions{}) {
				want[r.k] = r.v
			}
		})
	}
}

// TestParallelScanRegionSplit splits and merges regions while a parallel
// scan runs on borders it looked up before.
func TestParallelScanRegionSplit(t *testing.T) {
	const n = 1000
	keys, values, model := pods(n, smallValue)
	var splits [][]byte
	for i := 100; i < n; i += 100 {
		splits = append(splits, keys[i])
	}
	for _, reverse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reverse=%v", reverse), func(t *testing.T) {
			e := newMock(t, MockOptions{SplitKeys: splits, ScanConcurrency: 2})
			load(t, e, keys, values, 1000)
			cluster := e.c.mock.cluster
			locate := func(k []byte) *kvstore.KeyLocation {
				loc, err := e.c.store.GetRegionCache().LocateKey(kvstore.NewBackofferWithVars(context.Background(), 1000, nil), k)
				if err != nil {
					t.Fatal(err)
				}
				return loc
			}
			tx := begin(t, e)
			defer tx.Rollback()
			it, err := tx.Iter(storage.IterOptions{Reverse: reverse})
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			var got []row
			for it.Next() {
				got = append(got, row{string(it.Key()), string(it.Value())})
				if len(got) == 1 {
					// Split the regions of keys 550 and 250, merge 700's
					// with the next.
					for _, i := range []int{550, 250} {
						id := locate(keys[i]).Region.GetID()
						ids := cluster.AllocIDs(2)
						cluster.Split(id, ids[0], keys[i], []uint64{ids[1]}, ids[1])
					}
					cluster.Merge(locate(keys[700]).Region.GetID(), locate(keys[800]).Region.GetID())
					if n := regionCount(e); n != len(splits)+1+2-1 {
						t.Fatalf("%d regions after the changes", n)
					}
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			opts := storage.IterOptions{Reverse: reverse}
			if d := diff(got, inRange(model, opts)); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// TestScanAboveReverseTop covers keys above the stand-in for a missing
// upper bound of reverse scans.
func TestScanAboveReverseTop(t *testing.T) {
	top := string(reverseTop)
	model := []row{{"a", "1"}, {top[:31], "2"}, {top, "3"}, {top + "\x00", "4"}, {top + "\xff\xff", "5"}}
	for _, regions := range [][][]byte{nil, {[]byte("b"), reverseTop, []byte(top + "\x01")}} {
		e := newMock(t, MockOptions{SplitKeys: regions})
		var keys, values [][]byte
		for _, p := range model {
			keys, values = append(keys, []byte(p.k)), append(values, []byte(p.v))
		}
		load(t, e, keys, values, 10)
		tx := begin(t, e)
		for _, lower := range []string{"", "b", top, top + "\x01", top + "\xff\xff\x00"} {
			for _, limit := range []int{0, 1} {
				opts := storage.IterOptions{Lower: []byte(lower), Reverse: true, Limit: limit}
				if d := diff(collect(t, tx, opts), inRange(model, opts)); d != "" {
					t.Errorf("regions %q, lower %q, limit %d: %s", regions, lower, limit, d)
				}
			}
		}
		tx.Rollback()
	}
}

func TestScanStops(t *testing.T) {
	const n = 3000
	keys, values, _ := pods(n, smallValue)
	open := func(t *testing.T) (*Engine, storage.Txn, storage.Iterator) {
		e := newMock(t, MockOptions{Regions: 8, Sample: func() (s [][]byte) {
			for i := range n {
				s = append(s, podKey(i))
			}
			return s
		}()})
		load(t, e, keys, values, 1000)
		tx := begin(t, e)
		it, err := tx.Iter(storage.IterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if !it.Next() {
				t.Fatalf("Next: %v", it.Err())
			}
		}
		if !usesParallel(it) {
			t.Fatal("not a parallel scan")
		}
		return e, tx, it
	}
	t.Run("iterator closed early", func(t *testing.T) {
		e, tx, it := open(t)
		it.Close()
		if it.Next() || it.Err() != nil {
			t.Errorf("closed iterator: Next true or Err %v", it.Err())
		}
		tx.Rollback()
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("transaction ended", func(t *testing.T) {
		e, tx, it := open(t)
		tx.Rollback()
		if it.Next() || !errors.Is(it.Err(), storage.ErrClosed) {
			t.Errorf("after Rollback: Err %v; want ErrClosed", it.Err())
		}
		it.Close()
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("engine closed", func(t *testing.T) {
		e, tx, it := open(t)
		// Workers are blocked on the unread chunks; Close must stop them.
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if it.Next() || !errors.Is(it.Err(), storage.ErrClosed) {
			t.Errorf("after Close: Err %v; want ErrClosed", it.Err())
		}
		it.Close()
		tx.Rollback()
	})
}
