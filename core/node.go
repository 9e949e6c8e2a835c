package core

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
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

// maxBatch bounds the requests of one WorkBatch.
const maxBatch = 64

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

// Config tunes a node.
type Config struct {
	// RingSize is how many recent events stay in memory (default 65536).
	RingSize int
	// RingBytes bounds what those events weigh, values and previous
	// values included (default 32 MiB; negative: no bound).
	RingBytes int64
	// MaxTxnOps is etcd's --max-txn-ops (default 128).
	MaxTxnOps int
	// MaxAttempts bounds how often one request is dealt again after
	// conflicts, lateness or engine failures (default 64).
	MaxAttempts int
	// CatchUpBatch bounds the revisions one catch-up read covers.
	CatchUpBatch int
	// MaxPending bounds the write requests admitted and not yet final
	// (dealt or waiting in latches); past it Propose answers
	// ErrTooManyRequests, as etcd does when its apply falls 5,000
	// entries behind (default 10,000).
	MaxPending int
	// MinLeaseTTL is the smallest lease TTL granted, in seconds (etcd
	// derives it from its election timeout; default 2).
	MinLeaseTTL int64
	// SweepBatch bounds the records one compaction sweep batch reads
	// (default 512).
	SweepBatch int
	// Term is the leadership term the node deals in (Member sets it).
	Term int64
}

func (c Config) withDefaults() Config {
	if c.RingSize <= 0 {
		c.RingSize = 1 << 16
	}
	if c.RingBytes == 0 {
		c.RingBytes = 32 << 20
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = 128
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 64
	}
	if c.CatchUpBatch <= 0 {
		c.CatchUpBatch = 1024
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 10000
	}
	if c.MinLeaseTTL <= 0 {
		c.MinLeaseTTL = 2
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = 512
	}
	return c
}

// State is what a node starts from, read from the engine by Recover.
type State struct {
	// Committed is the highest revision stored: everything at or below
	// it is final.
	Committed int64
	Compacted int64
	Leases    []LeaseState
	// NoSpace: the NOSPACE alarm is raised, by the members Alarmed.
	NoSpace bool
	Alarmed []uint64
}

type slotState uint8

const (
	slotRunning   slotState = iota + 1 // work out at the driver
	slotUncertain                      // fence out at the driver
	slotApplied
	slotNoop
)

// slot tracks one dealt revision until the commit point passes it.
type slot struct {
	state slotState
	work  *Work
	eff   *Effects // evaluation result, kept while uncertain
	// retried: the request already went on under a new revision; the
	// fence only marks this one.
	retried bool
}

// Node is the pure state machine of one Axon leader: it deals revisions,
// orders outcomes, advances the commit point, and releases responses and
// watch events in revision order. It is not safe for concurrent use: the
// driver serialises calls. It never blocks, reads a clock or does IO.
type Node struct {
	cfg       Config
	next      int64 // next revision to deal
	committed int64 // C
	compacted int64
	slots     map[int64]*slot
	// held is serial work waiting for C to reach its after revision.
	held []*Work
	// out is request work handed out undealt: it may still call Deal.
	out map[*Work]struct{}
	// answers of requests that wrote nothing, waiting for C to reach
	// the revision they were read at.
	answers []Response
	// leaseSeq numbers the lease IDs the node picks in its term.
	leaseSeq int64
	ring     *Ring
	watch    watchers
	leases   leases
	ready    Ready
	latches  latches
	// draining refuses new writes while leadership is handed over.
	draining bool
	// alarmed are the members whose NOSPACE alarm is raised; alarming
	// says a WorkAlarm is out, alarms are the changes asked for meanwhile.
	alarmed  []uint64
	alarming bool
	alarms   []*Work
	// compacting is the compact revision being stored, if above
	// compacted; a second request for it or below fails, as in etcd.
	compacting int64
	// compactQueue holds compactions asked for while one is stored: they
	// take effect in order, each judged against the one before (a lower
	// one stored after a higher one answered would be out of order).
	compactQueue []compactAsk
	sweep        sweeper
}

