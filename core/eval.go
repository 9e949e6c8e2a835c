package core

import (
	"bytes"
	"errors"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Event is one committed change, at revision Rev, as etcd's watch sends it.
type Event struct {
	Rev int64
	*mvccpb.Event
	// PrevUnread says PrevKv carries its version's metadata but not its
	// value, which the write did not need to read: it is read where the
	// event is sent to a watcher that asked for prev_kv (see "Previous
	// values" in prev.go).
	PrevUnread bool
}

// Write is one engine mutation that a work item asks the driver to make.
type Write struct {
	Key, Value []byte
	Delete     bool
	// New says Key must not exist in the engine: the transaction must not
	// commit if it does (an engine assertion, or a read first; see
	// driver.Buffer).
	New bool
	// Fresh, with New, says Key cannot exist: the node is its engine's
	// only writer and dealt no revision this high before (FreshFrom). An
	// engine without an assertion need not read it first.
	Fresh bool
}

// Effects is what evaluating a work item produced: the engine writes to
// commit in the work's transaction, and what to release once its revision
// commits. A late or failed evaluation has no writes.
type Effects struct {
	// Writes to apply in the engine transaction, then commit.
	Writes []Write
	// Events the revision emits once committed, in order.
	Events []Event
	// Response to the request (nil for internal work).
	Response *pb.ResponseOp
	// Err is a request error (e.g. ErrFutureRev): the revision is a no-op
	// and the client gets Err.
	Err error
	// Late: the work touched a key already touched by a later revision;
	// its revision is abandoned and the request dealt again.
	Late bool
	// Applied reports, for fence work, that the fenced revision was found
	// applied in the engine; for election work, that the CAS matched.
	Applied bool
	// Record is the election record after election work.
	Record *ElectionRecord
	// Batch holds the effects of each request of WorkBatch, in order.
	Batch []*Effects
	// Sweep is WorkSweep's progress after its batch.
	Sweep *Sweep

	// probe is, for undealt work that needs a revision, the evaluation
	// Redeal may finish at the dealt revision instead of running again.
	probe *txnEval
	// probeResp is the probe's response (Response stays nil: the work
	// is not answered undealt).
	probeResp *pb.ResponseOp
}

// Evaluate runs a work item against a snapshot (the driver's engine
// transaction) and returns the writes to commit and what to release. It
// is pure and safe to call outside the node's lock; only rd is read.
func Evaluate(rd Reader, w *Work) (*Effects, error) {
	switch w.Kind {
	case WorkFence:
		return evaluateFence(rd, w.Rev, w.Term)
	case WorkElect:
		return evaluateElect(rd, w.Elect)
	case WorkAlarm:
		return evaluateAlarm(rd, w.Alarmed)
	case WorkCompact:
		ws, err := CompactWrites(rd, w.Rev)
		if err != nil {
			return nil, err
		}
		return &Effects{Writes: ws}, nil
	case WorkSweep:
		next, dels, err := SweepStep(rd, *w.Sweep, w.Sweep.Limit)
		if err != nil {
			return nil, err
		}
		return &Effects{Writes: dels, Sweep: &next}, nil
	case WorkRequest:
	default:
		return nil, ErrEmptyRequest
	}
	undealt := w.Rev == 0
	rev := w.Rev
	if undealt {
		// Above every revision: the evaluation only says whether the
		// request changes keys, and answers it if it does not.
		rev = probeRev
	}
	// The revision record is written New, not read first: a record
	// already there is another leader's write at this revision (an
	// engine that applied a deposed leader's transaction past its
	// deadline), never to be overwritten; the engine refuses the commit
	// then, and the revision is fenced and the request dealt again.
	tx := &txnEval{rd: rd, rev: rev, term: w.Term, fresh: w.fresh, serial: w.Serial, committed: w.Committed, compacted: w.Compacted, knobs: w.knobs}
	if undealt {
		tx.seen = w.seen
	}
	var (
		resp *pb.ResponseOp
		err  error
	)
	if w.Lease != nil {
		err = tx.leaseOp(w.Lease)
	} else {
		resp, err = tx.request(w.Request)
	}
	switch {
	case errors.Is(err, errLate):
		return &Effects{Late: true}, nil
	case isRequestError(err) && undealt:
		return &Effects{Err: err}, nil
	case isRequestError(err):
		// The revision is spent: its record says it changed nothing.
		tx.discard()
		return &Effects{Err: err, Writes: tx.writes()}, nil
	case err != nil:
		return nil, err
	case undealt && len(tx.events) > 0:
		// It changes keys: the driver deals it a revision (Node.Deal)
		// and evaluates it again there (Redeal).
		eff := &Effects{Events: tx.events}
		if restampable(w) {
			// A copy: storing tx itself would move every evaluation's
			// txnEval to the heap.
			probe := *tx
			eff.probe, eff.probeResp = &probe, resp
		}
		return eff, nil
	case undealt:
		// It changes no key: no revision, no touches; only a lease
		// record, if any, is written.
		return &Effects{Writes: tx.extra, Response: resp}, nil
	}
	return &Effects{Writes: tx.writes(), Events: tx.events, Response: resp}, nil
}

// probeRev is the revision undealt work is evaluated at: above any dealt.
const probeRev = 1<<62 - 1

// Redeal evaluates work that Evaluate, undealt, found changes keys
// (probe: its Effects, NeedsRevision) once Deal gave it w.Rev; rd must
// be the reader the probe read, in the same transaction. For most
// requests it finishes the probe's evaluation instead of running it
// again: the probe read what a second evaluation would read and decided
// what it would decide, and only the revision it stamped differs (see
// restamp). A create costs about twenty allocations less and core and
// the driver's apply layer a third less CPU (BenchmarkNodeCreate).
func Redeal(rd Reader, w *Work, probe *Effects) (*Effects, error) {
	tx := probe.probe
	if tx == nil || w.Rev == 0 || w.Kind != WorkRequest {
		return Evaluate(rd, w)
	}
	probe.probe = nil // finished once
	return tx.restamp(w, probe.probeResp), nil
}

// restampable reports whether undealt work's evaluation equals its
// dealt evaluation but for the revision it stamps: it reads single keys
// only (not serial: a range is read below the work's revision), is no
// lease operation, and filters no range by revision (the probe's
// revision, above every other, would filter differently).
func restampable(w *Work) bool {
	return w.Lease == nil && !w.Serial && !filtersByRevision(w.Request)
}

func filtersByRevision(op *pb.RequestOp) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		r := tv.RequestRange
		return r.GetMinModRevision() != 0 || r.GetMaxModRevision() != 0 || r.GetMinCreateRevision() != 0 || r.GetMaxCreateRevision() != 0
	case *pb.RequestOp_RequestTxn:
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.GetSuccess(), tv.RequestTxn.GetFailure()} {
			if slices.ContainsFunc(ops, filtersByRevision) {
				return true
			}
		}
	}
	return false
}

