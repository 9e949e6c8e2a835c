package core

import (
	"bytes"
	"cmp"
	"fmt"
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
	// ScanShort is Scan forwards for a caller that needs no value longer
	// than short: fn may get nil for such a value, which the engine then
	// need not read.
	ScanShort(lower, upper []byte, limit, short int, fn func(key, value []byte) bool) error
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

// readLatestMeta reads key's latest record, or nil, without the value
// of a live one (marked unread): what a write needs to know of a key is
// there, and the value is a second read, of a history record.
func readLatestMeta(rd Reader, key []byte) (*Record, error) {
	v, ok, err := rd.Get(LatestKey(key))
	if err != nil || !ok {
		return nil, err
	}
	rec, err := DecodeRecord(v)
	if err != nil {
		return nil, err
	}
	rec.Value, rec.unread = nil, !rec.Tombstone
	return &rec, nil
}

// readLatest reads key's latest record, or nil.
func readLatest(rd Reader, key []byte) (*Record, error) {
	rec, err := readLatestMeta(rd, key)
	if err != nil || !rec.alive() {
		return rec, err
	}
	if rec.Value, err = valueOf(rd, key, rec.ModRev); err != nil {
		return nil, err
	}
	rec.unread = false
	return rec, nil
}

// readValues fills in the values of kvs, ascending by key, from their
// history records: one scan over the history of the keys' span when it
// holds few other versions, a point read per key otherwise (a hot key
// with thousands of versions in the span). Each value read is held in
// mem (nil: unbounded).
func readValues(rd Reader, kvs []*mvccpb.KeyValue, mem *tally) error {
	if len(kvs) == 0 {
		return nil
	}
	next := 0 // the first kv with no value yet
	if len(kvs) > 2 {
		lower := HistoryKey(kvs[0].Key, kvs[0].ModRevision)
		want := bytes.Clone(lower) // rewritten in place; lower stays the engine's
		last := kvs[len(kvs)-1]
		upper := HistoryKey(last.Key, last.ModRevision+1)
		budget := 4*len(kvs) + 64 // records the scan may pass over
		var err error
		scanErr := rd.Scan(lower, upper, false, 0, func(k, v []byte) bool {
			if budget--; budget < 0 {
				return false
			}
			c := bytes.Compare(k, want)
			if c > 0 { // want's record is missing: a point read will say so
				return false
			}
			if c < 0 {
				return true
			}
			var rec Record
			if rec, err = DecodeRecord(v); err != nil {
				return false
			}
			kvs[next].Value = bytes.Clone(rec.Value)
			if err = mem.add(len(rec.Value)); err != nil {
				return false
			}
			if next++; next == len(kvs) {
				return false
			}
			want = appendHistoryKey(want[:0], kvs[next].Key, kvs[next].ModRevision)
			return true
		})
		if scanErr != nil {
			return scanErr
		}
		if err != nil {
			return err
		}
	}
	for _, kv := range kvs[next:] {
		v, err := valueOf(rd, kv.Key, kv.ModRevision)
		if err != nil {
			return err
		}
		kv.Value = v
		if err := mem.add(len(v)); err != nil {
			return err
		}
	}
	return nil
}

// valueOf reads the value key was given at revision modRev: a latest
// record holds none, its value is in the history record of its version,
// which compaction keeps while it is the key's newest.
func valueOf(rd Reader, key []byte, modRev int64) ([]byte, error) {
	v, ok, err := historyValue(rd, key, modRev)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %q has no history record at its revision %d", ErrBadRecord, key, modRev)
	}
	return v, err
}

// historyValue reads the value of key's version at modRev from its
// history record; ok is false when there is none.
func historyValue(rd Reader, key []byte, modRev int64) (v []byte, ok bool, err error) {
	b, ok, err := rd.Get(HistoryKey(key, modRev))
	if err != nil || !ok {
		return nil, ok, err
	}
	rec, err := DecodeRecord(b)
	if err != nil {
		return nil, false, err
	}
	return bytes.Clone(rec.Value), true, nil
}

// aliveAt collects the keys in [key, end) alive at revision rev, in
// ascending key order.
func aliveAt(rd Reader, key, end []byte, rev int64) ([]*mvccpb.KeyValue, error) {
	p := pageScan{keep: -1}
	if err := p.run(rd, key, end, rev); err != nil {
		return nil, err
	}
	return p.kvs, nil
}

