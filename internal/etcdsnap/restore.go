package etcdsnap

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/exec"
)

var (
	// ErrHashMismatch: the snapshot's SHA-256 trailer does not match its
	// content (a damaged or truncated file), etcdutl's refusal too.
	ErrHashMismatch = errors.New("etcdsnap: snapshot hash mismatch")
	// ErrNoHash: the file has no SHA-256 trailer, like a db file copied
	// from an etcd data directory; SkipHashCheck restores it anyway.
	ErrNoHash = errors.New("etcdsnap: snapshot has no hash (a db file copied from a data directory?); skip the hash check to restore it")
	// ErrNotEmpty: the engine to restore into already holds Axon data.
	ErrNotEmpty = errors.New("etcdsnap: the store to restore into is not empty")
)

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// SkipHashCheck restores a file without a hash trailer, or whose
	// hash does not match.
	SkipHashCheck bool
	// BatchBytes bounds one engine transaction (default 4 MiB).
	BatchBytes int
	// By names the binary restoring, in the store's format record.
	By string
}

// Restored summarises a restore.
type Restored struct {
	Revision, Compacted int64
	Versions, Leases    int
}

// Restore loads the etcd snapshot at path (what `etcdctl snapshot save`
// writes, from etcd or from Axon) into eng, which must hold no Axon
// data: every version of its key bucket, its leases and its compact
// revision, so that Axon answers as the etcd it came from, at the same
// revisions. It writes in transactions of about BatchBytes, so a
// restore that fails part way leaves a partial store: delete it and
// restore again (a second Restore refuses it as not empty).
func Restore(ctx context.Context, path string, eng storage.Engine, opts RestoreOptions) (Restored, error) {
	db, cleanup, err := openSnapshot(path, opts.SkipHashCheck)
	if err != nil {
		return Restored{}, err
	}
	defer cleanup()
	if err := checkEmpty(ctx, eng); err != nil {
		return Restored{}, err
	}
	w := &batchWriter{ctx: ctx, eng: eng, limit: cmp.Or(max(opts.BatchBytes, 0), 4<<20)}
	var out Restored
	err = db.View(func(tx *bbolt.Tx) error {
		compacted, err := readCompacted(tx)
		if err != nil {
			return err
		}
		leases, err := readLeases(tx)
		if err != nil {
			return err
		}
		keys := tx.Bucket(schema.Key.Name())
		if keys == nil {
			return fmt.Errorf("etcdsnap: %s has no key bucket: not an etcd snapshot", path)
		}
		im := core.NewImporter(compacted)
		err = keys.ForEach(func(k, v []byte) error {
			ver, err := decodeVersion(k, v)
			if err != nil {
				return err
			}
			ws, err := im.Add(ver)
			if err != nil {
				return err
			}
			out.Versions++
			out.Revision = max(out.Revision, ver.Rev)
			return w.add(ws)
		})
		if err != nil {
			return err
		}
		// The format is recorded last: a restore cut short leaves a store
		// that no binary serves as complete.
		if err := w.add(append(im.Finish(leases), core.FormatWrite(cmp.Or(opts.By, "axon snapshot restore")))); err != nil {
			return err
		}
		out.Compacted, out.Leases = compacted, len(leases)
		out.Revision = max(out.Revision, compacted)
		return w.flush()
	})
	return out, err
}

// openSnapshot checks the file's hash trailer and opens its database
// part read-only, from a copy without the trailer (bbolt takes the file
// whole, as etcdutl's restore does).
func openSnapshot(path string, skipHash bool) (*bbolt.DB, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("etcdsnap: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("etcdsnap: %w", err)
	}
	size := st.Size()
	// etcd's test: a bbolt file is whole pages, so a hash trailer shows
	// as 32 bytes past a multiple of 512.
	hashed := size%512 == sha256.Size
	if !hashed && !skipHash {
		return nil, nil, fmt.Errorf("%w: %s", ErrNoHash, path)
	}
	if hashed {
		size -= sha256.Size
	}
	dir, err := os.MkdirTemp("", "axon-restore-")
	if err != nil {
		return nil, nil, fmt.Errorf("etcdsnap: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	dbPath := filepath.Join(dir, "db")
	cp, err := os.Create(dbPath)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("etcdsnap: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(cp, h), io.LimitReader(f, size))
	if cerr := cp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("etcdsnap: copy %s: %w", path, err)
	}
	if hashed && !skipHash {
		want := make([]byte, sha256.Size)
		if _, err := io.ReadFull(f, want); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("etcdsnap: %w", err)
		}
		if !bytes.Equal(h.Sum(nil), want) {
			cleanup()
			return nil, nil, fmt.Errorf("%w: %s", ErrHashMismatch, path)
		}
	}
	db, err := bbolt.Open(dbPath, 0o400, &bbolt.Options{ReadOnly: true})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("etcdsnap: open %s: %w", path, err)
	}
	if err := checkDB(db, size); err != nil {
		db.Close()
		cleanup()
		return nil, nil, fmt.Errorf("etcdsnap: %s: %w", path, err)
	}
	return db, func() { db.Close(); cleanup() }, nil
}

