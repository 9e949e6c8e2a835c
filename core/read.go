package core

import (
	"bytes"
	"cmp"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Reader is the read half of an engine transaction, as core needs it. The
// driver implements it over its engine (storage.NewReader does so for any
// storage.Txn). Core only reads through it; it never writes or commits.
type Reader interface {
	// Get returns key's value; found is false when there is none.
	Get(key []byte) (value []byte, found bool, err error)
	// Scan calls fn for each key in [lower, upper), in ascending order or
	// descending if reverse, until fn returns false. limit is a hint.
	// key and value are only valid during the call.
	Scan(lower, upper []byte, reverse bool, limit int, fn func(key, value []byte) bool) error
}

// recordAt returns key's record as of revision rev (the newest with
// ModRev ≤ rev), or nil if the key has none. latest, if not nil, is the
// key's latest record, which saves a lookup in the common case.
func recordAt(rd Reader, key []byte, latest *Record, rev int64) (*Record, error) {
	if latest != nil && latest.ModRev <= rev {
		return latest, nil
	}
	lower, upper := keyHistoryBounds(key, 1, rev+1)
	var (
		found *Record
		err   error
	)
	scanErr := rd.Scan(lower, upper, true, 1, func(_, v []byte) bool {
		var rec Record
		rec, err = DecodeRecord(v)
		if err == nil {
			rec.Value = bytes.Clone(rec.Value)
			found = &rec
		}
		return false
	})
	if scanErr != nil {
		return nil, scanErr
	}
	return found, err
}

// readLatest reads key's latest record, or nil.
func readLatest(rd Reader, key []byte) (*Record, error) {
	v, ok, err := rd.Get(LatestKey(key))
	if err != nil || !ok {
		return nil, err
	}
	rec, err := DecodeRecord(v)
	if err != nil {
		return nil, err
	}
	rec.Value = bytes.Clone(rec.Value)
	return &rec, nil
}

// aliveAt collects the keys in [key, end) alive at revision rev, in
// ascending key order.
func aliveAt(rd Reader, key, end []byte, rev int64) ([]*mvccpb.KeyValue, error) {
	kvs, _, err := aliveFirst(rd, key, end, rev, -1, false)
	return kvs, err
}

// aliveFirst returns the first keep keys in [key, end) alive at revision
// rev, in ascending key order (every one if keep < 0), and how many are
// alive in all. Keys past the first keep are only counted, without
// copying their values: a paginated list of a large range costs one pass
// over the latest records, not a copy of everything after the page.
// keysOnly leaves values out.
func aliveFirst(rd Reader, key, end []byte, rev int64, keep int, keysOnly bool) ([]*mvccpb.KeyValue, int64, error) {
	if len(end) > 0 && !(len(end) == 1 && end[0] == 0) && bytes.Compare(key, end) >= 0 {
		return nil, 0, nil
	}
	lower, upper := latestBounds(key, end)
	var (
		kvs     []*mvccpb.KeyValue // nil entries: keys whose latest record is newer than rev
		behind  [][]byte           // their raw keys, in order
		counted int64              // alive keys past the kept ones
		later   [][]byte           // keys newer than rev past the kept ones
		sure    int                // entries of kvs known alive
		err     error
	)
	scanErr := rd.Scan(lower, upper, false, 0, func(k, v []byte) bool {
		var rec Record
		if rec, err = DecodeRecord(v); err != nil {
			return false
		}
		full := keep < 0 || sure < keep
		if !full && rec.ModRev <= rev {
			if !rec.Tombstone {
				counted++
			}
			return true
		}
		var raw []byte
		if raw, err = DecodeLatestKey(k); err != nil {
			return false
		}
		switch {
		case rec.ModRev > rev && full:
			behind = append(behind, raw)
			kvs = append(kvs, nil) // placeholder keeps key order
		case rec.ModRev > rev:
			later = append(later, raw)
		case !rec.Tombstone:
			if keysOnly {
				rec.Value = nil
			} else {
				rec.Value = bytes.Clone(rec.Value)
			}
			kvs = append(kvs, rec.keyValue(raw))
			sure++
		}
		return true
	})
	if scanErr != nil {
		return nil, 0, scanErr
	}
	if err != nil {
		return nil, 0, err
	}
	for _, raw := range later {
		rec, err := recordAt(rd, raw, nil, rev)
		if err != nil {
			return nil, 0, err
		}
		if rec.alive() {
			counted++
		}
	}
	out := kvs[:0]
	for _, kv := range kvs {
		if kv == nil {
			raw := behind[0]
			behind = behind[1:]
			rec, err := recordAt(rd, raw, nil, rev)
			if err != nil {
				return nil, 0, err
			}
			if !rec.alive() {
				continue
			}
			if keysOnly {
				rec.Value = nil
			}
			kv = rec.keyValue(raw)
		}
		out = append(out, kv)
	}
	count := int64(len(out)) + counted
	if keep >= 0 && len(out) > keep {
		out = out[:keep]
	}
	return out, count, nil
}

// keyOrdered reports whether a range answers in ascending key order with
// no filter on its keys, so that only its first Limit keys need reading
// in full.
func keyOrdered(req *pb.RangeRequest) bool {
	return (req.SortOrder == pb.RangeRequest_NONE || req.SortOrder == pb.RangeRequest_ASCEND && req.SortTarget == pb.RangeRequest_KEY) &&
		req.SortTarget == pb.RangeRequest_KEY &&
		req.MaxModRevision == 0 && req.MinModRevision == 0 && req.MaxCreateRevision == 0 && req.MinCreateRevision == 0
}

// rangeAt answers a validated range at revision rev.
func rangeAt(rd Reader, req *pb.RangeRequest, rev int64) (*pb.RangeResponse, error) {
	if !keyOrdered(req) || (req.Limit <= 0 && !req.CountOnly) {
		kvs, err := aliveAt(rd, req.Key, req.RangeEnd, rev)
		if err != nil {
			return nil, err
		}
		return shapeRange(req, kvs), nil
	}
	keep := int(req.Limit)
	if req.CountOnly {
		keep = 0
	}
	kvs, count, err := aliveFirst(rd, req.Key, req.RangeEnd, rev, keep, req.KeysOnly)
	if err != nil {
		return nil, err
	}
	resp := &pb.RangeResponse{Count: count}
	if !req.CountOnly {
		resp.Kvs = kvs
		resp.More = count > int64(len(kvs))
	}
	return resp, nil
}

// checkRevision validates a requested read revision against the commit
// point and the compact revision; 0 means the commit point.
func checkRevision(rev, committed, compacted int64) (int64, error) {
	switch {
	case rev <= 0:
		return committed, nil
	case rev > committed:
		return 0, ErrFutureRev
	case rev < compacted:
		return 0, ErrCompacted
	}
	return rev, nil
}

// Range evaluates a Range request against a snapshot that holds every
// write up to committed. It is pure and safe to run outside the node's
// lock. The header revision is committed.
func Range(rd Reader, req *pb.RangeRequest, committed, compacted int64) (*pb.RangeResponse, error) {
	if err := ValidateRange(req); err != nil {
		return nil, err
	}
	rev, err := checkRevision(req.Revision, committed, compacted)
	if err != nil {
		return nil, err
	}
	resp, err := rangeAt(rd, req, rev)
	if err != nil {
		return nil, err
	}
	resp.Header = &pb.ResponseHeader{Revision: committed}
	return resp, nil
}

// shapeRange applies a RangeRequest's filters, sort, limit and output
// options to the keys alive in its range (ascending key order), the way
// etcd does: Count is the number of keys in the range before filters.
func shapeRange(req *pb.RangeRequest, kvs []*mvccpb.KeyValue) *pb.RangeResponse {
	resp := &pb.RangeResponse{Count: int64(len(kvs))}
	if req.CountOnly {
		return resp
	}
	kvs = slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool {
		return (req.MaxModRevision != 0 && kv.ModRevision > req.MaxModRevision) ||
			(req.MinModRevision != 0 && kv.ModRevision < req.MinModRevision) ||
			(req.MaxCreateRevision != 0 && kv.CreateRevision > req.MaxCreateRevision) ||
			(req.MinCreateRevision != 0 && kv.CreateRevision < req.MinCreateRevision)
	})
	order := req.SortOrder
	if req.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order != pb.RangeRequest_NONE {
		sortKeyValues(kvs, req.SortTarget, order == pb.RangeRequest_DESCEND)
	}
	if req.Limit > 0 && int64(len(kvs)) > req.Limit {
		kvs = kvs[:req.Limit]
		resp.More = true
	}
	if req.KeysOnly {
		for i, kv := range kvs {
			kvs[i] = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
		}
	}
	resp.Kvs = kvs
	return resp
}

