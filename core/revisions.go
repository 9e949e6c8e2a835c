package core

import (
	"bytes"
	"cmp"
	"slices"
)

// revisionBatch is how many records one round of scanRevisions reads
// from each shard.
const revisionBatch = 128

// scanRevisions calls fn with each revision record in [from, to], in
// revision order, until fn returns false. It merges the shards in rounds:
// each round reads up to revisionBatch records of every shard and hands
// out those below the first revision a shard may still hold unread. fn
// runs after the round's scans, so it may read rd itself; v is its own.
func scanRevisions(rd Reader, from, to int64, fn func(rev int64, v []byte) (bool, error)) error {
	type record struct {
		rev int64
		v   []byte
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
			err := rd.Scan(shardRevisionKey(s, from), shardRevisionKey(s, to+1), false, revisionBatch, func(k, v []byte) bool {
				var rev int64
				if rev, decErr = DecodeRevisionKey(k); decErr != nil {
					return false
				}
				recs = append(recs, record{rev, bytes.Clone(v)})
				n, last = n+1, rev
				return n < revisionBatch
			})
			if err == nil {
				err = decErr
			}
			if err != nil {
				return err
			}
			if n == revisionBatch {
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

// lastRevision returns the highest revision with a record, or 0.
func lastRevision(rd Reader) (int64, error) {
	var last int64
	for s := range RevisionShards {
		var decErr error
		err := rd.Scan(RevisionShardStart(s), RevisionShardStart(s+1), true, 1, func(k, _ []byte) bool {
			var rev int64
			if rev, decErr = DecodeRevisionKey(k); decErr == nil {
				last = max(last, rev)
			}
			return false
		})
		if err == nil {
			err = decErr
		}
		if err != nil {
			return 0, err
		}
	}
	return last, nil
}
