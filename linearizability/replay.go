package linearizability

import (
	"cmp"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Applied is an operation known to have taken effect, for Replay: a
// write at its own revision (Wrote), or an operation that changed no key
// (a lease grant, a revoke or expiry of a lease without keys) placed at
// the revision it was answered at, after that revision's write.
type Applied struct {
	In  Input
	Out Output // the answer, if its caller got one (compared for KV writes)
	Rev int64
	// Wrote: the operation changed keys at Rev.
	Wrote bool
}

// Replay applies ops in revision order through the model and returns the
// events their writes make, in revision order (within a revision, in
// the order the operation made them, as etcd sends them): what a store with etcd's semantics emits for them, derived
// without reading any store's own event records. It fails if a write's
// answer is not the model's at its revision, if a write changes nothing,
// or if an operation placed without a revision changes keys. Operations
// on leases the model does not know (a grant nobody learned of) are
// skipped.
func Replay(ops []Applied) ([]Event, error) {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b Applied) int {
		if c := cmp.Compare(a.Rev, b.Rev); c != 0 {
			return c
		}
		switch {
		case a.Wrote == b.Wrote:
			return 0
		case a.Wrote:
			return -1
		}
		return 1
	})
	s := &state{}
	for _, op := range ops {
		if op.Wrote {
			if op.Rev <= s.rev {
				return nil, fmt.Errorf("two writes at r%d: %s", op.Rev, describeInput(op.In))
			}
			x := newExec(s, op.Rev)
			exp, kind := x.run(op.In, &op.Out)
			switch {
			case kind != errNone:
				return nil, fmt.Errorf("r%d %s fails in the model (%d) on %s", op.Rev, describeInput(op.In), kind, s.describe())
			case !x.wrote:
				return nil, fmt.Errorf("r%d %s changes nothing in the model", op.Rev, describeInput(op.In))
			case op.In.KV != nil && op.Out.KV != nil && !x.sameOutput(exp, op.Out):
				return nil, fmt.Errorf("r%d %s answered %s, the model gives %s", op.Rev, describeInput(op.In), describeOutput(op.Out), describeOutput(exp))
			}
			s = x.commit()
			continue
		}
		x := newExec(s, s.rev)
		if _, kind := x.run(op.In, &op.Out); kind != errNone {
			continue // a lease the model never saw granted
		}
		if x.wrote {
			return nil, fmt.Errorf("%s at r%d changes keys without a revision", describeInput(op.In), op.Rev)
		}
		s = x.commit()
	}
	return s.events(), nil
}

// events lists the changes of every applied revision as watch events.
func (s *state) events() []Event {
	var recs []*record
	for r := s.hist; r != nil; r = r.prev {
		recs = append(recs, r)
	}
	slices.Reverse(recs)
	var evs []Event
	for _, r := range recs {
		for _, c := range r.changes {
			switch {
			case c.after != nil:
				evs = append(evs, Event{Rev: r.rev, Event: &mvccpb.Event{Type: mvccpb.PUT, Kv: c.after, PrevKv: c.before}})
			case c.before != nil:
				kv := &mvccpb.KeyValue{Key: []byte(c.key), ModRevision: r.rev}
				evs = append(evs, Event{Rev: r.rev, Event: &mvccpb.Event{Type: mvccpb.DELETE, Kv: kv, PrevKv: c.before}})
			}
		}
	}
	return evs
}
