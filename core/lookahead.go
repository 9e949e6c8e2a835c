package core

import (
	"bytes"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Lookahead lists the first reads an evaluation will make, so that a
// driver can issue them together before evaluating: on TiKV one round
// trip instead of one per read. Evaluation still reads through the
// driver's Reader; a read not predicted costs what it always did, a
// prediction not used costs only its share of the batch.
type Lookahead struct {
	// Gets are point reads.
	Gets [][]byte
	// Lasts are reads of the last record in each range.
	Lasts []Bounds
}

// Bounds is an engine key range [Lower, Upper).
type Bounds struct{ Lower, Upper []byte }

// lookaheadKeys bounds the keys a Lookahead predicts reads of: most
// requests use one or two, and a large txn should not read keys in bulk
// that a failed compare would never touch.
const lookaheadKeys = 8

// add predicts the reads of one key at revision rev: its latest record
// and, with value, its newest history record at or below rev, which
// holds the value of the latest version (readLatest's valueOf) or the
// version a read at rev wants (recordAt).
func (la *Lookahead) add(key []byte, rev int64, value bool) {
	latest := LatestKey(key)
	if !slices.ContainsFunc(la.Gets, func(g []byte) bool { return bytes.Equal(g, latest) }) {
		la.Gets = append(la.Gets, latest)
	}
	if !value {
		return
	}
	lower, upper := keyHistoryBounds(key, 1, rev+1)
	if !slices.ContainsFunc(la.Lasts, func(b Bounds) bool { return bytes.Equal(b.Lower, lower) }) {
		la.Lasts = append(la.Lasts, Bounds{lower, upper})
	}
}

// WorkLookahead predicts the reads of request work: for each single key
// its request puts, deletes, reads or compares (in every branch of a
// txn), the latest record, and the value of its latest version where the
// request reads it (a range, a compare on the value, prev_kv,
// ignore_value; a write alone does not: see "Previous values" in
// prev.go). Other work predicts nothing.
func WorkLookahead(w *Work) Lookahead {
	var la Lookahead
	if w.Kind != WorkRequest || w.Lease != nil || w.Request == nil {
		return la
	}
	addOpKeys(&la, w.Request, true)
	return la
}

// addOpKeys predicts op's reads; with values false, none of a value
// (a txn's failure branch: the apiserver's reads back the object whose
// compare failed, a conflict, which is rare and costs a read then).
func addOpKeys(la *Lookahead, op *pb.RequestOp, values bool) {
	add := func(key, end []byte, value bool) {
		if len(end) == 0 && len(la.Gets) < lookaheadKeys {
			la.add(key, probeRev, value && values)
		}
	}
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		p := tv.RequestPut
		add(p.Key, nil, p.PrevKv || p.IgnoreValue)
	case *pb.RequestOp_RequestDeleteRange:
		d := tv.RequestDeleteRange
		add(d.Key, d.RangeEnd, d.PrevKv)
	case *pb.RequestOp_RequestRange:
		r := tv.RequestRange
		add(r.Key, r.RangeEnd, !r.KeysOnly && !r.CountOnly)
	case *pb.RequestOp_RequestTxn:
		for _, c := range tv.RequestTxn.Compare {
			add(c.Key, c.RangeEnd, c.Target == pb.Compare_VALUE)
		}
		for _, sub := range tv.RequestTxn.Success {
			addOpKeys(la, sub, values)
		}
		for _, sub := range tv.RequestTxn.Failure {
			addOpKeys(la, sub, false)
		}
	}
}

// RangeLookahead predicts the reads of a range of a single key at
// revision rev (0: the commit point committed): its latest record and
// its newest version at or below the revision read.
func RangeLookahead(req *pb.RangeRequest, committed int64) Lookahead {
	var la Lookahead
	if len(req.RangeEnd) != 0 {
		return la
	}
	rev := req.Revision
	if rev <= 0 {
		rev = committed
	}
	la.add(req.Key, rev, !req.KeysOnly && !req.CountOnly)
	return la
}
