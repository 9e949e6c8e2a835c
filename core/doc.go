// Package core is Axon's pure state machine: it deals etcd revisions,
// orders the outcomes of engine transactions, advances the commit point,
// and releases responses and watch events in revision order. It reads no
// clock, starts no goroutine, takes no lock and does no IO: a driver (the
// gRPC server, or the deterministic simulator) feeds it inputs and runs
// the engine work it asks for. A test enforces this (purity_test.go).
//
// docs/design.md tells the whole design: the data model, the ordering
// rules and why they hold, and a Put and a watch event followed through
// the code. What follows is what a reader of this package needs.
//
// # Data model
//
// All state lives in a transactional engine under keys built by
// LatestKey, HistoryKey, RevisionKey, MetaKey and LeaseKey (see keys.go).
// A key's latest record carries the metadata of its newest version
// (revisions, version, lease, or a tombstone) and its touch revision: the
// revision that last wrote it. History records keep every
// version, values included, for reads at a revision and for prev_kv. A
// value is stored once, in the history record of its version: the latest
// record, rewritten by every write, holds none, and a read takes the
// value from history (a list by one scan over its page's history, see
// readValues). Compaction keeps the newest version of every key at or
// below the compact revision, so a live key's value is always there. A
// revision record per dealt revision lists its events (the durable event
// index) or marks it fenced.
//
// # Revision records
//
// Revision records are spread over RevisionShards (16) shards, shard =
// rev mod 16, each sorted by revision: every write writes one, and a key
// space that grew with the revision would put every write transaction
// into the region holding its tail (on TiKV, one Raft group would take
// every write). A TiKV cluster splits the revision space by size into
// few regions (records are small), then by load at the shard borders
// (RevisionShardStart), so up to 16 regions each take 1/16 of the
// writes; the latest and history spaces split along the keys. A scan by
// revision (ReadEvents, Recover's highest revision, Export, the sweep)
// merges the shards; the fence of revision r reads RevisionKey(r), in
// its shard.
//
// A write's revision record is a Write with New set: the key must not
// exist when the transaction commits. The engine checks that (a TiKV
// assertion at prewrite, memkv at apply; engines without one read the
// key first), so no read of it costs a round trip. A record already
// there would be another leader's write at the same revision, from an
// engine that applied a deposed leader's transaction past its deadline;
// the commit then fails (definitely), the revision is fenced and the
// request dealt again. A record written after the transaction began (a
// fence) conflicts with it as any write-write conflict does.
//
// # Reads a driver may batch
//
// WorkLookahead and RangeLookahead predict the first reads of an
// evaluation: a key's latest record and, where the request reads it, its
// newest history record (the value); a write alone reads no value (see
// "Previous values" in prev.go). A driver whose engine pays a round trip
// per read issues them together before evaluating (driver.Reader),
// so a create, an update or a failed compare reads in one round trip.
// Evaluation still reads through the Reader: predictions only save time.
//
// # Order of truth
//
// Revision order is the linearization order. A write at revision r may
// use a key only if the key's touch revision (the revision that last
// wrote its latest record) is below r; otherwise the work is late, its
// revision becomes a no-op and the request is dealt again. Work that
// reads or deletes a key range is serial: it is handed out only when
// every revision dealt before it is final. Responses are released only
// when the commit point C has passed their revision; the header revision
// of a write is its own revision, of a read C.
//
// # Touches
//
// Keys a request only reads (a compare on one key, a write to another)
// are not written back. Two things order a later request after every
// earlier one that uses its keys, so a delayed earlier revision cannot
// slip a write under a later read:
//   - on one leader, latches: a request waits, undealt, until every
//     earlier request on an overlapping key has a final outcome (fenced,
//     if uncertain), so it never runs beside one;
//   - across leaders, the takeover: a new leader serves only after its
//     predecessor's lease, the engine deadline and the drift bound have
//     passed (its writes landed or never will; on TiKV its locks are
//     settled at recovery), and a handover drains first.
//
// Within these rules a touch at or above r can only come from another
// leader's write, which the timing model says cannot happen. The late
// check costs no IO, so it stays, and refuses work whose premises are
// broken.
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
// # Auth
//
// etcd's auth store is package core/auth: engine data next to the KV
// records, which the driver checks requests against before dealing them.
// The node never sees it.
//
// # Writing a driver
//
// A driver runs one Member per instance; several instances share one
// engine and elect a leader through a record in it. Package driver is
// the driver both the server and the simulator use; a third needs only
// what follows. The driver serialises every call into the Member (a
// mutex, or one goroutine) and gives it the time:
//
//  1. NewMember(cfg). Call Tick(now) before every other call, with the
//     instance's clock (clocks may disagree by at most cfg.MaxDrift); a
//     leader whose lease has run out steps down in Tick, before it can
//     hand out more work.
//  2. Feed inputs to the leader's Node (Member.Node is nil on a
//     follower): Propose for Put, DeleteRange and Txn; Grant, Revoke and
//     KeepAlive for leases; Compact and AwaitSweep; AddWatch, CancelWatch
//     and RequestProgress. Each request carries a RequestID the driver
//     chose; its answer, or its validation error, comes back as a
//     Response with that ID (a keepalive's at once, unless the lease's
//     time is up: then once the expiry's revoke commits).
//  3. Call Ready and act on every output, in order:
//     - Work: run each item in its own engine transaction — begin,
//     Evaluate (undealt request work: when Effects.NeedsRevision, Deal
//     it, then Redeal it with those Effects, which finishes the
//     evaluation at the dealt revision; a WorkBatch's requests in
//     order, each seeing the writes of those before it; driver.Apply
//     does all this), apply Effects.Writes, commit unless Effects.Late or nothing
//     is written — and call Done(w, Result{Effects, Outcome}), the
//     Outcome being Committed, NotApplied (definitely not applied) or
//     Uncertain. WorkCatchUp reads ReadEvents(From, To) instead and
//     reports Result{Events, Last} (or Err); WorkRecover reads Recover
//     and reports Result{State} (or Err). A commit must land within
//     cfg.EngineDeadline/2 of its begin or not at all: that bound is
//     what lets a successor start safely. Items are independent and may
//     run concurrently and in any order; back off by Work.Attempt, and
//     start delayed work only if Owns(w) after a Tick.
//     - Responses: answer the client waiting on each RequestID. When
//     RoleChanged shows the member lost its Node, the requests still
//     waiting will never be answered: answer them "leader changed" (their
//     outcome is unknown).
//     - WatchResponses: deliver in order per watch, before the lock is
//     released (a Requested progress response answers RequestProgress for
//     the stream). A response that lists Unread events must have their
//     previous values read before it is sent: ReadPrevValues in an engine
//     snapshot, outside the lock, retried while the engine fails, the
//     stream's later responses waiting behind it (driver.ReadPrev;
//     "Previous values" in prev.go).
//     - HandedOff: tell the successor named in the record to look now.
//  4. Repeat with whatever arrives next: a request, a finished work item,
//     a timer (Tick at least every cfg.RenewEvery/2).
//
// One error means "not applied here, ask the leader": ErrNotLeader (this
// member does not lead, or is handing over); ErrNoLeader says none is
// known. A follower sends writes to the leader named by Leader() and
// never re-sends one whose answer was lost: it may have applied.
// driver.Attempt makes these choices for a call and leaves the IO to its
// host: Driver.Begin, then Next with each answer says run here, send to
// the leader at an address, wait for a leader change
// (Driver.AwaitLeader), or done.
//
// Reads need no work item. Where Serving is true, read at Node.Committed
// in an engine snapshot with Range (pure: run it outside the lock); a
// follower asks the leader for its Committed (a read index) and reads at
// that. A streamed range (RangePages) reads page after page from the same
// snapshot, which the driver keeps open until the last. Transfer hands the lead to another member: it drains, writes the
// successor's record, and steps down.
//
// An uncertain outcome is resolved by fence work (evaluateFence): if the
// revision record is present the write applied, else the fence writes a
// fenced record, so a delayed copy of the transaction conflicts and can
// never land. The commit point waits for the fence.
package core
