package core

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
)

// The store's format: which layout of the key spaces its records follow.
// It is written at creation under MetaKey(MetaFormat) and checked at every
// open, as etcd keeps its storage version in its meta bucket.
//
//	1  values in latest and history records, revision records in one range
//	2  a value stored once, in its history record (latest records hold none)
//	3  revision records spread over RevisionShards shards; format recorded
//	4  format 3 that may hold the auth store (auth.MetaAuth, auth.MetaAuthSeq)
//
// Formats 1 and 2 recorded no format; today's code reads both alike, so
// an unrecorded store counts as FormatUnrecorded and upgrades the same way.
//
// Format 4 moves no record: a store of format 3 is format 4 without auth
// records, so it is served as it is (no --upgrade-data) and stays
// readable by binaries of format 3 until the first change of the auth
// store records format 4 in the same transaction (auth.AuthWrites). From then
// on a binary of format 3 refuses the store, as written by a newer
// binary, rather than serve it without its users and permissions.
const (
	FormatVersion    = 4
	FormatUnrecorded = 2
	// FormatNoAuth is the last format without auth records: served as
	// it is.
	FormatNoAuth = 3
)

// MetaFormat names the meta record holding the store's Format.
const MetaFormat = "format"

// Format is what a store says of its layout.
type Format struct {
	Version int64
	// By names the binary that wrote the record (its version string);
	// empty for an unrecorded format.
	By string
}

// ErrFormat reports a store this binary cannot serve as it is.
var ErrFormat = errors.New("core: data format")

// MetaRestoring names the meta record `axon snapshot restore` writes
// before anything else and deletes, in the transaction that records the
// format, at its very end: a store holding it is a restore cut short.
const MetaRestoring = "restoring"

// ErrRestoreInterrupted reports a store holding MetaRestoring: a part of
// a snapshot, which no binary serves.
var ErrRestoreInterrupted = fmt.Errorf("%w: the store holds an interrupted `axon snapshot restore` (only part of the snapshot): empty it (delete the data dir, or the TiKV keyspace) and restore again", ErrFormat)

// FormatError says why a store's format is refused and what to do.
type FormatError struct {
	Found Format
	Hint  string
}

func (e *FormatError) Error() string {
	found := fmt.Sprintf("format %d", e.Found.Version)
	switch {
	case e.Found.By != "":
		found += " (written by " + e.Found.By + ")"
	case e.Found.Version == FormatUnrecorded:
		found = "format 1 or 2 (recorded by no binary before format 3)"
	}
	return fmt.Sprintf("data is %s; this binary reads and writes format %d: %s", found, FormatVersion, e.Hint)
}

func (e *FormatError) Unwrap() error { return ErrFormat }

// AppendFormat appends the encoding of f to dst.
func AppendFormat(dst []byte, f Format) []byte {
	return append(binary.AppendUvarint(dst, uint64(f.Version)), f.By...)
}

// DecodeFormat decodes a format record.
func DecodeFormat(b []byte) (Format, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || v == 0 || v > 1<<31 {
		return Format{}, ErrBadRecord
	}
	return Format{Version: int64(v), By: string(b[n:])}, nil
}

// ReadFormat reads the store's format. An empty store (no Axon key at
// all) has Version 0; a store with data and no record is
// FormatUnrecorded, unless it is a restore cut short
// (ErrRestoreInterrupted).
func ReadFormat(rd Reader) (Format, error) {
	v, ok, err := rd.Get(MetaKey(MetaFormat))
	if err != nil {
		return Format{}, err
	}
	if ok {
		return DecodeFormat(v)
	}
	if _, ok, err := rd.Get(MetaKey(MetaRestoring)); err != nil || ok {
		return Format{}, cmp.Or(err, ErrRestoreInterrupted)
	}
	if empty, err := IsEmpty(rd); err != nil || empty {
		return Format{}, err
	}
	return Format{Version: FormatUnrecorded}, nil
}

// FormatWrite records format FormatVersion, written by the binary by.
func FormatWrite(by string) Write {
	return Write{Key: MetaKey(MetaFormat), Value: AppendFormat(nil, Format{Version: FormatVersion, By: by})}
}

// CheckFormat tells whether a store of format f can be served as it is:
// nil for today's format or an empty store, a *FormatError otherwise
// (upgradable says the store can be upgraded in place with UpgradeStep).
func CheckFormat(f Format) (upgradable bool, err error) {
	switch {
	case f.Version == 0 || f.Version == FormatVersion || f.Version == FormatNoAuth:
		return false, nil
	case f.Version > FormatVersion:
		return false, &FormatError{Found: f, Hint: "it was written by a newer binary; run that binary, or restore a snapshot taken with it (etcdctl snapshot save) with this one (axon snapshot restore)"}
	}
	return true, &FormatError{Found: f, Hint: "back the data directory up, then start once with --upgrade-data to upgrade it in place (binaries older than format 3 cannot read it afterwards)"}
}

// formatBarrier is a key in the revision space of format 2 that sorts
// above every revision record there. A binary of format 2 or before
// recovers from the highest key of that space and cannot decode this one,
// so it refuses the store instead of serving it without its revisions.
var formatBarrier = append(LegacyRevisionKey(-1), "axon format 3"...)

// UpgradeStep does the next bounded part (about limit records) of the
// upgrade of a store of format 1 or 2 to format 3: it moves revision
// records to their shards. It returns the writes of one engine
// transaction; done says none remain, and then the writes record the
// format. Each step is complete in itself: an upgrade cut short resumes
// where it stopped.
func UpgradeStep(rd Reader, by string, limit int) (ws []Write, done bool, err error) {
	limit = max(limit, 1)
	ws = []Write{{Key: formatBarrier, Value: []byte{}}}
	var (
		decErr error
		moved  int
	)
	err = rd.Scan(LegacyRevisionKey(0), formatBarrier, false, limit, func(k, v []byte) bool {
		if moved++; moved > limit {
			return false
		}
		if len(k) != 13 {
			decErr = fmt.Errorf("%w: revision record key %x", ErrBadKey, k)
			return false
		}
		rev := int64(binary.BigEndian.Uint64(k[5:]))
		ws = append(ws, Write{Key: RevisionKey(rev), Value: bytes.Clone(v)}, Write{Key: bytes.Clone(k), Delete: true})
		return true
	})
	if err == nil {
		err = decErr
	}
	if err != nil {
		return nil, false, err
	}
	if len(ws) == 1 {
		return append(ws, FormatWrite(by)), true, nil
	}
	return ws, false, nil
}