// restamp turns a probe's evaluation (at probeRev) into the evaluation
// at w's dealt revision rev, in w's term and freshness. The dealt
// evaluation would find the work late where a key it read was touched at
// rev or above; otherwise everything it computes is the probe's with
// probeRev replaced by rev: the revisions of the records and key-values
// the work wrote (a key is written at most once in a request,
// ValidateTxn), of its events, and of its responses' headers.
func (tx *txnEval) restamp(w *Work, resp *pb.ResponseOp) *Effects {
	rev := w.Rev
	for _, e := range tx.order {
		if e.orig != nil && e.orig.Touch >= rev {
			return &Effects{Late: true}
		}
	}
	tx.rev, tx.term, tx.fresh, tx.seen = rev, w.Term, w.fresh, 0
	for _, e := range tx.order {
		if e.written && e.cur != nil {
			e.cur.ModRev = stamp(e.cur.ModRev, rev)
			e.cur.CreateRev = stamp(e.cur.CreateRev, rev)
		}
	}
	for i := range tx.events {
		tx.events[i].Rev = rev
		restampKV(tx.events[i].Kv, rev)
	}
	restampResponse(resp, rev)
	return &Effects{Writes: tx.writes(), Events: tx.events, Response: resp}
}

func stamp(r, rev int64) int64 {
	if r == probeRev {
		return rev
	}
	return r
}

func restampKV(kv *mvccpb.KeyValue, rev int64) {
	if kv != nil {
		kv.ModRevision = stamp(kv.ModRevision, rev)
		kv.CreateRevision = stamp(kv.CreateRevision, rev)
	}
}

func restampHeader(h *pb.ResponseHeader, rev int64) {
	if h != nil {
		h.Revision = stamp(h.Revision, rev)
	}
}

