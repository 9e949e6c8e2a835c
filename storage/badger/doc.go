// Package badger is Axon's embedded default engine: storage.Engine over
// github.com/dgraph-io/badger/v4.
//
// # Durability
//
// SyncWrites is always on: Commit returns only after badger has synced
// its write-ahead log, so an acknowledged commit survives kill -9 and power
// loss (as far as the disk honours fsync). Badger's single writer goroutine
// takes the commits that queued while it was busy as one batch; commits
// therefore queue concurrently here — the engine takes no lock of its own
// around Commit. (Badger v4 still syncs its WAL once per transaction within
// a batch, so concurrency mostly overlaps the other work of a commit;
// BenchmarkCommitParallel measures what it buys.)
//
// # Conflicts
//
// Badger detects conflicts on a transaction's read set: a commit fails if a
// key it read was written by a transaction that committed after its
// snapshot. The storage contract wants conflicts on written and locked keys,
// so this package:
//
//   - reads every key before its first Set or Delete in a transaction, which
//     puts it in the read set;
//   - implements Lock(k) by reading k and writing its snapshot value back
//     (or a deletion if it is absent). The read makes the locker conflict
//     with writers that committed first; the write makes later committers
//     that began before the locker committed conflict with it. The
//     write-back changes no value: it can only commit if nobody wrote k
//     since the snapshot.
//
// Keys read by Get or Iter in a transaction that writes are in badger's
// read set too, so such a transaction also conflicts when a concurrent
// transaction wrote a key it merely read. The contract allows this (an
// ErrConflict always means "not applied"); it only costs retries. Badger
// compares 64-bit key fingerprints, so a hash collision can also cause a
// rare spurious conflict.
//
// # Errors
//
// badger.ErrConflict becomes storage.ErrConflict. Errors from Set, Delete
// and Lock (transaction too big, empty key, key longer than 65000 bytes, key
// starting with badger's reserved "!badger!" prefix) are returned at once,
// wrap badger's error, and leave the transaction usable: nothing of the
// failed call is buffered. A Commit that fails before it reaches badger's
// write queue is definite (nothing applied). A Commit whose write failed
// (disk error) returns storage.ErrUncertain: part of the batch may have
// reached the log and be replayed when the database is opened again. A
// context canceled before Commit yields storage.ErrUnavailable; once the
// commit is queued it runs to completion regardless of the context.
//
// # Iteration
//
// Iter honours [Lower, Upper) in both directions. Reverse iteration seeks to
// Upper (badger's reverse Seek lands on the largest key <= its argument)
// and skips Upper itself. Limit sets badger's prefetch size. Iterators still
// open at Commit or Rollback are closed, as badger requires.
//
// StartTS is badger's read timestamp; every commit that writes advances it.
package badger
