package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/linearizability"
	"github.com/axon-kv/axon/storage"
)

// expiry is a lease revoked by a leader's clock, seen released at rev;
// wrote: it deleted keys at rev (else it took no revision).
type expiry struct {
	lease, rev int64
	at         time.Duration
	wrote      bool
}

// check resolves every call against the engine's ground truth, then runs
// the checkers: every applied revision is explained by exactly one call
// or expiry, every acknowledged write is applied, the final state is the
// replay of the events, every compare-and-swap swapped what it compared,
// the history is linearizable, and every watch stream keeps etcd's
// guarantees.
func (w *World) check(res *Result) error {
	evs, err := w.committedEvents()
	if err != nil {
		return fmt.Errorf("reading ground truth: %w", err)
	}
	res.Events = len(evs)
	byRev := map[int64][]core.Event{}
	for _, ev := range evs {
		byRev[ev.Rev] = append(byRev[ev.Rev], ev)
	}
	if err := w.resolve(); err != nil {
		return err
	}
	w.countLate(res)
	if err := w.explain(byRev); err != nil {
		return err
	}
	if err := w.checkNoEmptyRevisions(); err != nil {
		return err
	}
	if err := w.checkAuth(res, evs); err != nil {
		return err
	}
	if err := w.checkLeaseDeadlines(); err != nil {
		return err
	}
	if err := w.checkLeaseLife(); err != nil {
		return err
	}
	if err := w.checkAlarms(); err != nil {
		return err
	}
	if err := w.checkLeaseQueries(evs); err != nil {
		return err
	}
	if err := w.checkOracle(evs); err != nil {
		return err
	}
	if err := w.checkState(evs); err != nil {
		return err
	}
	if err := w.checkExport(evs); err != nil {
		return err
	}
	if res.increments, err = w.checkSwaps(evs); err != nil {
		return err
	}
	if err := w.checkWatches(evs); err != nil {
		return err
	}
	if err := w.checkSerializable(evs); err != nil {
		return err
	}
	if err := w.checkMonotonicReads(); err != nil {
		return err
	}
	return w.checkLinearizable(res)
}

// ledTerm is the node that led a term, and whose it was.
type ledTerm struct {
	by   string
	node *core.Node
}

// checkTermLedOnce records that node nd of member id leads term, and a
// violation if another node led that term before: a term is one
// leader's, once. A second node in a term deals its revisions again
// without knowing what the first one committed.
func (w *World) checkTermLedOnce(id string, term int64, nd *core.Node) {
	if w.ledBy == nil {
		w.ledBy = map[int64]ledTerm{}
	}
	prev, ok := w.ledBy[term]
	if ok && prev.node != nd && w.violation == nil {
		w.violation = fmt.Errorf("term %d led twice: by a node of %s, then by another of %s", term, prev.by, id)
	}
	w.ledBy[term] = ledTerm{by: id, node: nd}
}

// checkWellFormed records a violation if an engine read of node n, for
// what, met a malformed record (core.ErrBadRecord). Axon writes none, and
// a snapshot that holds every commit made before it began shows none: a
// latest record's history record is written beside it. One that misses
// such a commit does, when the key cache answers for the key (a stale
// start timestamp did so over TiKV): the cached latest record names a
// history record the snapshot lacks. The driver takes it for a failed
// attempt and deals the request again, so no answer need be wrong; the
// error is the evidence, as the server's log line of it was. A watch's
// catch-up is not judged: one that reads revisions a compaction passes
// meanwhile meets revision records whose history records the sweep took,
// and core then cancels its watch for compaction.
func (w *World) checkWellFormed(n *node, what string, err error) {
	if err != nil && w.violation == nil && errors.Is(err, core.ErrBadRecord) {
		w.violation = fmt.Errorf("%s %s met a malformed record: %w", n.id(), what, err)
	}
}

// linearEvents converts the ground truth for the checkers.
func linearEvents(evs []core.Event) []linearizability.Event {
	out := make([]linearizability.Event, len(evs))
	for i, ev := range evs {
		out[i] = linearizability.Event{Rev: ev.Rev, Event: ev.Event}
	}
	return out
}

