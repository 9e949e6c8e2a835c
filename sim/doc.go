// Package sim is Axon's deterministic simulator: the same core that the
// server drives, driven instead in virtual time by one goroutine, with
// every choice drawn from one PCG seeded by the run's seed, so a failing
// seed replays bit for bit (Result.Hash is the trace's hash; a test
// checks it).
//
// A World holds three nodes (core.Member plus a small driver whose memory
// a crash wipes) over one faulty memkv engine, and clients with
// Kubernetes-like and etcd-like traffic. Each seed draws its own mix of
// faults (plan.go): engine errors, unavailability and uncertain commits,
// crashes, pauses, partitions, message loss and duplication, clock
// jumps, leader transfers, compactions, lease expiry. After the client
// budget is spent the faults heal and every client must get a write
// through and every watch must catch up (liveness).
//
// Then check.go resolves every call the clients could not tell about
// from the engine's revision records, and runs the checkers: no lost or
// unexplained write, a linearizable history (linearizability), and etcd's
// guarantees on every watch stream; core invariants run after every step.
// cmd/axon's `axon sim` runs one seed or a swarm.
package sim
