// Package driver is everything between a host's gRPC handlers (or the
// simulator's clients) and the engine that is not IO, the same code in
// the server and in the simulator: it runs a core.Member, serialises
// calls into it, acts on its Ready (answers waiting requests, hands watch
// responses to their streams, starts work), backs retried work off by
// its attempt, and feeds results back with Done.
//
// Hosts use its typed API (api.go: Write, Grant, Revoke, KeepAlive,
// Compact, SetAlarm; Leading, Status, TimeToLive, ...); none reaches into
// core.Node, and the driver's lock is its own.
//
// A call that must run on the leader goes one way, Lead: an Attempt says
// where it runs — here, at the leader's address, or after a leader change
// — and the host's run callback does the IO, so no host code runs inside
// the driver's lock; the attempt keeps the rules (what is tried again,
// until when, what a forwarded call answers).
//
// A client's Watch stream is a WatchStream (watch.go): creation,
// cancellation, progress, the bounded outbox (outbox.go) and the cut-off
// of a slow watcher, the previous values' read and fragments. The host
// decodes requests and sends what Next returns.
//
// It also keeps the member's copy of the auth store and decides, per
// check, whether that copy may be used or the store must be read from the
// request's engine snapshot (LookAuth, LoadAuth, Authorize,
// AuthorizeLeader: the leader trusts its copy within its term, others
// read the store's counter every time), and runs the changes of the store
// on the leader, one at a time (ChangeAuth, through an AuthEngine): a
// permission revoked is never honoured by a request that starts after the
// revoke was acknowledged, or landed and its leader heard its commit
// fail, on any instance. Who a call runs as (tokens, certificates) is the
// server's business; the driver only picks the store.
//
// What differs between the two worlds comes in through small interfaces
// and callbacks: a Clock (wall time and timers, or virtual time), an
// Executor (engine IO on goroutines, or as simulated events with latency
// and faults), a Transport, and Hooks. Every callback API runs both on
// goroutines and in virtual time. Nothing here starts a goroutine or reads
// a clock of its own, so under the simulator a run replays by seed.
//
// The engine IO of a work item is here too, shared by both worlds
// (exec.go): StartWork begins its transaction and reads, or evaluates and
// buffers its writes (Apply), and Job.Commit commits, so that a host may
// let time pass between the halves (the simulator does); Outcome turns
// the commit's error into what core.Member.Done wants. Run, Recover and
// CatchUp do a whole item in one go for tests and tools. OpenFormat checks
// the store's format before anything is served from it (format.go).
//
// TestingKnobs plant Axon's own bugs here, so that the simulator finds
// them in the code the server runs. The driver is the one layer that
// knows both core and storage: core never sees an engine, and storage
// never sees core's keys.
package driver