// checkSerializable checks every answered serializable read against the
// store as of its header revision.
func (w *World) checkSerializable(evs []core.Event) error {
	committed := linearEvents(evs)
	for _, cl := range w.hist.calls {
		if cl.in.kind != opRange || !cl.in.rng.Serializable || cl.status != answered || cl.err != nil {
			continue
		}
		if err := linearizability.CheckSnapshotRead(committed, cl.in.rng, cl.resp.GetResponseRange()); err != nil {
			return fmt.Errorf("c%d op%d: %w", cl.client.idx, cl.id, err)
		}
	}
	return nil
}

// checkMonotonicReads holds each node incarnation's serializable reads
// to etcd's: a member never answers one at a revision below one it had
// already answered anything at (a write, a read, a lease call) when it
// took the call, whether it led then or follows now (its applied revision
// only grows, and it answers a write or a linearizable read only once it
// applied that far). Calls it answered at once may come in any order. It
// reads the history only: who answered each call, when, and the header
// revision answered; a read's start is when its node took it, before it
// chose its revision.
func (w *World) checkMonotonicReads() error {
	type answer struct {
		to  time.Duration
		rev int64
		id  int
	}
	type read struct {
		from time.Duration
		rev  int64
		id   int
	}
	answers, reads := map[string][]answer{}, map[string][]read{}
	for _, cl := range w.hist.calls {
		if cl.status != answered || cl.err != nil {
			continue
		}
		if cl.answeredBy != "" && cl.rev > 0 {
			answers[cl.answeredBy] = append(answers[cl.answeredBy], answer{to: cl.answeredAt, rev: cl.rev, id: cl.id})
		}
		if cl.in.kind == opRange && cl.in.rng.Serializable && cl.readBy != "" && cl.readTo != 0 {
			reads[cl.readBy] = append(reads[cl.readBy], read{from: cl.readFrom, rev: cl.rev, id: cl.id})
		}
	}
	for _, node := range slices.Sorted(maps.Keys(reads)) {
		as := answers[node]
		slices.SortStableFunc(as, func(a, b answer) int { return cmp.Compare(a.to, b.to) })
		// high[i]: the answer of highest revision among as[:i+1].
		high := make([]answer, len(as))
		for i, a := range as {
			high[i] = a
			if i > 0 && high[i-1].rev > a.rev {
				high[i] = high[i-1]
			}
		}
		for _, b := range reads[node] {
			i, _ := slices.BinarySearchFunc(as, b.from, func(a answer, t time.Duration) int { return cmp.Compare(a.to, t) })
			if i == 0 {
				continue // nothing answered before it started
			}
			if a := high[i-1]; b.rev < a.rev {
				return fmt.Errorf("%s answered serializable op%d at r%d after it had answered op%d at r%d: its reads went back", node, b.id, b.rev, a.id, a.rev)
			}
		}
	}
	return nil
}

// resolve turns each unknown call into applied (at its revision) or not,
// from the revision records in the engine.
func (w *World) resolve() error {
	for _, cl := range w.hist.calls {
		if !cl.done {
			return fmt.Errorf("op%d never completed", cl.id)
		}
		if cl.status != unknown {
			continue
		}
		for _, a := range cl.attempts {
			ok, err := w.appliedRevision(a.rev, a.term)
			if err != nil {
				return err
			}
			if ok {
				cl.patched = &a
				break
			}
		}
	}
	return nil
}

// countLate counts the calls that applied after their client gave up,
// by the node they entered at.
func (w *World) countLate(res *Result) {
	for _, cl := range w.hist.calls {
		if cl.status == unknown && cl.patched != nil {
			res.Late++
			if cl.viaLeader {
				res.lateVia[0]++
			} else {
				res.lateVia[1]++
			}
		}
	}
}

