package etcdsnap

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
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
// revisions.
//
// It writes in transactions of about BatchBytes. The first marks the
// store as a restore under way (core.MetaRestoring); the last records
// the format and deletes the mark, so a store cut short in between is
// refused by every binary (core.ErrRestoreInterrupted). A restore that
// fails part way deletes what it wrote and returns its error saying so;
// if that cleanup fails too, the mark stays and the error says so.
func Restore(ctx context.Context, path string, eng storage.Engine, opts RestoreOptions) (Restored, error) {
	db, cleanup, err := openSnapshot(path, opts.SkipHashCheck)
	if err != nil {
		return Restored{}, err
	}
	defer cleanup()
	limit := cmp.Or(max(opts.BatchBytes, 0), 4<<20)
	by := cmp.Or(opts.By, "axon snapshot restore")
	if err := begin(ctx, eng, by); err != nil {
		if errors.Is(err, ErrNotEmpty) || errors.Is(err, storage.ErrConflict) {
			// Nothing written.
			return Restored{}, err
		}
		// The mark may have been written (an uncertain commit).
		return Restored{}, undo(ctx, eng, limit, err)
	}
	w := &batchWriter{ctx: ctx, eng: eng, limit: limit}
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
		if err := w.add(im.Finish(leases)); err != nil {
			return err
		}
		st, err := readAuth(tx)
		if err != nil {
			return err
		}
		if st != nil {
			if err := w.add(auth.AuthRecords(st)); err != nil {
				return err
			}
		}
		// The format is recorded last, with the mark's deletion in the
		// same transaction: until then no binary serves the store.
		w.pending = append(w.pending, core.FormatWrite(by), core.Write{Key: core.MetaKey(core.MetaRestoring), Delete: true})
		out.Compacted, out.Leases = compacted, len(leases)
		out.Revision = max(out.Revision, compacted)
		return w.flush()
	})
	if err != nil {
		return Restored{}, undo(ctx, eng, limit, err)
	}
	return out, nil
}

// begin checks that eng holds no Axon data and marks it as a restore
// under way, in one transaction (which locks the format record, so that
// a server recording the format of the empty store at once conflicts
// with it instead of serving a partial store).
func begin(ctx context.Context, eng storage.Engine, by string) error {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return fmt.Errorf("etcdsnap: %w", err)
	}
	defer txn.Rollback()
	rd := storage.NewReader(txn)
	empty, err := core.IsEmpty(rd)
	if err != nil {
		return fmt.Errorf("etcdsnap: %w", err)
	}
	if !empty {
		if _, ok, err := rd.Get(core.MetaKey(core.MetaRestoring)); err == nil && ok {
			return fmt.Errorf("%w: %w", ErrNotEmpty, core.ErrRestoreInterrupted)
		}
		return ErrNotEmpty
	}
	if err := txn.Lock(core.MetaKey(core.MetaFormat)); err != nil {
		return fmt.Errorf("etcdsnap: %w", err)
	}
	if err := txn.Set(core.MetaKey(core.MetaRestoring), []byte(by)); err != nil {
		return fmt.Errorf("etcdsnap: %w", err)
	}
	if err := txn.Commit(ctx); err != nil {
		return fmt.Errorf("etcdsnap: mark the restore: %w", err)
	}
	return nil
}

// undo empties the store after the restore failed with cause: every key
// of Axon's keyspace is deleted, in transactions of about limit bytes of
// keys, the restore's mark last. It returns cause wrapped, saying
// whether the store was emptied. It runs on even if ctx was canceled (a
// restore interrupted is the commonest failure).
func undo(ctx context.Context, eng storage.Engine, limit int, cause error) error {
	if err := emptyStore(context.WithoutCancel(ctx), eng, limit); err != nil {
		return fmt.Errorf("etcdsnap: the restore failed: %w; emptying the store failed too (%w): it is left marked as an interrupted restore, which axon serve refuses: empty it (delete the data dir, or the TiKV keyspace) before restoring again", cause, err)
	}
	return fmt.Errorf("etcdsnap: the restore failed and the store was emptied of what it wrote (restore again once fixed): %w", cause)
}

// undoKeys bounds the deletions of one cleanup transaction.
const undoKeys = 1000

// emptyStore deletes every key in Axon's keyspace, the restore's mark
// last, in bounded transactions.
func emptyStore(ctx context.Context, eng storage.Engine, limit int) error {
	lower, upper := core.Keyspace()
	mark := core.MetaKey(core.MetaRestoring)
	for from := lower; ; {
		var keys [][]byte
		size := 0
		txn, err := eng.Begin(ctx)
		if err != nil {
			return err
		}
		err = storage.NewReader(txn).Scan(from, upper, false, undoKeys+1, func(k, _ []byte) bool {
			if bytes.Equal(k, mark) {
				return true
			}
			keys = append(keys, bytes.Clone(k))
			size += len(k)
			return len(keys) < undoKeys && size < limit
		})
		if err == nil && len(keys) == 0 {
			// Nothing but the mark (if any) is left.
			err = txn.Delete(mark)
			if err == nil {
				err = txn.Commit(ctx)
			}
			txn.Rollback()
			return err
		}
		for _, k := range keys {
			if err == nil {
				err = txn.Delete(k)
			}
		}
		if err == nil {
			err = txn.Commit(ctx)
		}
		txn.Rollback()
		if err != nil {
			return err
		}
		from = append(keys[len(keys)-1], 0)
	}
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

// readAuth reads etcd's auth buckets; nil when auth was never set up.
func readAuth(tx *bbolt.Tx) (*auth.Store, error) {
	var (
		enabled bool
		rev     uint64
		users   []*authpb.User
		roles   []*authpb.Role
	)
	if b := tx.Bucket(schema.Auth.Name()); b != nil {
		enabled = bytes.Equal(b.Get(schema.AuthEnabledKeyName), []byte{1})
		if v := b.Get(schema.AuthRevisionKeyName); len(v) == 8 {
			rev = binary.BigEndian.Uint64(v)
		}
	}
	for _, each := range []struct {
		bucket backend.Bucket
		add    func([]byte) error
	}{
		{schema.AuthUsers, func(v []byte) error {
			u := &authpb.User{}
			users = append(users, u)
			return proto.Unmarshal(v, u)
		}},
		{schema.AuthRoles, func(v []byte) error {
			r := &authpb.Role{}
			roles = append(roles, r)
			return proto.Unmarshal(v, r)
		}},
	} {
		b := tx.Bucket(each.bucket.Name())
		if b == nil {
			continue
		}
		if err := b.ForEach(func(_, v []byte) error { return each.add(v) }); err != nil {
			return nil, fmt.Errorf("etcdsnap: auth record: %w", err)
		}
	}
	if !enabled && len(users) == 0 && len(roles) == 0 {
		return nil, nil
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return auth.ImportAuth(enabled, rev, users, roles, secret), nil
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
	if err := driver.Buffer(txn, b.pending); err != nil {
		return fmt.Errorf("etcdsnap: restore: %w", err)
	}
	if err := txn.Commit(b.ctx); err != nil {
		return fmt.Errorf("etcdsnap: restore: %w", err)
	}
	b.pending, b.size = b.pending[:0], 0
	return nil
}
