package badger

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bdb "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/axon-kv/axon/internal/fsutil"
	"github.com/axon-kv/axon/storage"
)

// Options configure Open.
type Options struct {
	// Logger receives badger's warnings and errors (its info and debug
	// messages are dropped). Nil means slog.Default().
	Logger *slog.Logger
	// PruneEvery is how many commit groups pass between prunes of the
	// conflict state (default 256). Tests set 1 to prune after every group.
	PruneEvery int
	// MemoryBudget sizes badger's memtables and, for compressed tables,
	// its block cache (sizesFor), and bounds the tables' pages the
	// process keeps mapped (tableTrimmer). 0 keeps the defaults below (64
	// MiB memtables, about 500 MiB under a steady write load) and maps
	// tables freely.
	MemoryBudget int64
	// ProbeEvery is how often the engine checks, while idle, that its data
	// directory still takes writes (default DefaultProbeEvery). Commits
	// check the directory themselves.
	ProbeEvery time.Duration
	// CloseTimeout bounds Close (default DefaultCloseTimeout).
	CloseTimeout time.Duration
	// Compression compresses the blocks of the tables written from now
	// on (ParseCompression). Each table keeps the kind it was written
	// with, so a store may be reopened with another. The zero value keeps
	// the store's own (CompressionAsStored).
	Compression Compression
	// ValueThreshold is the size above which a record written from now
	// on keeps its value in badger's value log, the tables holding a
	// pointer. 0 picks by the tables' compression: DefaultValueThreshold
	// for uncompressed tables, MaxValueThreshold (every value in the
	// tables) for compressed ones, whose values the log would store
	// uncompressed.
	ValueThreshold int64
}

// DefaultValueThreshold keeps Kubernetes objects out of the tables. A
// key's latest record and a revision's record are a few dozen bytes; a
// history record holds the value. With values in the tables every
// object is rewritten by each level's compaction, and the point reads a
// write makes walk tables full of values: under churn in a 1 GiB cgroup,
// writing compacted tables took 27 % of the server's CPU, and with the
// values in the log the churn wrote 1.2–1.4× as much at a third of the
// p99 (BENCHMARKS.md, "Data beyond memory"). In the log a value is
// written once, appended, and collected (gcLoop) once its version is
// swept.
const DefaultValueThreshold = 256

// MaxValueThreshold is badger's largest: every value stays in the
// tables, where compression reaches it.
const MaxValueThreshold = 1 << 20

// valueThreshold is the threshold opts asks for, given the compression
// the tables are written with.
func valueThreshold(asked int64, c options.CompressionType) int64 {
	switch {
	case asked > 0:
		return min(asked, MaxValueThreshold)
	case c == options.None:
		return DefaultValueThreshold
	}
	return MaxValueThreshold
}

// valueLogFile is the size of a value log file: the unit the log is
// collected in. Small with values in the log (a defragmentation of a
// 60 MiB store gave back nothing with 64 MiB files, all but 10 MiB with
// 16 MiB: the file being written is never collected).
func valueLogFile(threshold int64) int64 {
	if threshold < MaxValueThreshold {
		return 16 << 20
	}
	return 64 << 20
}

// sizes are badger's memory settings.
type sizes struct {
	memTable, blockCache, indexCache int64
	// l0Stall is how many level-0 tables make flushes, then writes, wait.
	l0Stall int
}

// Level-0 tables at which writes wait: badger's default, and the fewest
// that leave a flush room while compaction moves level 0 down.
const (
	maxL0Stall = 15
	minL0Stall = 4
)

// minMemTable is the smallest memtable badger accepts with its 1 MiB
// value threshold (a batch may take 15 % of a memtable).
const minMemTable = 8 << 20