// callResponse is the answer of a write call that applied (nil if it
// did not): the one its client got, or the engine's for an abandoned one.
func callResponse(cl *call) *pb.ResponseOp {
	switch {
	case cl.patched != nil:
		return cl.patched.eff.Response
	case callRev(cl) != 0:
		return cl.resp
	}
	return nil
}

// callRev is the revision a write call applied at, or 0.
func callRev(cl *call) int64 {
	switch {
	case cl.patched != nil:
		return cl.patched.rev
	case cl.status == answered && cl.err == nil && cl.wrote:
		return cl.rev
	}
	return 0
}

// explain maps applied revisions with events to the calls that made
// them: a lost acknowledged write or an unexplained change is a bug.
func (w *World) explain(byRev map[int64][]core.Event) error {
	seen := map[int64]string{}
	claim := func(rev int64, who string) error {
		if prev, ok := seen[rev]; ok {
			return fmt.Errorf("revision r%d claimed by %s and %s", rev, prev, who)
		}
		seen[rev] = who
		return nil
	}
	for _, cl := range w.hist.calls {
		rev := callRev(cl)
		if rev == 0 {
			continue
		}
		if err := claim(rev, fmt.Sprintf("op%d", cl.id)); err != nil {
			return err
		}
		if cl.status == answered && cl.in.kind == opWrite && linearizability.Writes(cl.resp) && len(byRev[rev]) == 0 {
			return fmt.Errorf("lost write: op%d (%s) acknowledged at r%d, not in the engine", cl.id, core.DescribeRequest(cl.in.write), rev)
		}
	}
	// Expiries the engine applied but no leader released.
	released := map[int64]bool{}
	for _, e := range w.expiries {
		released[e.rev] = true
	}
	ended := map[int64]bool{} // leases a released revoke or expiry ended
	for _, e := range w.expiries {
		ended[e.lease] = true
	}
	for _, cl := range w.hist.calls {
		if cl.in.kind == opRevoke && cl.status == answered && cl.err == nil {
			ended[cl.in.lease] = true
		}
	}
	// lastUse is the newest revision that attached a key to each lease:
	// the lease was alive then, so no expiry applied below it.
	lastUse := map[int64]int64{}
	for rev, evs := range byRev {
		for _, ev := range evs {
			if l := ev.Kv.GetLease(); ev.Type == mvccpb.PUT && l != 0 {
				lastUse[l] = max(lastUse[l], rev)
			}
		}
	}
	for _, a := range w.expiryAttempts {
		if a.rev == 0 {
			// An expiry of a lease without keys, never released: it
			// applied if the lease record is gone, nothing else ended
			// the lease, and no key was attached to the lease after it
			// (then it did not apply, and a later attempt did: a node
			// that crashed with its expiry in flight, and the lease
			// expired again by its successor).
			gone, err := w.leaseGone(a.lease.id)
			if err != nil {
				return err
			}
			if gone && !ended[a.lease.id] && a.readAt >= lastUse[a.lease.id] {
				ended[a.lease.id] = true
				w.expiries = append(w.expiries, expiry{lease: a.lease.id, rev: a.readAt, at: a.by})
			}
			continue
		}
		if released[a.rev] {
			continue
		}
		ok, err := w.appliedRevision(a.rev, a.term)
		if err != nil {
			return err
		}
		if ok {
			w.expiries = append(w.expiries, expiry{lease: a.lease.id, rev: a.rev, at: a.by, wrote: true})
			released[a.rev] = true
		}
	}
	for _, e := range w.expiries {
		if !e.wrote {
			continue // it took no revision
		}
		if err := claim(e.rev, fmt.Sprintf("expiry of lease %d", e.lease)); err != nil {
			return err
		}
	}
	revs := make([]int64, 0, len(byRev))
	for rev := range byRev {
		revs = append(revs, rev)
	}
	slices.Sort(revs)
	for _, rev := range revs {
		evs := byRev[rev]
		if _, ok := seen[rev]; ok {
			continue
		}
		// A leader may apply a lease expiry and lose the lead before
		// releasing it: deletes of one lease's keys explain themselves.
		lease := evs[0].PrevKv.GetLease()
		for _, ev := range evs {
			if ev.Type != mvccpb.DELETE || lease == 0 || ev.PrevKv.GetLease() != lease {
				return fmt.Errorf("revision r%d applied but no call made it (%s)", rev, core.DescribeEvent(ev))
			}
		}
		w.expiries = append(w.expiries, expiry{lease: lease, rev: rev, at: w.now, wrote: true})
	}
	return nil
}

