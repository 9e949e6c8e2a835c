package core

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
)

// Importer turns a store's versions, as an etcd snapshot holds them (its
// key bucket, in revision order), into Axon's engine records: a history
// record per version, a revision record per revision from the compact
// revision on, and at the end each key's latest record, the leases with
// their attachment index and the compact revision. It is Export's
// inverse: importing what Export gave rebuilds an equivalent store.
type Importer struct {
	compacted int64
	last      Version // the previous version added (Rev 0: none yet)
	events    []RevisionEvent
	latest    map[string]Record
}

// NewImporter starts an import of a store compacted at revision
// compacted (0: never).
func NewImporter(compacted int64) *Importer {
	return &Importer{compacted: compacted, latest: map[string]Record{}}
}

// Add takes the next version, in ascending (Rev, Sub) order, and returns
// the engine writes it makes (with those of the revision it completes).
// A version out of order or inconsistent with itself is refused with
// ErrBadRecord; nothing of it is written.
func (im *Importer) Add(v Version) ([]Write, error) {
	if err := im.check(v); err != nil {
		return nil, err
	}
	var ws []Write
	if v.Rev != im.last.Rev {
		ws = im.endRevision(ws)
	}
	rec := Record{Tombstone: true, ModRev: v.Rev, Touch: v.Rev}
	if !v.Tombstone {
		rec = Record{Touch: v.Rev, ModRev: v.Rev, CreateRev: v.KV.CreateRevision, Version: v.KV.Version, Lease: v.KV.Lease, Value: v.KV.Value}
	}
	ws = append(ws, Write{Key: HistoryKey(v.KV.Key, v.Rev), Value: AppendRecord(nil, &rec)})
	rec.Value = nil // the value lives once, in history
	im.latest[string(v.KV.Key)] = rec
	im.events = append(im.events, RevisionEvent{Delete: v.Tombstone, Key: bytes.Clone(v.KV.Key)})
	im.last = v
	return ws, nil
}

// check refuses a version that cannot follow the last one or that
// contradicts itself.
func (im *Importer) check(v Version) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s: %s", ErrBadRecord, DescribeVersion(v), why)
	}
	switch {
	case v.KV == nil || len(v.KV.Key) == 0:
		return fmt.Errorf("%w: r%d.%d: a version without a key", ErrBadRecord, v.Rev, v.Sub)
	case v.Rev < 1 || v.Sub < 0:
		return bad("a revision below 1")
	case v.Rev < im.last.Rev || v.Rev == im.last.Rev && v.Sub <= im.last.Sub:
		return bad(fmt.Sprintf("after r%d.%d: out of revision order", im.last.Rev, im.last.Sub))
	case v.Tombstone:
		return nil
	case v.KV.ModRevision != v.Rev:
		return bad("its mod revision is not the revision it is filed under")
	case v.KV.CreateRevision < 1 || v.KV.CreateRevision > v.Rev || v.KV.Version < 1:
		return bad("its create revision or version is impossible")
	}
	return nil
}

// endRevision appends the revision record of the revision gathered so
// far, if it is one a reader may still ask for (at or after the compact
// revision; the events of older ones are gone).
func (im *Importer) endRevision(ws []Write) []Write {
	if len(im.events) > 0 && im.last.Rev >= im.compacted {
		rr := RevisionRecord{Events: im.events}
		ws = append(ws, Write{Key: RevisionKey(im.last.Rev), Value: AppendRevisionRecord(nil, &rr)})
	}
	im.events = nil
	return ws
}

// Finish returns the rest of the import: the last revision's record,
// each key's latest record, the leases (ID and TTL) and the keys
// attached to them, and the compact revision. The head revision is the
// last version's or the compact revision, whichever is higher (as
// etcd's); an empty revision record marks it if no version does.
func (im *Importer) Finish(leases []LeaseState) []Write {
	ws := im.endRevision(nil)
	if head := im.compacted; head > im.last.Rev {
		ws = append(ws, Write{Key: RevisionKey(head), Value: AppendRevisionRecord(nil, &RevisionRecord{})})
	}
	for _, k := range slices.Sorted(maps.Keys(im.latest)) {
		rec := im.latest[k]
		ws = append(ws, Write{Key: LatestKey([]byte(k)), Value: AppendRecord(nil, &rec)})
		if rec.alive() && rec.Lease != 0 {
			ws = append(ws, Write{Key: AttachKey(rec.Lease, []byte(k)), Value: []byte{1}})
		}
	}
	for _, l := range leases {
		ws = append(ws, leaseWrite(l.ID, l.TTL))
	}
	if im.compacted > 0 {
		ws = append(ws, compactWrite(im.compacted))
	}
	return ws
}

// IsEmpty reports whether the engine holds no Axon record at all.
func IsEmpty(rd Reader) (bool, error) {
	empty := true
	lower, upper := Keyspace()
	err := rd.Scan(lower, upper, false, 1, func(_, _ []byte) bool {
		empty = false
		return false
	})
	return empty, err
}
