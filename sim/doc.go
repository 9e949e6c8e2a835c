// Package sim is Axon's deterministic simulator: the same core that the
// server drives, driven instead in virtual time by one goroutine, with
// every choice drawn from one PCG seeded by the run's seed, so a failing
// seed replays bit for bit (Result.Hash is the trace's hash; a test checks
// it).
//
// A World holds three nodes (core.Member plus a small driver whose memory
// a crash wipes) over one faulty memkv engine, and clients with
// Kubernetes-like and etcd-like traffic, through leader and followers;
// the etcd clients also call the lease API as etcdctl and clientv3 do
// (leaseapi.go): grants of IDs they choose (some live, so refused) and
// above etcd's largest TTL, revokes of leases never granted or revoked
// already, time-to-live with and without keys, and lease lists; their
// compares take a key's lease or run over a range now and then, and
// their ranges, plain and in txns, name a revision to read at (a recent
// one, a compacted one, or one past the newest seen; some txns read
// there only once a compare saw a write past it, txnreads.go).
// Each seed draws its own mix of faults (plan.go): engine errors,
// unavailability and uncertain commits, crashes, pauses, partitions,
// message loss and duplication, clock jumps, leader transfers,
// compactions (physical ones, and ones past the newest revision, which
// etcd refuses), lease expiry; and of traffic: hot keys (most operations on
// 1–3 keys, counters incremented by Get-then-CAS loops, more clients) and
// clients that abandon calls (a timeout as short as one commit, or a
// cancel right after sending) that may still apply; slow watch readers,
// streams that carry several watches as clientv3's do (streams.go: from
// older revisions, on part of the keys, with filters, picked IDs and
// cancels, one RequestProgress answer for all), a small event ring, and serializable reads a follower answers at the
// newest commit point it learned; and auth (auth.go): the engine starts
// with a store of root, users and roles, the clients run as those users (a
// call names its user, as a client certificate would), and an admin client
// grants and revokes permissions (some from a key on) and roles among its
// traffic, and three in ten of its changes delete and add again roles
// and users, disable and enable auth, change a password, or are ones
// etcd refuses (a name that exists or is empty, root's protections, an
// unknown role, an invalid range), through leader and followers, under
// the same faults; users' compactions and lease revokes are checked as
// the server checks them; on some seeds the store is
// troubled: its commits often end uncertain, the leader's loads of it from
// a snapshot stall, and the admin backs off after a failed change, so
// loads run across failed changes and distrust windows pass unread; an
// etcd client raises members' NOSPACE alarms (alarm.go) and disarms them
// soon after, on some seeds, the lead moving after some raises; the etcd
// clients send a few requests etcd refuses or accepts at the edge of its
// rules (empty keys, ignore_value with a value, a key written twice on a
// path, --max-txn-ops and one more), and some seeds let the leader hold
// only a few writes in flight (core's MaxPending). Nodes
// check ranges, writes and compactions as the server does, with the
// driver's choice of store. After the client budget is spent the faults
// heal and every client must get a write through (to one of its keys as
// well, so a key left latched shows) and every watch must
// catch up (liveness).
//
// Then check.go resolves every call the clients could not tell about from
// the engine's revision records, and runs the checkers: no lost or
// unexplained write, a final state that is the replay of the events, every
// applied compare-and-swap on one key swapped the revision it compared (no
// lost update, counters count every increment), a linearizable history
// (linearizability) with every serializable read the store as of its
// revision and no node's serializable reads going back in time, every
// time-to-live and lease list fitting the history (its keys those the
// events attach to the lease at its revision, its remaining TTL within
// what the grant and keepalives promised, "not found" only once a revoke
// may have committed), etcd's guarantees on every watch stream, every permission
// decision fits an auth store between the newest change known before the
// request started (acknowledged, or applied although its commit failed,
// once its leader heard the commit's answer) and the newest committed
// before it was decided (authcheck.go: its own model of the store, with
// etcd's refusals, uncertain changes resolved by the engine's outcome of
// their transactions, the chain of applied changes checked against the
// engine's final store, every change that did not apply answered as
// etcd would have; a revoke judged on the keys the history shows
// attached; other lease calls, watches and puts that attach a lease are
// not judged), every write and lease grant refused for NOSPACE or
// accepted fits the alarm changes around it in real time (checkAlarms),
// and a snapshot (core.Export) that holds exactly the events
// since the compaction and the versions alive at it; core invariants run
// after every step, with one across nodes: a term is led by one node,
// once; and no engine read of a node meets a malformed record (a write
// whose key cache entry is newer than its snapshot does, and the driver
// only retries it). A crashed node's pending answers die with it.
//
// What the simulator runs and what it simulates: from the driver down,
// it runs the server's code. The loop that runs a call on the leader
// (driver.Lead), the watch stream from creation to the responses that go
// out (driver.WatchStream: outbox, previous values' read, fragments,
// progress, slow-watcher cut-off), the execution of work items
// (driver.StartWork, Job.Commit), a read's snapshot (driver.BeginRead),
// the auth checks (driver.AuthorizeLeader, driver.Authorize) and
// keepalives (driver.KeepAlive) are the server's own;
// so are the hubs every node serves its watches from and their feeds
// (driver.Feed), which the network carries here (feed.go);
// what stays here is the world around them: the network (net.go), the nodes' clocks and
// crashes (node.go), the engine's latency and faults, and the clients,
// which decode the streams as clientv3 does (fragments put together).
// What stays in server/ is gRPC: decoding, the handlers' goroutines and
// waits, encoding.
//
// Config's BreakDrift breaks an assumption, its Plants plant faults of
// the world, and its Knobs (driver.TestingKnobs) plant Axon's own bugs in
// the code the server runs, for tests that prove the checkers see what
// they are for. cmd/axon's `axon
// sim` runs one seed or a swarm; docs/testing.md tells how to run and
// replay seeds.
package sim