// checkNoEmptyRevisions fails a revision that was applied without a
// change: etcd moves its revision only when a key changes, and
// kube-apiserver's watch cache answers 410 Gone across such a gap after a
// restart. Only a fenced revision (an attempt that did not land) may hold
// no event.
func (w *World) checkNoEmptyRevisions() error {
	return w.archive(func(rd storage.Reader, st core.State) error {
		for rev := int64(1); rev <= st.Committed; rev++ {
			v, ok, err := rd.Get(core.RevisionKey(rev))
			if err != nil || !ok {
				continue // no record: r1 of an empty store, or a gap not applied
			}
			rec, err := core.DecodeRevisionRecord(v)
			if err != nil {
				return fmt.Errorf("revision record r%d: %w", rev, err)
			}
			if !rec.Fenced && len(rec.Events) == 0 {
				return fmt.Errorf("revision r%d applied without changing a key (etcd's revision would not move)", rev)
			}
		}
		return nil
	})
}

// record converts the history for porcupine.
func (w *World) record() *linearizability.Recorder {
	rec := &linearizability.Recorder{}
	for _, cl := range w.hist.calls {
		in, ok := historyInput(cl)
		if !ok {
			continue
		}
		id := rec.Call(cl.client.idx, in, int64(cl.start))
		switch {
		case cl.patched != nil:
			// It took effect when a leader's commit point passed it: if a
			// leader released its answer (lost on the way), by then;
			// otherwise nobody knows when, and it returns at +infinity.
			cl.lease = cl.patched.lease
			out := historyOutput(cl, cl.patched.eff.Response, nil, cl.patched.rev)
			if cl.released > 0 {
				rec.Return(id, out, int64(cl.released))
			} else {
				rec.Patch(id, out)
			}
		case cl.status == unknown && cl.in.kind == opCompact:
			rec.Unknown(id) // a compaction leaves no revision record
		case cl.status == unknown:
			rec.Drop(id) // no attempt applied
		case cl.status == failed:
			rec.Drop(id)
		default:
			rec.Return(id, historyOutput(cl, cl.resp, cl.err, cl.rev), int64(cl.end))
		}
	}
	granted := map[int64]time.Duration{}
	for _, cl := range w.hist.calls {
		if _, ok := granted[cl.lease.id]; cl.in.kind == opGrant && cl.lease.id != 0 && !ok {
			granted[cl.lease.id] = cl.start // the first: a client may grant an ID again once it ended
		}
	}
	for i, e := range w.expiries {
		if _, ok := granted[e.lease]; !ok && !e.wrote {
			// The grant's answer was lost: no one knew the lease, and its
			// expiry changed nothing anyone saw.
			continue
		}
		// An expiry can take effect any time after its lease was granted.
		id := rec.Call(10000+i, linearizability.Input{Revoke: &pb.LeaseRevokeRequest{ID: e.lease}}, int64(granted[e.lease]))
		rec.Return(id, linearizability.Output{Revoke: &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: e.rev}}}, int64(e.at))
	}
	return rec
}

func historyInput(cl *call) (linearizability.Input, bool) {
	switch cl.in.kind {
	case opWrite:
		return linearizability.Input{KV: cl.in.write}, true
	case opRange:
		// A serializable read need not be linearizable; checkSerializable
		// checks it against the store at its revision.
		return linearizability.RangeInput(cl.in.rng), !cl.in.rng.Serializable
	case opGrant:
		return linearizability.Input{Grant: &pb.LeaseGrantRequest{ID: cl.in.lease, TTL: cl.in.ttl}}, true
	case opRevoke:
		return linearizability.Input{Revoke: &pb.LeaseRevokeRequest{ID: cl.in.lease}}, true
	case opCompact:
		return linearizability.Input{Compact: &pb.CompactionRequest{Revision: cl.in.rev}}, true
	}
	return linearizability.Input{}, false
}

