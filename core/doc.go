// Package core is Axon's pure state machine: it deals etcd revisions,
// orders the outcomes of engine transactions, advances the commit point,
// and releases responses and watch events in revision order. It reads no
// clock, starts no goroutine, takes no lock and does no IO: a driver (the
// gRPC server, or the deterministic simulator) feeds it inputs and runs
// the engine work it asks for. A test enforces this (purity_test.go).
//
// # Data model
//
// All state lives in a transactional engine under keys built by
// LatestKey, HistoryKey, RevisionKey, MetaKey and LeaseKey (see keys.go).
// A key's latest record carries its newest value and its touch revision:
// the highest revision that read or wrote it. History records keep every
// version for reads at a revision and for prev_kv. A revision record per
// dealt revision lists its events (the durable event index) or marks it
// fenced.
//
// # Order of truth
//
// Revision order is the linearization order. A write at revision r may
// use a key only if the key's touch revision is below r; otherwise the
// work is late, its revision becomes a no-op and the request is dealt
// again. Keys a request only reads are touched too (written back), so a
// delayed earlier revision cannot slip a write under a later read. Work
// that reads or deletes a key range is serial: it is handed out only when
// every revision dealt before it is final. Responses are released only
// when the commit point C has passed their revision; the header revision
// of a write is its own revision, of a read C.
//
// # Revisions only for changes
//
// As in etcd, the revision moves only when a key changes: kube-apiserver's
// watch cache answers 410 Gone to a watch that resumes across a revision
// it never saw an event for. So a request is dealt its revision only once
// it is known to change keys. A plain put surely does and is dealt when it
// is handed out; any other request (a txn, a delete, a lease grant or
// revoke) goes out undealt. The driver evaluates it in its engine
// transaction; if it changes keys, the driver calls Deal, which gives it
// the next revision, and evaluates it again there (reads come from the
// first pass). If it changes nothing (a failed compare, a delete of a
// missing key, a put etcd refuses, a grant, a revoke of a lease without
// keys) it is never dealt: it writes at most a lease record, and its
// answer is a read at the newest revision dealt when it is reported (in a
// WorkBatch, the revision below the next request of the batch that was
// dealt), released once C reaches it. Its keys stay latched until then,
// so no write to them falls between its read and that revision. Dealing
// after the read keeps the order: every write a read saw was dealt
// before it. A revision is still spent on a fenced attempt (an engine
// conflict or an uncertain commit that did not land): those are rare
// and happen only under engine faults.
//
// # Contention
//
// Before a request is dealt it takes latches on the keys it reads or
// writes (ranges on their span, a lease revoke on every key; latch.go).
// A request that overlaps an earlier one still in flight waits, undealt,
// until that one's outcome is final, so requests on one key are dealt in
// arrival order and none finds its key touched by a later revision. When
// a latch is released, the requests queued behind it go out together as
// one WorkBatch: one engine transaction, each at its own revision,
// evaluated in order, so one commit serves a hot key's whole queue (as
// one raft entry batch does in etcd). The engine's conflict check stays
// the safety net: late work and conflicts still fence and deal again, and
// only an engine that keeps failing exhausts a request's attempts.
//
// # Writing a driver
//
// A driver owns one Node and serialises calls into it (a mutex, or one
// goroutine). Its loop:
//
//  1. Recover the State from an engine snapshot (Recover) and NewNode.
//  2. Feed inputs: Propose for Put, DeleteRange and Txn; Compact;
//     AddWatch, CancelWatch. Validation errors come back at once.
//  3. Call Ready and act on every output:
//     - Work: for WorkRequest, WorkBatch, WorkFence, WorkCompact,
//     WorkSweep, WorkElect and WorkAlarm, begin an engine transaction,
//     evaluate the work against it (Evaluate; undealt work twice, with Deal between
//     when Effects.NeedsRevision; for WorkBatch each request in order,
//     applying its writes before evaluating the next, with the effects in
//     Effects.Batch — storage/exec.Apply does all of this), apply
//     Effects.Writes, commit unless Effects.Late, and Report the work with
//     its Effects and the Outcome: Committed, NotApplied (definite
//     failure) or Uncertain. Work items are independent and may run
//     concurrently, in any order; back off by Work.Attempt, and start
//     delayed work only if Member.Owns it after a Tick. For WorkCatchUp, read ReadEvents(From, To) in a
//     snapshot and hand the result to CatchUpDone.
//     - Responses: deliver each to the client waiting on its RequestID.
//     - WatchResponses: deliver in order per watch.
//  4. Repeat from 2 with whatever arrives next.
//
// Linearizable reads need no work item: take an engine snapshot after
// reading Committed and run Range against it (it is pure, run it outside
// the lock). Progress tells when a progress notification may be sent.
//
// An uncertain outcome is resolved by fence work (evaluateFence): if the
// revision record is present the write applied, else the fence writes a
// fenced record, so a delayed copy of the transaction conflicts and can
// never land. The commit point waits for the fence.
package core
