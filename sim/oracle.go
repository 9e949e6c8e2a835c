package sim

import (
	"fmt"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/linearizability"
)

// checkOracle derives the events every applied call and lease expiry
// must have made by replaying them through the linearizability model
// (etcd's semantics, written apart from core), and requires the events
// in the engine's revision records to be exactly those: an event a write
// forgot to record, or one no call explains, fails here even though the
// watch checker, which reads the records, would expect what they hold.
func (w *World) checkOracle(evs []core.Event) error {
	var ops []linearizability.Applied
	for _, cl := range w.hist.calls {
		in, ok := historyInput(cl)
		if !ok {
			continue
		}
		if rev := callRev(cl); rev != 0 {
			ops = append(ops, linearizability.Applied{In: in, Out: historyOutput(cl, callResponse(cl), nil, rev), Rev: rev, Wrote: true})
			continue
		}
		if cl.status == answered && cl.err == nil && (cl.in.kind == opGrant || cl.in.kind == opRevoke) {
			ops = append(ops, linearizability.Applied{In: in, Out: historyOutput(cl, cl.resp, nil, cl.rev), Rev: cl.rev})
		}
	}
	for _, e := range w.expiries {
		ops = append(ops, linearizability.Applied{In: linearizability.Input{Revoke: &pb.LeaseRevokeRequest{ID: e.lease}}, Rev: e.rev, Wrote: e.wrote})
	}
	want, err := linearizability.Replay(ops)
	if err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	got := make([]string, len(evs))
	for i, ev := range evs {
		got[i] = describeOracleEvent(ev.Rev, ev.Event)
	}
	exp := make([]string, len(want))
	for i, ev := range want {
		exp[i] = describeOracleEvent(ev.Rev, ev.Event)
	}
	slices.Sort(got)
	slices.Sort(exp)
	for i := 0; i < max(len(got), len(exp)); i++ {
		var g, e string
		if i < len(got) {
			g = got[i]
		}
		if i < len(exp) {
			e = exp[i]
		}
		if g != e {
			return fmt.Errorf("the engine's events differ from the oracle's replay of the calls: engine has %q where the oracle has %q (%d events against %d)", g, e, len(got), len(exp))
		}
	}
	return nil
}

// describeOracleEvent is an event in the terms both sides share: a put's
// key-value with its revisions and lease, a delete's key (prev_kv is
// checked by the watch checker).
func describeOracleEvent(rev int64, ev *mvccpb.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "r%012d %s %q", rev, ev.Type, ev.Kv.Key)
	if ev.Type == mvccpb.PUT {
		kv := ev.Kv
		fmt.Fprintf(&b, "=%q c%d m%d v%d lease%d", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String()
}
