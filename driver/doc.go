// Package driver runs a core.Member against the outside world, the same
// code in the server and in the simulator: it serialises calls into the
// member, acts on its Ready (answers waiting requests, hands watch
// responses and role changes to hooks, starts work), backs retried work
// off by its attempt, and feeds results back with Done.
//
// What differs between the two worlds comes in through small interfaces:
// a Clock (wall time and timers, or virtual time), an Executor (engine
// IO on goroutines, or as simulated events with latency and faults) and
// Hooks. Nothing here starts a goroutine or reads a clock of its own, so
// under the simulator a run replays by seed.
package driver