// sizesFor divides a budget. A memtable's flush builds its level-0 table
// in up to eight times the memtable (the blocks raw and, if compressed,
// compressed, each with slack, in buffers that double), and badger pools
// up to eight such builders, so memtables take 1/64 of the budget: three
// of them and a flush about a sixth. The block cache, which only
// compressed tables use, takes 1/8. The index cache stays empty: badger
// reads unencrypted tables' indexes through their mapping
// (tableTrimmer bounds those pages). Level 0 holds at most 1/16 of the
// budget (at least minL0Stall tables): while compaction moves level 0
// down, badger merges four or more of its tables into one, a table of
// all of them built in eight times its size (tables of 150 MB, builders
// of 2 GiB at 6 million keys under a 2 GiB budget, with badger's 15).
// 0 means the defaults.
func sizesFor(budget int64) sizes {
	if budget <= 0 {
		return sizes{memTable: 64 << 20, blockCache: 32 << 20, indexCache: 16 << 20, l0Stall: maxL0Stall}
	}
	mt := min(max(budget/64, minMemTable), 64<<20)
	return sizes{
		memTable:   mt,
		blockCache: max(budget/8, 1<<20),
		l0Stall:    int(min(max(budget/16/mt, minL0Stall), maxL0Stall)),
	}
}

// Engine is a badger database used as a storage.Engine.
//
// Badger syncs its log once per commit request, so concurrent commits
// would pay one fsync each. The engine therefore runs badger in managed
// mode and commits itself: transactions buffer their writes, a single
// committer checks each against the writes committed since its snapshot
// (first committer wins, as before) and writes every transaction that
// queued meanwhile as one badger request at one timestamp — one fsync for
// the group, and no acknowledgement before it. Kept over badger's own
// transactions for BenchmarkGroupCommit, which runs 64 writers through
// both.
type Engine struct {
	db *bdb.DB
	// mu guards closed. Every operation holds it for reading while it uses
	// db, so Close waits for operations in flight, commits included.
	mu     sync.RWMutex
	closed bool
	// closing is closed once Close's work is done; closeErr is its error.
	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error

	// dir is the data directory; guard watches it and failure, once
	// set, is why the engine takes no more writes (ErrFailed).
	dir          string
	guard        *dirGuard
	failure      atomic.Pointer[error]
	probeEvery   time.Duration
	closeTimeout time.Duration
	watched      chan struct{}
	// trimmer keeps the tables' mapped pages within the memory budget
	// (nil without one); trimmed is closed once its loop is done.
	trimmer *tableTrimmer
	trimmed chan struct{}
	// collected is closed when gcLoop has stopped.
	collected chan struct{}
	// memTable is badger's memtable size (Defrag asks whether writes fill one soon).
	memTable int64
	// defragging lets one Defrag run at a time; gcLoop's collections and
	// the trimmer's paging of the value log take it too (a collection
	// unmaps the files it deletes).
	defragging sync.Mutex
	// rate counts the bytes of keys and values committed, for Defrag to
	// tell whether writes will soon flush the memtables.
	rate writeRate

	queue chan *commitReq
	// alone runs a function in the commit loop, between groups.
	alone chan func()
	stop  chan struct{}
	done  chan struct{}

	// cmu guards the clock and the conflict state.
	cmu sync.Mutex
	// ts is the timestamp of the last committed group: snapshots read at
	// it and see every group up to it.
	ts uint64
	// active counts open transactions by snapshot timestamp; the oldest
	// bounds which writes can still conflict and which versions badger
	// may drop.
	active map[uint64]int
	// written maps a key to the timestamp of its last committed write,
	// for keys written after the oldest open snapshot.
	written    map[string]uint64
	groups     int
	pruneEvery int

	// advisor advises badger's new log mappings every adviseEvery groups
	// (commit loop only).
	advisor *logAdvisor
	log     *slog.Logger

	// observers are the metrics' (observe.go).
	observers struct {
		commits storage.Observers[func(time.Duration)]
		syncs   storage.Observers[func(time.Duration, int)]
	}
	inUse inUseCache
}

// adviseEvery is how many commit groups pass between looks for new log
// mappings: a memtable's log takes tens of MiB, so few of its bytes are
// written before it is advised.
const adviseEvery = 64

// commitReq is one transaction handed to the committer.
type commitReq struct {
	readTs uint64
	writes map[string]pending
	err    chan error
}

// notFoundError is Get's answer for a missing key. Its message is built
// only if someone reads it.
type notFoundError struct{ key string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("badger: get %q: %v", e.key, storage.ErrNotFound)
}

func (e *notFoundError) Unwrap() error { return storage.ErrNotFound }

