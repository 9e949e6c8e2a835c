package badger

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	bdb "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/prometheus/procfs"

	"github.com/axon-kv/axon/internal/memlimit"
	"golang.org/x/sys/unix"
)

// tableTrimmer keeps the pages of badger's memory-mapped tables and value
// log files that the process holds resident within its memory budget.
//
// Badger maps every table and reads its index, its bloom filter and its
// blocks through the mapping, and writes new tables through one; the
// pages stay in the process's resident set until the kernel needs them,
// so the resident set grows with the data (all of it after a load or a
// compaction) whatever the budget. Above its share the trimmer advises
// the tables' mappings MADV_DONTNEED: the pages leave the process's
// resident set but stay in the kernel's page cache, which gives them back
// on the next read without a disk read while the machine has memory to
// spare, and reclaims them first when it has not (in a memory cgroup at
// its limit, too). MADV_PAGEOUT would drop them from the page cache as
// well, so that every read of a table past the budget went to the disk:
// a point get at 10 million keys took 12 times as long as at 100,000.
// Kept for BenchmarkTrim, which reads tables back with and without it.
//
// MADV_DONTNEED zeroes an anonymous mapping, and badger unmaps a table
// when a compaction has replaced it, after which the address may be
// reused: a table is advised only while pinned (see pin), so that its
// mapping is still the one /proc/self/maps showed.
//
// The value log's files are mapped too, and every value written passes
// through the mapping of the file being written, so with values in the
// log its pages outgrow the tables'. A log file's mapping changes twice:
// when badger stops writing it (truncated and mapped again), and when a
// collection deletes it. So a file is advised only once badger writes a
// later one, seen in an earlier look (doneBelow), and only while no
// collection runs (collecting) and the pin's iterator holds, which makes
// badger defer a deletion to the last iterator's close.
type tableTrimmer struct {
	db     *bdb.DB
	dir    string
	budget int64
	// blocks is blocksLen of each table advised, by id: a table's file
	// never changes, and reading thousands of footers every second would.
	blocks map[uint64]int64
	// collecting is held while the value log is collected.
	collecting *sync.Mutex
	// doneBelow is the highest value log file an earlier look saw:
	// badger no longer writes, nor maps again, any file below it. (Not
	// the file itself, which badger may still write, and map again when
	// it moves to the next.)
	doneBelow uint32
	// memory is what the process may hold, its page cache included (its
	// cgroup's limit, else the machine's memory; 0: unknown, and no
	// value is dropped from the page cache).
	memory int64
}

func newTableTrimmer(db *bdb.DB, dir string, budget int64, collecting *sync.Mutex) *tableTrimmer {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	memory, _ := memlimit.Memory()
	return &tableTrimmer{db: db, dir: filepath.Clean(abs), budget: budget, blocks: map[uint64]int64{}, collecting: collecting, memory: memory}
}

// tablesShare is the least of the budget the tables' mapped pages may
// keep: what the process's own memory leaves of the budget, but at least
// this share, so that a process at its budget does not lose its tables'
// hot pages (indexes, bloom filters) every time it looks.
const tablesShare = 8

