package badger

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/axon-kv/axon/storage"
	"github.com/dgraph-io/badger/v4/table"
	"golang.org/x/sys/unix"
)

// tablesResident is the bytes of badger's table mappings in dir that
// are resident, from /proc/self/smaps.
func tablesResident(t testing.TB, dir string) int64 {
	t.Helper()
	return resident(t, dir, ".sst")
}

// resident is the bytes of the mappings of dir's files named *ext that
// are resident, from /proc/self/smaps.
func resident(t testing.TB, dir, ext string) int64 {
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
			table = filepath.Dir(path) == abs && filepath.Ext(path) == ext
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

// tableKeys is how many keys of 1 KiB scannedTables writes: 4 MiB of
// incompressible values.
const tableKeys = 4096

// scannedTables returns an engine (closed when the test ends) whose data
// is in tables, not memtables, and whose tables' pages a scan of every
// key has just brought in; the engine runs no trimmer of its own.
func scannedTables(t testing.TB) (*Engine, string) {
	t.Helper()
	dir := t.TempDir()
	e := openWith(t, dir, valuesInTheTables())
	value := make([]byte, 1024)
	for i := 0; i < tableKeys; i += 64 {
		var pairs [][]byte
		for j := i; j < i+64; j++ {
			rand.Read(value)
			pairs = append(pairs, fmt.Appendf(nil, "key-%06d", j), append([]byte(nil), value...))
		}
		set(t, e, pairs...)
	}
	// Close flushes the memtable into a table.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openWith(t, dir, valuesInTheTables())
	t.Cleanup(func() { e.Close() })
	if got := len(scanAll(t, e, storage.IterOptions{})); got != tableKeys {
		t.Fatalf("scanned %d keys, want %d", got, tableKeys)
	}
	return e, dir
}

// TestTablesArePagedOutOverTheBudget: once a scan has brought a table's
// pages in, a trimmer whose budget they exceed pages out its blocks but
// not its index, and one whose budget they fit leaves them; the data
// reads the same afterwards.
func TestTablesArePagedOutOverTheBudget(t *testing.T) {
	e, dir := scannedTables(t)
	before := tablesResident(t, dir)
	if before < tableKeys*1024/2 {
		t.Fatalf("%d B of the tables resident after a scan of %d KiB", before, tableKeys)
	}
	if n, err := newTableTrimmer(e.db, dir, 1<<50, &e.defragging).trim(); err != nil || n != 0 {
		t.Errorf("a budget the tables fit: %d B paged out, err %v; want none", n, err)
	}
	n, err := newTableTrimmer(e.db, dir, 1, &e.defragging).trim()
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
	if got := len(scanAll(t, e, storage.IterOptions{})); got != tableKeys {
		t.Fatalf("after paging out: scanned %d keys, want %d", got, tableKeys)
	}
}

// BenchmarkTrim reads back every key of scannedTables' 4 MiB of tables
// once their pages are in, as badger leaves them ("badger": the kernel
// takes the pages out of the resident set only when memory runs short)
// and after the trimmer pages their blocks out ("trimmed"). An operation
// is a trim and the reads that follow, whose pages come back from the
// page cache; resident-KiB is what the tables keep resident before the
// reads.
func BenchmarkTrim(b *testing.B) {
	for _, trimmed := range []bool{false, true} {
		name := "badger"
		if trimmed {
			name = "trimmed"
		}
		b.Run(name, func(b *testing.B) {
			e, dir := scannedTables(b)
			tr := newTableTrimmer(e.db, dir, 1, &e.defragging)
			var resident, n int64
			for b.Loop() {
				if trimmed {
					if _, err := tr.trim(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				resident += tablesResident(b, dir)
				n++
				b.StartTimer()
				for i := range tableKeys {
					if _, err := read(e, fmt.Appendf(nil, "key-%06d", i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(resident)/float64(n)/1024, "resident-KiB")
		})
	}
}

// TestValueLogIsPagedOutOverTheBudget: with values in the value log, the
// log files' mapped pages leave the resident set over the budget too,
// but only files badger had stopped writing at the trimmer's previous
// look; the values read the same afterwards.
func TestValueLogIsPagedOutOverTheBudget(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir)
	values := make([][]byte, tableKeys)
	for i := range values {
		values[i] = make([]byte, 1024)
		rand.Read(values[i])
		set(t, e, fmt.Appendf(nil, "key-%06d", i), values[i])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, dir) // writes a new log file: the first is done
	defer e.Close()
	readAll := func() {
		for i, v := range values {
			if got, err := read(e, fmt.Appendf(nil, "key-%06d", i)); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("key %d: %d bytes, %v", i, len(got), err)
			}
		}
	}
	readAll()
	before := resident(t, dir, ".vlog")
	if before < tableKeys*1024/2 {
		t.Fatalf("%d B of the value log resident after a scan of %d KiB", before, tableKeys)
	}
	tr := newTableTrimmer(e.db, dir, 1, &e.defragging)
	if _, err := tr.trim(); err != nil {
		t.Fatal(err)
	}
	if got := resident(t, dir, ".vlog"); got < before*3/4 {
		t.Fatalf("the first look paged out the value log (%d of %d B resident): it cannot know which file badger is done with", got, before)
	}
	e.defragging.Lock()
	if _, err := tr.trim(); err != nil {
		t.Fatal(err)
	}
	if got := resident(t, dir, ".vlog"); got < before*3/4 {
		t.Fatalf("paged out the value log while it was being collected (%d of %d B resident)", got, before)
	}
	e.defragging.Unlock()
	if _, err := tr.trim(); err != nil {
		t.Fatal(err)
	}
	after := resident(t, dir, ".vlog")
	t.Logf("value log resident: %d B before, %d B after", before, after)
	if after > before/4 {
		t.Errorf("%d B of the value log still resident, of %d", after, before)
	}
	readAll()
}

// tablesCached is the bytes of the table files in dir that are in the
// kernel's page cache, whoever maps them (mincore on a mapping of our
// own).
func tablesCached(t *testing.T, dir string) int64 {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	return cached(t, paths...)
}

// cached is the bytes of the files at paths that are in the page cache.
func cached(t *testing.T, paths ...string) int64 {
	t.Helper()
	var cached int64
	page := os.Getpagesize()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil || fi.Size() == 0 {
			f.Close()
			continue
		}
		m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		vec := make([]byte, (len(m)+page-1)/page)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		for _, v := range vec {
			if v&1 != 0 {
				cached += int64(page)
			}
		}
		if err := unix.Munmap(m); err != nil {
			t.Fatal(err)
		}
	}
	return cached
}

// TestOldValuesLeaveThePageCache: once the value log outgrows what the
// page cache keeps beside the tables, the trimmer drops the pages of the
// log's older files from the page cache, keeps the newest files'
// cached, leaves the file badger writes alone, and the values read the
// same afterwards.
func TestOldValuesLeaveThePageCache(t *testing.T) {
	dir := t.TempDir()
	const files = 3 // each close and open starts a new log file
	values := make([][]byte, files*tableKeys/2)
	for f := range files {
		e := open(t, dir)
		for i := f * tableKeys / 2; i < (f+1)*tableKeys/2; i++ {
			values[i] = make([]byte, 1024)
			rand.Read(values[i])
			set(t, e, fmt.Appendf(nil, "key-%06d", i), values[i])
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	e := open(t, dir)
	defer e.Close()
	readAll := func() {
		t.Helper()
		for i, v := range values {
			if got, err := read(e, fmt.Appendf(nil, "key-%06d", i)); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("key %d: %d bytes, %v", i, len(got), err)
			}
		}
	}
	readAll()
	logs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil || len(logs) != files+1 {
		t.Fatalf("value log files %v (%v), want %d", logs, err, files+1)
	}
	slices.Sort(logs) // zero-padded ids: the oldest first
	var before []int64
	for _, l := range logs {
		before = append(before, cached(t, l))
	}
	if before[0] < tableKeys/2*1024/2 {
		t.Fatalf("the oldest log file has %d B cached after reading it", before[0])
	}

	tr := newTableTrimmer(e.db, dir, 8<<20, &e.defragging)
	tr.memory = 0 // unknown: nothing is dropped
	if n, err := tr.dropOldValues(0, selfMaps); err != nil || n != 0 {
		t.Fatalf("with the memory unknown: dropped %d files, %v", n, err)
	}
	tr.memory = 1 << 50 // room for everything
	if n, err := tr.dropOldValues(0, selfMaps); err != nil || n != 0 {
		t.Fatalf("with room to spare: dropped %d files, %v", n, err)
	}
	// Memory for nothing but the least share: one file kept. The first
	// look only learns which files badger is done with.
	tr.memory = 1
	for look, want := range []int{0, files - 1} {
		if n, err := tr.dropOldValues(0, selfMaps); err != nil || n != want {
			t.Fatalf("look %d: dropped %d files, %v; want %d", look+1, n, err, want)
		}
	}
	e.defragging.Lock()
	if n, err := tr.dropOldValues(0, selfMaps); err != nil || n != 0 {
		t.Fatalf("while the log is collected: dropped %d files, %v", n, err)
	}
	e.defragging.Unlock()
	for i, l := range logs {
		got := cached(t, l)
		t.Logf("%s: %d B cached, was %d", filepath.Base(l), got, before[i])
		switch {
		case i < files-1 && got > before[i]/4:
			t.Errorf("%s: %d B still cached of %d", filepath.Base(l), got, before[i])
		case i >= files-1 && got < before[i]*3/4:
			t.Errorf("%s (newest or written): %d B left cached of %d", filepath.Base(l), got, before[i])
		}
	}
	readAll()
}

// TestTrimmedTablesStayInThePageCache: trimming takes the tables' pages
// out of the process's resident set, not out of the page cache, so a read
// after it costs no disk read while the machine has memory to spare.
func TestTrimmedTablesStayInThePageCache(t *testing.T) {
	e, dir := scannedTables(t)
	before, cached := tablesResident(t, dir), tablesCached(t, dir)
	if n, err := newTableTrimmer(e.db, dir, 1, &e.defragging).trim(); err != nil || n < before/2 {
		t.Fatalf("a budget of 1 B: %d B advised, err %v; want most of the %d B resident", n, err, before)
	}
	after, still := tablesResident(t, dir), tablesCached(t, dir)
	t.Logf("resident %d → %d B, in the page cache %d → %d B", before, after, cached, still)
	if after > before/4 {
		t.Errorf("%d B of the tables still resident, of %d", after, before)
	}
	if still < cached*3/4 {
		t.Errorf("%d B of the tables left in the page cache, of %d: trimming dropped them", still, cached)
	}
}

// TestPinnedTablesOutliveTheirReplacement: the trimmer advises a table's
// mapping only while it holds the table; a table badger drops meanwhile
// stays mapped, at the address the trimmer read, until it lets go.
func TestPinnedTablesOutliveTheirReplacement(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir)
	for i := 0; i < 256; i++ {
		set(t, e, fmt.Appendf(nil, "key-%04d", i), make([]byte, 512))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, dir)
	defer e.Close()
	tr := newTableTrimmer(e.db, dir, 1, &e.defragging)
	pinned, release := tr.pin()
	if len(pinned) == 0 || len(pinned) != len(e.db.Tables()) {
		t.Fatalf("pinned %d tables, badger has %d", len(pinned), len(e.db.Tables()))
	}
	mapped := func() map[uint64]bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		ids := map[uint64]bool{}
		abs, _ := filepath.Abs(dir)
		for line := range strings.SplitSeq(string(b), "\n") {
			if _, _, path, ok := parseMapping([]byte(line)); ok && filepath.Dir(path) == abs {
				if id, ok := table.ParseFileID(path); ok {
					ids[id] = true
				}
			}
		}
		return ids
	}
	if err := e.db.DropAll(); err != nil {
		t.Fatal(err)
	}
	if len(e.db.Tables()) != 0 {
		t.Fatalf("%d tables left after DropAll", len(e.db.Tables()))
	}
	now := mapped()
	for id := range pinned {
		if !now[id] {
			t.Errorf("table %d unmapped while pinned", id)
		}
	}
	release()
	now = mapped()
	for id := range pinned {
		if now[id] {
			t.Errorf("table %d still mapped after release", id)
		}
	}
}

// TestValuesKept: the log's older files are dropped only once the log is
// more than twice what memory leaves beside the process and the tables,
// and then a quarter of that is kept (at least the budget's share).
func TestValuesKept(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name                     string
		memory, anon, tables, lg int64
		keep                     int64
		drop                     bool
	}{
		{"3M keys in 4 GiB", 4 * gib, gib / 2, gib / 2, 3 * gib, 3 * gib / 4, false},
		{"10M keys in 4 GiB", 4 * gib, gib, 3 * gib / 2, 10 * gib, 3 * gib / 8, true},
		{"no room beside the tables", gib, gib / 2, gib, 64 << 20, 3 * gib / 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &tableTrimmer{memory: tc.memory, budget: 3 * gib}
			if keep, drop := tr.valuesKept(tc.anon, tc.tables, tc.lg); keep != tc.keep || drop != tc.drop {
				t.Fatalf("valuesKept = %d, %v; want %d, %v", keep, drop, tc.keep, tc.drop)
			}
		})
	}
}
