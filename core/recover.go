package core

import "encoding/binary"

// Recover reads the state a new node starts from: the highest revision
// stored (every revision at or below it is final once no older leader can
// still write) and the compact revision.
func Recover(rd Reader) (State, error) {
	var (
		st  State
		err error
	)
	if st.Committed, err = lastRevision(rd); err != nil {
		return State{}, err
	}
	if st.Compacted, err = ReadCompacted(rd); err != nil {
		return State{}, err
	}
	// etcd starts at revision 1 before any write; the apiserver rejects
	// a list at revision 0.
	st.Committed = max(st.Committed, 1)
	if st.Leases, err = ReadLeases(rd); err != nil {
		return State{}, err
	}
	if st.Alarmed, err = ReadAlarmed(rd); err != nil {
		return State{}, err
	}
	st.NoSpace = len(st.Alarmed) > 0
	return st, nil
}

// ReadLeases reads the lease records and the keys attached to each
// from the attachment index.
func ReadLeases(rd Reader) ([]LeaseState, error) {
	var (
		out   []LeaseState
		index = map[int64]int{}
		err   error
	)
	scanErr := rd.Scan(spacePrefix(spaceLease), spacePrefix(spaceLease+1), false, 0, func(k, v []byte) bool {
		var ls LeaseState
		if ls.ID, err = DecodeLeaseKey(k); err != nil {
			return false
		}
		if ls.TTL, err = DecodeLeaseRecord(v); err != nil {
			return false
		}
		index[ls.ID] = len(out)
		out = append(out, ls)
		return true
	})
	if scanErr != nil {
		return nil, scanErr
	}
	if err != nil || len(out) == 0 {
		return out, err
	}
	attached := false
	scanErr = rd.Scan(spacePrefix(spaceAttach), spacePrefix(spaceAttach+1), false, 0, func(k, _ []byte) bool {
		var (
			id  int64
			key []byte
		)
		if id, key, err = DecodeAttachKey(k); err != nil {
			return false
		}
		attached = true
		if i, ok := index[id]; ok {
			out[i].Keys = append(out[i].Keys, key)
		}
		return true
	})
	if scanErr != nil {
		return nil, scanErr
	}
	if err != nil || attached {
		return out, err
	}
	// No attachment index: a store written before it existed, or leases
	// with no keys. Find the keys the slow way.
	scanErr = rd.Scan(spacePrefix(spaceLatest), spacePrefix(spaceLatest+1), false, 0, func(k, v []byte) bool {
		var rec Record
		if rec, err = DecodeRecord(v); err != nil {
			return false
		}
		i, ok := index[rec.Lease]
		if rec.Tombstone || rec.Lease == 0 || !ok {
			return true
		}
		var key []byte
		if key, err = DecodeLatestKey(k); err != nil {
			return false
		}
		out[i].Keys = append(out[i].Keys, key)
		return true
	})
	if scanErr != nil {
		return nil, scanErr
	}
	return out, err
}

// CompactWrites returns the write that stores compact revision rev, or
// none if a larger one is stored already.
func CompactWrites(rd Reader, rev int64) ([]Write, error) {
	v, ok, err := rd.Get(MetaKey(MetaCompact))
	if err != nil {
		return nil, err
	}
	if ok && len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= rev {
		return nil, nil
	}
	return []Write{compactWrite(rev)}, nil
}

// compactWrite stores compact revision rev.
func compactWrite(rev int64) Write {
	return Write{Key: MetaKey(MetaCompact), Value: binary.BigEndian.AppendUint64(nil, uint64(rev))}
}

// ReadCompacted returns the stored compact revision (0 if none), for
// readers that are not the leader and so have no Node to ask.
func ReadCompacted(rd Reader) (int64, error) {
	v, ok, err := rd.Get(MetaKey(MetaCompact))
	if err != nil || !ok {
		return 0, err
	}
	if len(v) != 8 {
		return 0, ErrBadRecord
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}