func historyOutput(cl *call, resp *pb.ResponseOp, err error, rev int64) linearizability.Output {
	if err != nil {
		return linearizability.ErrOutput(err)
	}
	hdr := &pb.ResponseHeader{Revision: rev}
	switch cl.in.kind {
	case opGrant:
		return linearizability.Output{Grant: &pb.LeaseGrantResponse{Header: hdr, ID: cl.lease.id, TTL: cl.lease.ttl}}
	case opRevoke:
		return linearizability.Output{Revoke: &pb.LeaseRevokeResponse{Header: hdr}}
	case opCompact:
		return linearizability.Output{Compact: &pb.CompactionResponse{Header: hdr}}
	}
	return linearizability.Output{KV: resp}
}

// checkLinearizable checks the history by its revision-order witness;
// porcupine's search runs too when asked (it is slow on long histories)
// and renders a failing history.
func (w *World) checkLinearizable(res *Result) error {
	ops := w.record().Operations()
	res.Visualize = func(path string) error {
		_, info := linearizability.Check(ops, 10*time.Second)
		return linearizability.Visualize(info, path)
	}
	if err := linearizability.CheckRevisionOrder(ops); err != nil {
		return fmt.Errorf("history of %d operations is not linearizable: %w", len(ops), err)
	}
	if w.cfg.Porcupine {
		if result, _ := linearizability.Check(ops, time.Minute); result != porcupine.Ok {
			return fmt.Errorf("porcupine finds the history of %d operations %v", len(ops), result)
		}
	}
	return nil
}

// compacted is the final compact revision: no watch saw a higher one.
func (w *World) compacted() (rev int64) {
	_ = w.final(func(_ storage.Reader, st core.State) error {
		rev = st.Compacted
		return nil
	})
	return rev
}

// checkWatches checks every watch stream against the ground truth, and
// holds each to the compactions its node had answered when the watch
// reached it (checkCompactedStart).
func (w *World) checkWatches(evs []core.Event) error {
	committed := linearEvents(evs)
	compacted := w.compacted()
	compactions := map[string][]*call{} // each node's acknowledged compactions
	for _, cl := range w.hist.calls {
		if cl.in.kind == opCompact && cl.status == answered && cl.err == nil && cl.answeredBy != "" {
			compactions[cl.answeredBy] = append(compactions[cl.answeredBy], cl)
		}
	}
	for _, c := range w.clients {
		for i, cw := range c.watches {
			if err := checkCompactedStart(cw, compactions[cw.openedBy]); err != nil {
				return fmt.Errorf("c%d watch %d (from r%d): %w", c.idx, i, cw.spec.StartRev, err)
			}
			if err := checkRefusedCreates(cw); err != nil {
				return fmt.Errorf("c%d watch %d (from r%d): %w", c.idx, i, cw.spec.StartRev, err)
			}
			spec := linearizability.WatchSpec{Key: cw.spec.Key, End: cw.spec.End, StartRev: cw.spec.StartRev, PrevKV: cw.spec.PrevKV,
				NoPut: cw.spec.NoPut, NoDelete: cw.spec.NoDelete, Compacted: compacted}
			if err := linearizability.CheckWatch(committed, spec, cw.got); err != nil {
				return fmt.Errorf("c%d watch %d (from r%d): %w", c.idx, i, cw.spec.StartRev, err)
			}
		}
	}
	return nil
}

// checkCompactedStart: a watch from below a compaction its node had
// already answered when the create reached it is canceled at once, as
// etcd's member that applied the compaction cancels it: no event.
func checkCompactedStart(cw *clientWatch, compactions []*call) error {
	for _, cl := range compactions {
		if cl.answeredAt > cw.openedAt || cw.spec.StartRev <= 0 || cw.spec.StartRev >= cl.in.rev {
			continue
		}
		for _, r := range cw.got {
			if len(r.Events) > 0 {
				return fmt.Errorf("got events, but %s had answered op%d's compaction at r%d before the watch reached it", cw.openedBy, cl.id, cl.in.rev)
			}
		}
	}
	return nil
}