// pendingOverhead is what badger adds to a write's key and value when
// it sizes a batch (meta, version), rounded up.
const pendingOverhead = 16

// pending is one buffered write; del marks a deletion.
type pending struct {
	value []byte
	del   bool
}

var (
	_ storage.Engine = (*Engine)(nil)
	_ storage.Sizer  = (*Engine)(nil)
)

// Open opens (creating if needed) the database in dir, with synchronous
// writes.
func Open(dir string, opts Options) (*Engine, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	sz := sizesFor(opts.MemoryBudget)
	compression := opts.Compression.resolve(dir, logger)
	threshold := valueThreshold(opts.ValueThreshold, compression)
	bo := bdb.DefaultOptions(dir).
		WithSyncWrites(true).
		WithDetectConflicts(false). // the committer detects them
		// Memory: badger's defaults (5×64 MiB memtables, 256 MiB block
		// cache, every table index resident, 1 GiB mmapped value log)
		// dwarf Axon's working set. Memtables stay 64 MiB by default:
		// smaller ones flush and compact so often that writes stall
		// (delete p99 at 256 clients 139 ms with 16 MiB, 57 ms with 64
		// MiB); a MemoryBudget trades that for memory.
		WithMemTableSize(sz.memTable).
		WithNumMemtables(3).
		WithNumCompactors(2).
		WithNumLevelZeroTables(min(5, sz.l0Stall-1)).
		WithNumLevelZeroTablesStall(sz.l0Stall).
		WithBaseTableSize(1 << 20). // compaction builds tables in memory
		WithCompression(compression).
		WithBlockCacheSize(blockCache(compression, sz)).
		WithIndexCacheSize(sz.indexCache).
		WithValueLogFileSize(valueLogFile(threshold)).
		WithValueThreshold(threshold).
		// Not WithLoggingLevel: it replaces the logger with badger's own.
		WithLogger(slogLogger{logger.With("component", "badger")})
	db, err := bdb.OpenManaged(bo)
	if err != nil {
		return nil, fmt.Errorf("badger: open %s: %w", dir, err)
	}
	guard, err := newDirGuard(dir)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("badger: open %s: %w", dir, err)
	}
	e := &Engine{
		db: db, queue: make(chan *commitReq, 1024), alone: make(chan func()), stop: make(chan struct{}), done: make(chan struct{}),
		ts: db.MaxVersion(), active: map[uint64]int{}, written: map[string]uint64{},
		pruneEvery: cmp.Or(max(opts.PruneEvery, 0), 256),
		advisor:    newLogAdvisor(dir), log: logger,
		closing: make(chan struct{}), dir: dir, guard: guard, watched: make(chan struct{}), trimmed: make(chan struct{}), collected: make(chan struct{}), memTable: sz.memTable,
		probeEvery:   cmp.Or(max(opts.ProbeEvery, 0), DefaultProbeEvery),
		closeTimeout: cmp.Or(max(opts.CloseTimeout, 0), DefaultCloseTimeout),
	}
	if opts.MemoryBudget > 0 {
		e.trimmer = newTableTrimmer(db, dir, opts.MemoryBudget, &e.defragging)
	}
	e.advise()
	go e.commitLoop()
	go e.watch()
	go e.trimLoop()
	go e.gcLoop()
	return e, nil
}

// gcEvery is how often the value log is collected. Under churn the log
// takes the values as fast as they are written (600 MB a minute at 1 KiB
// objects in a 1 GiB cgroup), and its garbage comes as fast once the
// sweep has deleted their versions: collected once a minute, eight files
// at a time, the log outgrew a 2 GiB quota in five minutes.
const gcEvery = 10 * time.Second

// gcLoop collects the value log every gcEvery until Close: badger
// rewrites the live values of a file at least half garbage (versions the
// sweep deleted and compaction dropped) and removes it, one file a call,
// and a round goes on while a file qualifies. Without it the log keeps
// every value ever written until a Defrag.
func (e *Engine) gcLoop() {
	// Close waits for a round (collected) before it closes badger, so a
	// round needs no read lock (which Close's write lock would block).
	e.every(gcEvery, e.collected, func() bool {
		if e.Failed() != nil || !e.defragging.TryLock() {
			return true // a failed directory takes no rewrite; Defrag collects itself
		}
		defer e.defragging.Unlock()
		for {
			select {
			case <-e.stop:
				return false // Close waits for the file in hand only
			default:
			}
			err := e.collectOne()
			if err == nil {
				continue
			}
			if !errors.Is(err, bdb.ErrNoRewrite) && !errors.Is(err, bdb.ErrRejected) {
				e.log.Warn("collecting the value log", "err", err)
			}
			return true
		}
	})
}