func restampResponse(op *pb.ResponseOp, rev int64) {
	switch r := op.GetResponse().(type) {
	case *pb.ResponseOp_ResponsePut:
		restampHeader(r.ResponsePut.GetHeader(), rev)
	case *pb.ResponseOp_ResponseDeleteRange:
		restampHeader(r.ResponseDeleteRange.GetHeader(), rev)
	case *pb.ResponseOp_ResponseRange:
		restampHeader(r.ResponseRange.GetHeader(), rev)
		for _, kv := range r.ResponseRange.GetKvs() {
			restampKV(kv, rev)
		}
	case *pb.ResponseOp_ResponseTxn:
		restampHeader(r.ResponseTxn.GetHeader(), rev)
		for _, sub := range r.ResponseTxn.GetResponses() {
			restampResponse(sub, rev)
		}
	}
}

// NeedsRevision reports whether undealt work's effects change keys, so
// that it must be dealt a revision and evaluated again (Node.Deal).
func (e *Effects) NeedsRevision() bool { return len(e.Events) > 0 && e.Events[0].Rev == probeRev }

// isRequestError tells errors the client caused from engine failures.
func isRequestError(err error) bool {
	for _, e := range []error{ErrCompacted, ErrFutureRev, ErrKeyNotFound, ErrLeaseNotFound, ErrEmptyRequest} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// evaluateFence resolves an uncertain revision: if its record is in the
// engine it was applied; otherwise the fence writes a Fenced record, which
// makes any delayed copy of the original transaction conflict.
func evaluateFence(rd Reader, rev, term int64) (*Effects, error) {
	v, ok, err := rd.Get(RevisionKey(rev))
	if err != nil {
		return nil, err
	}
	if ok {
		rec, err := DecodeRevisionRecord(v)
		if err != nil {
			return nil, err
		}
		return &Effects{Applied: !rec.Fenced && rec.Term == term}, nil
	}
	fenced := AppendRevisionRecord(nil, &RevisionRecord{Fenced: true, Term: term})
	return &Effects{Writes: []Write{{Key: RevisionKey(rev), Value: fenced}}}, nil
}

// entry is a key's state inside one evaluation.
type entry struct {
	key     []byte
	orig    *Record // latest record before the work (nil: none)
	cur     *Record // state as the work sees it now (nil: absent)
	written bool
}

type txnEval struct {
	rd                   Reader
	rev, term            int64
	fresh                bool  // no record can exist at rev (Work.fresh)
	seen                 int64 // undealt work: the newest touch it may meet (Work.seen)
	serial               bool
	committed, compacted int64
	cache                map[string]*entry // by key, once order is longer than smallCache
	order                []*entry
	events               []Event
	extra                []Write // writes outside the key spaces (lease records)
	knobs                TestingKnobs
}

// get returns the entry of a single key, reading it on first use. A key
// touched by a later revision makes the work late.
func (tx *txnEval) get(key []byte) (*entry, error) {
	if e := tx.cached(key); e != nil {
		return e, nil
	}
	rec, err := readLatestMeta(tx.rd, key)
	if err != nil {
		return nil, err
	}
	if rec != nil && (rec.Touch >= tx.rev || tx.seen > 0 && rec.Touch > tx.seen) {
		return nil, errLate
	}
	e := &entry{key: bytes.Clone(key), orig: rec}
	if rec.alive() {
		e.cur = rec
	}
	if tx.cache != nil {
		tx.cache[string(key)] = e
	} else if len(tx.order) == smallCache {
		tx.cache = make(map[string]*entry, 2*smallCache)
		for _, o := range tx.order {
			tx.cache[string(o.key)] = o
		}
		tx.cache[string(key)] = e
	}
	tx.order = append(tx.order, e)
	return e, nil
}

// smallCache is how many keys an evaluation finds by scanning its order
// before it builds a map: most requests use one or two keys.
const smallCache = 8

// cached returns the entry of key, if the evaluation read it.
func (tx *txnEval) cached(key []byte) *entry {
	if tx.cache != nil {
		return tx.cache[string(key)]
	}
	for _, e := range tx.order {
		if bytes.Equal(e.key, key) {
			return e
		}
	}
	return nil
}

// value reads the value of the key's version before the work, if the
// work needs it and has not read it yet: a write reads only the key's
// latest record, which holds no value.
func (tx *txnEval) value(e *entry) error {
	if rec := e.orig; rec.alive() && rec.unread {
		v, err := valueOf(tx.rd, e.key, rec.ModRev)
		if err != nil {
			return err
		}
		rec.Value, rec.unread = v, false
	}
	return nil
}

// attachWrites keeps the lease attachment index in step with a written
// key whose lease changed (a put with another lease, a delete, a revoke).
func (e *entry) attachWrites(ws []Write) []Write {
	var before, after int64
	if e.orig.alive() {
		before = e.orig.Lease
	}
	if e.cur != nil {
		after = e.cur.Lease
	}
	if before == after {
		return ws
	}
	if before != 0 {
		ws = append(ws, Write{Key: AttachKey(before, e.key), Delete: true})
	}
	if after != 0 {
		ws = append(ws, Write{Key: AttachKey(after, e.key), Value: []byte{1}})
	}
	return ws
}

// discard forgets the work's changes, keeping only what it read.
func (tx *txnEval) discard() {
	for _, e := range tx.order {
		e.written = false
		e.cur = nil
		if e.orig.alive() {
			e.cur = e.orig
		}
	}
	tx.events, tx.extra = nil, nil
}

// writes renders the evaluation's engine writes: a history record (with
// the value) and a latest record (without) for written keys, and the
// revision record. Keys only read are not written back: latches order
// the requests of one leader, the takeover wait those of two (see
// "Touches" in doc.go).
func (tx *txnEval) writes() []Write {
	ws := make([]Write, 0, 2*len(tx.order)+1)
	rr := RevisionRecord{Term: tx.term, Events: make([]RevisionEvent, 0, len(tx.events))}
	for _, ev := range tx.events {
		rr.Events = append(rr.Events, RevisionEvent{Delete: ev.Type == mvccpb.DELETE, Key: ev.Kv.Key})
	}
	for _, e := range tx.order {
		if !e.written {
			continue
		}
		rec := Record{Tombstone: true, ModRev: tx.rev}
		if e.cur != nil {
			rec = *e.cur
		}
		rec.Touch = tx.rev
		ws = append(ws, Write{Key: HistoryKey(e.key, tx.rev), Value: AppendRecord(nil, &rec)})
		ws = e.attachWrites(ws)
		rec.Value = nil // the value lives once, in history
		ws = append(ws, Write{Key: LatestKey(e.key), Value: AppendRecord(nil, &rec)})
	}
	ws = append(ws, tx.extra...)
	return append(ws, Write{Key: RevisionKey(tx.rev), Value: AppendRevisionRecord(nil, &rr), New: true, Fresh: tx.fresh})
}

func (tx *txnEval) header() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: tx.rev} }

