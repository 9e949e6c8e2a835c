// Package etcdsnap writes etcd v3 snapshot databases: the bbolt file
// with etcd's schema that `etcdctl snapshot save` receives from etcd's
// Maintenance.Snapshot and `etcdutl snapshot status|restore` read. Axon
// answers Snapshot with one, so a backup of Axon is an etcd backup,
// restorable into etcd.
package etcdsnap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/coreos/go-semver/semver"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
)

// StorageVersion is the etcd storage version the database declares (as
// Axon's Status reports it).
var StorageVersion = semver.Version{Major: 3, Minor: 6}

// commitEvery bounds the writes one bbolt transaction holds in memory.
const commitEvery = 10000

// tombstoneMark ends the key-bucket key of a deletion (etcd's mvcc
// markTombstone, which it does not export).
const tombstoneMark = 't'

// Writer builds a snapshot database in a file.
type Writer struct {
	db      *bbolt.DB
	tx      *bbolt.Tx
	pending int
	err     error
}

// Create starts a snapshot database at path, which must not exist. The
// file is scratch until Close: it is not synced.
func Create(path string) (*Writer, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		return nil, fmt.Errorf("etcdsnap: %w", err)
	}
	w := &Writer{db: db}
	if err := w.begin(); err != nil {
		db.Close()
		return nil, err
	}
	for _, b := range schema.AllBuckets {
		w.UnsafeCreateBucket(b)
	}
	return w, w.err
}

func (w *Writer) begin() error {
	tx, err := w.db.Begin(true)
	if err != nil {
		return fmt.Errorf("etcdsnap: %w", err)
	}
	w.tx, w.pending = tx, 0
	return nil
}

// Put files v in the key bucket.
func (w *Writer) Put(v core.Version) error {
	if w.err != nil {
		return w.err
	}
	kv := v.KV
	if v.Tombstone {
		kv = &mvccpb.KeyValue{Key: v.KV.Key}
	}
	b, err := proto.Marshal(kv)
	if err != nil {
		return fmt.Errorf("etcdsnap: %s: %w", core.DescribeVersion(v), err)
	}
	w.UnsafeSeqPut(schema.Key, BucketKey(v.Rev, v.Sub, v.Tombstone), b)
	return w.step()
}

// BucketKey is where etcd's key bucket files revision (rev, sub).
func BucketKey(rev, sub int64, tombstone bool) []byte {
	k := mvcc.RevToBytes(mvcc.Revision{Main: rev, Sub: sub}, mvcc.NewRevBytes())
	if tombstone {
		k = append(k, tombstoneMark)
	}
	return k
}

// Lease files a lease granted with ttl seconds.
func (w *Writer) Lease(id, ttl int64) error {
	if w.err != nil {
		return w.err
	}
	schema.MustUnsafePutLease(w, &leasepb.Lease{ID: id, TTL: ttl})
	return w.step()
}

// Auth files the auth store in etcd's schema: the enabled flag and the
// auth revision in the auth bucket, users and roles in theirs.
func (w *Writer) Auth(a *auth.Store) error {
	if w.err != nil {
		return w.err
	}
	enabled := []byte{0}
	if a.Enabled {
		enabled = []byte{1}
	}
	w.UnsafePut(schema.Auth, schema.AuthEnabledKeyName, enabled)
	w.UnsafePut(schema.Auth, schema.AuthRevisionKeyName, binary.BigEndian.AppendUint64(nil, a.Revision))
	users, roles := a.ExportAuth()
	for _, u := range users {
		b, err := proto.Marshal(u)
		if err != nil {
			return fmt.Errorf("etcdsnap: user: %w", err)
		}
		w.UnsafePut(schema.AuthUsers, u.Name, b)
	}
	for _, r := range roles {
		b, err := proto.Marshal(r)
		if err != nil {
			return fmt.Errorf("etcdsnap: role: %w", err)
		}
		w.UnsafePut(schema.AuthRoles, r.Name, b)
	}
	return w.step()
}

// step commits once a transaction holds commitEvery writes.
func (w *Writer) step() error {
	if w.err != nil {
		return w.err
	}
	if w.pending++; w.pending < commitEvery {
		return nil
	}
	if err := w.tx.Commit(); err != nil {
		w.err = fmt.Errorf("etcdsnap: commit: %w", err)
		return w.err
	}
	w.err = w.begin()
	return w.err
}

// Finish records the compact revision and the storage version and
// closes the database; the file is then complete.
func (w *Writer) Finish(compacted int64) error {
	if w.err == nil {
		if compacted > 0 {
			rev := mvcc.RevToBytes(mvcc.Revision{Main: compacted}, mvcc.NewRevBytes())
			w.UnsafePut(schema.Meta, schema.ScheduledCompactKeyName, rev)
			w.UnsafePut(schema.Meta, schema.FinishedCompactKeyName, rev)
		}
		schema.UnsafeSetStorageVersion(w, &StorageVersion)
	}
	if w.err == nil {
		if err := w.tx.Commit(); err != nil {
			w.err = fmt.Errorf("etcdsnap: commit: %w", err)
		}
		w.tx = nil
	}
	return errors.Join(w.err, w.Close())
}

// Close abandons what was not finished and closes the file.
func (w *Writer) Close() error {
	if w.tx != nil {
		_ = w.tx.Rollback()
		w.tx = nil
	}
	if w.db == nil {
		return nil
	}
	err := w.db.Close()
	w.db = nil
	if err != nil {
		return fmt.Errorf("etcdsnap: close: %w", err)
	}
	return nil
}

// The Writer is a backend.UnsafeWriter, so that etcd's schema package
// encodes what it owns (leases, the storage version); a failure is kept
// for the next call to return.
var _ backend.UnsafeWriter = (*Writer)(nil)

func (w *Writer) UnsafeCreateBucket(b backend.Bucket) {
	if w.err == nil {
		if _, err := w.tx.CreateBucketIfNotExists(b.Name()); err != nil {
			w.err = fmt.Errorf("etcdsnap: bucket %s: %w", b, err)
		}
	}
}

func (w *Writer) UnsafeDeleteBucket(b backend.Bucket) {
	if w.err == nil {
		if err := w.tx.DeleteBucket(b.Name()); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			w.err = fmt.Errorf("etcdsnap: bucket %s: %w", b, err)
		}
	}
}

func (w *Writer) UnsafePut(b backend.Bucket, key, value []byte) { w.put(b, key, value, false) }

func (w *Writer) UnsafeSeqPut(b backend.Bucket, key, value []byte) { w.put(b, key, value, true) }

func (w *Writer) put(b backend.Bucket, key, value []byte, seq bool) {
	if w.err != nil {
		return
	}
	bk := w.tx.Bucket(b.Name())
	if bk == nil {
		w.err = fmt.Errorf("etcdsnap: bucket %s: %w", b, berrors.ErrBucketNotFound)
		return
	}
	if seq {
		// Mostly ascending: pack pages as etcd's backend does.
		bk.FillPercent = 0.9
	}
	if err := bk.Put(key, value); err != nil {
		w.err = fmt.Errorf("etcdsnap: put %s: %w", b, err)
	}
}

func (w *Writer) UnsafeDelete(b backend.Bucket, key []byte) {
	if w.err != nil {
		return
	}
	if bk := w.tx.Bucket(b.Name()); bk != nil {
		if err := bk.Delete(key); err != nil {
			w.err = fmt.Errorf("etcdsnap: delete %s: %w", b, err)
		}
	}
}
