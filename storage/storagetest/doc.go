// Package storagetest is the conformance suite of the storage contract.
//
// Every engine's tests call Run with a function that opens a fresh, empty
// engine:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Engine { return memkv.New() })
//	}
//
// Run states the contract of package storage as subtests: point reads and
// writes with storage.ErrNotFound; read-your-own-writes for Get and Iter;
// snapshot isolation; first-committer-wins conflicts on written and locked
// keys (storage.ErrConflict, nothing applied); ordered iteration in both
// directions with exact bounds over binary keys; the ownership of byte
// slices passed in and handed out; the logical clock (StartTS); use after
// Commit, Rollback and Close (storage.ErrClosed); and two concurrent
// read-modify-write workloads whose final state must account for exactly
// the commits that succeeded — the second a compare-and-swap race on two
// keys while other goroutines open and release snapshots, where no two
// successful commits may have read the same version (a lost update).
// Engines that prune conflict state as snapshots end should also run the
// suite configured to prune as often as they can (badger does).
//
// The suite only checks what every engine must do. Engines may be stricter
// (badger, for instance, also conflicts on keys a writing transaction has
// read), so no test expects a commit to succeed when the transaction read a
// key that a concurrent transaction wrote. Uncertain outcomes
// (storage.ErrUncertain) cannot be provoked portably; memkv tests them.
//
// Run closes each engine when its subtest ends; engines' Close must
// therefore tolerate being called twice if open also arranges a Close.
package storagetest