// trimEvery is how often the trimmer looks at the resident set: the
// kernel tells nobody when a process's mapped pages grow, and a look
// costs one read of /proc/self/status.
const trimEvery = time.Second

// trimLoop trims the tables' mapped pages every trimEvery until Close.
func (e *Engine) trimLoop() {
	if e.trimmer == nil {
		close(e.trimmed)
		return
	}
	warned := false
	e.every(trimEvery, e.trimmed, func() bool {
		// Only memory is at stake: the next look tries again. Said once,
		// as a lasting failure would say it every second.
		if _, err := e.trimmer.trim(); err != nil && !warned {
			warned = true
			e.log.Warn("paging out badger's tables failed; the resident set may exceed the memory budget", "err", err)
		}
		return true
	})
}

// every runs fn every d until Close or until fn returns false, then
// closes done.
func (e *Engine) every(d time.Duration, done chan struct{}, fn func() bool) {
	defer close(done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if !fn() {
				return
			}
		}
	}
}

// commitLoop commits queued transactions in groups until Close.
func (e *Engine) commitLoop() {
	defer close(e.done)
	maxCount, maxSize := e.db.MaxBatchCount()/2, e.db.MaxBatchSize()/2
	groups := 0
	for {
		var first *commitReq
		select {
		case first = <-e.queue:
		case fn := <-e.alone:
			fn()
			continue
		case <-e.stop:
			return
		}
		group := []*commitReq{first}
		count, size := first.size()
	fill:
		for count < maxCount && size < maxSize {
			select {
			case r := <-e.queue:
				group = append(group, r)
				c, s := r.size()
				count, size = count+c, size+s
			default:
				break fill
			}
		}
		e.commitGroup(group)
		if groups++; groups%adviseEvery == 0 {
			e.advise()
		}
	}
}

// advise marks new log mappings MADV_RANDOM (logAdvisor); a failure only
// costs disk bandwidth, so it is logged, not returned.
func (e *Engine) advise() {
	if _, err := e.advisor.advise(); err != nil {
		e.log.Warn("advising badger's logs failed; each sync may write far more than it appended", "err", err)
	}
}

func (r *commitReq) size() (count, size int64) {
	for k, w := range r.writes {
		count++
		size += int64(len(k)+len(w.value)) + pendingOverhead
	}
	return count, size
}

// commitGroup writes the non-conflicting transactions of group at one
// new timestamp and answers each.
func (e *Engine) commitGroup(group []*commitReq) {
	e.cmu.Lock()
	ts := e.ts + 1
	var ok []*commitReq
	for _, r := range group {
		conflict := e.conflicts(r)
		// Checked: the snapshot no longer bounds what must be kept.
		e.unregister(r.readTs)
		if conflict {
			r.err <- fmt.Errorf("badger: commit at %d: %w", r.readTs, storage.ErrConflict)
			continue
		}
		for k := range r.writes {
			e.written[k] = ts
		}
		ok = append(ok, r)
	}
	e.cmu.Unlock()
	if len(ok) == 0 {
		return
	}
	var err error
	if ferr := e.checkDir(); ferr != nil {
		// Nothing goes to badger on a failed directory: on a read-only
		// filesystem a write to a new page of its mmapped log would kill
		// the process with SIGBUS, and on a removed one the write lands
		// in unlinked files.
		err = fmt.Errorf("badger: commit: %w: %w", storage.ErrUnavailable, ferr)
	} else if err = e.timedWrite(ts, ok); err == nil {
		if ferr := e.checkDir(); ferr != nil {
			// Synced, but perhaps into files no longer in the directory
			// (removed meanwhile): it must not be acknowledged as
			// durable.
			err = fmt.Errorf("badger: commit: %w: %w", storage.ErrUncertain, ferr)
		}
	}
	e.cmu.Lock()
	if err == nil {
		e.ts = ts
	}
	e.groups++
	if e.groups%e.pruneEvery == 0 || len(e.written) > 1<<16 {
		e.prune()
	}
	e.cmu.Unlock()
	for _, r := range ok {
		r.err <- err
	}
}

