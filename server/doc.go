// Package server serves etcd's v3 API over a storage engine, in real time:
// it is the production side of package driver, as package sim is the
// simulated one. A Server owns one core.Member and the driver.Driver that
// runs it; it gives the driver a wall clock, an executor that runs work
// items on goroutines against the engine (driver.Run), and a peer
// transport, and it turns gRPC calls into driver calls. The ordering
// rules themselves live in core and driver (docs/design.md).
//
// Services (Register): KV (Range, RangeStream, Put, DeleteRange, Txn,
// Compact), Watch (start revision, prev_kv, filters, fragment, progress
// notify, RequestProgress), Lease (Grant, Revoke, KeepAlive, TimeToLive,
// Leases), Cluster (MemberList from the instances' presence records;
// membership changes answer Unimplemented), Maintenance (Status, Alarm,
// Defragment, Hash, HashKV, MoveLeader, Snapshot as an etcd snapshot),
// Auth, gRPC health, and the instances' own peer service (ReadIndex,
// Nudge, Follow).
//
// Several instances may share one engine; one leads. On a follower, unary
// calls that must run on the leader are forwarded to it (forward, lead:
// driver.Lead), LeaseKeepAlive streams are relayed to it (proxy.go), and
// reads run locally at a read index the leader gives (readSnapshot,
// driver.BeginRead). Every instance serves its clients' watches from its
// own hub, fed by the leader's revisions over the Follow peer stream
// (feed.go, driver.Feed). A leader reads at its own commit point. Members announce
// themselves in the engine (members.go); MoveLeader and Handoff hand the
// lead over.
//
// Around that: etcd's auth (auth.go, authsvc.go, simple and JWT tokens,
// client certificates; instance.go says which listener may serve which
// caller), the data format check at open (format.go), auto-compaction
// (compact.go), the space quota and the NOSPACE alarm (space.go), a failed
// engine answered as a stopped etcd member (iofail.go), admission of
// requests in flight (overload.go), a memory budget for the answers of
// reads (readmem.go), a faster decoder of write requests (codec.go),
// counts for paginated lists (counter.go), and Prometheus metrics with
// etcd's names where Axon has the same quantity (metrics*.go).
package server
