package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/axon-kv/axon/storage"
)

// Options configure Open.
type Options struct {
	// Logger receives badger's warnings and errors (its info and debug
	// messages are dropped). Nil means slog.Default().
	Logger *slog.Logger
}

// Engine is a badger database used as a storage.Engine.
type Engine struct {
	db *bdb.DB
	// mu guards closed. Every operation holds it for reading while it uses
	// db, so Close waits for operations in flight, commits included.
	mu     sync.RWMutex
	closed bool
}

var _ storage.Engine = (*Engine)(nil)

// Open opens (creating if needed) the database in dir, with synchronous
// writes.
func Open(dir string, opts Options) (*Engine, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	bo := bdb.DefaultOptions(dir).
		WithSyncWrites(true).
		WithLogger(slogLogger{logger.With("component", "badger")}).
		WithLoggingLevel(bdb.WARNING)
	db, err := bdb.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("badger: open %s: %w", dir, err)
	}
	return &Engine{db: db}, nil
}

// Close closes the database after the operations in flight finish. Open
// transactions become unusable. Closing twice is harmless.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("badger: close: %w", err)
	}
	return nil
}

// acquire read-locks the engine for one operation, or reports it closed.
func (e *Engine) acquire(op string) error {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return fmt.Errorf("badger: %s: engine: %w", op, storage.ErrClosed)
	}
	return nil
}

func (e *Engine) release() { e.mu.RUnlock() }

// Begin starts a read-write transaction.
func (e *Engine) Begin(ctx context.Context) (storage.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("badger: begin: %w: %w", storage.ErrUnavailable, err)
	}
	if err := e.acquire("begin"); err != nil {
		return nil, err
	}
	defer e.release()
	return &txn{e: e, tx: e.db.NewTransaction(true), written: make(map[string]struct{})}, nil
}

type txn struct {
	e  *Engine
	tx *bdb.Txn
	// written holds the keys in the write set (by Set, Delete or Lock);
	// they are in badger's read set as well.
	written map[string]struct{}
	iters   []*iterator
	closed  bool
}

func (t *txn) begin(op string) error {
	if t.closed {
		return fmt.Errorf("badger: %s: transaction: %w", op, storage.ErrClosed)
	}
	return t.e.acquire(op)
}

func (t *txn) StartTS() uint64 { return t.tx.ReadTs() }