// conflicts reports whether a key r wrote or locked was written after
// its snapshot; called with cmu held.
func (e *Engine) conflicts(r *commitReq) bool {
	for k := range r.writes {
		if e.written[k] > r.readTs {
			return true
		}
	}
	return false
}

// write commits the group's writes as one badger transaction at ts.
func (e *Engine) write(ts uint64, group []*commitReq) error {
	tx := e.db.NewTransactionAt(ts-1, true)
	defer tx.Discard()
	var size int64
	for _, r := range group {
		for k, w := range r.writes {
			size += int64(len(k) + len(w.value))
			var err error
			if w.del {
				err = tx.Delete([]byte(k))
			} else {
				err = tx.Set([]byte(k), w.value)
			}
			if err != nil {
				if errors.Is(err, bdb.ErrTxnTooBig) {
					return fmt.Errorf("badger: commit: %w", err)
				}
				return fmt.Errorf("badger: commit: %w: %w", storage.ErrUncertain, err)
			}
		}
	}
	if err := tx.CommitAt(ts, nil); err != nil {
		if errors.Is(err, bdb.ErrBlockedWrites) {
			return fmt.Errorf("badger: commit: %w", err) // refused: nothing applied
		}
		// The write itself failed; part of it may be in the log. Badger
		// cannot be trusted with more writes (an I/O error, a failed
		// sync): the engine fails, as etcd stops on a failed commit.
		return fmt.Errorf("badger: commit: %w: %w", storage.ErrUncertain, e.fail(err))
	}
	e.rate.add(time.Now(), size)
	return nil
}

// prune forgets writes no open snapshot can conflict with and lets
// badger drop versions no snapshot can read; called with cmu held.
func (e *Engine) prune() {
	oldest := e.ts
	for ts := range e.active {
		oldest = min(oldest, ts)
	}
	for k, ts := range e.written {
		if ts <= oldest {
			delete(e.written, k)
		}
	}
	e.db.SetDiscardTs(oldest)
}

// snapshot registers a new transaction's snapshot. It stays registered
// until the transaction is rolled back or its commit has been checked for
// conflicts: prune keeps every write newer than the oldest registered
// snapshot, and a commit checked after its snapshot was dropped could miss
// the write it conflicts with (two CAS increments both winning).
func (e *Engine) snapshot() uint64 {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	e.active[e.ts]++
	return e.ts
}

// forget drops a transaction's snapshot.
func (e *Engine) forget(ts uint64) {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	e.unregister(ts)
}

// unregister drops a snapshot; called with cmu held.
func (e *Engine) unregister(ts uint64) {
	if e.active[ts]--; e.active[ts] <= 0 {
		delete(e.active, ts)
	}
}

// Close closes the database after the operations in flight finish. Open
// transactions become unusable. Closing twice is harmless.
//
// Close gives up after CloseTimeout (2 s once the directory failed):
// badger retries a memtable flush that fails forever, and a commit stuck
// in badger would hold Close forever too. It then returns an error and
// leaves badger open; the process is expected to exit.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		go func() {
			e.closeErr = e.close()
			close(e.closing)
		}()
	})
	timeout := e.closeTimeout
	if e.Failed() != nil {
		timeout = min(timeout, failedCloseTimeout)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.closing:
		return e.closeErr
	case <-t.C:
	}
	if f := e.Failed(); f != nil {
		e.log.Error("badger did not close: its memtables cannot be flushed to the failed data directory. "+
			"Writes acknowledged before the failure are in its write-ahead log and are replayed at the next open if the directory's files survive; "+
			"none was acknowledged since. If the directory was removed, its data is lost unless restored from a backup or snapshot",
			"dir", e.dir, "waited", timeout, "err", f)
		return fmt.Errorf("badger: close: gave up after %v: %w", timeout, f)
	}
	e.log.Error("badger did not close: its memtables were not flushed to tables; acknowledged writes stay in its write-ahead log and are replayed at the next open",
		"dir", e.dir, "waited", timeout)
	return fmt.Errorf("badger: close: gave up after %v", timeout)
}

