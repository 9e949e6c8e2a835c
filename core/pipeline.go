package core

import (
	"bytes"
	"cmp"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maxBatch bounds the requests of one WorkBatch.
const maxBatch = 64

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

// Propose accepts a write request (Put, DeleteRange or Txn) and deals it a
// revision. A request etcd would reject is answered at once.
func (n *Node) Propose(id RequestID, req *pb.RequestOp) {
	err := n.validate(req)
	if n.draining {
		err = ErrNotLeader
	}
	if err == nil && n.NoSpace() && addsData(req, n.cfg.Testing.NoSpaceMissesFailureBranch) {
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
	n.admit(&Work{Kind: WorkRequest, ID: id, Request: req, Serial: needsSerial(req), knobs: n.cfg.Testing}, false)
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
// every earlier revision to be final), use no lease (whose checks run
// when a request is dealt) and read at no revision (which may have to
// wait for it, deal).
func batchable(w *Work) bool {
	return w.Kind == WorkRequest && w.Request != nil && !w.Serial && len(leasesUsed(w.Request, nil)) == 0 &&
		(readsAt(w.Request) == 0 || w.knobs.RevisionReadsGoEarly)
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
			maxOps := n.cfg.MaxTxnOps
			if n.cfg.Testing.TxnOpsLimitOffByOne {
				maxOps--
			}
			return ValidateTxn(tv.RequestTxn, maxOps)
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
	// A range at a revision dealt but not final waits for it: the
	// request's compares and reads may see that revision's writes, so it
	// is no future revision to them (as etcd checks against its view),
	// and a read at it needs every write up to it in place.
	if r := readsAt(w.Request); r > n.committed && r < n.next && !w.knobs.RevisionReadsGoEarly {
		w.after = max(w.after, r)
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
	w.fresh = n.cfg.FreshFrom > 0 && w.Rev >= n.cfg.FreshFrom
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

// Done tells the node how a work item it handed out ended.
func (n *Node) Done(w *Work, r Result) {
	if w.Kind == WorkCatchUp {
		n.hub.catchUpDone(w, r.Events, r.Last, r.Err)
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
		if !n.cfg.Testing.ExhaustedKeepsLatch {
			n.unlatch(w)
		}
		return
	}
	next := &Work{Kind: WorkRequest, ID: w.ID, Request: w.Request, Lease: w.Lease, Serial: w.Serial, Attempt: w.Attempt + 1, latch: w.latch, knobs: w.knobs}
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
		n.hub.committed = rev
		if s.state == slotApplied {
			n.commit(rev, s)
		}
		n.releaseAnswers()
	}
	if n.committed == start {
		return
	}
	n.hub.advance(n.committed)
	n.releaseHeld()
}

// commit publishes an applied revision.
func (n *Node) commit(rev int64, s *slot) {
	eff := s.eff
	n.hub.publish(rev, eff.Events)
	n.leases.attach(eff.Events, n.cfg.Testing.LeaseKeepsDetachedKeys)
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