// NewNode returns a node that continues from st.
func NewNode(cfg Config, st State) *Node {
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:       cfg,
		next:      st.Committed + 1,
		committed: st.Committed,
		compacted: st.Compacted,
		slots:     make(map[int64]*slot),
		out:       make(map[*Work]struct{}),
		ring:      NewRing(cfg.RingSize, st.Committed+1),
		watch:     newWatchers(st.Compacted),
		leases:    newLeases(st.Leases),
		latches:   newLatches(),
		alarmed:   st.Alarmed,
	}
	if st.NoSpace && len(n.alarmed) == 0 {
		n.alarmed = []uint64{AnyMember}
	}
	n.ring.SetByteLimit(cfg.RingBytes)
	if st.Compacted > 1 {
		// Finish what a predecessor's sweep may have left.
		n.sweepTo(st.Compacted)
	}
	return n
}

// Committed returns the commit point C: reads at C see every write whose
// response was released.
func (n *Node) Committed() int64 { return n.committed }

// Compacted returns the compact revision.
func (n *Node) Compacted() int64 { return n.compacted }

// Compacting is the highest compact revision asked for: above Compacted
// while a compaction is being stored.
func (n *Node) Compacting() int64 { return max(n.compacting, n.compacted) }

// InFlight returns how many dealt revisions are above C, plus the work
// out undealt and the answers waiting for C.
func (n *Node) InFlight() int { return len(n.slots) + len(n.out) + len(n.answers) }

// Drained reports that nothing this node handed out can still change the
// engine's records: no request in flight and no compaction or alarm being
// stored. A handover waits for it: the successor recovers at once, and a
// compact revision stored after its recovery would leave it believing
// history it cannot read is still there. (Sweep batches may still run:
// they only delete what a stored compaction already made unreachable.)
func (n *Node) Drained() bool {
	return n.InFlight() == 0 && n.compacting <= n.compacted && !n.alarming
}

// Config returns the node's effective configuration.
func (n *Node) Config() Config { return n.cfg }

// Ready returns the outputs collected since the last call and clears them.
func (n *Node) Ready() Ready {
	if len(n.watch.asked) > 0 {
		n.watch.flush(&n.ready)
		n.answerProgress()
	}
	rd := n.ready
	rd.Committed = n.committed
	n.ready = Ready{}
	return rd
}

// HasReady reports whether Ready would return any output.
func (n *Node) HasReady() bool {
	return len(n.ready.Work) > 0 || len(n.ready.Responses) > 0 || len(n.ready.WatchResponses) > 0
}

// Propose accepts a write request (Put, DeleteRange or Txn) and deals it a
// revision. A request etcd would reject is answered at once.
func (n *Node) Propose(id RequestID, req *pb.RequestOp) {
	err := n.validate(req)
	if n.draining {
		err = ErrNotLeader
	}
	if err == nil && n.NoSpace() && addsData(req) {
		err = ErrNoSpace
	}
	if err == nil && len(n.latches.live) >= n.cfg.MaxPending {
		err = ErrTooManyRequests
	}
	var busy *lease
	if err == nil {
		busy, err = n.checkLeases(req)
	}
	if err != nil {
		n.respond(id, err)
		return
	}
	if busy != nil {
		busy.parked = append(busy.parked, parkedRequest{id: id, req: req})
		return
	}
	n.admit(&Work{Kind: WorkRequest, ID: id, Request: req, Serial: needsSerial(req)}, false)
}

// admit deals w once no earlier request in flight overlaps its keys (all:
// every key); until then it waits, undealt, in the latch table.
func (n *Node) admit(w *Work, all bool) {
	if n.latches.acquire(w, all) {
		n.deal(w)
	}
}

// start deals a request whose latch was granted after a wait or that is
// dealt again, unless a lease it uses went away or became busy meanwhile.
func (n *Node) start(w *Work) {
	if w.Request != nil {
		busy, err := n.checkLeases(w.Request)
		switch {
		case err != nil:
			n.respond(w.ID, err) // a lease it uses was revoked meanwhile
			n.unlatch(w)
			return
		case busy != nil:
			// Parked without its latch: the lease's revoke waits for
			// every latch, this one included.
			busy.parked = append(busy.parked, parkedRequest{id: w.ID, req: w.Request})
			n.unlatch(w)
			return
		}
	}
	n.deal(w)
}

