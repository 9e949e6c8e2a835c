package linearizability

import (
	"bytes"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// CheckSnapshotRead checks a serializable range, which etcd answers from
// a member's own state without a read index: it need not be linearizable,
// but it must be the store exactly as of its header revision, or as of
// the revision it names, which its member must have reached (etcd answers
// ErrFutureRev above its own revision). committed is every applied
// event, in revision order (r's count, filters, sort, limit and
// keys_only are etcd's, as the model's).
func CheckSnapshotRead(committed []Event, r *pb.RangeRequest, got *pb.RangeResponse) error {
	if got.Header == nil {
		return fmt.Errorf("serializable range %s: no header", describeSpan(r.Key, r.RangeEnd))
	}
	at := got.Header.Revision
	if r.Revision > at {
		return fmt.Errorf("serializable range %s @r%d%s answered at r%d, below the revision it reads at", describeSpan(r.Key, r.RangeEnd), r.Revision, describeOptions(r), at)
	}
	opts := describeOptions(r)
	if r.Revision > 0 {
		at, opts = r.Revision, fmt.Sprintf(" @r%d%s", r.Revision, opts)
	}
	state := map[string]*mvccpb.KeyValue{}
	for _, ev := range committed {
		if ev.Rev > at {
			break
		}
		if !InSpan(ev.Kv.Key, r.Key, r.RangeEnd) {
			continue
		}
		if ev.Type == mvccpb.DELETE {
			delete(state, string(ev.Kv.Key))
		} else {
			state[string(ev.Kv.Key)] = ev.Kv
		}
	}
	want := make([]*mvccpb.KeyValue, 0, len(state))
	for _, kv := range state {
		want = append(want, kv)
	}
	slices.SortFunc(want, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	// etcd's count, filters, sort, limit and keys_only, as the model
	// shapes a range; ties of a non-key sort in any order.
	x := &exec{}
	if exp := x.shape(r, want); !x.sameRange(exp, got) {
		return fmt.Errorf("serializable range %s%s at r%d answered count=%d more=%v %s; the store at r%d holds %s",
			describeSpan(r.Key, r.RangeEnd), opts, got.Header.Revision, got.Count, got.More, describeKVs(got.Kvs), at, describeKVs(want))
	}
	return nil
}