func (tx *txnEval) request(op *pb.RequestOp) (*pb.ResponseOp, error) {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		r, err := tx.put(tv.RequestPut)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: r}}, err
	case *pb.RequestOp_RequestDeleteRange:
		r, err := tx.deleteRange(tv.RequestDeleteRange)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: r}}, err
	case *pb.RequestOp_RequestRange:
		r, err := tx.rangeOp(tv.RequestRange)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: r}}, err
	case *pb.RequestOp_RequestTxn:
		path, err := tx.comparePath(tv.RequestTxn)
		if err != nil {
			return nil, err
		}
		r, err := tx.txn(tv.RequestTxn, &path)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: r}}, err
	}
	return nil, ErrEmptyRequest
}

func (tx *txnEval) put(p *pb.PutRequest) (*pb.PutResponse, error) {
	e, err := tx.get(p.Key)
	if err != nil {
		return nil, err
	}
	prev := e.cur
	if (p.IgnoreValue || p.IgnoreLease) && prev == nil {
		return nil, ErrKeyNotFound
	}
	if p.IgnoreValue || p.PrevKv {
		if err := tx.value(e); err != nil {
			return nil, err
		}
	}
	rec := &Record{ModRev: tx.rev, CreateRev: tx.rev, Version: 1, Value: p.Value, Lease: p.Lease}
	if prev != nil {
		rec.CreateRev, rec.Version = prev.CreateRev, prev.Version+1
		if p.IgnoreValue {
			rec.Value = prev.Value
		}
		if p.IgnoreLease && !tx.knobs.IgnoreLeaseDetaches {
			rec.Lease = prev.Lease
		}
	}
	e.cur, e.written = rec, true
	ev := Event{Rev: tx.rev, Event: &mvccpb.Event{Type: mvccpb.PUT, Kv: rec.keyValue(e.key)}}
	resp := &pb.PutResponse{Header: tx.header()}
	if prev != nil {
		ev.PrevKv, ev.PrevUnread = prev.keyValue(e.key), prev.unread
		if p.PrevKv {
			resp.PrevKv = ev.PrevKv
		}
	}
	tx.events = append(tx.events, ev)
	return resp, nil
}