// unlatch releases w's latch, once its request's outcome is final, and
// starts the requests that waited for it: with the requests queued
// behind each, in one batch, when they can share its transaction.
func (n *Node) unlatch(w *Work) {
	for _, next := range n.latches.release(w.latch) {
		if !batchable(next) {
			n.start(next)
		} else if ws := n.latches.follow(next, maxBatch, batchable); ws == nil {
			n.start(next)
		} else {
			n.dealBatch(ws)
		}
	}
}

// batchable tells requests that may share a transaction with the ones
// they waited for: key-value requests that are not serial (which wait for
// every earlier revision to be final) and use no lease (whose checks run
// when a request is dealt).
func batchable(w *Work) bool {
	return w.Kind == WorkRequest && w.Request != nil && !w.Serial && len(leasesUsed(w.Request, nil)) == 0
}

// dealBatch hands the requests of ws out as one WorkBatch; each is dealt
// its revision when it surely writes, or by Deal once it turns out to.
func (n *Node) dealBatch(ws []*Work) {
	b := &Work{Kind: WorkBatch, Term: n.cfg.Term, Batch: ws}
	for _, w := range ws {
		// Dealt only as they run, in order: a revision dealt now would be
		// below those the requests before it take as they run.
		n.prepare(w, false)
		w.batch = b
	}
	n.ready.Work = append(n.ready.Work, b)
}

// Drain refuses new writes while leadership is handed over, and answers
// the requests still waiting in latches with ErrNotLeader: they were never
// dealt, so the client may safely send them to the successor. Member's
// Transfer calls it.
func (n *Node) Drain() {
	n.draining = true
	for _, c := range n.compactQueue {
		n.respond(c.id, ErrNotLeader)
	}
	n.compactQueue = nil
	waiting := n.latches.takeWaiting()
	for _, w := range waiting {
		if w.Lease != nil {
			n.abandonLease(w.Lease)
		}
		n.respond(w.ID, ErrNotLeader)
	}
	for _, w := range waiting {
		n.unlatch(w)
	}
}

func (n *Node) validate(req *pb.RequestOp) error {
	// etcd answers an empty operation with "key not found".
	switch tv := req.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		if tv.RequestPut != nil {
			return ValidatePut(tv.RequestPut)
		}
	case *pb.RequestOp_RequestDeleteRange:
		if tv.RequestDeleteRange != nil {
			return ValidateDeleteRange(tv.RequestDeleteRange)
		}
	case *pb.RequestOp_RequestTxn:
		if tv.RequestTxn != nil {
			return ValidateTxn(tv.RequestTxn, n.cfg.MaxTxnOps)
		}
	}
	return ErrKeyNotFound
}

// deal hands w to the driver, or holds it if it is serial and revisions
// dealt before it are not final yet.
func (n *Node) deal(w *Work) {
	if w.Serial {
		w.after = max(w.after, n.next-1)
	}
	if w.after <= n.committed {
		n.handOut(w)
		return
	}
	i, _ := slices.BinarySearchFunc(n.held, w.after+1, func(h *Work, after int64) int { return cmp.Compare(h.after, after) })
	n.held = slices.Insert(n.held, i, w)
}

// handOut gives work to the driver. A revoke learns its keys now: serial
// work runs when every revision dealt before it is final, so the table is
// whole.
func (n *Node) handOut(w *Work) {
	if w.Lease != nil && w.Lease.Revoke {
		w.Lease.Keys = w.Lease.Keys[:0]
		if l := n.leases.byID[w.Lease.ID]; l != nil {
			for k := range l.keys {
				w.Lease.Keys = append(w.Lease.Keys, []byte(k))
			}
			slices.SortFunc(w.Lease.Keys, bytes.Compare)
		}
	}
	n.prepare(w, true)
	n.ready.Work = append(n.ready.Work, w)
}