func (e *Engine) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	close(e.stop)
	<-e.done
	<-e.watched
	<-e.trimmed
	<-e.collected
	e.guard.close()
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("badger: close: %w", err)
	}
	return nil
}

// acquire read-locks the engine for one operation, or reports it closed.
func (e *Engine) acquire(op string) error {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return fmt.Errorf("badger: %s: engine: %w", op, storage.ErrClosed)
	}
	return nil
}

func (e *Engine) release() { e.mu.RUnlock() }

// Begin starts a read-write transaction.
func (e *Engine) Begin(ctx context.Context) (storage.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("badger: begin: %w: %w", storage.ErrUnavailable, err)
	}
	if err := e.acquire("begin"); err != nil {
		return nil, err
	}
	defer e.release()
	ts := e.snapshot()
	return &txn{e: e, ts: ts, tx: e.db.NewTransactionAt(ts, true), writes: make(map[string]pending)}, nil
}

type txn struct {
	e  *Engine
	ts uint64
	// tx reads the snapshot and, for iterators, holds the buffered
	// writes (mirror); it is never committed itself.
	tx *bdb.Txn
	// writes is the write set (by Set, Delete or Lock) handed to the
	// committer; order lists its keys in write order (a key again when
	// rewritten after a mirror), the first mirrored of them already in tx.
	writes   map[string]pending
	order    []string
	mirrored int
	// count and size are what badger would count of the write set.
	count, size int64
	iters       []*iterator
	closed      bool
}

func (t *txn) begin(op string) error {
	if t.closed {
		return fmt.Errorf("badger: %s: transaction: %w", op, storage.ErrClosed)
	}
	return t.e.acquire(op)
}

func (t *txn) StartTS() uint64 { return t.ts }