// trim drops the tables' blocks from the resident set if their mapped
// pages exceed their share; it reports the bytes of table mappings
// advised (0: under the share). Indexes stay: every lookup reads them, as
// does a restart.
func (t *tableTrimmer) trim() (int64, error) {
	anon, file, err := rssParts()
	if err != nil {
		return 0, err
	}
	// One read of the mappings a look, whichever part needs them first.
	maps := sync.OnceValues(selfMaps)
	if _, err := t.dropOldValues(anon, maps); err != nil {
		return 0, err
	}
	if file <= max(t.budget-anon, t.budget/tablesShare) {
		return 0, nil
	}
	pinned, release := t.pin()
	defer release()
	logs := t.collecting.TryLock() // else a collection may unmap a file
	if logs {
		defer t.collecting.Unlock()
	}
	all, err := maps()
	if err != nil {
		return 0, fmt.Errorf("badger: trim tables: %w", err)
	}
	var n int64
	high := t.doneBelow
	for _, m := range all {
		path := m.Pathname
		if filepath.Dir(path) != t.dir {
			continue
		}
		start, end := uint64(m.StartAddr), uint64(m.EndAddr)
		if fid, ok := logID(path); ok {
			high = max(high, fid)
			if !logs || fid >= t.doneBelow {
				continue
			}
			if err := madvise(start, uintptr(end-start), unix.MADV_DONTNEED); err != nil {
				return n, fmt.Errorf("badger: trim %s: %w", path, err)
			}
			n += int64(end - start)
			continue
		}
		if filepath.Ext(path) != ".sst" {
			continue
		}
		id, ok := table.ParseFileID(path)
		if !ok || !pinned[id] {
			continue // being written, or replaced: its mapping may go
		}
		blocks, known := t.blocks[id]
		if !known {
			if blocks = blocksLen(path); blocks > 0 { // 0: unreadable, or too small: look again
				t.blocks[id] = blocks
			}
		}
		if blocks <= 0 {
			continue // gone meanwhile, or too small to bother
		}
		length := min(uintptr(blocks)&^uintptr(os.Getpagesize()-1), uintptr(end-start))
		if err := madvise(start, length, unix.MADV_DONTNEED); err != nil {
			return n, fmt.Errorf("badger: trim %s: %w", path, err)
		}
		n += int64(length)
	}
	t.doneBelow = high
	for id := range t.blocks {
		if !pinned[id] {
			delete(t.blocks, id) // replaced: its id never comes back
		}
	}
	return n, nil
}

// logID is the file id of a value log file's path.
func logID(path string) (uint32, bool) {
	if filepath.Ext(path) != ".vlog" {
		return 0, false
	}
	fid, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".vlog"), 10, 32)
	return uint32(fid), err == nil
}

// The value log's pages and the tables' share the page cache. A get
// reads its key's records from the tables and its value from the log,
// and over more values than memory holds each get reads a value no
// other get reads soon, pushing out table pages that every get reads: at
// 10 million keys of 1 KiB in a 4 GiB cgroup a get read 19.6 KB from the
// disk, five pages, four of them the tables'. So once the log outgrows
// what the page cache keeps beside the process and the tables, the
// trimmer drops its older files' pages from the page cache
// (POSIX_FADV_DONTNEED) each time it looks, keeping the newest part of
// the log, where recent writes are read back (a watcher's previous
// values among them).

// valuesKept is how much of the newest value log stays in the page
// cache, and whether the rest is dropped: room is what the process's
// memory leaves beside its own pages and the tables. While the log is no
// more than twice that, the kernel keeps most of it and the tables too
// (a get at 3 million keys in a 4 GiB cgroup read 39–81 bytes from the
// disk). Past that a quarter of room is kept: the rest goes to the
// tables, to the files badger writes and compacts, and to the values
// read since the last look.
func (t *tableTrimmer) valuesKept(anon, tables, log int64) (keep int64, drop bool) {
	room := t.memory - anon - tables
	return max(room/4, t.budget/tablesShare), log > 2*room
}

// dropOldValues drops from the page cache the pages of the value log's
// files beyond valuesKept, newest first, and reports how many files it
// dropped; only files badger has stopped writing, and not while the log
// is collected (which deletes files).
func (t *tableTrimmer) dropOldValues(anon int64, maps func() ([]*procfs.ProcMap, error)) (int, error) {
	if t.memory <= 0 {
		return 0, nil
	}
	tables, log := t.db.Size()
	keep, drop := t.valuesKept(anon, tables, log)
	if !drop || !t.collecting.TryLock() {
		return 0, nil
	}
	defer t.collecting.Unlock()
	all, err := maps()
	if err != nil {
		return 0, fmt.Errorf("badger: drop old values: %w", err)
	}
	type logMap struct {
		fid        uint32
		start, end uint64
		path       string
	}
	var logs []logMap
	high := t.doneBelow
	for _, m := range all {
		if filepath.Dir(m.Pathname) != t.dir {
			continue
		}
		fid, ok := logID(m.Pathname)
		if !ok {
			continue
		}
		high = max(high, fid)
		if fid < t.doneBelow {
			logs = append(logs, logMap{fid, uint64(m.StartAddr), uint64(m.EndAddr), m.Pathname})
		}
	}
	t.doneBelow = high
	slices.SortFunc(logs, func(a, b logMap) int { return cmp.Compare(b.fid, a.fid) })
	var kept int64
	dropped := 0
	for _, l := range logs {
		if kept < keep {
			kept += int64(l.end - l.start)
			continue
		}
		gone, err := dropCached(l.start, l.end, l.path)
		if err != nil {
			return dropped, fmt.Errorf("badger: drop old values of %s: %w", l.path, err)
		}
		if !gone {
			dropped++
		}
	}
	return dropped, nil
}