// prepare stamps request work for the driver: a request that surely
// changes a key is dealt its revision now if eager; any other goes out
// undealt and is dealt only if its evaluation changes keys (Deal).
func (n *Node) prepare(w *Work, eager bool) {
	w.Rev, w.Term, w.seen, w.batch = 0, n.cfg.Term, n.next-1, nil
	w.Committed, w.Compacted = n.committed, n.compacted
	if eager && w.Lease == nil && surelyWrites(w.Request) {
		n.assign(w)
		return
	}
	n.out[w] = struct{}{}
}

// assign deals w the next revision.
func (n *Node) assign(w *Work) {
	w.Rev = n.next
	n.next++
	n.slots[w.Rev] = &slot{state: slotRunning, work: w}
}

// Deal gives undealt request work the revision its writes commit at. The
// driver calls it, inside the work's engine transaction, once evaluation
// shows the request changes keys, then evaluates it again at w.Rev.
// ErrNotLeader: the work is not this node's to deal (stale, or already
// dealt); abandon the transaction and report the work NotApplied.
func (n *Node) Deal(w *Work) error {
	if _, ok := n.out[w]; !ok || w.Term != n.cfg.Term {
		return ErrNotLeader
	}
	delete(n.out, w)
	n.assign(w)
	if b := w.batch; b != nil {
		// The requests after it in the batch read what it writes.
		for _, sub := range b.Batch[slices.Index(b.Batch, w)+1:] {
			sub.seen = max(sub.seen, w.Rev)
		}
	}
	return nil
}

// surelyWrites reports whether a request changes a key whatever the
// store holds: a plain put. Other requests may change nothing (a failed
// compare, a delete of a missing key, a put etcd refuses) and so are dealt
// only once evaluation shows they write.
func surelyWrites(op *pb.RequestOp) bool {
	p := op.GetRequestPut()
	return p != nil && !p.IgnoreValue && !p.IgnoreLease
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
	Err     error
}

// Done tells the node how a work item it handed out ended.
func (n *Node) Done(w *Work, r Result) {
	if w.Kind == WorkCatchUp {
		n.catchUpDone(w, r.Events, r.Last, r.Err)
		return
	}
	n.report(w, r.Effects, r.Outcome)
}

// report ends transactional work.
func (n *Node) report(w *Work, eff *Effects, out Outcome) {
	switch w.Kind {
	case WorkRequest:
		n.reportRequest(w, eff, out, n.next-1)
	case WorkBatch:
		// A request that wrote nothing read what the ones before it in
		// the batch wrote and none of what the ones after it did: it is
		// answered below the next one's revision.
		at := make([]int64, len(w.Batch))
		next := n.next
		for i := len(w.Batch) - 1; i >= 0; i-- {
			at[i] = next - 1
			if r := w.Batch[i].Rev; r != 0 {
				next = r
			}
		}
		for i, sub := range w.Batch {
			var e *Effects
			if eff != nil && i < len(eff.Batch) {
				e = eff.Batch[i]
			}
			n.reportRequest(sub, e, out, at[i])
		}
	case WorkFence:
		n.reportFence(w, eff, out)
	case WorkCompact:
		n.reportCompact(w, out)
	case WorkSweep:
		n.reportSweep(w, eff, out)
	case WorkAlarm:
		n.reportAlarm(w, out)
	}
	n.advance()
}

// reportRequest ends request work; at is the revision an answer that
// wrote nothing is read at.
func (n *Node) reportRequest(w *Work, eff *Effects, out Outcome, at int64) {
	if w.Rev == 0 {
		n.reportUndealt(w, eff, out, at)
		return
	}
	s := n.slots[w.Rev]
	if s == nil || s.work != w || s.state != slotRunning {
		return // a stale or duplicated report
	}
	switch {
	case out == Committed && eff != nil && !eff.Late:
		s.state, s.eff = slotApplied, eff
		n.unlatch(w)
	case out == Uncertain && eff != nil && !eff.Late:
		s.state, s.eff = slotUncertain, eff
		n.fence(w, 0)
	default:
		// Definitely not applied: deal the request again now, but keep
		// C below this revision until a fence marks it durably. A new
		// leader starts above the highest revision stored; were a no-op
		// C passed left unmarked, it could deal that revision again and
		// change history a reader has seen.
		s.state, s.retried = slotUncertain, true
		n.fence(w, 0)
		n.retry(w)
	}
}

