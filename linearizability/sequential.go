package linearizability

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Sequential is the model applied one operation at a time, each at a
// revision its caller knows: the oracle for a single node whose release
// order is the revision order (core's model test).
type Sequential struct{ s *state }

// NewSequential returns an empty store.
func NewSequential() *Sequential { return &Sequential{s: &state{}} }

// Answer is the model's answer to one operation.
type Answer struct {
	Out Output
	// Wrote: the operation changed keys (it takes the revision).
	Wrote bool
	kind  errKind
	x     *exec
}

// Failed reports whether the model refuses the operation.
func (a Answer) Failed() bool { return a.kind != errNone }

// SameError reports whether err (nil for success) is the model's answer,
// by etcd's error text.
func (a Answer) SameError(err error) bool {
	if err == nil {
		return a.kind == errNone
	}
	return a.kind != errNone && classify(err.Error()) == a.kind
}

// Same reports whether got is the model's output, headers and lease
// TTLs aside.
func (a Answer) Same(got Output) bool { return a.kind == errNone && a.x.sameOutput(a.Out, got) }

// Apply runs in at revision rev: a write's own revision, or for an
// operation that changes no key the revision its answer was read at. A
// refused operation changes nothing.
func (q *Sequential) Apply(in Input, rev int64) Answer {
	x := newExec(q.s, max(rev, q.s.rev))
	out, kind := x.run(in, nil)
	if kind != errNone {
		return Answer{kind: kind, x: x}
	}
	if !x.wrote {
		x.rev = q.s.rev
	}
	q.s = x.commit()
	return Answer{Out: out, Wrote: x.wrote, kind: errNone, x: x}
}

// Grant adds lease id, as a grant answered with that ID does.
func (q *Sequential) Grant(id, ttl int64) {
	out := Output{Grant: &pb.LeaseGrantResponse{ID: id, TTL: ttl}}
	x := newExec(q.s, q.s.rev)
	if _, kind := x.run(Input{Grant: &pb.LeaseGrantRequest{TTL: ttl}}, &out); kind == errNone {
		q.s = x.commit()
	}
}

// Range answers a read at revision at, the store's commit point (or at
// r.Revision if set): revisions between the last write and at changed
// nothing.
func (q *Sequential) Range(r *pb.RangeRequest, at int64) (*pb.RangeResponse, bool) {
	x := newExec(q.s, max(q.s.rev, at))
	resp, kind := x.rangeOp(r)
	return resp, kind == errNone
}

// Events lists every applied revision's changes as watch events.
func (q *Sequential) Events() []Event { return q.s.events() }

// Compacted is the compact revision.
func (q *Sequential) Compacted() int64 { return q.s.compact }
