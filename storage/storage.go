package storage

import (
	"context"
	"errors"
)

// Errors an engine reports. Callers test them with errors.Is; engines wrap
// their own errors with %w so the cause stays readable.
var (
	// ErrNotFound: Get found no value for the key.
	ErrNotFound = errors.New("storage: key not found")
	// ErrConflict: the transaction was definitely not applied because
	// another transaction wrote (or locked) one of its keys after its
	// snapshot was taken.
	ErrConflict = errors.New("storage: write conflict")
	// ErrUncertain: the engine did not say whether the transaction was
	// applied. It may have been applied, or may still be applied later.
	ErrUncertain = errors.New("storage: transaction outcome uncertain")
	// ErrUnavailable: the engine could not serve the call; nothing was
	// applied and the caller may retry.
	ErrUnavailable = errors.New("storage: engine unavailable")
	// ErrClosed: the engine or transaction was used after Close, Commit
	// or Rollback.
	ErrClosed = errors.New("storage: closed")
)

// Engine is a transactional, ordered key-value store with snapshot
// isolation. Implementations: memkv (deterministic, faulty), badger
// (embedded) and tikv (distributed).
type Engine interface {
	// Begin starts a transaction reading a consistent snapshot that
	// includes every transaction committed before Begin was called.
	Begin(ctx context.Context) (Txn, error)
	// Close releases the engine. Open transactions become unusable.
	Close() error
}

// Txn is one snapshot-isolated transaction. It is used from one goroutine.
//
// Writes are buffered and become visible to other transactions only at
// Commit. Reads inside the transaction see its own buffered writes.
// Commit fails with ErrConflict when a key the transaction wrote or
// locked was written by another transaction committed after this one's
// snapshot (first committer wins).
type Txn interface {
	// Get returns the value of key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// Iter returns an iterator over the keys in [opts.Lower, opts.Upper).
	Iter(opts IterOptions) (Iterator, error)
	// Set buffers a write of value under key.
	Set(key, value []byte) error
	// Delete buffers a deletion of key.
	Delete(key []byte) error
	// Lock adds keys to the transaction's conflict set without writing
	// them: a concurrent transaction that writes any of them conflicts.
	Lock(keys ...[]byte) error
	// StartTS is the engine's logical clock at the snapshot: it strictly
	// increases between transactions that begin after one another commits.
	StartTS() uint64
	// Commit applies the buffered writes atomically.
	Commit(ctx context.Context) error
	// Rollback discards the transaction. It is safe after Commit.
	Rollback()
}

// IterOptions bound an iteration.
type IterOptions struct {
	// Lower is the inclusive lower bound; nil means the start of the keyspace.
	Lower []byte
	// Upper is the exclusive upper bound; nil means the end of the keyspace.
	Upper []byte
	// Reverse iterates from the largest key down.
	Reverse bool
	// Limit is a hint of how many keys the caller will read (0: unknown).
	// Engines may use it to size their batches; they must not stop early.
	Limit int
	// Short, if positive, says the caller needs no value longer than
	// this: an engine that can tell a value's length without reading it
	// (badger, for a value in its value log) may leave such a value
	// unread, and Value is nil for it. Engines that read every value
	// anyway return it.
	Short int
}

// Iterator walks keys in order. Key and Value are valid until the next
// call to Next; callers copy what they keep.
type Iterator interface {
	// Next advances to the next key and reports whether there is one.
	Next() bool
	Key() []byte
	Value() []byte
	// Err reports the error that stopped iteration, if any.
	Err() error
	Close()
}

// BatchReader is a Txn that runs several reads at once. On TiKV each read
// is an RPC; reads that do not depend on each other need not wait for each
// other. Engines whose reads are local need not implement it.
type BatchReader interface {
	// ReadBatch runs reads as of the transaction's snapshot and buffered
	// writes, as Get and Iter would, and returns their results in order.
	ReadBatch(reads []Read) ([]ReadResult, error)
}

// Read is one read of a batch: a point read of Key, or, if Last, a read of
// the last key in [Key, Upper).
type Read struct {
	Key, Upper []byte
	Last       bool
}

// ReadResult is what one Read found: for a Last read, Key is the key
// found.
type ReadResult struct {
	Key, Value []byte
	Found      bool
}

// Inserter is a Txn that writes keys which must not exist, checked by the
// engine as it commits (TiKV's assertions) instead of by a read first: a
// round trip less.
type Inserter interface {
	// Insert buffers a write of value under key; Commit fails with
	// ErrConflict (definitely not applied) if key exists by then.
	Insert(key, value []byte) error
}

// LockResolver is an engine whose transactions leave locks behind their
// owner (TiKV's two-phase commit): a transaction that dies between
// prewrite and commit holds its keys until the lock's TTL runs out. A new
// leader settles its predecessors' locks before it reads, so that no
// write waits for them.
type LockResolver interface {
	// ResolveLocks settles every lock in [lower, upper) of transactions
	// that began before ts, at once: those whose commit had begun are
	// committed, the others rolled back (they can then never commit).
	ResolveLocks(ctx context.Context, ts uint64, lower, upper []byte) error
}

type leaderSnapshotKey struct{}

// WithLeaderSnapshot marks ctx for a transaction whose caller has seen
// every write it must read (or must not overwrite) commit through this
// same engine before calling Begin: a leader, whose latches let a request
// out only after the writes before it on its keys committed, and whose
// recovery began after its predecessor's last commit. An engine whose
// timestamps cost a round trip may then serve ReadBatch, before the
// transaction writes, at the newest commit it has seen return instead of
// at a fresh timestamp; conflicts are still checked from the fresh one
// on. Not for a follower, whose writes commit elsewhere. Engines without
// timestamps ignore it.
func WithLeaderSnapshot(ctx context.Context) context.Context {
	return context.WithValue(ctx, leaderSnapshotKey{}, true)
}

type staleSnapshotKey struct{}

// WithStaleSnapshot asks, for a test, for a transaction that begins at
// the snapshot of by commits before the latest, as one handed a stale
// start timestamp does (driver.TestingKnobs.StaleSnapshots). memkv obeys;
// the other engines ignore it.
func WithStaleSnapshot(ctx context.Context, by uint64) context.Context {
	return context.WithValue(ctx, staleSnapshotKey{}, by)
}

// StaleSnapshot is what WithStaleSnapshot asked of ctx (0: nothing).
func StaleSnapshot(ctx context.Context) uint64 {
	v, _ := ctx.Value(staleSnapshotKey{}).(uint64)
	return v
}

// LeaderSnapshot reports whether ctx was marked by WithLeaderSnapshot.
func LeaderSnapshot(ctx context.Context) bool {
	v, _ := ctx.Value(leaderSnapshotKey{}).(bool)
	return v
}