// reportUndealt ends request work that was never dealt: it changed no
// key, so it is answered as a read at revision at, once C reaches it.
// Its keys are latched until now, so no write to them was dealt between
// its read and at.
func (n *Node) reportUndealt(w *Work, eff *Effects, out Outcome, at int64) {
	if _, ok := n.out[w]; !ok {
		return // a stale or duplicated report
	}
	delete(n.out, w)
	if out != Committed || eff == nil || eff.Late || len(eff.Events) > 0 {
		// Not applied (or the lease record it writes may not be): it
		// changed no key, so nothing needs fencing; run it again.
		n.retry(w)
		return
	}
	r := Response{ID: w.ID, Rev: at, Response: eff.Response, Err: eff.Err}
	if w.Lease != nil {
		n.commitLease(w.Lease)
		r.Lease, r.LeaseTTL = w.Lease.ID, w.Lease.TTL
	}
	n.answer(r)
	n.unlatch(w)
}

// answer releases a response that wrote nothing at r.Rev: every write
// it may have read is at or below it, and every later write to its keys
// above. Until C reaches that revision it waits.
func (n *Node) answer(r Response) {
	stampHeaders(r.Response, r.Rev)
	if r.Rev <= n.committed {
		n.ready.Responses = append(n.ready.Responses, r)
		return
	}
	// A batch reports answers below revisions it dealt, which may be
	// below answers already waiting: keep them in revision order.
	i, _ := slices.BinarySearchFunc(n.answers, r.Rev+1, func(a Response, rev int64) int { return cmp.Compare(a.Rev, rev) })
	n.answers = slices.Insert(n.answers, i, r)
}

// releaseAnswers releases the waiting answers C has reached.
func (n *Node) releaseAnswers() {
	i := 0
	for i < len(n.answers) && n.answers[i].Rev <= n.committed {
		i++
	}
	n.ready.Responses = append(n.ready.Responses, n.answers[:i]...)
	n.answers = n.answers[i:]
}

// stampHeaders sets the header revision of a response and of every
// response nested in it.
func stampHeaders(r *pb.ResponseOp, rev int64) {
	switch tv := r.GetResponse().(type) {
	case *pb.ResponseOp_ResponsePut:
		tv.ResponsePut.Header = &pb.ResponseHeader{Revision: rev}
	case *pb.ResponseOp_ResponseDeleteRange:
		tv.ResponseDeleteRange.Header = &pb.ResponseHeader{Revision: rev}
	case *pb.ResponseOp_ResponseRange:
		tv.ResponseRange.Header = &pb.ResponseHeader{Revision: rev}
	case *pb.ResponseOp_ResponseTxn:
		tv.ResponseTxn.Header = &pb.ResponseHeader{Revision: rev}
		for _, sub := range tv.ResponseTxn.Responses {
			stampHeaders(sub, rev)
		}
	}
}

func (n *Node) fence(w *Work, attempt int) {
	n.ready.Work = append(n.ready.Work, &Work{Kind: WorkFence, Rev: w.Rev, Term: w.Term, ID: w.ID, Attempt: attempt})
}

func (n *Node) reportFence(f *Work, eff *Effects, out Outcome) {
	s := n.slots[f.Rev]
	if s == nil || s.state != slotUncertain {
		return
	}
	switch {
	case out == Committed && eff != nil && eff.Applied && s.eff != nil:
		s.state = slotApplied
		n.unlatch(s.work)
	case out == Committed && eff != nil:
		s.state = slotNoop
		if !s.retried {
			n.retry(s.work)
		}
	default:
		// The fence itself failed: fence again, later.
		n.fence(f, f.Attempt+1)
	}
}

