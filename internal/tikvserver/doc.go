// Package tikvserver serves PD's and TiKV's gRPC services on one address
// over client-go's in-memory mock store (mocktikv), so that a process
// running `axon serve --store tikv` goes through every layer of client-go
// production goes through — PD member discovery, the TSO stream, the
// region cache, BatchCommands, reconnects — where tikv.NewMock skips the
// network altogether. TiKV itself cannot run on the machines Axon is
// tested on; this is the closest thing that can.
//
// It is test and demo infrastructure, not an engine: the data lives in
// the process's memory and is lost when it exits.
//
// # How requests are answered
//
// TiKV calls, unary or inside a BatchCommands stream, are turned back into
// the tikvrpc.Request client-go built them from and handed to the mock's
// RPC client, the one tikv.NewMock uses in process; its response goes back
// as it is. PD calls (unary, and the Tso and QueryRegion streams) are
// answered from the mock cluster's regions and store, with the store's
// address set to the server's own, so client-go dials this server for
// TiKV calls too. Like PD, which embeds etcd, it also answers etcd's
// member list and PD's meta storage, which the clients read at start.
// Timestamps are the wall clock's milliseconds with a logical counter,
// never going back while the process lives. The cluster ID is drawn when
// the process starts: a new process is a new, empty cluster, and clients
// of the old one are refused instead of reading an empty store as theirs
// (PD's refusal makes client-go stop its process, as against a PD of
// another cluster; Restart keeps the cluster).
//
// # What it does not implement
//
// A method it does not implement answers codes.Unimplemented and is
// logged with its full name, and so is a BatchCommands entry (which ends
// its stream): a call client-go starts making after an upgrade is found,
// not hidden. Calls counts every method and batch entry served, and
// Unimplemented those it answered so.
//
// # Counting round trips
//
// Load, and its Collector for a metrics listener, count the requests
// answered as a client's round trips: a unary call, a BatchCommands entry,
// a request on the Tso or QueryRegion stream each count once, by type;
// opening a stream does not. They also count the busy periods, the times
// the requests in flight (from arrival to answer, the delay included) rose
// from none: with one client and nothing else calling, the sequential
// round trips of its operations. A benchmark reads them before and after
// a run and divides.
//
// # Faults
//
// Options inject what a real cluster does: a delay before each call, or
// each message of a stream; region errors (NotLeader without a leader, as
// during an election; EpochNotMatch with the current region; ServerIsBusy)
// answered before a TiKV request runs, which client-go retries on its own;
// a region split at a key inside it while serving; and Restart, which
// drops every connection and listens again on the same address after a
// pause, keeping the data.
package tikvserver