// checkState replays the ground-truth events and compares the result with
// what a read of every key at the final commit point returns: a commit
// that landed over a newer one (a skipped conflict check) leaves a key
// whose latest value no event explains. It does not check older
// versions (reads at a revision are the linearizability check's) nor a
// stale commit that a later write to the same key hid again.
func (w *World) checkState(evs []core.Event) error {
	want := map[string]*mvccpb.KeyValue{}
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			delete(want, string(ev.Kv.Key))
		} else {
			want[string(ev.Kv.Key)] = ev.Kv
		}
	}
	got, err := w.finalRange()
	if err != nil {
		return fmt.Errorf("reading the final state: %w", err)
	}
	for _, kv := range got {
		ev := want[string(kv.Key)]
		delete(want, string(kv.Key))
		if ev == nil || ev.ModRevision != kv.ModRevision || ev.CreateRevision != kv.CreateRevision ||
			ev.Version != kv.Version || ev.Lease != kv.Lease || string(ev.Value) != string(kv.Value) {
			return fmt.Errorf("final state: %q is %s, its events say %s", kv.Key, describeKV(kv), describeKV(ev))
		}
	}
	left := slices.Sorted(maps.Keys(want))
	if len(left) > 0 {
		return fmt.Errorf("final state: %q is missing, its events say %s", left[0], describeKV(want[left[0]]))
	}
	return nil
}