// retry deals a request again after its revision ended as a no-op.
func (n *Node) retry(w *Work) {
	if w.Attempt+1 >= n.cfg.MaxAttempts {
		if w.Lease != nil {
			n.abandonLease(w.Lease)
		}
		n.respond(w.ID, ErrRetriesExhausted)
		n.unlatch(w)
		return
	}
	next := &Work{Kind: WorkRequest, ID: w.ID, Request: w.Request, Lease: w.Lease, Serial: w.Serial, Attempt: w.Attempt + 1, latch: w.latch}
	if w.Rev == 0 {
		// It may be answered without a revision, so no engine conflict
		// orders it after a request of its batch whose outcome is still
		// unknown: let every revision dealt so far be final first.
		next.after = n.next - 1
	}
	if n.latches.regrant(next) {
		n.start(next)
	}
}

// advance moves C over the contiguous prefix of final revisions, emitting
// their events and responses in revision order.
func (n *Node) advance() {
	start := n.committed
	for {
		s := n.slots[n.committed+1]
		if s == nil || (s.state != slotApplied && s.state != slotNoop) {
			break
		}
		rev := n.committed + 1
		delete(n.slots, rev)
		n.committed = rev
		if s.state == slotApplied {
			n.commit(rev, s)
		}
		n.releaseAnswers()
	}
	if n.committed == start {
		return
	}
	n.watch.wake(n.committed)
	n.watch.flush(&n.ready)
	n.releaseHeld()
}

// commit publishes an applied revision.
func (n *Node) commit(rev int64, s *slot) {
	eff := s.eff
	for i := range eff.Events {
		n.ring.fillPrev(&eff.Events[i])
		n.ring.Append(eff.Events[i])
	}
	n.watch.publish(rev, eff.Events)
	n.leases.attach(eff.Events)
	w := s.work
	r := Response{ID: w.ID, Rev: rev, Wrote: len(eff.Events) > 0, Response: eff.Response, Err: eff.Err}
	if w.Lease != nil {
		n.commitLease(w.Lease)
		r.Lease, r.LeaseTTL = w.Lease.ID, w.Lease.TTL
	}
	n.ready.Responses = append(n.ready.Responses, r)
}

// releaseHeld hands out the serial work whose turn has come.
func (n *Node) releaseHeld() {
	for len(n.held) > 0 && n.held[0].after <= n.committed {
		w := n.held[0]
		n.held = n.held[1:]
		n.handOut(w)
	}
}

// Compact asks to compact history below rev. The answer comes as a
// Response to id once the compact revision is stored.
func (n *Node) Compact(id RequestID, rev int64) {
	switch {
	case n.draining:
		n.respond(id, ErrNotLeader)
		return
	case rev > n.committed:
		n.respond(id, ErrFutureRev)
		return
	case n.compacting > n.compacted:
		n.compactQueue = append(n.compactQueue, compactAsk{id, rev})
		return
	case rev <= n.compacted:
		n.respond(id, ErrCompacted)
		return
	}
	n.compacting = rev
	n.ready.Work = append(n.ready.Work, &Work{Kind: WorkCompact, ID: id, Rev: rev, Term: n.cfg.Term})
}

func (n *Node) reportCompact(w *Work, out Outcome) {
	if out != Committed {
		// Storing a larger compact revision is idempotent: try again.
		n.ready.Work = append(n.ready.Work, &Work{Kind: WorkCompact, ID: w.ID, Rev: w.Rev, Term: w.Term, Attempt: w.Attempt + 1})
		return
	}
	if w.Rev > n.compacted {
		n.compacted = w.Rev
		n.watch.compactRev = w.Rev
		n.ring.Compact(w.Rev)
		n.watch.compacted(n.compacted, &n.ready)
		n.sweepTo(w.Rev)
	}
	n.ready.Responses = append(n.ready.Responses, Response{ID: w.ID, Rev: n.committed})
	for len(n.compactQueue) > 0 && n.compacting <= n.compacted {
		next := n.compactQueue[0]
		n.compactQueue = n.compactQueue[1:]
		n.Compact(next.id, next.rev)
	}
}

// compactAsk is a compaction waiting for the one being stored.
type compactAsk struct {
	id  RequestID
	rev int64
}