func (tx *txnEval) deleteRange(d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{Header: tx.header()}
	keys, err := tx.keysIn(d.Key, d.RangeEnd)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		e, err := tx.get(k)
		if err != nil {
			return nil, err
		}
		if e.cur == nil {
			continue
		}
		if d.PrevKv {
			if err := tx.value(e); err != nil {
				return nil, err
			}
		}
		prev := e.cur
		e.cur, e.written = nil, true
		tx.events = append(tx.events, deleteEvent(tx.rev, e.key, prev))
		resp.Deleted++
		if d.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, prev.keyValue(e.key))
		}
	}
	return resp, nil
}

// deleteEvent is the event of deleting key at rev, whose version before
// was prev.
func deleteEvent(rev int64, key []byte, prev *Record) Event {
	return Event{Rev: rev, Event: &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: key, ModRevision: rev}, PrevKv: prev.keyValue(key)},
		PrevUnread: prev.unread}
}

// keysIn lists the keys a single-key or ranged operation addresses. A
// single key is returned as is (it may not exist); a range is read as of
// the previous revision (serial work: every earlier revision is final)
// merged with the work's own writes.
func (tx *txnEval) keysIn(key, end []byte) ([][]byte, error) {
	if len(end) == 0 {
		return [][]byte{key}, nil
	}
	kvs, err := tx.aliveIn(key, end, false)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.Key
	}
	return keys, nil
}

// aliveIn returns the keys alive in [key, end) as the work sees them,
// a single key with its value only if withValue (a range reads values).
func (tx *txnEval) aliveIn(key, end []byte, withValue bool) ([]*mvccpb.KeyValue, error) {
	if len(end) == 0 {
		e, err := tx.get(key)
		if err != nil || e.cur == nil {
			return nil, err
		}
		if withValue {
			if err := tx.value(e); err != nil {
				return nil, err
			}
		}
		return []*mvccpb.KeyValue{e.cur.keyValue(e.key)}, nil
	}
	if !tx.serial {
		// Dealing marks every ranged request serial; reaching here means
		// the work was built wrongly, and reading would break the order.
		return nil, errNotSerial
	}
	base, err := aliveAt(tx.rd, key, end, tx.rev-1)
	if err != nil {
		return nil, err
	}
	s := span{key, end}
	changed := false
	byKey := make(map[string]*mvccpb.KeyValue, len(base))
	for _, kv := range base {
		byKey[string(kv.Key)] = kv
	}
	for _, e := range tx.order {
		if !e.written || !s.contains(e.key) {
			continue
		}
		changed = true
		if e.cur == nil {
			delete(byKey, string(e.key))
		} else {
			byKey[string(e.key)] = e.cur.keyValue(e.key)
		}
	}
	if !changed {
		return base, nil
	}
	out := make([]*mvccpb.KeyValue, 0, len(byKey))
	for _, kv := range byKey {
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	return out, nil
}

var errNotSerial = errors.New("core: ranged operation in non-serial work")

func (tx *txnEval) rangeOp(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	var (
		kvs []*mvccpb.KeyValue
		err error
	)
	if r.Revision > 0 {
		rev, _, err := CheckRevision(r.Revision, tx.committed, tx.compacted)
		if err != nil {
			return nil, err
		}
		if tx.knobs.TxnRevisionReadsCommitted {
			rev = tx.committed
		}
		kvs, err = aliveAt(tx.rd, r.Key, r.RangeEnd, rev)
		if err != nil {
			return nil, err
		}
	} else if kvs, err = tx.aliveIn(r.Key, r.RangeEnd, !r.KeysOnly && !r.CountOnly); err != nil {
		return nil, err
	}
	resp := shapeRange(r, kvs, tx.knobs)
	resp.Header = tx.header()
	return resp, nil
}

// comparePath evaluates the compares of a txn and of every nested txn on
// the branch taken, before any operation runs, as etcd does.
func (tx *txnEval) comparePath(t *pb.TxnRequest) ([]bool, error) {
	ok, err := tx.compares(t)
	if err != nil {
		return nil, err
	}
	path := []bool{ok}
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	for _, op := range ops {
		if nt := op.GetRequestTxn(); nt != nil {
			sub, err := tx.comparePath(nt)
			if err != nil {
				return nil, err
			}
			path = append(path, sub...)
		}
	}
	return path, nil
}

func (tx *txnEval) compare(c *pb.Compare) (bool, error) {
	kvs, err := tx.aliveIn(c.Key, c.RangeEnd, c.Target == pb.Compare_VALUE)
	if err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKeyValue(c, &mvccpb.KeyValue{}, tx.knobs), nil
	}
	for _, kv := range kvs {
		if !compareKeyValue(c, kv, tx.knobs) {
			return false, nil
		}
		if tx.knobs.CompareFirstKeyOnly {
			break
		}
	}
	return true, nil
}

