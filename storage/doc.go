// Package storage is the contract between Axon and a transactional
// key-value engine: snapshot-isolated transactions with ordered iteration,
// key locking and a logical clock, and the typed errors that tell the
// caller whether a failed commit was applied (ErrConflict: never;
// ErrUncertain: maybe, perhaps later; ErrUnavailable: never, retry).
//
// Beyond the contract an engine may have optional capabilities, each an
// interface of its own that callers find by type assertion: on the
// request path (Inserter, BatchReader, LockResolver) and for operating
// the engine (observe.go, operate.go). Engines declare the ones they
// have with compile-time checks.
//
// The package and its engines know nothing of core: what an engine needs
// of Axon's key layout, its caller hands it.
//
// The conformance suite in storage/storagetest states the contract as
// tests; every engine runs it.
package storage
