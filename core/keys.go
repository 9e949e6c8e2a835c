package core

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// The engine keyspace. Every Axon key starts with the 4-byte magic and a
// one-byte space tag, so Axon can share an engine with other data and
// each space is one contiguous range:
//
//	latest   magic 'L' esc(key)               → latest record of key, no value
//	history  magic 'H' esc(key) BE64(rev)     → record of key at rev, with its value
//	revision magic 'S' shard BE64(rev)        → what revision rev did
//	meta     magic 'M' name                   → compact revision, format, ...
//	lease    magic 'E' BE64(id)               → lease record
//	attach   magic 'A' BE64(id) esc(key)      → key is attached to lease id
//
// esc is an order-preserving, prefix-free escaping, so any binary key
// works and encodings sort exactly as raw keys do.
//
// Revision records are spread over RevisionShards shards by revision
// (shard = rev mod RevisionShards): a key that grew with the revision
// would put every write transaction into the one engine region holding
// the tail of the space (on TiKV, one Raft group takes every write).
// Within a shard records sort by revision; a scan by revision merges the
// shards (scanRevisions). Stores of format 2 and before kept them in one
// range, magic 'R' BE64(rev); only the upgrade reads that (format.go).
var magic = [4]byte{0x57, 0xfb, 0x80, 0x8b}

// Space tags.
const (
	spaceLatest   byte = 'L'
	spaceHistory  byte = 'H'
	spaceRevision byte = 'S'
	// spaceRevisionV2 held the unsharded revision records of format 2
	// and before (LegacyRevisionKey).
	spaceRevisionV2 byte = 'R'
	spaceMeta       byte = 'M'
	spaceLease      byte = 'E'
	spaceAttach     byte = 'A'
)

// Escaping: 0x00 becomes 0x00 0xFF and a key ends with 0x00 0x01. The
// terminator sorts below every escaped byte, so a key sorts before its
// extensions, and no encoding is a prefix of another.
const (
	escByte     = 0x00
	escEscaped  = 0xFF
	escTerminus = 0x01
)

// ErrBadKey reports an engine key that is not a valid Axon encoding.
var ErrBadKey = errors.New("core: malformed engine key")

// Keyspace is the engine range [lower, upper) that holds every Axon key.
func Keyspace() (lower, upper []byte) {
	return magic[:], []byte{magic[0], magic[1], magic[2], magic[3] + 1}
}

func spacePrefix(space byte) []byte {
	return []byte{magic[0], magic[1], magic[2], magic[3], space}
}

// appendEscaped appends esc(key) to dst.
func appendEscaped(dst, key []byte) []byte {
	for {
		i := bytes.IndexByte(key, escByte)
		if i < 0 {
			dst = append(dst, key...)
			break
		}
		dst = append(dst, key[:i+1]...)
		dst = append(dst, escEscaped)
		key = key[i+1:]
	}
	return append(dst, escByte, escTerminus)
}

// readEscaped decodes esc(key) from the start of b and returns the raw
// key and the rest of b.
func readEscaped(b []byte) (key, rest []byte, err error) {
	key = make([]byte, 0, len(b))
	for {
		i := bytes.IndexByte(b, escByte)
		if i < 0 || i+1 >= len(b) {
			return nil, nil, ErrBadKey
		}
		key = append(key, b[:i]...)
		switch b[i+1] {
		case escTerminus:
			return key, b[i+2:], nil
		case escEscaped:
			key = append(key, escByte)
			b = b[i+2:]
		default:
			return nil, nil, ErrBadKey
		}
	}
}

func headerOK(b []byte, space byte) bool {
	return len(b) >= 5 && b[0] == magic[0] && b[1] == magic[1] && b[2] == magic[2] && b[3] == magic[3] && b[4] == space
}

// LatestKey is the engine key of key's latest record.
func LatestKey(key []byte) []byte {
	return appendEscaped(append(make([]byte, 0, len(key)+8), spacePrefix(spaceLatest)...), key)
}

// IsLatestKey reports whether b is in the space of latest records.
func IsLatestKey(b []byte) bool { return headerOK(b, spaceLatest) }

// DecodeLatestKey returns the raw key of a LatestKey encoding.
func DecodeLatestKey(b []byte) ([]byte, error) {
	if !headerOK(b, spaceLatest) {
		return nil, ErrBadKey
	}
	key, rest, err := readEscaped(b[5:])
	if err != nil || len(rest) != 0 {
		return nil, ErrBadKey
	}
	return key, nil
}

// HistoryKey is the engine key of key's record at revision rev. For one
// key, encodings sort by ascending revision.
func HistoryKey(key []byte, rev int64) []byte {
	return appendHistoryKey(make([]byte, 0, len(key)+16), key, rev)
}

// appendHistoryKey appends HistoryKey(key, rev) to dst.
func appendHistoryKey(dst, key []byte, rev int64) []byte {
	dst = append(dst, spacePrefix(spaceHistory)...)
	return binary.BigEndian.AppendUint64(appendEscaped(dst, key), uint64(rev))
}

// DecodeHistoryKey returns the raw key and revision of a HistoryKey.
func DecodeHistoryKey(b []byte) (key []byte, rev int64, err error) {
	if !headerOK(b, spaceHistory) {
		return nil, 0, ErrBadKey
	}
	key, rest, err := readEscaped(b[5:])
	if err != nil || len(rest) != 8 {
		return nil, 0, ErrBadKey
	}
	return key, int64(binary.BigEndian.Uint64(rest)), nil
}

