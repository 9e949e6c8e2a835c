package sim

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/linearizability"
)

// invalidRequest draws a write etcd's gRPC layer refuses (or one at the
// edge of a rule that it accepts), as a buggy or hostile client sends:
// an empty key, a value or lease beside ignore_value or ignore_lease, a
// txn that writes a key twice on one path or holds more operations than
// --max-txn-ops. The linearizability model knows etcd's rules: each must
// be refused with etcd's error and change nothing, each edge accepted.
func (c *client) invalidRequest() input {
	w := c.w
	k, v := c.pickKey(), c.value()
	put := func(k string) *pb.RequestOp { return putOp(k, c.value(), 0) }
	del := func(k, end string) *pb.RequestOp {
		d := &pb.DeleteRangeRequest{Key: []byte(k)}
		if end != "" {
			d.RangeEnd = []byte(end)
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
	}
	txnOp := func(t *pb.TxnRequest) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
	}
	var op *pb.RequestOp
	switch w.rng.IntN(10) {
	case 0: // an empty key: a put, a delete, a compare, a read in a txn
		switch w.rng.IntN(4) {
		case 0:
			op = putOp("", v, 0)
		case 1:
			op = del("", "")
		case 2:
			op = txnOp(&pb.TxnRequest{Compare: []*pb.Compare{modCompare("", 0)}, Success: []*pb.RequestOp{put(k)}})
		default:
			op = txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{put(k), getOp("")}})
		}
	case 1: // ignore_value with a value
		op = putOp(k, v, 0)
		op.GetRequestPut().IgnoreValue = true
	case 2: // ignore_lease with a lease
		op = putOp(k, nil, 1+w.rng.Int64N(1<<40))
		op.GetRequestPut().IgnoreLease = true
	case 3: // one key put twice in a branch, or put in both branches (valid)
		b := []*pb.RequestOp{put(k), getOp(k), put(k)}
		if w.chance(0.5) {
			op = txnOp(&pb.TxnRequest{Compare: []*pb.Compare{c.compare()}, Success: b[:1], Failure: []*pb.RequestOp{put(k)}})
			break
		}
		op = txnOp(&pb.TxnRequest{Compare: []*pb.Compare{c.compare()}, Success: b, Failure: b[1:2]})
	case 4: // a put inside a range the branch deletes, or beside it (valid)
		r := etcdRanges[w.rng.IntN(len(etcdRanges))]
		op = txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{del(r[0], r[1]), put(k)}})
	case 5: // a nested txn's put against its parent's, or both its branches' (valid)
		inner := &pb.TxnRequest{Compare: []*pb.Compare{c.compare()}, Success: []*pb.RequestOp{put(k)}, Failure: []*pb.RequestOp{put(k)}}
		outer := []*pb.RequestOp{txnOp(inner)}
		if w.chance(0.5) {
			outer = append(outer, put(c.pickKey()))
		}
		op = txnOp(&pb.TxnRequest{Compare: []*pb.Compare{c.compare()}, Success: outer})
	case 6, 7: // --max-txn-ops compares, reads or writes, or one more
		n := linearizability.MaxTxnOps + w.rng.IntN(2)
		t := &pb.TxnRequest{Success: []*pb.RequestOp{put(k)}, Failure: []*pb.RequestOp{getOp(k)}}
		switch w.rng.IntN(3) {
		case 0:
			for range n {
				t.Compare = append(t.Compare, c.compare())
			}
		case 1:
			for range n - 1 {
				t.Failure = append(t.Failure, getOp(c.pickKey()))
			}
		default: // deletes of keys no one writes: no change to bloat the store
			t.Success = nil
			for i := range n {
				t.Success = append(t.Success, del(fmt.Sprintf("/e/many/%d", i), ""))
			}
		}
		op = txnOp(t)
	case 8: // a nested txn over what its parent's count leaves
		n := linearizability.MaxTxnOps - 2 + w.rng.IntN(2)
		inner := &pb.TxnRequest{}
		for range n {
			inner.Success = append(inner.Success, getOp(c.pickKey()))
		}
		op = txnOp(&pb.TxnRequest{Compare: []*pb.Compare{c.compare(), c.compare()}, Success: []*pb.RequestOp{txnOp(inner)}})
	default: // an empty operation in a branch
		op = txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{getOp(k), {}}})
	}
	return input{kind: opWrite, write: op}
}
