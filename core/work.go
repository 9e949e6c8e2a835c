package core

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// RequestID names a client request across its attempts; the driver picks
// it and gets it back with the response.
type RequestID uint64

// WorkKind says what a work item asks the driver to run.
type WorkKind uint8

const (
	// WorkRequest evaluates a write request. It comes undealt (Rev 0)
	// unless it surely writes: the driver evaluates it once, calls Deal
	// only if it changes keys, and evaluates it again at that revision
	// (driver.Apply does). A request that changes nothing takes no
	// revision, as in etcd.
	WorkRequest WorkKind = iota + 1
	// WorkFence resolves an uncertain revision (docs/design.md,
	// "Uncertain writes and fences").
	WorkFence
	// WorkCompact stores a new compact revision.
	WorkCompact
	// WorkCatchUp reads events for a watcher behind the ring.
	WorkCatchUp
	// WorkElect compares-and-swaps the election record (Member).
	WorkElect
	// WorkRecover reads the State a new leader starts from (Recover).
	WorkRecover
	// WorkAlarm stores the NOSPACE alarm's state (SetNoSpace).
	WorkAlarm
	// WorkSweep deletes one batch of what compaction made unreachable
	// (Evaluate runs SweepStep); the node hands out the next when it is
	// reported, until the sweep is done.
	WorkSweep
	// WorkBatch carries requests on overlapping keys that were waiting
	// for one another: run them in one engine transaction, each at its
	// own revision, in order, applying each one's writes before the next
	// is evaluated (driver.Apply does), and report the batch once with
	// Effects.Batch. One commit serves a hot key's whole queue.
	WorkBatch
)

// String names the kind for logs and traces (DescribeWork, which also
// shows keys and values, is for traces only).
func (k WorkKind) String() string {
	switch k {
	case WorkRequest:
		return "request"
	case WorkFence:
		return "fence"
	case WorkCompact:
		return "compact"
	case WorkSweep:
		return "sweep"
	case WorkCatchUp:
		return "catch-up"
	case WorkElect:
		return "election"
	case WorkRecover:
		return "recovery"
	case WorkAlarm:
		return "alarm"
	case WorkBatch:
		return "batch"
	}
	return fmt.Sprintf("WorkKind(%d)", uint8(k))
}

// Work is one engine transaction for the driver to run: begin a
// transaction, Evaluate (or ReadEvents for catch-up, Recover for a
// recovery read) against it, apply the writes, commit, then Done.
type Work struct {
	Kind    WorkKind
	Rev     int64 // dealt revision (WorkRequest, WorkFence); 0 until Deal
	ID      RequestID
	Request *pb.RequestOp
	// Lease is set instead of Request for a lease grant or revoke.
	Lease *LeaseOp
	// Elect is the election CAS of WorkElect.
	Elect *ElectOp
	// Serial work was held until every earlier revision was final.
	Serial bool
	// Committed and Compacted as of dealing, for reads at a revision.
	Committed, Compacted int64
	// Attempt counts earlier attempts of the same request or fence; the
	// driver backs off by it.
	Attempt int
	// Term of the node that handed it out (stored in revision records);
	// a report from an earlier term is dropped.
	Term int64
	// Watch and From/To address a catch-up read.
	Watch    WatchID
	From, To int64
	// Raise and AlarmMember are WorkAlarm's change of a member's NOSPACE
	// alarm; Alarmed the members raised after it, in order.
	Raise       bool
	AlarmMember uint64
	Alarmed     []uint64
	// Batch is WorkBatch's requests, in revision order.
	Batch []*Work
	// Sweep is WorkSweep's progress before its batch.
	Sweep *Sweep
	// latch is the request's claim on its keys, carried across attempts.
	latch *latch
	// after is the revision C must reach before the work goes out
	// (serial work, and retries of undealt work); it waits in held.
	after int64
	// seen is, for undealt work, the newest revision it may find a key
	// touched at: this node latched its keys, so a touch above it is
	// another leader's write, and the work is late.
	seen int64
	// batch is the WorkBatch a request runs in, if any.
	batch *Work
	// fresh says no record can exist at Rev (Config.FreshFrom).
	fresh bool
	// knobs are the node's planted bugs its evaluation honours
	// (TestingKnobs).
	knobs TestingKnobs
}

// Outcome is what the engine said about a work's commit.
type Outcome uint8

const (
	// Committed: the transaction was applied.
	Committed Outcome = iota + 1
	// NotApplied: the transaction definitely was not applied (conflict,
	// definite error, unavailable, or evaluation said late/failed).
	NotApplied
	// Uncertain: the engine did not say; it may apply it, even later.
	Uncertain
)

// String names the outcome for logs and traces.
func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case NotApplied:
		return "not-applied"
	case Uncertain:
		return "uncertain"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Response is a request's answer, released in revision order. ID 0 marks
// the node's own work (a lease expiry): no client waits for it.
type Response struct {
	ID RequestID
	// Rev is the header revision: the request's own if Wrote, else the
	// revision its answer was read at.
	Rev      int64
	Wrote    bool
	Response *pb.ResponseOp
	// Lease is the lease a grant created or a keepalive renewed (its TTL
	// in LeaseTTL).
	Lease, LeaseTTL int64
	Err             error
}

// Ready is what the node asks of its driver since the last call.
type Ready struct {
	// Work to run, in any order and concurrently.
	Work []*Work
	// Responses to deliver to waiting clients.
	Responses []Response
	// WatchResponses to deliver, in order per watch.
	WatchResponses []WatchResponse
	// Committed is the commit point C after these outputs.
	Committed int64
	// RoleChanged: the member became leader or stopped leading. On
	// losing the lead, requests still waiting will not be answered.
	RoleChanged bool
	// HandedOff is the record of a successor this member just handed
	// leadership to: tell it at once rather than let it notice.
	HandedOff *ElectionRecord
}

// Result is how a work item ended, the driver's one report of it
// (Member.Done, Node.Done):
//   - transactional work: Effects, Evaluate's result (nil if evaluation
//     itself failed), and the Outcome of the commit;
//   - WorkCatchUp: the Events of revisions From..Last that ReadEvents
//     read, or Err;
//   - WorkRecover: the State Recover read, or Err.
//
// Err of transactional work is for the driver's log only: the Outcome
// says what became of it.
type Result struct {
	Effects *Effects
	Outcome Outcome
	Events  []Event
	Last    int64
	State   State
	// Compacted is the compact revision a catch-up read found in its
	// snapshot (0: not read), so that a hub that learned of a compaction
	// late never takes swept history for none.
	Compacted int64
	Err       error
}