// checkDB refuses a database that is not whole: bbolt trusts its file,
// and a page past the end of a truncated one is a SIGBUS, not an error.
// Then bbolt's own consistency check (etcdutl's status runs it too).
func checkDB(db *bbolt.DB, size int64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: a damaged database: %v", core.ErrBadRecord, r)
		}
	}()
	return db.View(func(tx *bbolt.Tx) error {
		if tx.Size() > size {
			return fmt.Errorf("%w: the database needs %d bytes, the file holds %d (truncated?)", core.ErrBadRecord, tx.Size(), size)
		}
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w: a damaged database: %w", core.ErrBadRecord, errors.Join(errs...))
		}
		return nil
	})
}

// checkEmpty refuses an engine that holds Axon data.
func checkEmpty(ctx context.Context, eng storage.Engine) error {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	empty, err := core.IsEmpty(storage.NewReader(txn))
	if err != nil {
		return err
	}
	if !empty {
		return ErrNotEmpty
	}
	return nil
}

// readCompacted reads the compact revision etcd finished.
func readCompacted(tx *bbolt.Tx) (int64, error) {
	meta := tx.Bucket(schema.Meta.Name())
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(schema.FinishedCompactKeyName)
	if v == nil {
		return 0, nil
	}
	rev, err := decodeRevision(v)
	if err != nil {
		return 0, fmt.Errorf("etcdsnap: compact revision: %w", err)
	}
	return rev.Main, nil
}

// readLeases reads the lease bucket.
func readLeases(tx *bbolt.Tx) ([]core.LeaseState, error) {
	b := tx.Bucket(schema.Lease.Name())
	if b == nil {
		return nil, nil
	}
	var out []core.LeaseState
	err := b.ForEach(func(k, v []byte) error {
		var l leasepb.Lease
		if err := proto.Unmarshal(v, &l); err != nil {
			return fmt.Errorf("etcdsnap: lease %x: %w", k, err)
		}
		if l.ID == 0 || l.TTL <= 0 {
			return fmt.Errorf("%w: lease %x with TTL %d", core.ErrBadRecord, l.ID, l.TTL)
		}
		out = append(out, core.LeaseState{ID: l.ID, TTL: l.TTL})
		return nil
	})
	return out, err
}

// decodeRevision checks a revision's encoding before etcd's decoder
// (which panics on a bad one) reads it.
func decodeRevision(b []byte) (mvcc.Revision, error) {
	if len(b) != 17 && len(b) != 18 || b[8] != '_' || binary.BigEndian.Uint64(b) > 1<<63-1 || binary.BigEndian.Uint64(b[9:]) > 1<<63-1 {
		return mvcc.Revision{}, fmt.Errorf("%w: revision %x", core.ErrBadRecord, b)
	}
	return mvcc.BytesToBucketKey(b).Revision, nil
}

// decodeVersion decodes one entry of the key bucket.
func decodeVersion(k, v []byte) (core.Version, error) {
	rev, err := decodeRevision(k)
	if err != nil {
		return core.Version{}, err
	}
	kv := &mvccpb.KeyValue{}
	if err := proto.Unmarshal(v, kv); err != nil {
		return core.Version{}, fmt.Errorf("%w: r%d.%d: %v", core.ErrBadRecord, rev.Main, rev.Sub, err)
	}
	return core.Version{Rev: rev.Main, Sub: rev.Sub, Tombstone: mvcc.IsTombstone(k), KV: kv}, nil
}

// batchWriter commits writes in engine transactions of about limit bytes.
type batchWriter struct {
	ctx     context.Context
	eng     storage.Engine
	limit   int
	pending []core.Write
	size    int
}

func (b *batchWriter) add(ws []core.Write) error {
	for _, w := range ws {
		b.pending = append(b.pending, w)
		b.size += len(w.Key) + len(w.Value)
		if b.size >= b.limit {
			if err := b.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *batchWriter) flush() error {
	if len(b.pending) == 0 {
		return nil
	}
	txn, err := b.eng.Begin(b.ctx)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	if err := exec.Buffer(txn, b.pending); err != nil {
		return fmt.Errorf("etcdsnap: restore: %w", err)
	}
	if err := txn.Commit(b.ctx); err != nil {
		return fmt.Errorf("etcdsnap: restore: %w", err)
	}
	b.pending, b.size = b.pending[:0], 0
	return nil
}