func compareKeyValue(c *pb.Compare, kv *mvccpb.KeyValue, knobs TestingKnobs) bool {
	var res int
	switch c.Target {
	case pb.Compare_VALUE:
		res = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		res = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		res = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		res = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		res = cmpInt(kv.Lease, c.GetLease())
		if knobs.LeaseCompareReadsVersion {
			res = cmpInt(kv.Lease, c.GetVersion())
		}
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return res == 0
	case pb.Compare_NOT_EQUAL:
		return res != 0
	case pb.Compare_GREATER:
		return res > 0
	case pb.Compare_LESS:
		return res < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// txn runs the branch chosen by path[0]; nested txns consume the rest of
// path in order.
// compares reports whether every compare of t holds, as the txn sees
// the store now.
func (tx *txnEval) compares(t *pb.TxnRequest) (bool, error) {
	for _, c := range t.Compare {
		good, err := tx.compare(c)
		if err != nil || !good {
			return false, err
		}
	}
	return true, nil
}

// txn runs t's branch that path says (nil: the planted
// LateNestedCompares, which evaluates t's compares now).
func (tx *txnEval) txn(t *pb.TxnRequest, path *[]bool) (*pb.TxnResponse, error) {
	var ok bool
	if path == nil {
		var err error
		if ok, err = tx.compares(t); err != nil {
			return nil, err
		}
	} else {
		ok = (*path)[0]
		*path = (*path)[1:]
	}
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	resp := &pb.TxnResponse{Header: tx.header(), Succeeded: ok, Responses: make([]*pb.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		var (
			r   *pb.ResponseOp
			err error
		)
		if nt := op.GetRequestTxn(); nt != nil {
			var tr *pb.TxnResponse
			if tx.knobs.LateNestedCompares {
				tr, err = tx.txn(nt, nil)
			} else {
				tr, err = tx.txn(nt, path)
			}
			r = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}}
		} else {
			r, err = tx.request(op)
		}
		if err != nil {
			return nil, err
		}
		resp.Responses = append(resp.Responses, r)
	}
	return resp, nil
}

// needsSerial reports whether a request reads or deletes a key range in
// the present: such work may start only when every earlier revision is
// final, since a range cannot be protected key by key.
func needsSerial(op *pb.RequestOp) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestDeleteRange:
		return len(tv.RequestDeleteRange.GetRangeEnd()) > 0
	case *pb.RequestOp_RequestRange:
		return len(tv.RequestRange.GetRangeEnd()) > 0 && tv.RequestRange.GetRevision() <= 0
	case *pb.RequestOp_RequestTxn:
		t := tv.RequestTxn
		for _, c := range t.GetCompare() {
			if len(c.GetRangeEnd()) > 0 {
				return true
			}
		}
		for _, ops := range [][]*pb.RequestOp{t.GetSuccess(), t.GetFailure()} {
			for _, o := range ops {
				if needsSerial(o) {
					return true
				}
			}
		}
	}
	return false
}

// readsAt returns the highest revision a range of the request names, on
// any branch (0: none).
func readsAt(op *pb.RequestOp) int64 {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		return tv.RequestRange.GetRevision()
	case *pb.RequestOp_RequestTxn:
		var r int64
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.GetSuccess(), tv.RequestTxn.GetFailure()} {
			for _, o := range ops {
				r = max(r, readsAt(o))
			}
		}
		return r
	}
	return 0
}
