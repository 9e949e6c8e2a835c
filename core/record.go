package core

import (
	"encoding/binary"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ErrBadRecord reports an engine value that is not a valid Axon record.
var ErrBadRecord = errors.New("core: malformed engine record")

// Record is the stored state of one key at one revision: a live value or
// a tombstone. Latest and history records share the encoding; a latest
// record as stored holds no Value (it is read from history).
type Record struct {
	// Tombstone marks a deleted key, or in a latest record a key that was
	// only read (touched) and never written.
	Tombstone bool
	// Touch is the highest revision that read or wrote the key (latest
	// records only). A write at revision r may use the key only if
	// Touch < r; this is what orders concurrent writes by revision.
	Touch     int64
	ModRev    int64
	CreateRev int64
	Version   int64
	Lease     int64
	Value     []byte
	// unread: Value was not read (a latest record read for its
	// metadata; entry.value reads it when it is needed).
	unread bool
}

const flagTombstone = 1

// maxTombstoneLen bounds a tombstone's encoding: flags and five varints,
// no value.
const maxTombstoneLen = 1 + 5*binary.MaxVarintLen64

// AppendRecord appends the encoding of rec to dst.
func AppendRecord(dst []byte, rec *Record) []byte {
	var flags byte
	if rec.Tombstone {
		flags |= flagTombstone
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(rec.Touch))
	dst = binary.AppendUvarint(dst, uint64(rec.ModRev))
	dst = binary.AppendUvarint(dst, uint64(rec.CreateRev))
	dst = binary.AppendUvarint(dst, uint64(rec.Version))
	dst = binary.AppendUvarint(dst, uint64(rec.Lease))
	return append(dst, rec.Value...)
}

// DecodeRecord decodes b. The returned Value aliases b.
func DecodeRecord(b []byte) (Record, error) {
	var rec Record
	if len(b) < 1 || b[0]&^flagTombstone != 0 {
		return rec, ErrBadRecord
	}
	rec.Tombstone = b[0]&flagTombstone != 0
	b = b[1:]
	for _, f := range []*int64{&rec.Touch, &rec.ModRev, &rec.CreateRev, &rec.Version, &rec.Lease} {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return Record{}, ErrBadRecord
		}
		*f = int64(v)
		b = b[n:]
	}
	rec.Value = b
	return rec, nil
}

// alive reports whether rec holds a value.
func (rec *Record) alive() bool { return rec != nil && !rec.Tombstone }

// keyValue renders rec as etcd's KeyValue for key.
func (rec *Record) keyValue(key []byte) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{
		Key:            key,
		Value:          rec.Value,
		CreateRevision: rec.CreateRev,
		ModRevision:    rec.ModRev,
		Version:        rec.Version,
		Lease:          rec.Lease,
	}
}

// RevisionRecord says what one dealt revision did in the engine. Every
// write transaction stores one under RevisionKey(rev); a fence stores a
// Fenced one so that a delayed copy of the transaction conflicts.
type RevisionRecord struct {
	Fenced bool
	// Term of the leader that dealt the revision: after a leader change
	// a revision number that ended as a no-op may be dealt again, and
	// the term tells whose write the record is.
	Term int64
	// Events lists the keys the revision changed, in event order.
	Events []RevisionEvent
}

// RevisionEvent is one change of a revision.
type RevisionEvent struct {
	Delete bool
	Key    []byte
}

const (
	revApplied byte = 1
	revFenced  byte = 2
)

// AppendRevisionRecord appends the encoding of rec to dst.
func AppendRevisionRecord(dst []byte, rec *RevisionRecord) []byte {
	if rec.Fenced {
		return binary.AppendUvarint(append(dst, revFenced), uint64(rec.Term))
	}
	dst = append(dst, revApplied)
	dst = binary.AppendUvarint(dst, uint64(rec.Term))
	dst = binary.AppendUvarint(dst, uint64(len(rec.Events)))
	for _, ev := range rec.Events {
		op := byte(mvccpb.PUT)
		if ev.Delete {
			op = byte(mvccpb.DELETE)
		}
		dst = append(dst, op)
		dst = binary.AppendUvarint(dst, uint64(len(ev.Key)))
		dst = append(dst, ev.Key...)
	}
	return dst
}

// DecodeRevisionRecord decodes b; keys alias b.
func DecodeRevisionRecord(b []byte) (RevisionRecord, error) {
	var rec RevisionRecord
	if len(b) == 0 {
		return rec, ErrBadRecord
	}
	if b[0] != revFenced && b[0] != revApplied {
		return rec, ErrBadRecord
	}
	rec.Fenced = b[0] == revFenced
	term, k := binary.Uvarint(b[1:])
	if k <= 0 {
		return rec, ErrBadRecord
	}
	rec.Term = int64(term)
	b = b[1+k:]
	if rec.Fenced {
		if len(b) != 0 {
			return RevisionRecord{}, ErrBadRecord
		}
		return rec, nil
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return rec, ErrBadRecord
	}
	b = b[k:]
	rec.Events = make([]RevisionEvent, 0, n)
	for i := uint64(0); i < n; i++ {
		if len(b) < 1 || (b[0] != byte(mvccpb.PUT) && b[0] != byte(mvccpb.DELETE)) {
			return RevisionRecord{}, ErrBadRecord
		}
		del := b[0] == byte(mvccpb.DELETE)
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || l > uint64(len(b)-1-k) {
			return RevisionRecord{}, ErrBadRecord
		}
		b = b[1+k:]
		rec.Events = append(rec.Events, RevisionEvent{Delete: del, Key: b[:l:l]})
		b = b[l:]
	}
	if len(b) != 0 {
		return RevisionRecord{}, ErrBadRecord
	}
	return rec, nil
}
