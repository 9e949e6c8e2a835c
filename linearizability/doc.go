// Package linearizability checks what clients of an etcd-compatible store
// saw: a porcupine model for the KV, lease and compaction API, and a
// checker for the guarantees of one watch stream. The simulator records
// every client operation and every watch response, then asks this package
// whether some legal order explains them all.
//
// # Recording
//
// A Recorder takes Call and Return in virtual time. A client that got no
// definite answer (timeout, lost connection) marks its operation Unknown:
// it may take effect at any moment after its call, so it returns at
// +infinity. Left like that it is expensive and vague, so the simulator,
// which resolves every uncertain revision by fencing, says what really
// happened: Patch with the real response, or Drop if it never applied.
//
// # The model
//
// The state is the store as a client can observe it: the alive keys with
// their create/mod revisions, versions and leases; the current revision;
// the compact revision; the live leases; and the chain of applied write
// revisions, so reads at a past revision can be answered.
//
// Revision numbers are Axon's order of truth, but they are not contiguous:
// a dealt revision may end as a no-op. So the model never predicts a
// revision, it checks the one the response carries. An operation that
// changes keys at revision r needs r above the current revision, and every
// key it writes gets r. An operation that changes no key (a read, a txn
// whose branch only reads, a delete that found nothing, a lease grant, a
// compaction) carries a header revision h no lower than the current one;
// it sees the state at h and the state moves to h, so no later write can
// claim a revision at or below it. Within those rules the model computes
// exactly what etcd answers (compares, both txn branches and nested txns,
// range count/limit/more/keys_only/sort/filters, prev_kv, a txn's ranges
// at a revision, which read the store as of it without the txn's own
// writes and fail if they name the txn's own revision) and compares it
// with what the client got. A known error (compacted, future revision,
// lease not found or existing, key not found) must be what etcd would
// answer in that state; one of etcd's gRPC layer (an empty key, a value
// or lease beside ignore_value or ignore_lease, more operations than
// MaxTxnOps, a key written twice on one path) what it answers whatever
// the state, and a request it refuses must not be accepted.
//
// Every response must carry its header revision, and only linearizable
// reads belong in the history: a serializable read may be stale by design.
//
// # What the model does not check
//
//   - Header fields other than the top revision, and lease TTLs (servers
//     raise them to a minimum); lease expiry is not modelled: record an
//     expiry as a LeaseRevoke, and record auto-compaction as a Compact.
//   - Unknown errors: an error text the model does not know is taken as a
//     definite failure that changed nothing. Record uncertain ones as
//     Unknown.
//   - An Unknown operation never patched is modelled as applied at the
//     revision after the current one (or not at all): if it applied at a
//     later revision and someone saw it, the check reports a violation.
//     Patch or Drop every uncertain write.
//   - ErrFutureRev is accepted for any revision above the highest one a
//     client saw: revisions dealt but never observed are invisible.
//   - Range sorts on a target other than the key: keys that tie may come
//     in any order, so only the sequence of target values is fixed.
//
// # Watch
//
// CheckWatch replays one watcher's responses against the committed
// events and reports the first broken guarantee: order, uniqueness,
// atomicity of a revision, no gaps, the start revision, prev_kv and
// IsCreate, filters, progress notifications that run ahead of events,
// and cancellation for compaction when none was needed.
package linearizability
