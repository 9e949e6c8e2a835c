package badger

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/axon-kv/axon/storage"
)

// tablesResident is the bytes of badger's table mappings in dir that
// are resident, from /proc/self/smaps.
func tablesResident(t *testing.T, dir string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	abs, _ := filepath.Abs(dir)
	var total int64
	table := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if _, _, path, ok := parseMapping([]byte(line)); ok || isAnonymousMapping(line) {
			table = filepath.Dir(path) == abs && filepath.Ext(path) == ".sst"
		} else if v, ok := strings.CutPrefix(line, "Rss:"); ok && table {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("smaps %q: %v", line, err)
			}
			total += kb << 10
		}
	}
	return total
}

// TestTablesArePagedOutOverTheBudget: once a scan has brought a table's
// pages in, a trimmer whose budget they exceed pages out its blocks but
// not its index, and one whose budget they fit leaves them; the data
// reads the same afterwards.
func TestTablesArePagedOutOverTheBudget(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir)
	value := make([]byte, 1024)
	const keys = 4096 // 4 MiB of incompressible values
	for i := 0; i < keys; i += 64 {
		var pairs [][]byte
		for j := i; j < i+64; j++ {
			rand.Read(value)
			pairs = append(pairs, fmt.Appendf(nil, "key-%06d", j), append([]byte(nil), value...))
		}
		set(t, e, pairs...)
	}
	// Close flushes the memtable into a table; the trimmer is tried by
	// hand on an engine without a budget, which runs none.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, dir)
	defer e.Close()
	if got := len(scanAll(t, e, storage.IterOptions{})); got != keys {
		t.Fatalf("scanned %d keys, want %d", got, keys)
	}
	before := tablesResident(t, dir)
	if before < keys*1024/2 {
		t.Fatalf("%d B of the tables resident after a scan of %d KiB", before, keys)
	}
	if n, err := newTableTrimmer(dir, 1<<50).trim(); err != nil || n != 0 {
		t.Errorf("a budget the tables fit: %d B paged out, err %v; want none", n, err)
	}
	n, err := newTableTrimmer(dir, 1).trim()
	if err != nil || n < before/2 {
		t.Fatalf("a budget of 1 B: %d B of mappings paged out, err %v; want most of the %d B resident", n, err, before)
	}
	after := tablesResident(t, dir)
	t.Logf("tables resident: %d B before, %d B after", before, after)
	if after > before/4 {
		t.Errorf("%d B of the tables still resident after paging out %d B", after, before)
	}
	if after == 0 {
		t.Errorf("nothing of the tables resident: their indexes were paged out too")
	}
	if got := len(scanAll(t, e, storage.IterOptions{})); got != keys {
		t.Fatalf("after paging out: scanned %d keys, want %d", got, keys)
	}
}