func (t *txn) Get(key []byte) ([]byte, error) {
	if err := t.begin("get"); err != nil {
		return nil, err
	}
	defer t.e.release()
	item, err := t.tx.Get(key)
	if errors.Is(err, bdb.ErrKeyNotFound) {
		return nil, fmt.Errorf("badger: get %q: %w", key, storage.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("badger: get %q: %w", key, err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("badger: get %q: value: %w", key, err)
	}
	return v, nil
}

// track puts key in badger's read set and returns its value as of the
// snapshot (found reports whether it exists). Callers hold the engine.
func (t *txn) track(key []byte) (value []byte, found bool, err error) {
	item, err := t.tx.Get(key)
	switch {
	case errors.Is(err, bdb.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	return v, err == nil, err
}

func (t *txn) write(op string, key, value []byte, del bool) error {
	if err := t.begin(op); err != nil {
		return err
	}
	defer t.e.release()
	if _, ok := t.written[string(key)]; !ok {
		if _, _, err := t.track(key); err != nil {
			return fmt.Errorf("badger: %s %q: %w", op, key, err)
		}
	}
	key = bytes.Clone(key)
	var err error
	if del {
		err = t.tx.Delete(key)
	} else {
		err = t.tx.Set(key, bytes.Clone(value))
	}
	if err != nil {
		return fmt.Errorf("badger: %s %q: %w", op, key, err)
	}
	t.written[string(key)] = struct{}{}
	return nil
}

func (t *txn) Set(key, value []byte) error { return t.write("set", key, value, false) }

func (t *txn) Delete(key []byte) error { return t.write("delete", key, nil, true) }

func (t *txn) Lock(keys ...[]byte) error {
	if err := t.begin("lock"); err != nil {
		return err
	}
	defer t.e.release()
	for _, key := range keys {
		if _, ok := t.written[string(key)]; ok {
			continue // already in both the read set and the write set
		}
		v, found, err := t.track(key)
		if err != nil {
			return fmt.Errorf("badger: lock %q: %w", key, err)
		}
		key = bytes.Clone(key)
		if found {
			err = t.tx.Set(key, v)
		} else {
			err = t.tx.Delete(key)
		}
		if err != nil {
			return fmt.Errorf("badger: lock %q: %w", key, err)
		}
		t.written[string(key)] = struct{}{}
	}
	return nil
}

// end marks the transaction closed and closes its iterators (badger's
// Discard panics while any is open). Callers hold the engine.
func (t *txn) end() {
	t.closed = true
	for _, it := range t.iters {
		it.close()
	}
	t.iters = nil
}

func (t *txn) Rollback() {
	if t.closed {
		return
	}
	if t.e.acquire("rollback") != nil {
		t.closed = true // the database is closed; nothing to discard
		return
	}
	defer t.e.release()
	t.end()
	t.tx.Discard()
}

func (t *txn) Commit(ctx context.Context) error {
	if err := t.begin("commit"); err != nil {
		return err
	}
	defer t.e.release()
	t.end()
	if err := ctx.Err(); err != nil {
		t.tx.Discard()
		return fmt.Errorf("badger: commit: %w: %w", storage.ErrUnavailable, err)
	}
	err := t.tx.Commit()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bdb.ErrConflict):
		return fmt.Errorf("badger: commit at %d: %w", t.tx.ReadTs(), storage.ErrConflict)
	case errors.Is(err, bdb.ErrTxnTooBig), errors.Is(err, bdb.ErrBlockedWrites):
		// Refused before the write was queued: nothing applied.
		return fmt.Errorf("badger: commit: %w", err)
	default:
		// The write itself failed; part of it may be in the log.
		return fmt.Errorf("badger: commit: %w: %w", storage.ErrUncertain, err)
	}
}

func (t *txn) Iter(opts storage.IterOptions) (storage.Iterator, error) {
	if err := t.begin("iter"); err != nil {
		return nil, err
	}
	defer t.e.release()
	bo := bdb.DefaultIteratorOptions
	bo.Reverse = opts.Reverse
	if opts.Limit > 0 {
		bo.PrefetchSize = min(opts.Limit, 1000)
	}
	if opts.Lower != nil && opts.Upper != nil {
		// Every key in [Lower, Upper) starts with their common prefix;
		// telling badger lets it skip tables outside it.
		n := 0
		for n < len(opts.Lower) && n < len(opts.Upper) && opts.Lower[n] == opts.Upper[n] {
			n++
		}
		bo.Prefix = bytes.Clone(opts.Lower[:n])
	}
	it := &iterator{t: t, it: t.tx.NewIterator(bo), lower: bytes.Clone(opts.Lower), upper: bytes.Clone(opts.Upper), reverse: opts.Reverse}
	t.iters = append(t.iters, it)
	return it, nil
}

type iterator struct {
	t            *txn
	it           *bdb.Iterator
	lower, upper []byte
	reverse      bool
	started      bool
	done         bool
	closed       bool
	key, value   []byte
	err          error
}

func (it *iterator) Next() bool {
	if it.done || it.err != nil {
		return false
	}
	if it.closed {
		if it.t.closed {
			it.err = fmt.Errorf("badger: iterator: transaction: %w", storage.ErrClosed)
		}
		return false
	}
	if err := it.t.e.acquire("iterator"); err != nil {
		it.err = err
		return false
	}
	defer it.t.e.release()
	b := it.it
	if !it.started {
		it.started = true
		switch {
		case !it.reverse && it.lower != nil:
			b.Seek(it.lower)
		case it.reverse && it.upper != nil:
			// Lands on the largest key <= upper; upper is excluded.
			b.Seek(it.upper)
			if b.Valid() && bytes.Equal(b.Item().Key(), it.upper) {
				b.Next()
			}
		default:
			b.Rewind()
		}
	} else {
		b.Next()
	}
	if !b.Valid() {
		return it.finish()
	}
	item := b.Item()
	k := item.Key()
	if !it.reverse && it.upper != nil && bytes.Compare(k, it.upper) >= 0 ||
		it.reverse && bytes.Compare(k, it.lower) < 0 {
		return it.finish()
	}
	it.key = item.KeyCopy(it.key[:0])
	v, err := item.ValueCopy(it.value[:0])
	if err != nil {
		it.err = fmt.Errorf("badger: iterator: value of %q: %w", k, err)
		return false
	}
	it.value = v
	return true
}

func (it *iterator) finish() bool {
	it.done = true
	it.key, it.value = nil, nil
	return false
}

func (it *iterator) Key() []byte   { return it.key }
func (it *iterator) Value() []byte { return it.value }
func (it *iterator) Err() error    { return it.err }

func (it *iterator) Close() {
	if it.closed {
		return
	}
	if it.t.e.acquire("iterator close") == nil {
		it.close()
		it.t.e.release()
	}
}

// close releases badger's iterator; callers hold the engine.
func (it *iterator) close() {
	if !it.closed {
		it.closed = true
		it.it.Close()
	}
}

// slogLogger routes badger's warnings and errors to slog.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Errorf(f string, args ...any) {
	s.l.Error(strings.TrimSpace(fmt.Sprintf(f, args...)))
}

func (s slogLogger) Warningf(f string, args ...any) {
	s.l.Warn(strings.TrimSpace(fmt.Sprintf(f, args...)))
}

func (slogLogger) Infof(string, ...any)  {}
func (slogLogger) Debugf(string, ...any) {}

// Size reports the bytes the database takes on disk (LSM tree and value
// log), for etcd's Status db_size.
func (e *Engine) Size() int64 {
	if e.acquire("size") != nil {
		return 0
	}
	defer e.release()
	lsm, vlog := e.db.Size()
	return lsm + vlog
}
