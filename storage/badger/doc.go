// Package badger is Axon's embedded default engine: storage.Engine over
// github.com/dgraph-io/badger/v4.
//
// # Durability
//
// SyncWrites is always on: Commit returns only after badger has synced
// its write-ahead log, so an acknowledged commit survives kill -9 and power
// loss (as far as the disk honours fsync). Badger syncs once per write
// request, so the engine runs badger in managed mode and commits itself:
// a transaction buffers its writes in its own write set, and one committer
// goroutine takes every transaction that queued while it was busy, checks
// each for conflicts and writes the survivors as one badger transaction at
// one new timestamp — one fsync for the group, and no acknowledgement
// before it.
//
// # Conflicts
//
// First committer wins on written and locked keys: a commit fails with
// storage.ErrConflict if a key in its write set was written by a group
// committed after its snapshot. Keys only read do not conflict (callers
// Lock what they compare). Lock(k) puts k's snapshot value (or a deletion)
// in the write set, so it changes nothing but conflicts like a write.
//
// Reads see the transaction's own writes: Get consults the write set, and
// Iter copies the writes not yet copied into badger's transaction, whose
// iterators merge them with the snapshot.
//
// # Errors
//
// Errors from Set, Delete and Lock (transaction too big, empty key, key
// longer than 65000 bytes, key starting with badger's reserved "!badger!"
// prefix) are returned at once, wrap badger's error where it has one, and
// leave the transaction usable: nothing of the failed call is buffered. A
// Commit refused before badger writes (a conflict, blocked writes during a
// defragmentation's flush) is definite (nothing applied). A Commit whose write failed
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
