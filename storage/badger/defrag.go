package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/axon-kv/axon/storage"
)

var (
	_ storage.Defragmenter     = (*Engine)(nil)
	_ storage.DefragSpaceError = (*SpaceError)(nil)
)

// defragKey is a key outside Axon's keyspace (whose keys all begin with
// core's magic bytes), written and dropped by Defrag.
var defragKey = []byte("axon/badger/defrag")

// Defrag gives back the disk space of deleted and superseded versions no
// open snapshot can read, as etcd's defragment does for bbolt: badger
// drops such versions only when it compacts the tables holding them, and
// a store that stopped growing may never compact its level 0 again.
//
// First what the memtables held when Defrag began (deletes, too, that
// free space below) must reach the tables: the writes flush them, and
// Defrag waits for that (at most flushWithin) while they come fast enough
// to, so writes go on without a stall. With fewer writes — an idle store,
// or one out of space being cleaned up — nothing would flush them soon.
// Badger has no call that flushes them but DropPrefix, so Defrag then
// writes a marker key and drops it: that flushes every memtable and
// compacts level 0 into the next level. It runs in the commit loop
// (badger refuses writes meanwhile, so commits wait their turn: a stall
// as long as writing the memtables out takes; reads go on). Flatten then
// merges the levels, level 0 included, with commits flowing, and the
// value log is collected until a pass finds nothing to rewrite or ctx
// ends.
//
// It first checks that the data directory's filesystem has the room that
// needs (DefragSpace): a rewrite that runs out of disk half-way leaves
// badger stuck, or kills it with SIGBUS in its mmapped files. Short of
// room it refuses with a *SpaceError before touching anything.
func (e *Engine) Defrag(ctx context.Context) error {
	if err := e.acquire("defrag"); err != nil {
		return err
	}
	defer e.release()
	defer e.forgetInUse()
	e.defragging.Lock() // one at a time: a client that gave up may ask again
	defer e.defragging.Unlock()
	if err := e.Failed(); err != nil {
		return fmt.Errorf("badger: defrag: %w", err)
	}
	need, have, err := e.DefragSpace()
	if err != nil {
		return fmt.Errorf("badger: defrag: %w", err)
	}
	if have < need {
		return &SpaceError{Need: need, Have: have}
	}
	// What the memtables hold now must reach the tables for Flatten to
	// compact it against what it supersedes or deletes.
	began := time.Now()
	files, err := e.files()
	if err != nil {
		return fmt.Errorf("badger: defrag: %w", err)
	}
	flushed, err := e.awaitFlush(ctx, files.mems)
	if err != nil {
		return err
	}
	if !flushed {
		if err := e.flushAlone(ctx); err != nil {
			return err
		}
	}
	flushedAt := time.Now()
	e.cmu.Lock()
	e.prune()
	e.cmu.Unlock()
	if err := e.db.Flatten(2); err != nil {
		return fmt.Errorf("badger: defrag: flatten: %w", err)
	}
	flattenedAt := time.Now()
	by := "writes"
	if !flushed {
		by = "defrag" // writes waited
	}
	defer func() {
		e.log.Info("badger defrag", "memtables_flushed_by", by, "flush", flushedAt.Sub(began),
			"flatten", flattenedAt.Sub(flushedAt), "value_log", time.Since(flattenedAt))
	}()
	for ctx.Err() == nil {
		err := e.collectOne()
		if errors.Is(err, bdb.ErrNoRewrite) || errors.Is(err, bdb.ErrRejected) {
			break
		}
		if err != nil {
			return fmt.Errorf("badger: defrag: value log: %w", err)
		}
	}
	return nil
}

// flushWithin bounds how long Defrag waits for the writes to flush the
// memtables, and the rate it waits on: writes that would not fill a
// memtable within it (at the rate of the last rateWindow) are too few
// (BenchmarkDefragUnderWrites, 64 writers: the longest write 1.4–2.4 s
// with the blocking flush; without it as long as without a defrag).
const flushWithin = time.Minute

// awaitFlush waits for the memtables whose logs are mems to be flushed
// by the writes; it reports false, at once or later, once the writes are
// too few for that.
func (e *Engine) awaitFlush(ctx context.Context, mems map[string]bool) (bool, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(flushWithin)
	for {
		now := time.Now()
		if now.After(deadline) || e.rate.perSecond(now)*flushWithin.Seconds() < float64(e.memTable) {
			return false, nil
		}
		left, err := e.files()
		if err != nil {
			return false, fmt.Errorf("badger: defrag: %w", err)
		}
		if !anyOf(mems, left.mems) {
			return true, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false, fmt.Errorf("badger: defrag: %w", ctx.Err())
		}
	}
}

func anyOf(set, of map[string]bool) bool {
	for k := range set {
		if of[k] {
			return true
		}
	}
	return false
}