// RevisionShards is how many shards the revision records are spread
// over. It is part of the store's format: changing it is an upgrade.
const RevisionShards = 16

// revisionShard is the shard of revision rev's record.
func revisionShard(rev int64) int { return int(uint64(rev) % RevisionShards) }

// RevisionKey is the engine key of revision rev's record.
func RevisionKey(rev int64) []byte { return shardRevisionKey(revisionShard(rev), rev) }

// shardRevisionKey is the key of revision rev in shard s: the bound of a
// scan within the shard (rev need not belong to it).
func shardRevisionKey(s int, rev int64) []byte {
	return binary.BigEndian.AppendUint64(append(spacePrefix(spaceRevision), byte(s)), uint64(rev))
}

// RevisionShardStart is the first engine key of revision shard s (s may
// be RevisionShards: the end of the last shard). Regions of a TiKV
// cluster split well there.
func RevisionShardStart(s int) []byte { return append(spacePrefix(spaceRevision), byte(s)) }

// RegionSplits returns the engine keys to cut a store into about n
// regions per space, given raw keys that cut the expected keys into n
// parts (quantiles): the start of the history and latest spaces, each
// quantile's key in both, the end of the latest space, and n evenly
// spaced revision shard starts with the end of the last shard, as
// TiKV's load-based splitting would cut a space whose shards each take
// an equal share of the writes. The mock TiKV cluster splits there
// (storage/tikv MockOptions.Layout); storage does not know the layout.
func RegionSplits(quantiles [][]byte, n int) [][]byte {
	keys := [][]byte{HistoryKey(nil, 0)}
	for _, q := range quantiles {
		keys = append(keys, HistoryKey(q, 0))
	}
	keys = append(keys, LatestKey(nil))
	for _, q := range quantiles {
		keys = append(keys, LatestKey(q))
	}
	keys = append(keys, MetaKey("")) // the end of the latest space
	n = min(max(n, 1), RevisionShards)
	for i := range n {
		keys = append(keys, RevisionShardStart(i*RevisionShards/n))
	}
	return append(keys, RevisionShardStart(RevisionShards))
}

// DecodeRevisionKey returns the revision of a RevisionKey.
func DecodeRevisionKey(b []byte) (int64, error) {
	if !headerOK(b, spaceRevision) || len(b) != 14 {
		return 0, ErrBadKey
	}
	rev := int64(binary.BigEndian.Uint64(b[6:]))
	if int(b[5]) != revisionShard(rev) {
		return 0, ErrBadKey
	}
	return rev, nil
}

// LegacyRevisionKey is where format 2 and before kept revision rev's
// record.
func LegacyRevisionKey(rev int64) []byte {
	return binary.BigEndian.AppendUint64(spacePrefix(spaceRevisionV2), uint64(rev))
}

// LeaseKey is the engine key of lease id's record.
func LeaseKey(id int64) []byte {
	return binary.BigEndian.AppendUint64(spacePrefix(spaceLease), uint64(id))
}

// DecodeLeaseKey returns the lease id of a LeaseKey.
func DecodeLeaseKey(b []byte) (int64, error) {
	if !headerOK(b, spaceLease) || len(b) != 13 {
		return 0, ErrBadKey
	}
	return int64(binary.BigEndian.Uint64(b[5:])), nil
}

// AttachKey is the engine key saying key is attached to lease id, so a
// new leader finds each lease's keys without reading every key.
func AttachKey(id int64, key []byte) []byte {
	return appendEscaped(binary.BigEndian.AppendUint64(spacePrefix(spaceAttach), uint64(id)), key)
}

// DecodeAttachKey returns the lease and the key of an AttachKey.
func DecodeAttachKey(b []byte) (int64, []byte, error) {
	if !headerOK(b, spaceAttach) || len(b) < 13 {
		return 0, nil, ErrBadKey
	}
	key, rest, err := readEscaped(b[13:])
	if err != nil || len(rest) != 0 {
		return 0, nil, ErrBadKey
	}
	return int64(binary.BigEndian.Uint64(b[5:13])), key, nil
}

// MetaKey is the engine key of a named meta record.
func MetaKey(name string) []byte {
	return append(spacePrefix(spaceMeta), name...)
}

// Meta record names.
const (
	MetaCompact = "compact" // the compact revision, BE64
)

// latestBounds returns the engine range [lower, upper) of latest records
// for raw keys in [key, end) with etcd's range_end conventions: empty end
// is the single key, "\x00" is every key from key on.
func latestBounds(key, end []byte) (lower, upper []byte) {
	lower = LatestKey(key)
	switch {
	case len(end) == 0:
		upper = append(lower[:len(lower):len(lower)], 0) // just past this key
	case len(end) == 1 && end[0] == 0:
		upper = spacePrefix(spaceLatest + 1)
	default:
		upper = LatestKey(end)
	}
	return lower, upper
}

// keyHistoryBounds is the engine range of key's history records with
// revisions in [from, to).
func keyHistoryBounds(key []byte, from, to int64) (lower, upper []byte) {
	return HistoryKey(key, from), HistoryKey(key, to)
}
