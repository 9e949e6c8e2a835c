package core

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HashKV hashes the history at or below rev (etcd's HashKV): every key's
// versions, in key and revision order, with their values. Instances over
// one engine agree; a corrupted or diverged copy does not.
func HashKV(rd Reader, rev int64) (uint32, error) {
	h := crc32.New(castagnoli)
	var (
		buf    []byte
		decErr error
	)
	err := rd.Scan(spacePrefix(spaceHistory), spacePrefix(spaceHistory+1), false, 0, func(k, v []byte) bool {
		_, r, err := DecodeHistoryKey(k)
		if err != nil {
			decErr = err
			return false
		}
		if r > rev {
			return true
		}
		rec, err := DecodeRecord(v)
		if err != nil {
			decErr = err
			return false
		}
		buf = append(buf[:0], k...)
		buf = binary.BigEndian.AppendUint64(buf, uint64(rec.CreateRev))
		buf = binary.BigEndian.AppendUint64(buf, uint64(rec.Version))
		buf = binary.BigEndian.AppendUint64(buf, uint64(rec.Lease))
		if rec.Tombstone {
			buf = append(buf, 0)
		} else {
			buf = append(buf, 1)
			buf = append(buf, rec.Value...)
		}
		h.Write(buf)
		return true
	})
	if err == nil {
		err = decErr
	}
	return h.Sum32(), err
}
