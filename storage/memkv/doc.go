// Package memkv is a deterministic, in-memory, multi-version implementation
// of storage.Engine that can be told to misbehave.
//
// It exists for the simulator and for tests. The store is an ordered B-tree
// (github.com/google/btree) of keys, each with its list of committed
// versions. Every commit that writes or locks something takes the next value
// of an internal counter as its commit timestamp; Begin takes the current
// counter as the transaction's snapshot (Txn.StartTS). Commit fails with
// storage.ErrConflict when any key the transaction wrote or locked was
// written or locked by a commit newer than the snapshot (first committer
// wins); nothing is applied then. A committed Lock leaves no version behind
// but still counts as a newer commit of the key for later committers.
//
// # Time and determinism
//
// The engine never reads the clock, never sleeps and starts no goroutines.
// Its notion of time is whatever the driver last passed to SetNow. Latency
// is not waited for: each Txn accumulates the virtual Delay of its
// operations (Txn.Delay) and the driver decides what to do with it. Driven
// from one goroutine with a deterministic Injector, every outcome, and the
// Hash of the final state, is the same on every run. A mutex makes the
// engine safe for concurrent use as well (the conformance suite needs it).
//
// # Faults
//
// An Injector is asked for a Fault before every Begin, Get, Iter and Commit
// (in the style of pebble's vfs/errorfs). A Fault adds latency and picks one
// of the FaultKinds:
//
//   - FaultError: the operation fails with an error wrapping ErrInjected.
//     This is a definite failure: nothing is applied.
//   - FaultUnavailable: storage.ErrUnavailable; nothing is applied.
//   - FaultUncertainNotApplied: Commit returns storage.ErrUncertain and the
//     transaction is never applied.
//   - FaultUncertainApplied: the transaction is committed now (if it does not
//     conflict) and Commit still returns storage.ErrUncertain.
//   - FaultUncertainAppliedLater: Commit returns storage.ErrUncertain and the
//     engine holds the transaction until virtual time reaches now+ApplyAfter.
//     Then it re-checks conflicts against everything committed since its
//     snapshot and is dropped if any key of its write or lock set was
//     written or locked meanwhile — which is how a fencing transaction
//     defeats a delayed one. Otherwise it commits with a fresh timestamp.
//
// The uncertain kinds only mean something for Commit; on Begin, Get and
// Iter they are ignored (their Delay still counts). SetUnavailable opens
// windows of virtual time in which every operation fails with
// storage.ErrUnavailable without asking the Injector. Txn.Outcome tells a
// test or the simulator what really became of a transaction, which the
// caller of Commit is not allowed to know.
//
// A Fault may also plant a bug: with SkipConflictCheck the commit applies
// without its conflict check (a lost update, as when Badger dropped a
// snapshot from its conflict-tracking set); with StaleBy a Begin takes
// the snapshot of that many commits ago, so it misses transactions that
// committed before it was called (as a transaction handed a stale or
// zero timestamp by TiKV's PD client did). No Rates draw them; the
// simulator's tests of those bug classes set them, and checks must then
// fail.
//
// NewRandomInjector draws faults from a seeded math/rand/v2 generator;
// Static and InjectorFunc are for tests.
//
// Old versions are never garbage collected: memkv is meant for bounded runs.
package memkv