func sortKeyValues(kvs []*mvccpb.KeyValue, target pb.RangeRequest_SortTarget, descend bool) {
	by := func(a, b *mvccpb.KeyValue) int {
		switch target {
		case pb.RangeRequest_VERSION:
			return cmp.Compare(a.Version, b.Version)
		case pb.RangeRequest_CREATE:
			return cmp.Compare(a.CreateRevision, b.CreateRevision)
		case pb.RangeRequest_MOD:
			return cmp.Compare(a.ModRevision, b.ModRevision)
		case pb.RangeRequest_VALUE:
			return bytes.Compare(a.Value, b.Value)
		}
		return bytes.Compare(a.Key, b.Key)
	}
	if descend {
		slices.SortStableFunc(kvs, func(a, b *mvccpb.KeyValue) int { return by(b, a) })
		return
	}
	slices.SortStableFunc(kvs, by)
}

// ReadEvents reads the events of revisions [from, to] from the durable
// revision records, in order, for a watcher that fell behind the ring.
// Each event carries its previous key-value. It reads at most limit
// revisions with events (0: no limit) and returns the last revision it
// covered, so the caller can continue from there.
func ReadEvents(rd Reader, from, to int64, limit int) (events []Event, last int64, err error) {
	last = from - 1
	if from > to {
		return nil, last, nil
	}
	type revRec struct {
		rev int64
		rec RevisionRecord
	}
	var (
		recs    []revRec
		scanErr error
	)
	err = rd.Scan(RevisionKey(from), RevisionKey(to+1), false, limit, func(k, v []byte) bool {
		var rev int64
		if rev, scanErr = DecodeRevisionKey(k); scanErr != nil {
			return false
		}
		var rec RevisionRecord
		if rec, scanErr = DecodeRevisionRecord(bytes.Clone(v)); scanErr != nil {
			return false
		}
		if rec.Fenced || len(rec.Events) == 0 {
			return true
		}
		recs = append(recs, revRec{rev, rec})
		return limit <= 0 || len(recs) < limit
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return nil, last, err
	}
	last = to
	if limit > 0 && len(recs) == limit {
		last = recs[len(recs)-1].rev
	}
	for _, rr := range recs {
		for _, e := range rr.rec.Events {
			ev, err := readEvent(rd, rr.rev, e)
			if err != nil {
				return nil, from - 1, err
			}
			events = append(events, ev)
		}
	}
	return events, last, nil
}

func readEvent(rd Reader, rev int64, e RevisionEvent) (Event, error) {
	ev := Event{Rev: rev}
	cur, err := recordAt(rd, e.Key, nil, rev)
	if err != nil {
		return ev, err
	}
	if cur == nil || cur.ModRev != rev {
		return ev, ErrBadRecord
	}
	prev, err := recordAt(rd, e.Key, nil, rev-1)
	if err != nil {
		return ev, err
	}
	ev.Event = &mvccpb.Event{Kv: cur.keyValue(e.Key)}
	if e.Delete {
		ev.Event.Type = mvccpb.DELETE
		ev.Event.Kv = &mvccpb.KeyValue{Key: e.Key, ModRevision: rev}
	}
	if prev.alive() {
		ev.Event.PrevKv = prev.keyValue(e.Key)
	}
	return ev, nil
}
