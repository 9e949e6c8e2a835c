package badger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bdb "github.com/dgraph-io/badger/v4"
)

// TestNextCollectedIsBadgersPick: the file nextCollected guesses is the
// one badger's collection then removes, each time, and it guesses none
// once badger declines. The values written fill several log files, and
// all but a few are overwritten, so each file is mostly garbage, some
// files more than others.
func TestNextCollectedIsBadgersPick(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir)
	defer e.Close()
	e.defragging.Lock() // the engine's own collection stays out of the way
	defer e.defragging.Unlock()
	value := make([]byte, 64<<10)
	const keys = 900 // 56 MiB: four log files of 16 MiB
	for i := range keys {
		value[0] = byte(i)
		set(t, e, fmt.Appendf(nil, "k%04d", i), value)
	}
	for i := range keys {
		if i%(7+i/300) == 0 {
			continue // kept: later files keep fewer
		}
		value[0] = byte(i + 1)
		set(t, e, fmt.Appendf(nil, "k%04d", i), value[:10]) // in the tables
	}
	// As Defrag does, short of the collection: the memtables flushed and
	// level 0 compacted, the overwritten values' garbage is counted.
	if err := e.flushAlone(t.Context()); err != nil {
		t.Fatal(err)
	}

	collected := 0
	for {
		path, _, ok := nextCollected(dir, collectRatio)
		before := logFiles(t, dir)
		err := e.db.RunValueLogGC(collectRatio)
		gone := slices.DeleteFunc(before, func(p string) bool { return slices.Contains(logFiles(t, dir), p) })
		if errors.Is(err, bdb.ErrNoRewrite) {
			if ok {
				t.Errorf("guessed %s, but badger collected nothing", filepath.Base(path))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		collected++
		if !ok || len(gone) != 1 || gone[0] != path {
			t.Fatalf("collection %d: guessed %q (%v), badger removed %q", collected, path, ok, gone)
		}
	}
	if collected < 3 {
		t.Errorf("badger collected %d files, want at least 3 to hold the guess to", collected)
	}
}

func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNextCollectedReadsTheDiscardFile: the guess follows badger's rules
// on a hand-made record: most garbage first, the lowest id of a tie, a
// removed file skipped, and nothing under the ratio.
func TestNextCollectedReadsTheDiscardFile(t *testing.T) {
	dir := t.TempDir()
	for fid, size := range map[int]int{1: 1000, 2: 1000, 3: 1000, 5: 1000} {
		if err := os.WriteFile(logPath(dir, uint64(fid)), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	record := func(slots ...uint64) {
		t.Helper()
		b := make([]byte, 0, 8*len(slots)+16)
		for _, v := range slots {
			b = binary.BigEndian.AppendUint64(b, v)
		}
		b = append(b, make([]byte, 64)...) // the zero slot, then unused space
		b = binary.BigEndian.AppendUint64(b, 5)
		b = binary.BigEndian.AppendUint64(b, 1<<20) // past the end: ignored
		if err := os.WriteFile(filepath.Join(dir, discardFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		slots []uint64
		want  int // 0: none
	}{
		{"most garbage", []uint64{1, 600, 2, 900, 3, 700}, 2},
		{"a tie takes the lowest id", []uint64{1, 600, 2, 800, 3, 800}, 2},
		{"a removed file is skipped", []uint64{1, 600, 3, 700, 4, 990}, 3},
		{"under the ratio", []uint64{1, 400, 2, 300}, 0},
		{"the most under the ratio, though another is over", []uint64{1, 499, 4, 2000}, 0},
		{"no garbage", []uint64{1, 0}, 0},
		{"empty", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			record(tc.slots...)
			path, size, ok := nextCollected(dir, collectRatio)
			want := ""
			if tc.want != 0 {
				want = logPath(dir, uint64(tc.want))
			}
			if path != want || ok != (tc.want != 0) || (ok && size != 1000) {
				t.Errorf("nextCollected = %q, %d, %v; want %q", path, size, ok, want)
			}
		})
	}
	if err := os.Remove(filepath.Join(dir, discardFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := nextCollected(dir, collectRatio); ok {
		t.Error("a guess without a discard file")
	}
}