func (t *txn) Get(key []byte) ([]byte, error) {
	if err := t.begin("get"); err != nil {
		return nil, err
	}
	defer t.e.release()
	if w, ok := t.writes[string(key)]; ok {
		if w.del {
			return nil, &notFoundError{key: string(key)}
		}
		return bytes.Clone(w.value), nil
	}
	item, err := t.tx.Get(key)
	if errors.Is(err, bdb.ErrKeyNotFound) {
		// Most writes read keys that do not exist yet: no formatting here.
		return nil, &notFoundError{key: string(key)}
	}
	if err != nil {
		return nil, fmt.Errorf("badger: get %q: %w", key, err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("badger: get %q: value: %w", key, err)
	}
	return v, nil
}

// track returns key's value as of the snapshot (found reports whether it
// exists). Callers hold the engine.
func (t *txn) track(key []byte) (value []byte, found bool, err error) {
	item, err := t.tx.Get(key)
	switch {
	case errors.Is(err, bdb.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	return v, err == nil, err
}

func (t *txn) write(op string, key, value []byte, del bool) error {
	if err := t.begin(op); err != nil {
		return err
	}
	defer t.e.release()
	if err := t.admit(key, value); err != nil {
		return fmt.Errorf("badger: %s: %w", op, err)
	}
	k := string(key)
	if _, ok := t.writes[k]; !ok || t.mirrored > 0 {
		// A key written again after a mirror must be mirrored again: it
		// may be among the mirrored ones.
		t.order = append(t.order, k)
	}
	t.writes[k] = pending{value: bytes.Clone(value), del: del}
	return nil
}

// maxKeySize is badger's bound on a key.
const maxKeySize = 65000

// admit checks a write as badger's own transaction would, before it is
// buffered, and counts it towards the transaction's size: the committer
// writes whole groups, so one transaction too big for badger must fail
// here rather than fail its group.
func (t *txn) admit(key, value []byte) error {
	switch {
	case len(key) == 0:
		return bdb.ErrEmptyKey
	case bytes.HasPrefix(key, []byte("!badger!")):
		return bdb.ErrInvalidKey
	case len(key) > maxKeySize:
		return fmt.Errorf("key of %d bytes exceeds the %d limit", len(key), maxKeySize)
	}
	count, size := t.count+1, t.size+int64(len(key)+len(value))+pendingOverhead
	if count >= t.e.db.MaxBatchCount() || size >= t.e.db.MaxBatchSize() {
		return bdb.ErrTxnTooBig
	}
	t.count, t.size = count, size
	return nil
}

// mirror copies the writes made since the last mirror into badger's
// transaction, whose iterators merge them with the snapshot. Writes are
// mirrored only when an iterator needs them: most transactions read
// everything first and write at the end, and Get reads the write set.
// Callers hold the engine.
func (t *txn) mirror() error {
	for _, k := range t.order[t.mirrored:] {
		w := t.writes[k]
		var err error
		if w.del {
			err = t.tx.Delete([]byte(k))
		} else {
			err = t.tx.Set([]byte(k), w.value)
		}
		if err != nil {
			return fmt.Errorf("badger: write %q: %w", k, err)
		}
	}
	t.mirrored = len(t.order)
	return nil
}

func (t *txn) Set(key, value []byte) error { return t.write("set", key, value, false) }

func (t *txn) Delete(key []byte) error { return t.write("delete", key, nil, true) }

func (t *txn) Lock(keys ...[]byte) error {
	if err := t.begin("lock"); err != nil {
		return err
	}
	defer t.e.release()
	for _, key := range keys {
		if _, ok := t.writes[string(key)]; ok {
			continue // already in the write set
		}
		// A lock rewrites the value it read: the key joins the write set
		// and a concurrent writer of it conflicts.
		v, found, err := t.track(key)
		if err != nil {
			return fmt.Errorf("badger: lock %q: %w", key, err)
		}
		if err := t.admit(key, v); err != nil {
			return fmt.Errorf("badger: lock %q: %w", key, err)
		}
		t.order = append(t.order, string(key))
		t.writes[string(key)] = pending{value: v, del: !found}
	}
	return nil
}

// end marks the transaction closed, closes its iterators (badger's
// Discard panics while any is open) and discards badger's transaction. Its
// snapshot stays registered. Callers hold the engine.
func (t *txn) end() {
	t.closed = true
	for _, it := range t.iters {
		it.close()
	}
	t.iters = nil
	t.tx.Discard()
}

func (t *txn) Rollback() {
	if t.closed {
		return
	}
	if t.e.acquire("rollback") != nil {
		t.closed = true // the database is closed; nothing to discard
		return
	}
	defer t.e.release()
	t.end()
	t.e.forget(t.ts)
}

func (t *txn) Commit(ctx context.Context) error {
	if err := t.begin("commit"); err != nil {
		return err
	}
	defer t.e.release()
	t.end()
	if err := ctx.Err(); err != nil {
		t.e.forget(t.ts)
		return fmt.Errorf("badger: commit: %w: %w", storage.ErrUnavailable, err)
	}
	if len(t.writes) == 0 {
		t.e.forget(t.ts)
		return nil
	}
	if err := t.e.Failed(); err != nil {
		t.e.forget(t.ts)
		return fmt.Errorf("badger: commit: %w: %w", storage.ErrUnavailable, err)
	}
	// The committer unregisters the snapshot once it has checked r.
	r := &commitReq{readTs: t.ts, writes: t.writes, err: make(chan error, 1)}
	start := time.Now()
	t.e.queue <- r
	err := <-r.err
	t.e.observeCommit(start)
	return err
}

func (t *txn) Iter(opts storage.IterOptions) (storage.Iterator, error) {
	if err := t.begin("iter"); err != nil {
		return nil, err
	}
	defer t.e.release()
	if err := t.mirror(); err != nil {
		return nil, err
	}
	bo := bdb.DefaultIteratorOptions
	bo.Reverse = opts.Reverse
	// Values are copied once, in Next; prefetching would copy each twice.
	bo.PrefetchValues = false
	if opts.Lower != nil && opts.Upper != nil {
		// Every key in [Lower, Upper) starts with their common prefix;
		// telling badger lets it skip tables outside it.
		n := 0
		for n < len(opts.Lower) && n < len(opts.Upper) && opts.Lower[n] == opts.Upper[n] {
			n++
		}
		bo.Prefix = bytes.Clone(opts.Lower[:n])
	}
	it := &iterator{t: t, it: t.tx.NewIterator(bo), lower: bytes.Clone(opts.Lower), upper: bytes.Clone(opts.Upper), reverse: opts.Reverse, short: int64(opts.Short)}
	t.iters = append(t.iters, it)
	return it, nil
}

type iterator struct {
	t            *txn
	it           *bdb.Iterator
	lower, upper []byte
	reverse      bool
	started      bool
	done         bool
	closed       bool
	key, value   []byte
	buf          []byte // value's storage, kept while a value is left unread
	// short is IterOptions.Short: a value badger sizes above it (plus
	// valueSizeSlack) is left unread.
	short int64
	err   error
}

// valueSizeSlack covers badger's estimate of a value in its log, which
// guesses the entry header's length (it may be up to 16 bytes over).
const valueSizeSlack = 32

func (it *iterator) Next() bool {
	if it.done || it.err != nil {
		return false
	}
	if it.closed {
		if it.t.closed {
			it.err = fmt.Errorf("badger: iterator: transaction: %w", storage.ErrClosed)
		}
		return false
	}
	if err := it.t.e.acquire("iterator"); err != nil {
		it.err = err
		return false
	}
	defer it.t.e.release()
	b := it.it
	if !it.started {
		it.started = true
		switch {
		case !it.reverse && it.lower != nil:
			b.Seek(it.lower)
		case it.reverse && it.upper != nil:
			// Lands on the largest key <= upper; upper is excluded.
			b.Seek(it.upper)
			if b.Valid() && bytes.Equal(b.Item().Key(), it.upper) {
				b.Next()
			}
		default:
			b.Rewind()
		}
	} else {
		b.Next()
	}
	if !b.Valid() {
		return it.finish()
	}
	item := b.Item()
	k := item.Key()
	if !it.reverse && it.upper != nil && bytes.Compare(k, it.upper) >= 0 ||
		it.reverse && bytes.Compare(k, it.lower) < 0 {
		return it.finish()
	}
	it.key = item.KeyCopy(it.key[:0])
	if it.short > 0 && item.ValueSize() > it.short+valueSizeSlack {
		it.value = nil // in the value log, and not wanted
		return true
	}
	v, err := item.ValueCopy(it.buf[:0])
	if err != nil {
		it.err = fmt.Errorf("badger: iterator: value of %q: %w", k, err)
		return false
	}
	if v == nil {
		v = []byte{}
	}
	it.buf, it.value = v, v
	return true
}

func (it *iterator) finish() bool {
	it.done = true
	it.key, it.value = nil, nil
	return false
}

func (it *iterator) Key() []byte   { return it.key }
func (it *iterator) Value() []byte { return it.value }
func (it *iterator) Err() error    { return it.err }

func (it *iterator) Close() {
	if it.closed {
		return
	}
	if it.t.e.acquire("iterator close") == nil {
		it.close()
		it.t.e.release()
	}
}

// close releases badger's iterator; callers hold the engine.
func (it *iterator) close() {
	if !it.closed {
		it.closed = true
		it.it.Close()
	}
}

// slogLogger routes badger's warnings and errors to slog.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Errorf(f string, args ...any) {
	s.l.Error(strings.TrimSpace(fmt.Sprintf(f, args...)))
}

func (s slogLogger) Warningf(f string, args ...any) {
	s.l.Warn(strings.TrimSpace(fmt.Sprintf(f, args...)))
}

func (slogLogger) Infof(string, ...any)  {}
func (slogLogger) Debugf(string, ...any) {}

// Size reports the bytes the data directory takes on disk, for etcd's
// Status db_size and the quota of a server given no directory to count
// (axon serve counts the same directory itself). Badger's own count is
// refreshed once a minute: a new store's writes would not show in it.
func (e *Engine) Size() int64 {
	if e.acquire("size") != nil {
		return 0
	}
	defer e.release()
	n, err := fsutil.DiskUsage(e.dir)
	if err != nil {
		lsm, vlog := e.db.Size()
		return lsm + vlog
	}
	return n
}