// pageScan reads the first keep keys in [key, end) alive at revision rev
// in full (every one if keep < 0) and, unless stop is set, counts the
// rest without copying their values: a paginated list of a large range
// costs one pass over the latest records, not a copy of everything after
// the page. With collect it also lists every alive key, for a Counter.
type pageScan struct {
	keep     int
	keysOnly bool
	stop     bool // stop once the page is full; count stays partial
	collect  bool

	mem *tally // what the answer holds; nil: unbounded

	kvs   []*mvccpb.KeyValue
	count int64
	alive [][]byte
}

func (p *pageScan) run(rd Reader, key, end []byte, rev int64) error {
	if len(end) == 0 {
		return p.one(rd, key, rev)
	}
	if len(end) > 0 && !(len(end) == 1 && end[0] == 0) && bytes.Compare(key, end) >= 0 {
		return nil
	}
	lower, upper := latestBounds(key, end)
	type seen struct {
		raw     []byte
		kv      *mvccpb.KeyValue // nil: latest record newer than rev
		counted bool             // past the page: only counted
		value   bool             // kv's value is still to be read
	}
	var (
		keys []seen
		sure int // kept keys known alive
		err  error
	)
	scanErr := rd.Scan(lower, upper, false, 0, func(k, v []byte) bool {
		var rec Record
		if rec, err = DecodeRecord(v); err != nil {
			return false
		}
		full := p.keep < 0 || sure < p.keep
		if !full && p.stop {
			return false
		}
		if !full && rec.ModRev <= rev && !p.collect {
			if !rec.Tombstone {
				p.count++
			}
			return true
		}
		if rec.ModRev <= rev && rec.Tombstone {
			return true
		}
		var raw []byte
		if raw, err = DecodeLatestKey(k); err != nil {
			return false
		}
		switch {
		case rec.ModRev > rev:
			keys = append(keys, seen{raw: raw, counted: !full})
		case !full:
			keys = append(keys, seen{raw: raw, kv: &mvccpb.KeyValue{}, counted: true})
		default:
			if p.keysOnly {
				rec.Lease = 0
			}
			keys = append(keys, seen{raw: raw, kv: rec.keyValue(raw), value: !p.keysOnly})
			sure++
		}
		err = p.mem.add(len(raw) + kvOverhead)
		return err == nil
	})
	if scanErr != nil {
		return scanErr
	}
	if err != nil {
		return err
	}
	var page []*mvccpb.KeyValue
	for _, s := range keys {
		if s.value {
			page = append(page, s.kv)
		}
	}
	if err := readValues(rd, page, p.mem); err != nil {
		return err
	}
	for _, s := range keys {
		kv := s.kv
		if kv == nil {
			rec, err := recordAt(rd, s.raw, nil, rev)
			if err != nil {
				return err
			}
			if !rec.alive() {
				continue
			}
			if p.keysOnly {
				rec.Value, rec.Lease = nil, 0
			}
			kv = rec.keyValue(s.raw)
			if err := p.mem.add(len(rec.Value)); err != nil {
				return err
			}
		}
		if p.collect {
			p.alive = append(p.alive, s.raw)
		}
		p.count++
		if !s.counted && (p.keep < 0 || len(p.kvs) < p.keep) {
			p.kvs = append(p.kvs, kv)
		}
	}
	return nil
}

// one runs the scan of a single key as a point read: an engine that keeps
// old versions of a record (Badger, until compaction) walks them all in a
// scan, and a hot key has thousands.
func (p *pageScan) one(rd Reader, key []byte, rev int64) error {
	latest, err := readLatest(rd, key)
	if err != nil || latest == nil {
		return err
	}
	rec, err := recordAt(rd, key, latest, rev)
	if err != nil || !rec.alive() {
		return err
	}
	key = bytes.Clone(key)
	if p.collect {
		p.alive = append(p.alive, key)
	}
	p.count++
	if p.keep != 0 {
		if p.keysOnly {
			rec.Value, rec.Lease = nil, 0
		}
		p.kvs = append(p.kvs, rec.keyValue(key))
		return p.mem.add(len(key) + len(rec.Value) + kvOverhead)
	}
	return nil
}

