// Package tikv is Axon's production engine: storage.Engine over a TiKV
// cluster through github.com/tikv/client-go/v2 (txnkv, optimistic
// transactions). Open connects to PD; NewMock runs the same code over
// client-go's in-process cluster (mocktikv), with as many regions as a
// test wants, for tests in any package.
//
// # Transactions
//
// Begin takes a fresh timestamp from PD, so the snapshot holds every
// transaction committed before the call, and StartTS is that timestamp.
// A leader's transaction (storage.WithLeaderSnapshot) begins at once
// instead: PD's timestamp is fetched in the background, and until the
// transaction writes, ReadBatch reads at the newest timestamp the
// backend has fetched or committed at (no older than 2 s), which holds
// every commit that returned before Begin; everything else waits for the
// start timestamp (start.go). A leader's request so reads in the round
// trip of its start timestamp, and one that turns out to change nothing
// is answered without it.
// Reads (Get, Iter) run under Begin's context: canceling it fails them
// with storage.ErrUnavailable. Writes are buffered in client-go's write
// buffer and sent by Commit's two-phase commit. Async commit and 1PC are
// off: with plain 2PC a transaction is committed exactly when the Commit
// RPC of its primary key succeeds, which is what makes failures
// classifiable (below).
//
// Lock(keys) flags the keys as locked in the buffer without writing them.
// At Commit each such key becomes an Op_Lock mutation: its prewrite fails
// on a write committed after the snapshot, and its commit leaves a
// lock-type write record that makes later committers whose snapshots
// predate it fail in turn. The value is never touched.
//
// Insert (storage.Inserter) buffers a write flagged "must not exist":
// transactions run at AssertionLevel_Strict, so TiKV checks the flag at
// prewrite and an existing key fails the commit before any Commit RPC.
// Axon's revision records are written so, instead of being read first.
//
// ReadBatch (storage.BatchReader) runs a request's predicted reads at
// once: the point reads in one BatchGet (one RPC per region, in
// parallel), each last-key read as one reverse Scan RPC, all
// concurrently, each on a snapshot object of its own at the start
// timestamp. Once the transaction has buffered writes it reads one by
// one through the buffer instead.
//
// ResolveLocks (storage.LockResolver) settles at once the locks of
// transactions older than a timestamp, with client-go's range resolver
// (the one TiKV's GC runs: primaries checked as if expired, committed
// ones committed, the rest rolled back), region by region in parallel. A
// new leader runs it before recovering (driver.Recover): a
// predecessor killed between prewrite and commit no longer holds writes
// up for the locks' 3 s TTL.
//
// TiKV cannot store an empty value in a transaction (the buffer uses
// empty for "deleted"), so values that are empty or start with 0xFF are
// stored with a 0xFF byte in front; all others, Axon's records included,
// are stored as they are.
//
// # Errors
//
//	client-go outcome                                  storage error
//	key not found                                      ErrNotFound
//	write conflict (prewrite found a newer write or    ErrConflict
//	  a newer lock), latch conflict, "retryable"
//	  (e.g. our locks were rolled back meanwhile),
//	  an inserted key that exists (assertion failed)
//	ErrResultUndetermined (lost answer to the          ErrUncertain
//	  primary's Commit RPC, UndeterminedResult)
//	any other failure after a Commit RPC was sent      ErrUncertain
//	  (context canceled or deadline, unknown errors)
//	any failure before a Commit RPC was sent (TSO,     ErrUnavailable
//	  prewrite RPC errors, region unavailable,
//	  backoff exhausted, context canceled)
//	failed reads, failed Begin                         ErrUnavailable
//	transaction or entry too large                     none (plain error)
//	engine or transaction closed                       ErrClosed
//
// Every error wraps client-go's with %w. Whether a Commit RPC was sent is
// tracked per transaction with an RPC interceptor.
//
// # Iteration
//
// An iterator merges the snapshot with the transaction's buffer (whose
// entries win, and whose deletions hide keys). client-go's own union
// iterator is not used: its buffer side panics once the transaction
// writes during the iteration, while this one reopens the buffer side
// just past the last key returned, so writes ahead of the position show.
//
// The snapshot side of a scan whose Limit hint is 0 or at least 1000 and
// whose range spans several regions is read region-parallel: the range is
// cut at the region borders known to the region cache and up to
// ScanConcurrency (default 4) workers scan consecutive pieces, each with
// its own Scanner at the start timestamp, while the consumer drains the
// pieces in order. Region changes during the scan are handled by each
// Scanner. Other scans use one Scanner with batches sized by the Limit
// hint; no scan stops before its bounds.
//
// Two client-go Scanner quirks are worked around: a reverse scan without
// an upper bound is located at the first region instead of the last (the
// bound is replaced by 32 bytes of 0xFF and any keys above are read
// forward), and a reverse scan whose batch ends exactly at a lower bound
// that starts a region would send an empty-range request to the wrong
// region (the iterator stops at the lower bound itself).
//
// # Sharing and closing
//
// Close waits for the operations in flight, stops scan workers, and makes
// open transactions fail with ErrClosed; a second Close returns nil.
// Share returns another handle on the same client: each user closes its
// own handle, and the client (for a mock, the in-process cluster) is
// released with the last.
//
// # Mock regions
//
// MockOptions.Regions = N splits the mock at the N-quantiles of a sample
// of raw keys (by default the 100,000 keys "/registry/pods/ns/pod-000000"
// on), turned into engine keys by MockOptions.Layout: the package knows
// nothing of Axon's key layout, so the caller passes it
// (core.RegionSplits, which cuts the history and latest spaces into N
// regions each, with a border at the start of each space and at the end
// of the latest space, so a list of keys distributed like the sample
// spreads evenly over N regions). SplitKeys sets the borders directly.
//
// NewMock also switches on, for the whole process, client-go's failpoint
// that reports every store live: the mock store cannot answer client-go's
// health probe, and without it a single failed send would wedge the
// engine for good.
package tikv
