package core

import (
	"bytes"

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
// and its newest history record at or below rev, which holds the value
// of the latest version (readLatest's valueOf) or the version a read at
// rev wants (recordAt).
func (la *Lookahead) add(key []byte, rev int64) {
	for _, g := range la.Gets {
		if bytes.Equal(g, LatestKey(key)) {
			return
		}
	}
	lower, upper := keyHistoryBounds(key, 1, rev+1)
	la.Gets = append(la.Gets, LatestKey(key))
	la.Lasts = append(la.Lasts, Bounds{lower, upper})
}

// expectedModRev is the mod revision a compare expects its single key at
// (the apiserver's creates expect 0, its updates the revision it read).
func expectedModRev(c *pb.Compare) (int64, bool) {
	if len(c.RangeEnd) != 0 || c.Target != pb.Compare_MOD || c.Result != pb.Compare_EQUAL {
		return 0, false
	}
	return c.GetModRevision(), true
}

// addVersion predicts the reads of a key expected at mod revision rev:
// its latest record and, for rev > 0, the history record of that version
// (its value). A point read each, where a scan for the newest version
// would cost the engine more: the expectation is usually right, and when
// it is not (a conflict) the value is read afterwards.
func (la *Lookahead) addVersion(key []byte, rev int64) {
	for _, g := range la.Gets {
		if bytes.Equal(g, LatestKey(key)) {
			return
		}
	}
	la.Gets = append(la.Gets, LatestKey(key))
	if rev > 0 {
		la.Gets = append(la.Gets, HistoryKey(key, rev))
	}
}

// WorkLookahead predicts the reads of request work: for each single key
// its request puts, deletes, reads or compares (in every branch of a
// txn), the latest record and the value of its latest version. Other
// work predicts nothing.
func WorkLookahead(w *Work) Lookahead {
	var la Lookahead
	if w.Kind != WorkRequest || w.Lease != nil || w.Request == nil {
		return la
	}
	addOpKeys(&la, w.Request)
	return la
}

func addOpKeys(la *Lookahead, op *pb.RequestOp) {
	add := func(key, end []byte) {
		if len(end) == 0 && len(la.Gets) < lookaheadKeys {
			la.add(key, probeRev)
		}
	}
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		add(tv.RequestPut.Key, nil)
	case *pb.RequestOp_RequestDeleteRange:
		add(tv.RequestDeleteRange.Key, tv.RequestDeleteRange.RangeEnd)
	case *pb.RequestOp_RequestRange:
		add(tv.RequestRange.Key, tv.RequestRange.RangeEnd)
	case *pb.RequestOp_RequestTxn:
		for _, c := range tv.RequestTxn.Compare {
			if rev, ok := expectedModRev(c); ok && len(la.Gets) < lookaheadKeys {
				la.addVersion(c.Key, rev)
				continue
			}
			add(c.Key, c.RangeEnd)
		}
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.Success, tv.RequestTxn.Failure} {
			for _, sub := range ops {
				addOpKeys(la, sub)
			}
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
	la.add(req.Key, rev)
	return la
}
