// Package faultload is the load and the checks of Axon's fault tests: a
// Kubernetes-shaped load (guarded creates, updates and deletes on
// contended keys, reads, paginated lists and prev_kv watches that relist
// when they end) from clients that know every endpoint, recorded as a
// history that is judged, once the faults are over, against the events
// the engine holds: porcupine and the revision-order check for
// linearizability, the watch checker for etcd's watch guarantees, and
// every acknowledged write applied, every applied revision made by one
// call. The in-process cluster tests of package server and the
// three-process tests of cmd/axon run the same load.
package faultload
