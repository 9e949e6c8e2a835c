// Package storage is the contract between Axon and a transactional
// key-value engine: snapshot-isolated transactions with ordered iteration,
// key locking and a logical clock, and the typed errors that tell the
// caller whether a failed commit was applied (ErrConflict: never;
// ErrUncertain: maybe, perhaps later; ErrUnavailable: never, retry).
//
// The conformance suite in storage/storagetest states the contract as
// tests; every engine runs it.
package storage
