// Package server is the real-time driver of Axon's core: the etcd v3 gRPC
// services over a storage engine. It serialises calls into one core.Node
// under a mutex, runs the engine work the node hands out on goroutines
// (storage/exec), and delivers responses and watch events in the order
// the node produces them.
//
// Implemented: KV (Range, Put, DeleteRange, Txn, Compact), Watch (create
// with start revision, prev_kv and filters, cancel, RequestProgress),
// Lease (Grant, Revoke, KeepAlive, TimeToLive, Leases; expiry by a
// ticker), Maintenance Status and Defragment, Cluster MemberList, gRPC
// health.
package server
