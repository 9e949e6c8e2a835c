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
	scanErr := rd.Scan(RevisionKey(0), spacePrefix(spaceRevision+1), true, 1, func(k, _ []byte) bool {
		st.Committed, err = DecodeRevisionKey(k)
		return false
	})
	if scanErr != nil {
		return State{}, scanErr
	}
	if err != nil {
		return State{}, err
	}
	v, ok, err := rd.Get(MetaKey(MetaCompact))
	if err != nil {
		return State{}, err
	}
	if ok {
		if len(v) != 8 {
			return State{}, ErrBadRecord
		}
		st.Compacted = int64(binary.BigEndian.Uint64(v))
	}
	return st, nil
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
	return []Write{{Key: MetaKey(MetaCompact), Value: binary.BigEndian.AppendUint64(nil, uint64(rev))}}, nil
}