// flushAlone runs flush in the commit loop, between commit groups.
func (e *Engine) flushAlone(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case e.alone <- func() { done <- e.flush() }:
	case <-ctx.Done():
		return fmt.Errorf("badger: defrag: %w", ctx.Err())
	}
	return <-done
}

// flush writes the marker at the next timestamp and drops it, with the
// discard timestamp brought up to the oldest open snapshot first; called
// from the commit loop. The clock does not move: no snapshot ever sees
// the marker, and the next group commits at the same timestamp.
func (e *Engine) flush() error {
	e.cmu.Lock()
	e.prune()
	ts := e.ts + 1
	e.cmu.Unlock()
	tx := e.db.NewTransactionAt(ts-1, true)
	defer tx.Discard()
	if err := tx.Set(defragKey, nil); err != nil {
		return fmt.Errorf("badger: defrag: %w", err)
	}
	if err := tx.CommitAt(ts, nil); err != nil {
		return fmt.Errorf("badger: defrag: %w", err)
	}
	if err := e.db.DropPrefix(defragKey); err != nil {
		return fmt.Errorf("badger: defrag: flush: %w", err)
	}
	return nil
}

// SpaceError is Defrag's refusal for want of free disk space; nothing was
// touched.
type SpaceError struct {
	// Need is the estimate of the bytes the defragmentation writes before
	// it frees any, Have the bytes free on the filesystem.
	Need, Have int64
}

func (e *SpaceError) Error() string {
	return fmt.Sprintf("badger: defrag: not enough free space to defragment: need %d bytes, have %d", e.Need, e.Have)
}

// DefragSpace reports the disk space Defrag needs and the space free on
// the data directory's filesystem.
//
// Defrag writes new copies before it deletes the old: flushing the
// memtables writes tables of about what their logs hold, compaction
// writes what survives of the tables it merges (the old ones go only once
// the new are written), and value log collection rewrites one value log
// file at a time. The estimate is the sum of those — the bytes allocated
// to the .mem files, the data that survives (the newest version of every
// live key with its value, and the key of every other version or
// tombstone, found by a scan of the keys), up to one value log file —
// plus a margin for the manifest and a table being built. It is not the
// size of the tables: a store full of deleted data needs little room to
// give it back, and refusing that would block etcd's way out of NOSPACE.
func (e *Engine) DefragSpace() (need, have int64, err error) {
	files, err := e.files()
	if err != nil {
		return 0, 0, err
	}
	kept := e.keptBytes()
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", e.dir, err)
	}
	have = int64(st.Bavail) * int64(st.Bsize)
	need = files.mem + kept + min(files.vlog, e.db.Opts().ValueLogFileSize) + defragMargin
	return need, have, nil
}

// storeFiles are the bytes of the store's files by kind: the memtables'
// logs, the tables, the value log; and the names of the memtables' logs.
type storeFiles struct {
	mem, tables, vlog int64
	mems              map[string]bool
}

func (e *Engine) files() (storeFiles, error) {
	f := storeFiles{mems: map[string]bool{}}
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return f, err
	}
	for _, d := range entries {
		ext := filepath.Ext(d.Name())
		if ext != ".mem" && ext != ".vlog" && ext != ".sst" {
			continue
		}
		info, err := d.Info()
		if err != nil {
			continue // removed meanwhile (a flush)
		}
		size := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			size = min(size, st.Blocks*512) // logs are preallocated sparse
		}
		switch ext {
		case ".mem":
			f.mem += size
			f.mems[d.Name()] = true
		case ".sst":
			f.tables += size
		default:
			f.vlog += size
		}
	}
	return f, nil
}

// defragMargin is room for the manifest, discard statistics and the
// table being built beyond the estimate.
const defragMargin = 8 << 20

// keptBytes is what a full compaction keeps: the newest version of each
// live key, key and value, and the key of every other version and
// tombstone (badger keeps tombstones above the last level).
func (e *Engine) keptBytes() int64 {
	e.cmu.Lock()
	ts := e.ts
	e.cmu.Unlock()
	tx := e.db.NewTransactionAt(ts, false)
	defer tx.Discard()
	opts := bdb.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.AllVersions = true
	it := tx.NewIterator(opts)
	defer it.Close()
	var kept int64
	var last []byte
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		newest := !bytes.Equal(k, last)
		if newest {
			last = append(last[:0], k...)
		}
		if newest && !item.IsDeletedOrExpired() {
			kept += item.EstimatedSize() + pendingOverhead
		} else {
			kept += int64(len(k)) + pendingOverhead
		}
	}
	return kept
}

// DefragSpace reports the estimate and the free space
// (storage.DefragSpaceError).
func (e *SpaceError) DefragSpace() (need, have int64) { return e.Need, e.Have }
