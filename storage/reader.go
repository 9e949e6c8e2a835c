package storage

import (
	"bytes"
	"errors"
)

// Reader adapts a Txn to the read interface Axon's core evaluates
// requests against (core.Reader): Get with a found flag and a callback
// Scan. Core cannot import this package; the method set is the contract.
type Reader struct{ Txn Txn }

// NewReader returns a Reader over txn.
func NewReader(txn Txn) Reader { return Reader{Txn: txn} }

// Get returns key's value and whether it exists.
func (r Reader) Get(key []byte) ([]byte, bool, error) {
	v, err := r.Txn.Get(key)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// Scan calls fn for each key in [lower, upper) in order until fn returns
// false.
func (r Reader) Scan(lower, upper []byte, reverse bool, limit int, fn func(key, value []byte) bool) error {
	return r.scan(IterOptions{Lower: lower, Upper: upper, Reverse: reverse, Limit: limit}, fn)
}

// ScanShort is Scan forwards for a caller that needs no value longer
// than short (IterOptions.Short): fn may get nil for such a value.
func (r Reader) ScanShort(lower, upper []byte, limit, short int, fn func(key, value []byte) bool) error {
	return r.scan(IterOptions{Lower: lower, Upper: upper, Limit: limit, Short: short}, fn)
}

func (r Reader) scan(opts IterOptions, fn func(key, value []byte) bool) error {
	it, err := r.Txn.Iter(opts)
	if err != nil {
		return err
	}
	defer it.Close()
	for it.Next() {
		if !fn(it.Key(), it.Value()) {
			break
		}
	}
	return it.Err()
}

// ReadEach runs reads one after another through txn's Get and Iter: what
// a storage.BatchReader's ReadBatch must answer, for engines (or states)
// that have nothing to gain from running them at once.
func ReadEach(txn Txn, reads []Read) ([]ReadResult, error) {
	rd := NewReader(txn)
	out := make([]ReadResult, len(reads))
	for i, r := range reads {
		var err error
		if !r.Last {
			var v []byte
			var found bool
			if v, found, err = rd.Get(r.Key); found {
				out[i] = ReadResult{Key: r.Key, Value: v, Found: true}
			}
		} else {
			err = rd.Scan(r.Key, r.Upper, true, 1, func(k, v []byte) bool {
				out[i] = ReadResult{Key: bytes.Clone(k), Value: bytes.Clone(v), Found: true}
				return false
			})
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