// checkExport compares a snapshot's content (core.Export at the final
// commit point, what Maintenance.Snapshot sends) with the ground truth:
// every event from the compact revision on, in order, then each key
// alive at the compact revision with an older version, that version.
func (w *World) checkExport(evs []core.Event) error {
	var (
		got       []string
		compacted int64
	)
	err := w.final(func(rd storage.Reader, st core.State) error {
		compacted = st.Compacted
		return core.Export(rd, st.Compacted, st.Committed, 7, func(v core.Version) error {
			if v.Rev < compacted {
				v.Sub = 0 // these only need to be distinct
			}
			got = append(got, core.DescribeVersion(v))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("exporting the final state: %w", err)
	}
	var want []string
	base := map[string]*mvccpb.KeyValue{}
	sub, last := int64(0), int64(0)
	for _, ev := range evs {
		if ev.Rev <= compacted {
			if ev.Type == mvccpb.DELETE {
				delete(base, string(ev.Kv.Key))
			} else {
				base[string(ev.Kv.Key)] = ev.Kv
			}
		}
		if ev.Rev < compacted {
			continue
		}
		if ev.Rev != last {
			sub, last = 0, ev.Rev
		}
		v := core.Version{Rev: ev.Rev, Sub: sub, Tombstone: ev.Type == mvccpb.DELETE, KV: ev.Kv}
		want = append(want, core.DescribeVersion(v))
		sub++
	}
	for _, k := range slices.Sorted(maps.Keys(base)) {
		if kv := base[k]; kv.ModRevision < compacted { // one at compacted came with the events
			want = append(want, core.DescribeVersion(core.Version{Rev: kv.ModRevision, KV: kv}))
		}
	}
	for i := range max(len(got), len(want)) {
		g, wv := "nothing", "nothing"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			wv = want[i]
		}
		if g != wv {
			return fmt.Errorf("snapshot (compacted r%d): version %d is %s, the events say %s", compacted, i, g, wv)
		}
	}
	return nil
}

func describeKV(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "absent"
	}
	return fmt.Sprintf("%q at r%d (created r%d, version %d, lease %d)", kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version, kv.Lease)
}

// finalRange reads every key at the engine's commit point.
func (w *World) finalRange() (kvs []*mvccpb.KeyValue, err error) {
	err = w.final(func(rd storage.Reader, st core.State) error {
		resp, err := core.Range(rd, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, st.Committed, st.Compacted)
		kvs = resp.GetKvs()
		return err
	})
	return kvs, err
}

// swap is a Txn `If ModRevision(k)==m Then Put(k, …)` (or Then
// Delete(k)): Kubernetes' create, GuaranteedUpdate and conditional delete,
// and the hot counters' increments.
type swap struct {
	key string
	mod int64
	put *pb.PutRequest // nil: a delete
}

func swapOf(in input) (swap, bool) {
	t := in.write.GetRequestTxn()
	if in.kind != opWrite || t == nil || len(t.Compare) != 1 || len(t.Success) != 1 {
		return swap{}, false
	}
	c := t.Compare[0]
	if c.Target != pb.Compare_MOD || c.Result != pb.Compare_EQUAL || len(c.RangeEnd) > 0 {
		return swap{}, false
	}
	sw := swap{key: string(c.Key), mod: c.GetModRevision(), put: t.Success[0].GetRequestPut()}
	if sw.put != nil {
		return sw, string(sw.put.Key) == sw.key
	}
	d := t.Success[0].GetRequestDeleteRange()
	return sw, d != nil && string(d.Key) == sw.key && len(d.RangeEnd) == 0
}

// checkSwaps holds every compare-and-swap that applied and succeeded —
// acknowledged, or abandoned by its client and found in the engine — to
// what etcd promises, against the engine's events rather than Axon's
// answers: the key's revision just before the swap was the one compared.
// So no two swaps of a key compared the same revision (the lost update of
// two CAS Txns that both succeed), and a counter increment wrote one more
// than the value it compared against: the counter accounts for every
// increment. A swap at m = 0 (create) needs the key absent before it.
// It does not check Txns of other shapes (several compares, value or
// version compares) or swaps whose compare failed: those are the
// linearizability check's. It returns how many counter increments it
// checked.
func (w *World) checkSwaps(evs []core.Event) (increments int, err error) {
	byKey := map[string][]core.Event{}
	for _, ev := range evs {
		byKey[string(ev.Kv.Key)] = append(byKey[string(ev.Kv.Key)], ev)
	}
	type compared struct {
		key string
		mod int64
	}
	winner := map[compared]int{}
	for _, cl := range w.hist.calls {
		sw, ok := swapOf(cl.in)
		if !ok || !callResponse(cl).GetResponseTxn().GetSucceeded() {
			continue
		}
		rev := callRev(cl)
		if prev, dup := winner[compared{sw.key, sw.mod}]; dup && sw.mod > 0 {
			return 0, fmt.Errorf("lost update: op%d and op%d both swapped %q comparing ModRevision==%d", prev, cl.id, sw.key, sw.mod)
		}
		winner[compared{sw.key, sw.mod}] = cl.id
		evs := byKey[sw.key]
		i, found := slices.BinarySearchFunc(evs, rev, func(ev core.Event, rev int64) int { return cmp.Compare(ev.Rev, rev) })
		if !found {
			if sw.put == nil && sw.mod == 0 {
				continue // deleted what was not there: no event
			}
			return 0, fmt.Errorf("op%d swapped %q at r%d, but the engine has no event of it there", cl.id, sw.key, rev)
		}
		var before *mvccpb.KeyValue
		if i > 0 && evs[i-1].Type == mvccpb.PUT {
			before = evs[i-1].Kv
		}
		if mod := before.GetModRevision(); mod != sw.mod {
			return 0, fmt.Errorf("lost update: op%d swapped %q at r%d comparing ModRevision==%d, but the engine had it at r%d then", cl.id, sw.key, rev, sw.mod, mod)
		}
		if cl.in.counter {
			if want := counterNumber(before.GetValue()) + 1; counterNumber(sw.put.Value) != want {
				return 0, fmt.Errorf("counter %q: op%d wrote %s at r%d over %s, not %d", sw.key, cl.id, sw.put.Value, rev, describeKV(before), want)
			}
			increments++
		}
	}
	return increments, nil
}
