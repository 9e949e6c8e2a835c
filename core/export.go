package core

import (
	"bytes"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Version is one version of a key as a snapshot keeps it, where etcd's
// key bucket files it: under revision (Rev, Sub), a tombstone with only
// its key.
type Version struct {
	Rev, Sub  int64
	Tombstone bool
	KV        *mvccpb.KeyValue
}

// DescribeVersion renders v for traces and test failures.
func DescribeVersion(v Version) string {
	if v.Tombstone {
		return fmt.Sprintf("r%d.%d delete %q", v.Rev, v.Sub, v.KV.Key)
	}
	return fmt.Sprintf("r%d.%d put %q=%q (create r%d, version %d, lease %d)",
		v.Rev, v.Sub, v.KV.Key, v.KV.Value, v.KV.CreateRevision, v.KV.Version, v.KV.Lease)
}

// Export calls fn with every version a snapshot at revision rev holds
// once compacted to compacted, as etcd's key bucket holds them after the
// same compaction:
//   - every event of revisions [compacted, rev], in revision order, each
//     revision's events in their order (Sub is the index);
//   - then, in key order, each key's version that was alive at
//     compacted and is older than it. The events of those revisions are
//     gone, so their order within a revision is lost: Sub counts these
//     versions, which keeps every (Rev, Sub) distinct.
//
// It reads at most batch revision records at a time (0: 1,000). The
// Versions are fn's to keep.
func Export(rd Reader, compacted, rev int64, batch int, fn func(Version) error) error {
	if batch <= 0 {
		batch = 1000
	}
	if err := exportEvents(rd, max(compacted, 1), rev, batch, fn); err != nil {
		return err
	}
	return exportBase(rd, compacted, fn)
}

// exportEvents exports the events of revisions [from, to] from their
// revision records, batch records at a time.
func exportEvents(rd Reader, from, to int64, batch int, fn func(Version) error) error {
	type revRec struct {
		rev int64
		rec RevisionRecord
	}
	for from <= to {
		var recs []revRec
		err := RecordScan{}.scanRevisions(rd, from, to, func(rev int64, v []byte) (bool, error) {
			rec, err := DecodeRevisionRecord(v)
			if err != nil {
				return false, err
			}
			recs = append(recs, revRec{rev, rec})
			return len(recs) < batch, nil
		})
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return nil
		}
		for _, rr := range recs {
			if rr.rec.Fenced {
				continue
			}
			for i, e := range rr.rec.Events {
				v, err := exportEvent(rd, rr.rev, int64(i), e)
				if err != nil {
					return err
				}
				if err := fn(v); err != nil {
					return err
				}
			}
		}
		from = recs[len(recs)-1].rev + 1
	}
	return nil
}

// exportEvent reads the version event e of revision rev wrote.
func exportEvent(rd Reader, rev, sub int64, e RevisionEvent) (Version, error) {
	v := Version{Rev: rev, Sub: sub, Tombstone: e.Delete, KV: &mvccpb.KeyValue{Key: bytes.Clone(e.Key)}}
	b, ok, err := rd.Get(HistoryKey(e.Key, rev))
	if err != nil {
		return v, err
	}
	if !ok {
		return v, fmt.Errorf("%w: revision %d lists %q, which has no history record there", ErrBadRecord, rev, e.Key)
	}
	rec, err := DecodeRecord(b)
	if err != nil {
		return v, err
	}
	if rec.Tombstone != e.Delete || rec.ModRev != rev {
		return v, fmt.Errorf("%w: revision %d lists %q, whose history record there says otherwise", ErrBadRecord, rev, e.Key)
	}
	if !e.Delete {
		v.KV = rec.keyValue(v.KV.Key)
		v.KV.Value = bytes.Clone(rec.Value)
	}
	return v, nil
}

// exportBase exports, in key order, each key's newest version below
// compacted if it is alive at compacted (a newer one at compacted itself
// came with the events).
func exportBase(rd Reader, compacted int64, fn func(Version) error) error {
	if compacted <= 1 {
		return nil
	}
	var (
		key    []byte  // the key whose versions are being read
		newest *Record // its newest version at or below compacted
		sub    int64
		err    error
	)
	flush := func() {
		if newest == nil || err != nil {
			return
		}
		if newest.ModRev < compacted && !newest.Tombstone {
			kv := newest.keyValue(key)
			err = fn(Version{Rev: newest.ModRev, Sub: sub, KV: kv})
			sub++
		}
		newest = nil
	}
	scanErr := rd.Scan(spacePrefix(spaceHistory), spacePrefix(spaceHistory+1), false, 0, func(k, v []byte) bool {
		raw, rev, decErr := DecodeHistoryKey(k)
		if decErr != nil {
			err = decErr
			return false
		}
		if !bytes.Equal(raw, key) {
			flush()
			key = raw
		}
		if err != nil {
			return false
		}
		if rev > compacted {
			return true
		}
		rec, decErr := DecodeRecord(v)
		if decErr != nil {
			err = decErr
			return false
		}
		rec.Value = bytes.Clone(rec.Value)
		newest = &rec
		return true
	})
	flush()
	if scanErr != nil {
		return scanErr
	}
	return err
}