// Counter remembers which keys of a range are alive at a revision, so
// that the later pages of a paginated list need not count the rest of the
// range again: at a fixed revision that set never changes. The server
// keeps one, bounded; core stays pure.
type Counter interface {
	// Count returns how many keys in [from, end) are alive at rev, if it
	// knows.
	Count(from, end []byte, rev int64) (int64, bool)
	// Remember records the keys alive in [from, end) at rev, ascending.
	Remember(from, end []byte, rev int64, alive [][]byte)
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
func rangeAt(rd Reader, req *pb.RangeRequest, rev int64, ctr Counter, mem *tally) (*pb.RangeResponse, error) {
	if !keyOrdered(req) || (req.Limit <= 0 && !req.CountOnly) {
		// Every key is read; values only if answered or sorted by.
		p := pageScan{keep: -1, keysOnly: req.KeysOnly && req.SortTarget != pb.RangeRequest_VALUE, mem: mem}
		if err := p.run(rd, req.Key, req.RangeEnd, rev); err != nil {
			return nil, err
		}
		return shapeRange(req, p.kvs, TestingKnobs{}), mem.flush()
	}
	p := pageScan{keep: int(req.Limit), keysOnly: req.KeysOnly, mem: mem}
	if req.CountOnly {
		p.keep = 0
	}
	known, haveCount := int64(0), false
	if ctr != nil {
		known, haveCount = ctr.Count(req.Key, req.RangeEnd, rev)
		p.stop, p.collect = haveCount, !haveCount
	}
	if !haveCount || p.keep > 0 {
		if err := p.run(rd, req.Key, req.RangeEnd, rev); err != nil {
			return nil, err
		}
	}
	if haveCount {
		p.count = known
	} else if ctr != nil {
		ctr.Remember(req.Key, req.RangeEnd, rev, p.alive)
	}
	resp := &pb.RangeResponse{Count: p.count}
	if !req.CountOnly {
		resp.Kvs = p.kvs
		resp.More = p.count > int64(len(p.kvs))
	}
	return resp, mem.flush()
}

// CheckRevision validates a requested read revision (0: the newest)
// against a reader's commit point and the compact revision its snapshot
// holds, and returns the revision to read at and the one its answer's
// header carries. A follower's commit point (a read index, or the last
// one it learned) may be older than that compaction, whose sweep may have
// taken the history at it: such a reader stands at the compact revision,
// final and committed before its snapshot began.
func CheckRevision(rev, committed, compacted int64) (at, header int64, err error) {
	committed = max(committed, compacted)
	switch {
	case rev <= 0:
		return committed, committed, nil
	case rev > committed:
		return 0, 0, ErrFutureRev
	case rev < compacted:
		return 0, 0, ErrCompacted
	}
	return rev, committed, nil
}

// Range evaluates a Range request against a snapshot that holds every
// write up to committed. It is pure and safe to run outside the node's
// lock. The header revision is committed, or compacted if that is newer.
func Range(rd Reader, req *pb.RangeRequest, committed, compacted int64) (*pb.RangeResponse, error) {
	return RangeCounted(rd, req, committed, compacted, nil, nil)
}

// RangeCounted is Range with a Counter (nil: none) that spares the later
// pages of a paginated list a count of the rest of the range, and an
// Allowance (nil: none) that bounds the memory its answer holds.
func RangeCounted(rd Reader, req *pb.RangeRequest, committed, compacted int64, ctr Counter, mem Allowance) (*pb.RangeResponse, error) {
	if err := ValidateRange(req); err != nil {
		return nil, err
	}
	rev, header, err := CheckRevision(req.Revision, committed, compacted)
	if err != nil {
		return nil, err
	}
	resp, err := rangeAt(rd, req, rev, ctr, newTally(mem))
	if err != nil {
		return nil, err
	}
	resp.Header = &pb.ResponseHeader{Revision: header}
	return resp, nil
}

// shapeRange applies a RangeRequest's filters, sort, limit and output
// options to the keys alive in its range (ascending key order), the way
// etcd does: Count is the number of keys in the range before filters.
func shapeRange(req *pb.RangeRequest, kvs []*mvccpb.KeyValue, knobs TestingKnobs) *pb.RangeResponse {
	resp := &pb.RangeResponse{Count: int64(len(kvs))}
	if req.CountOnly {
		return resp
	}
	kvs = slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool {
		if knobs.ModFiltersExclusive && (kv.ModRevision == req.MaxModRevision || kv.ModRevision == req.MinModRevision) {
			return true
		}
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
			// etcd drops the lease too.
			kvs[i] = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version}
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
	return RecordScan{}.ReadEvents(rd, from, to, limit)
}

// ReadEvents is the package's ReadEvents, reading records as sc says.
func (sc RecordScan) ReadEvents(rd Reader, from, to int64, limit int) (events []Event, last int64, err error) {
	last = from - 1
	if from > to {
		return nil, last, nil
	}
	type revRec struct {
		rev int64
		rec RevisionRecord
	}
	var recs []revRec
	err = sc.scanRevisions(rd, from, to, func(rev int64, v []byte) (bool, error) {
		rec, err := DecodeRevisionRecord(v)
		if err != nil {
			return false, err
		}
		if rec.Fenced || len(rec.Events) == 0 {
			return true, nil
		}
		recs = append(recs, revRec{rev, rec})
		return limit <= 0 || len(recs) < limit, nil
	})
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
