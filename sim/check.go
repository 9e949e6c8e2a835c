package sim

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/linearizability"
)

// expiry is a lease revoked by a leader's clock, seen released at rev.
type expiry struct {
	lease, rev int64
	at         time.Duration
}

// check resolves every call against the engine's ground truth, then runs
// the checkers: every applied revision is explained by exactly one call
// or expiry, every acknowledged write is applied, the history is
// linearizable, and every watch stream keeps etcd's guarantees.
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
	if err := w.explain(byRev); err != nil {
		return err
	}
	if err := w.checkWatches(evs); err != nil {
		return err
	}
	return w.checkLinearizable(res)
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
			ok, err := w.appliedRevision(a.rev)
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

// callRev is the revision a write call applied at, or 0.
func callRev(cl *call) int64 {
	switch {
	case cl.patched != nil:
		return cl.patched.rev
	case cl.status == answered && cl.err == nil && cl.in.kind != opRange && cl.in.kind != opKeepAlive && cl.in.kind != opCompact:
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
		if cl.status == answered && cl.in.kind == opWrite && writes(cl.resp) && len(byRev[rev]) == 0 {
			return fmt.Errorf("lost write: op%d (%s) acknowledged at r%d, not in the engine", cl.id, core.DescribeRequest(cl.in.write), rev)
		}
	}
	for _, e := range w.expiries {
		if err := claim(e.rev, fmt.Sprintf("expiry of lease %d", e.lease)); err != nil {
			return err
		}
	}
	for rev, evs := range byRev {
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
		w.expiries = append(w.expiries, expiry{lease: lease, rev: rev, at: w.now})
	}
	return nil
}

// writes reports whether a write response changed anything.
func writes(r *pb.ResponseOp) bool {
	switch tv := r.GetResponse().(type) {
	case *pb.ResponseOp_ResponsePut:
		return true
	case *pb.ResponseOp_ResponseDeleteRange:
		return tv.ResponseDeleteRange.Deleted > 0
	case *pb.ResponseOp_ResponseTxn:
		for _, sub := range tv.ResponseTxn.Responses {
			if writes(sub) {
				return true
			}
		}
	}
	return false
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
			rec.Patch(id, historyOutput(cl, cl.patched.eff.Response, nil, cl.patched.rev))
		case cl.status == unknown:
			rec.Drop(id) // no attempt applied
		case cl.status == failed:
			rec.Drop(id)
		default:
			rec.Return(id, historyOutput(cl, cl.resp, cl.err, cl.rev), int64(cl.end))
		}
	}
	for i, e := range w.expiries {
		id := rec.Call(10000+i, linearizability.Input{Revoke: &pb.LeaseRevokeRequest{ID: e.lease}}, 0)
		rec.Return(id, linearizability.Output{Revoke: &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: e.rev}}}, int64(e.at))
	}
	return rec
}

func historyInput(cl *call) (linearizability.Input, bool) {
	switch cl.in.kind {
	case opWrite:
		return linearizability.Input{KV: cl.in.write}, true
	case opRange:
		return linearizability.RangeInput(cl.in.rng), true
	case opGrant:
		return linearizability.Input{Grant: &pb.LeaseGrantRequest{TTL: cl.in.ttl}}, true
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

// checkLinearizable runs porcupine over the history.
func (w *World) checkLinearizable(res *Result) error {
	ops := w.record().Operations()
	result, info := linearizability.Check(ops, 20*time.Second)
	res.Visualize = func(path string) error { return linearizability.Visualize(info, path) }
	if result != porcupine.Ok {
		return fmt.Errorf("history of %d operations is not linearizable (%v)", len(ops), result)
	}
	return nil
}
func (w *World) checkWatches(evs []core.Event) error { return nil }
