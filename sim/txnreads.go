package sim

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// readRevision draws a revision for a read to name, as `etcdctl get
// --rev` does: mostly one a client saw lately; one in six just past the
// newest any client saw (a future revision, unless a write committed it
// meanwhile), one in six further back (compaction may have taken it).
func (c *client) readRevision() int64 {
	w := c.w
	top := w.hist.maxSeenRev
	switch w.rng.IntN(6) {
	case 0:
		return top + 1 + w.rng.Int64N(2)
	case 1:
		return max(1, top-10-w.rng.Int64N(100))
	}
	return max(1, top-w.rng.Int64N(10))
}

// widenCompare turns a compare on one key, one time in five, into a
// compare of its key's lease (one of the client's, or none), and one time
// in four into a compare over a range: every key in it must pass (a range
// of no key compares as a missing key), one of etcdRanges, every key from
// its start on, or a range between the keys (none is in it).
func (c *client) widenCompare(cmp *pb.Compare) {
	w := c.w
	if w.chance(0.2) {
		var l int64
		if len(c.leases) > 0 && w.chance(0.7) {
			l = c.leases[w.rng.IntN(len(c.leases))]
		}
		cmp.Target, cmp.TargetUnion = pb.Compare_LEASE, &pb.Compare_Lease{Lease: l}
	}
	if !w.chance(0.25) {
		return
	}
	r := etcdRanges[w.rng.IntN(len(etcdRanges))]
	cmp.Key, cmp.RangeEnd = []byte(r[0]), []byte(r[1])
	switch w.rng.IntN(8) {
	case 0:
		cmp.RangeEnd = []byte{0}
	case 1:
		cmp.Key, cmp.RangeEnd = []byte("/e/d"), []byte("/e/h")
	}
}

// guardedRead is a txn that reads at a revision just past the newest a
// client saw if one of its keys changed since (a watch cache's check
// that its snapshot is still whole, before it reads on): If
// ModRevision(k) > seen Then Range(etcdRange at seen+1) Else Get(k).
// The Then branch is taken only once a write past seen applied, so its
// revision is no future one to the txn.
func (c *client) guardedRead() input {
	w := c.w
	k := c.pickKey()
	seen := w.hist.maxSeenRev
	rr := c.etcdRange()
	rr.Revision = seen + 1
	cmp := &pb.Compare{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_ModRevision{ModRevision: seen}}
	return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
		Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: rr}}}, Failure: []*pb.RequestOp{getOp(k)}}}}}
}