// dropCached drops a file's pages from the process (its mapping at
// [start, end)) and from the page cache; gone reports a file already
// removed, which has nothing to drop.
func dropCached(start, end uint64, path string) (gone bool, err error) {
	// Mapped pages stay cached: unmap them from the process first.
	if err := madvise(start, uintptr(end-start), unix.MADV_DONTNEED); err != nil {
		return false, err
	}
	return adviseFile(path, 0, unix.FADV_DONTNEED)
}

// pin keeps every table badger holds in its levels mapped until release,
// and returns their file ids. An iterator references each table of every
// level (badger unmaps a table only once the last reference goes), and a
// table listed both before and after the iterator was made was in the
// levels all along, since badger never puts back a table it took out: so
// the iterator holds it.
func (t *tableTrimmer) pin() (map[uint64]bool, func()) {
	before := t.db.Tables()
	tx := t.db.NewTransactionAt(math.MaxUint64, false)
	it := tx.NewIterator(bdb.IteratorOptions{}) // no prefix: every table
	listed := make(map[uint64]bool, len(before))
	for _, ti := range before {
		listed[ti.ID] = true
	}
	pinned := make(map[uint64]bool, len(before))
	for _, ti := range t.db.Tables() {
		if listed[ti.ID] {
			pinned[ti.ID] = true
		}
	}
	return pinned, func() {
		it.Close()
		tx.Discard()
	}
}

// tailKept is what trim leaves resident of a table before its index:
// its last block (4 KiB before compression), which opening the table
// reads for its largest key. Small: it is kept for every table (2,084
// of them at 3 million keys).
const tailKept = 8 << 10

// blocksLen is the length of the table file's leading part that trim
// pages out: all but its index (block offsets and bloom filter, read by
// every lookup and by a restart's opening of the table), its footer and
// tailKept; 0 if the file cannot be read. A table ends with its index,
// the index's length (4 bytes), a checksum and the checksum's length (4
// bytes); read from the file, not the mapping, which badger may unmap.
func blocksLen(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	size := fi.Size()
	var b [4]byte
	if size < 8 {
		return 0
	}
	if _, err := f.ReadAt(b[:], size-4); err != nil {
		return 0
	}
	sumLen := int64(binary.BigEndian.Uint32(b[:]))
	if size-8-sumLen < 0 {
		return 0
	}
	if _, err := f.ReadAt(b[:], size-8-sumLen); err != nil {
		return 0
	}
	indexLen := int64(binary.BigEndian.Uint32(b[:]))
	return max(size-8-sumLen-indexLen-tailKept, 0)
}

// madvise advises the length bytes mapped at start.
func madvise(start uint64, length uintptr, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), length, uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

// rssParts reads the process's anonymous and file-backed resident bytes
// from /proc/self/status.
func rssParts() (anon, file int64, err error) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0, fmt.Errorf("badger: read status: %w", err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, fmt.Errorf("badger: read status: %w", err)
	}
	if st.RssAnon == 0 && st.RssFile == 0 {
		return 0, 0, errors.New("badger: status lacks RssAnon and RssFile")
	}
	return int64(st.RssAnon), int64(st.RssFile), nil
}
