package core

import (
	"bytes"
	"cmp"
	"math"
	"slices"
)

// RecordScan is how revision records are read: the shards merged in
// rounds of Batch records of each (0: DefaultRevisionBatch).
type RecordScan struct {
	Batch   int
	Testing TestingKnobs
}

// Scan is c's RecordScan.
func (c Config) Scan() RecordScan {
	return RecordScan{Batch: c.RevisionBatch, Testing: c.Testing}
}

// scanRevisions calls fn with each revision record in [from, to], in
// revision order, until fn returns false. It merges the shards in rounds:
// each round reads up to sc.Batch records of every shard and hands
// out those below the first revision a shard may still hold unread. fn
// runs after the round's scans, so it may read rd itself; v is its own.
func (sc RecordScan) scanRevisions(rd Reader, from, to int64, fn func(rev int64, v []byte) (bool, error)) error {
	type record struct {
		rev int64
		v   []byte
	}
	batch := int64(sc.Batch)
	if batch <= 0 {
		batch = DefaultRevisionBatch
	}
	var recs []record
	for from <= to {
		recs = recs[:0]
		bound := to // every record up to bound has been read this round
		for s := range RevisionShards {
			var (
				n, last int64
				decErr  error
			)
			err := rd.Scan(shardRevisionKey(s, from), shardRevisionKey(s, to+1), false, int(batch), func(k, v []byte) bool {
				var rev int64
				if rev, decErr = DecodeRevisionKey(k); decErr != nil {
					return false
				}
				recs = append(recs, record{rev, bytes.Clone(v)})
				n, last = n+1, rev
				return n < batch
			})
			if err == nil {
				err = decErr
			}
			if err != nil {
				return err
			}
			if n == batch && !sc.Testing.MergeSkipsFullShards {
				bound = min(bound, last)
			}
		}
		slices.SortFunc(recs, func(a, b record) int { return cmp.Compare(a.rev, b.rev) })
		for _, r := range recs {
			if r.rev > bound {
				break
			}
			if more, err := fn(r.rev, r.v); err != nil || !more {
				return err
			}
		}
		from = bound + 1
	}
	return nil
}

// lastRevision returns the highest revision with a record, or the
// compact revision if that is higher (0 for an empty store).
//
// It searches each shard upward from the compact revision, by forward
// scans of one record: below it a compaction's sweep leaves deleted
// records, which an engine's scan steps over one by one, and a reverse
// scan from a shard's end steps over all of them (Badger's, whose reverse
// iteration also ignores the bound of a prefix, walked every shard below
// too: half of a restart at 3M keys). Above it every revision has its
// record, so the forward scans meet no deleted ones.
func lastRevision(rd Reader) (int64, error) {
	from, err := ReadCompacted(rd)
	if err != nil {
		return 0, err
	}
	last := from
	for s := range RevisionShards {
		rev, ok, err := lastInShard(rd, s, from)
		if err != nil {
			return 0, err
		}
		if ok {
			last = max(last, rev)
		}
	}
	return last, nil
}

// lastInShard returns the highest revision of shard s with a record at or
// above from: a record at or above a revision exists exactly while the
// revision is at most that highest one, so a doubling search and then a
// bisection find it in O(log) scans of one record each.
func lastInShard(rd Reader, s int, from int64) (int64, bool, error) {
	lo, ok, err := nextInShard(rd, s, from)
	if err != nil || !ok {
		return 0, false, err
	}
	// lo has a record; none is at or above hi.
	hi := int64(math.MaxInt64)
	for step := int64(1); ; step *= 2 {
		if step > math.MaxInt64-lo {
			break
		}
		next, ok, err := nextInShard(rd, s, lo+step)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			hi = lo + step
			break
		}
		lo = next
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		next, ok, err := nextInShard(rd, s, mid)
		if err != nil {
			return 0, false, err
		}
		if ok {
			lo = next
		} else {
			hi = mid
		}
	}
	return lo, true, nil
}

// nextInShard returns the lowest revision of shard s with a record at or
// above rev. The upper bound is inside the shard, so that an engine that
// steps over deleted records stops at the shard's end.
func nextInShard(rd Reader, s int, rev int64) (int64, bool, error) {
	var (
		found  int64
		ok     bool
		decErr error
	)
	err := rd.Scan(shardRevisionKey(s, rev), shardRevisionKey(s, math.MaxInt64), false, 1, func(k, _ []byte) bool {
		found, decErr = DecodeRevisionKey(k)
		ok = decErr == nil
		return false
	})
	if err == nil {
		err = decErr
	}
	return found, ok, err
}
