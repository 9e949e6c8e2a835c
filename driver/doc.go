// Package driver runs a core.Member against the outside world, the same
// code in the server and in the simulator: it serialises calls into the
// member, acts on its Ready (answers waiting requests, hands watch
// responses and role changes to hooks, starts work), backs retried work
// off by its attempt, and feeds results back with Done.
//
// It also keeps the member's copy of the auth store and decides, per
// check, whether that copy may be used or the store must be read from the
// request's engine snapshot (LookAuth, LoadAuth: the leader trusts its
// copy within its term, others read the store's counter every time), and
// runs the changes of the store on the leader, one at a time
// (ChangeAuth, through an AuthEngine): a permission revoked is never
// honoured by a request that starts after the revoke was acknowledged,
// or landed and its leader heard its commit fail, on any instance. Who a call runs as (tokens, certificates) is the
// server's business; the driver only picks the store.
//
// A call that must run on the leader goes one way: the host asks an
// Attempt (Begin, Next) where it runs — here, at the leader's address,
// or after a leader change — and does that itself, so no host code runs
// inside the driver on a write; the attempt keeps the rules (what is
// tried again, until when, what a forwarded call answers).
//
// What differs between the two worlds comes in through small interfaces:
// a Clock (wall time and timers, or virtual time), an Executor (engine
// IO on goroutines, or as simulated events with latency and faults) and
// Hooks. Nothing here starts a goroutine or reads a clock of its own, so
// under the simulator a run replays by seed.
//
// The engine IO itself is here too, shared by both worlds (exec.go):
// Apply evaluates a work item inside an engine transaction and buffers
// its writes; Outcome turns the commit's error into what core.Member.Done
// wants; Run, Recover and CatchUp do a whole item in one transaction for
// executors that do not split begin from commit (the server's; the
// simulator's splits them to interleave other work in virtual time).
// OpenFormat checks the store's format before anything is served from it
// (format.go). The driver is the one layer that knows both core and
// storage: core never sees an engine, and storage never sees core's keys.
package driver
