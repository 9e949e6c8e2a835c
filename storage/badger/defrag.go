package badger

import (
	"context"
	"errors"
	"fmt"

	bdb "github.com/dgraph-io/badger/v4"
)

// defragKey is a key outside Axon's keyspace (whose keys all begin with
// core's magic bytes), written and dropped by Defrag.
var defragKey = []byte("axon/badger/defrag")

// Defrag gives back the disk space of deleted and superseded versions no
// open snapshot can read, as etcd's defragment does for bbolt: badger
// drops such versions only when it compacts the tables holding them, and
// a store that stopped growing may never compact its level 0 again.
//
// Badger has no call that flushes the memtables and compacts level 0 but
// DropPrefix, so Defrag writes a marker key and drops it: that flushes
// every memtable and compacts all of level 0 into the next level. It runs
// in the commit loop (badger refuses writes meanwhile, so commits wait
// their turn instead); reads go on. Flatten then merges the remaining
// levels, with commits flowing, and the value log is collected until a
// pass finds nothing to rewrite or ctx ends.
func (e *Engine) Defrag(ctx context.Context) error {
	if err := e.acquire("defrag"); err != nil {
		return err
	}
	defer e.release()
	done := make(chan error, 1)
	select {
	case e.alone <- func() { done <- e.flush() }:
	case <-ctx.Done():
		return fmt.Errorf("badger: defrag: %w", ctx.Err())
	}
	if err := <-done; err != nil {
		return err
	}
	if err := e.db.Flatten(2); err != nil {
		return fmt.Errorf("badger: defrag: flatten: %w", err)
	}
	for ctx.Err() == nil {
		err := e.db.RunValueLogGC(0.5)
		if errors.Is(err, bdb.ErrNoRewrite) || errors.Is(err, bdb.ErrRejected) {
			break
		}
		if err != nil {
			return fmt.Errorf("badger: defrag: value log: %w", err)
		}
	}
	return nil
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