// DescribeWork renders w on one line for traces and golden tests.
func DescribeWork(w *Work) string {
	switch w.Kind {
	case WorkRequest:
		what := DescribeRequest(w.Request)
		if l := w.Lease; l != nil && l.Revoke {
			what = fmt.Sprintf("revoke lease%d keys=%d", l.ID, len(l.Keys))
		} else if l != nil {
			what = fmt.Sprintf("grant lease%d ttl=%d", l.ID, l.TTL)
		}
		s := fmt.Sprintf("work req%d %s", w.ID, what)
		if w.Rev != 0 {
			s = fmt.Sprintf("work r%d req%d %s", w.Rev, w.ID, what)
		}
		if w.Serial {
			s += " serial"
		}
		if w.Attempt > 0 {
			s += fmt.Sprintf(" attempt=%d", w.Attempt)
		}
		return s
	case WorkFence:
		return fmt.Sprintf("fence r%d req%d attempt=%d", w.Rev, w.ID, w.Attempt)
	case WorkCompact:
		return fmt.Sprintf("compact r%d req%d", w.Rev, w.ID)
	case WorkSweep:
		s := fmt.Sprintf("sweep r%d", w.Sweep.Rev)
		if w.Sweep.Next != nil {
			s += fmt.Sprintf(" from %q", w.Sweep.Next)
		}
		if w.Attempt > 0 {
			s += fmt.Sprintf(" attempt=%d", w.Attempt)
		}
		return s
	case WorkCatchUp:
		return fmt.Sprintf("catchup watch%d r%d..r%d", w.Watch, w.From, w.To)
	case WorkElect:
		if w.Elect.Observe {
			return "elect observe"
		}
		return fmt.Sprintf("elect %s term=%d deadline=%v", w.Elect.Next.Holder, w.Elect.Next.Term, w.Elect.Next.Deadline)
	case WorkRecover:
		return "recover"
	case WorkAlarm:
		return fmt.Sprintf("alarm nospace=%v req%d", w.Raise, w.ID)
	case WorkBatch:
		parts := make([]string, len(w.Batch))
		for i, sub := range w.Batch {
			parts[i] = DescribeWork(sub)
		}
		return fmt.Sprintf("batch [%s]", strings.Join(parts, "; "))
	}
	return "work ?"
}

// DescribeRequest renders a request briefly.
func DescribeRequest(req *pb.RequestOp) string {
	switch tv := req.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		return fmt.Sprintf("put %q=%q", tv.RequestPut.Key, tv.RequestPut.Value)
	case *pb.RequestOp_RequestDeleteRange:
		return fmt.Sprintf("delete %q..%q", tv.RequestDeleteRange.Key, tv.RequestDeleteRange.RangeEnd)
	case *pb.RequestOp_RequestRange:
		return fmt.Sprintf("range %q..%q", tv.RequestRange.Key, tv.RequestRange.RangeEnd)
	case *pb.RequestOp_RequestTxn:
		return fmt.Sprintf("txn cmp=%d then=%d else=%d", len(tv.RequestTxn.Compare), len(tv.RequestTxn.Success), len(tv.RequestTxn.Failure))
	}
	return "empty"
}

// DescribeEvent renders an event on one line.
func DescribeEvent(ev Event) string {
	if ev.Type == mvccpb.DELETE {
		return fmt.Sprintf("r%d delete %q", ev.Rev, ev.Kv.Key)
	}
	return fmt.Sprintf("r%d put %q=%q v%d c%d", ev.Rev, ev.Kv.Key, ev.Kv.Value, ev.Kv.Version, ev.Kv.CreateRevision)
}

// DescribeResponse renders a response on one line.
func DescribeResponse(r Response) string {
	if r.Err != nil {
		return fmt.Sprintf("resp req%d err=%q", r.ID, r.Err)
	}
	lease := ""
	if r.LeaseTTL != 0 {
		lease = fmt.Sprintf(" lease%d ttl=%d", r.Lease, r.LeaseTTL)
	}
	if !r.Wrote {
		return fmt.Sprintf("resp req%d at r%d%s", r.ID, r.Rev, lease)
	}
	return fmt.Sprintf("resp req%d r%d%s", r.ID, r.Rev, lease)
}
