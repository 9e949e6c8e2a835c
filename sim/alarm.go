package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
)

// alarmChange is an operator's `etcdctl alarm` on NOSPACE: raise (the
// Maintenance.Alarm ACTIVATE a member's quota check sends) or disarm a
// member's alarm.
type alarmChange struct {
	member uint64
	raise  bool
}

// alarmMembers are the member IDs the alarm client raises NOSPACE for.
var alarmMembers = []uint64{1, 2, 3}

// alarmTurn draws the alarm client's change, if it makes one now: it
// raises a member's alarm on AlarmShare of its calls, and disarms one it
// raised on a third of them, so that the store refuses writes in short
// windows, some spanning a leader change. After healing it disarms every
// alarm it raised before its final write.
func (c *client) alarmTurn() (input, bool) {
	w := c.w
	switch {
	case len(c.raised) > 0 && (w.healed || w.chance(0.3)):
		return input{kind: opAlarm, alarm: &alarmChange{member: c.raised[w.rng.IntN(len(c.raised))]}}, true
	case !w.healed && w.chance(w.plan.AlarmShare):
		m := alarmMembers[w.rng.IntN(len(alarmMembers))]
		if !slices.Contains(c.raised, m) {
			c.raised = append(c.raised, m)
		}
		return input{kind: opAlarm, alarm: &alarmChange{member: m, raise: true}}, true
	}
	return input{}, false
}

// learnAlarm forgets a raised alarm once its disarm is acknowledged; a
// disarm that failed or may not have applied is tried again. After
// three in ten acknowledged raises the leader hands over soon, as an
// operator moves the lead off a member being defragmented: the new
// leader must refuse writes from the alarm it finds stored.
func (c *client) learnAlarm(cl *call) {
	a, w := cl.in.alarm, c.w
	if a == nil || cl.status != answered || cl.err != nil {
		return
	}
	if !a.raise {
		c.raised = slices.DeleteFunc(c.raised, func(m uint64) bool { return m == a.member })
		return
	}
	if w.cfg.Exclusive || !w.chance(0.3) {
		return
	}
	w.after(w.between(0, 100*time.Millisecond), "alarm transfer", func() {
		for _, n := range w.nodes {
			if n.up && n.member.Role() == core.Leader {
				n.transferAway()
				return
			}
		}
	})
}

// etcdAddsData is etcd's capped applier's rule (its quota's cost of a
// request): while NOSPACE is raised, a put is refused, and a txn with a
// put anywhere in its tree, in either branch.
func etcdAddsData(op *pb.RequestOp) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		return true
	case *pb.RequestOp_RequestTxn:
		return slices.ContainsFunc(slices.Concat(tv.RequestTxn.Success, tv.RequestTxn.Failure), etcdAddsData)
	}
	return false
}

// alarmSpan is one alarm change as its client saw it: [start, end], end
// at +infinity if it may have applied without an answer.
type alarmSpan struct {
	alarmChange
	id         int
	start, end time.Duration
	sure       bool // acknowledged
}

const forever = time.Duration(math.MaxInt64)

// checkAlarms judges every write and lease grant against the alarm
// changes, by real time alone (an alarm takes no revision): a request
// refused with NOSPACE adds data by etcd's rule, and came while some
// raise may have applied with no disarm of that member surely after it
// and surely before the request; one accepted came while no raise had
// surely applied before it started, or a disarm of that member may have
// come between. A request admitted before a raise may still apply after
// it, as in etcd one proposed before the alarm's entry does.
func (w *World) checkAlarms() error {
	var spans []alarmSpan
	for _, cl := range w.hist.calls {
		if cl.in.kind != opAlarm || cl.status == failed {
			continue
		}
		s := alarmSpan{alarmChange: *cl.in.alarm, id: cl.id, start: cl.start, end: forever}
		if cl.status == answered && cl.err == nil {
			s.sure, s.end = true, cl.end
		}
		spans = append(spans, s)
	}
	for _, cl := range w.hist.calls {
		if cl.in.kind != opWrite && cl.in.kind != opGrant {
			continue
		}
		adds := cl.in.kind == opGrant || etcdAddsData(cl.in.write)
		what := "lease grant"
		if cl.in.write != nil {
			what = core.DescribeRequest(cl.in.write)
		}
		switch {
		case cl.status == answered && errors.Is(cl.err, core.ErrNoSpace):
			if !adds {
				return fmt.Errorf("op%d (%s) refused for NOSPACE, but etcd refuses only what adds data", cl.id, what)
			}
			if a, ok := raisedWithin(spans, cl.start, cl.end); !ok {
				return fmt.Errorf("op%d (%s) refused for NOSPACE at %v (sent %v), but no alarm may have been raised then (%s)", cl.id, what, cl.end, cl.start, a)
			}
		case adds && (cl.status == answered && cl.err == nil || cl.patched != nil):
			end := cl.end
			if cl.patched != nil {
				end = forever
				if cl.released > 0 {
					end = cl.released
				}
			}
			if a, ok := surelyRaised(spans, cl.start, end); ok {
				return fmt.Errorf("op%d (%s) applied (sent %v), but op%d had raised member %d's NOSPACE at %v and no disarm may have come between", cl.id, what, cl.start, a.id, a.member, a.end)
			}
		}
	}
	return nil
}

// raisedWithin reports whether some raise may be in effect at a point of
// [start, end]: it began before end, and no acknowledged disarm of its
// member began after it surely ended and ended before start. It also
// describes the changes, for the failure.
func raisedWithin(spans []alarmSpan, start, end time.Duration) (string, bool) {
	for _, a := range spans {
		if !a.raise || a.start >= end {
			continue
		}
		if !slices.ContainsFunc(spans, func(d alarmSpan) bool {
			return !d.raise && d.sure && d.member == a.member && d.start > a.end && d.end < start
		}) {
			return "", true
		}
	}
	return fmt.Sprintf("%d alarm changes", len(spans)), false
}

// surelyRaised finds an acknowledged raise that ended before start with
// no disarm of its member that may have applied after it and before end.
func surelyRaised(spans []alarmSpan, start, end time.Duration) (alarmSpan, bool) {
	for _, a := range spans {
		if !a.raise || !a.sure || a.end >= start {
			continue
		}
		if !slices.ContainsFunc(spans, func(d alarmSpan) bool {
			return !d.raise && d.member == a.member && d.start < end && d.end > a.start
		}) {
			return a, true
		}
	}
	return alarmSpan{}, false
}
