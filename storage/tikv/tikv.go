package tikv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	"github.com/tikv/client-go/v2/config"
	tikverr "github.com/tikv/client-go/v2/error"
	"github.com/tikv/client-go/v2/kv"
	"github.com/tikv/client-go/v2/oracle"
	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/tikvrpc/interceptor"
	"github.com/tikv/client-go/v2/txnkv/transaction"
	"github.com/tikv/client-go/v2/util"

	"github.com/axon-kv/axon/storage"
)

// maxEntrySize bounds a key and value written together: TiKV's default
// raft-entry-max-size, above which it refuses the write.
const maxEntrySize = 8 << 20

// Options configure Open.
type Options struct {
	// CAPath, CertPath and KeyPath are PEM files for TLS to PD and TiKV.
	// All empty means plaintext. client-go keeps them in its process-wide
	// configuration, so every Engine of a process should use the same.
	CAPath, CertPath, KeyPath string
	// ScanConcurrency bounds the regions a large iteration reads at once.
	// Zero means DefaultScanConcurrency; 1 turns parallel scans off.
	ScanConcurrency int
}

// DefaultScanConcurrency is the number of regions a large scan prefetches
// at once unless Options say otherwise.
const DefaultScanConcurrency = 4

// Engine is a TiKV cluster used as a storage.Engine. Handles made by Share
// use one client; it is released when every handle is closed.
type Engine struct {
	c *backend
	// mu guards closed. Operations hold it for reading while they use the
	// client, so Close waits for the operations in flight.
	mu      sync.RWMutex
	closed  bool
	closing chan struct{} // closed by Close: stops scan workers
	workers sync.WaitGroup
	// observers are the metrics' (observe.go).
	observers struct {
		commits storage.Observers[func(time.Duration)]
	}
}

var _ storage.Engine = (*Engine)(nil)

// backend is the client-go store behind one or more Engine handles.
type backend struct {
	store           *kvstore.KVStore
	seen            seenTS // for leaders' snapshots (start.go)
	scanConcurrency int
	mock            *mockParts // nil for a real cluster

	mu   sync.Mutex
	refs int
}

func newEngine(c *backend) *Engine {
	c.mu.Lock()
	c.refs++
	c.mu.Unlock()
	return &Engine{c: c, closing: make(chan struct{})}
}

// tlsMu serializes the edits of client-go's global TLS settings.
var tlsMu sync.Mutex

// Open connects to the TiKV cluster whose PD servers are pdEndpoints.
func Open(ctx context.Context, pdEndpoints []string, opts Options) (*Engine, error) {
	if len(pdEndpoints) == 0 {
		return nil, errors.New("tikv: open: no PD endpoints")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tikv: open: %w: %w", storage.ErrUnavailable, err)
	}
	tlsMu.Lock()
	if opts.CAPath != "" || opts.CertPath != "" || opts.KeyPath != "" {
		// txnkv.NewClient reads TLS settings only from the global config.
		config.UpdateGlobal(func(c *config.Config) {
			c.Security = config.NewSecurity(opts.CAPath, opts.CertPath, opts.KeyPath, nil)
		})
	}
	store, err := newStore(pdEndpoints)
	tlsMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("tikv: open %v: %w: %w", pdEndpoints, storage.ErrUnavailable, err)
	}
	// Fail now, not at the first request, if PD does not answer.
	bo := kvstore.NewBackofferWithVars(ctx, transaction.TsoMaxBackoff, nil)
	if _, err := store.GetTimestampWithRetry(bo, oracle.GlobalTxnScope); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("tikv: open %v: timestamp: %w: %w", pdEndpoints, storage.ErrUnavailable, err)
	}
	return newEngine(&backend{store: store, scanConcurrency: concurrency(opts.ScanConcurrency)}), nil
}

// newStore is txnkv.NewClient's store (API V1, no keyspace), with the
// PD client under tsoGuard.
func newStore(pdEndpoints []string) (*kvstore.KVStore, error) {
	pdc, err := kvstore.NewPDClient(pdEndpoints)
	if err != nil {
		return nil, err
	}
	codec := kvstore.NewCodecPDClient(kvstore.ModeTxn, util.NewInterceptedPDClient(tsoGuard{Client: pdc}))
	cfg := config.GetGlobalConfig()
	tlsConfig, err := cfg.Security.ToTLSConfig()
	if err != nil {
		pdc.Close()
		return nil, err
	}
	spkv, err := kvstore.NewEtcdSafePointKV(pdEndpoints, tlsConfig)
	if err != nil {
		pdc.Close()
		return nil, err
	}
	rpc := kvstore.NewRPCClient(kvstore.WithSecurity(cfg.Security), kvstore.WithCodec(codec.GetCodec()))
	store, err := kvstore.NewKVStore(fmt.Sprintf("tikv-%v", codec.GetClusterID(context.TODO())), codec, spkv, rpc)
	if err != nil {
		_ = rpc.Close()
		_ = spkv.Close()
		pdc.Close()
		return nil, err
	}
	if cfg.TxnLocalLatches.Enabled {
		store.EnableTxnLocalLatches(cfg.TxnLocalLatches.Capacity)
	}
	return store, nil
}

func concurrency(n int) int {
	if n <= 0 {
		return DefaultScanConcurrency
	}
	return n
}

// Share returns another handle on e's client. Each handle is closed on its
// own; the client is released with the last one. It lets several users
// (say, Axon instances in one test process) share a cluster and close
// independently.
func (e *Engine) Share() (*Engine, error) {
	if err := e.acquire("share"); err != nil {
		return nil, err
	}
	defer e.release()
	return newEngine(e.c), nil
}

// Close makes e and its transactions unusable, after the operations in
// flight finish. Closing twice is harmless and returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.closing)
	e.mu.Unlock()
	e.workers.Wait()

	c := e.c
	c.mu.Lock()
	c.refs--
	last := c.refs == 0
	c.mu.Unlock()
	if !last {
		return nil
	}
	// For a mock this also closes the in-process cluster.
	if err := c.store.Close(); err != nil {
		return fmt.Errorf("tikv: close: %w", err)
	}
	return nil
}

// acquire read-locks the engine for one operation, or reports it closed.
func (e *Engine) acquire(op string) error {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return fmt.Errorf("tikv: %s: engine: %w", op, storage.ErrClosed)
	}
	return nil
}

func (e *Engine) release() { e.mu.RUnlock() }

// Begin starts an optimistic transaction at a fresh timestamp from PD, so
// its snapshot holds every transaction committed before the call.
func (e *Engine) Begin(ctx context.Context) (storage.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tikv: begin: %w: %w", storage.ErrUnavailable, err)
	}
	if err := e.acquire("begin"); err != nil {
		return nil, err
	}
	defer e.release()
	t := &txn{e: e, ctx: ctx}
	if storage.LeaderSnapshot(ctx) {
		t.pending, t.readTS = e.fetchStart(ctx), e.c.seen.snapshot()
		return t, nil
	}
	bo := kvstore.NewBackofferWithVars(ctx, transaction.TsoMaxBackoff, nil)
	ts, err := e.c.store.GetTimestampWithRetry(bo, oracle.GlobalTxnScope)
	if err != nil {
		return nil, fmt.Errorf("tikv: begin: timestamp: %w: %w", storage.ErrUnavailable, err)
	}
	if err := t.open(ts); err != nil {
		return nil, err
	}
	return t, nil
}

// open starts the client-go transaction at ts.
func (t *txn) open(ts uint64) error {
	t.e.c.seen.saw(ts)
	tx, err := t.e.c.store.Begin(kvstore.WithStartTS(ts))
	if err != nil {
		return fmt.Errorf("tikv: begin: %w: %w", storage.ErrUnavailable, err)
	}
	// Only a Commit RPC can make a plain 2PC transaction visible; async
	// commit and 1PC would make a prewrite decisive and blur what a
	// failed Commit means.
	tx.SetEnableAsyncCommit(false)
	tx.SetEnable1PC(false)
	// Insert's keys are asserted absent at prewrite; writes without the
	// flag carry no assertion.
	tx.SetAssertionLevel(kvrpcpb.AssertionLevel_Strict)
	// client-go's buffer takes entries of any size by default; one TiKV
	// cannot take comes back from prewrite as a RaftEntryTooLarge region
	// error, which would read as "unavailable, retry". Refused here, it
	// fails Set with client-go's ErrEntryTooLarge: a plain error.
	tx.GetUnionStore().SetEntrySizeLimit(maxEntrySize, math.MaxUint64)
	t.tx = tx
	tx.SetRPCInterceptor(interceptor.NewRPCInterceptor("axon-commit-sent", func(next interceptor.RPCInterceptorFunc) interceptor.RPCInterceptorFunc {
		return func(target string, req *tikvrpc.Request) (*tikvrpc.Response, error) {
			if req.Type == tikvrpc.CmdCommit {
				t.commitSent.Store(true)
			}
			return next(target, req)
		}
	}))
	return nil
}

type txn struct {
	e *Engine
	// tx is nil while the start timestamp is pending (a leader's
	// transaction): ReadBatch reads at readTS meanwhile (0: it waits
	// too), everything else waits for it (begin).
	tx      *transaction.KVTxn
	pending *pendingStart
	readTS  uint64
	// ctx is Begin's context; reads run under it (the storage contract's
	// reads take none).
	ctx context.Context
	// gen counts writes, so iterators notice that the buffer changed.
	gen   uint64
	iters []*iterator
	// commitSent is set once a Commit RPC may have left the client: from
	// then on, a failure may hide a committed transaction.
	commitSent atomic.Bool
	closed     bool
}

func (t *txn) begin(op string) error {
	if t.closed {
		return fmt.Errorf("tikv: %s: transaction: %w", op, storage.ErrClosed)
	}
	// Wait before taking the engine: the fetch takes it too, and a Close
	// waiting between the two would block both.
	if err := t.awaitStart(); err != nil {
		return err
	}
	if err := t.e.acquire(op); err != nil {
		return err
	}
	if t.tx == nil {
		if err := t.open(t.pending.ts); err != nil {
			t.e.release()
			return err
		}
	}
	return nil
}

// awaitStart waits for a pending start timestamp.
func (t *txn) awaitStart() error {
	if t.tx != nil || t.pending == nil {
		return nil
	}
	select {
	case <-t.pending.done:
	case <-t.ctx.Done():
		return fmt.Errorf("tikv: begin: timestamp: %w: %w", storage.ErrUnavailable, t.ctx.Err())
	}
	if err := t.pending.err; err != nil {
		return fmt.Errorf("tikv: begin: timestamp: %w: %w", storage.ErrUnavailable, err)
	}
	return nil
}

// StartTS waits for a pending start timestamp; 0 if it failed.
func (t *txn) StartTS() uint64 {
	if t.tx == nil {
		if t.begin("start timestamp") != nil {
			return 0
		}
		t.e.release()
	}
	return t.tx.StartTS()
}

func (t *txn) Get(key []byte) ([]byte, error) {
	if err := t.begin("get"); err != nil {
		return nil, err
	}
	defer t.e.release()
	v, err := t.tx.Get(t.ctx, key)
	if tikverr.IsErrNotFound(err) {
		return nil, fmt.Errorf("tikv: get %q: %w", key, storage.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("tikv: get %q: %w", key, readErr(err))
	}
	return decodeValue(make([]byte, 0, len(v.Value)), v.Value), nil
}

func (t *txn) Set(key, value []byte) error {
	if err := t.begin("set"); err != nil {
		return err
	}
	defer t.e.release()
	t.gen++
	// The buffer copies key and value.
	if err := t.tx.Set(key, encodeValue(value)); err != nil {
		return fmt.Errorf("tikv: set %q: %w", key, err)
	}
	return nil
}

var _ storage.Inserter = (*txn)(nil)

// Insert buffers a write TiKV checks at prewrite: the key must not exist
// (an assertion; it fails the commit before any Commit RPC, so the failure
// is definite).
func (t *txn) Insert(key, value []byte) error {
	if err := t.begin("insert"); err != nil {
		return err
	}
	defer t.e.release()
	t.gen++
	if err := t.tx.GetMemBuffer().SetWithFlags(key, encodeValue(value), kv.SetAssertNotExist); err != nil {
		return fmt.Errorf("tikv: insert %q: %w", key, err)
	}
	return nil
}

func (t *txn) Delete(key []byte) error {
	if err := t.begin("delete"); err != nil {
		return err
	}
	defer t.e.release()
	t.gen++
	if err := t.tx.Delete(key); err != nil {
		return fmt.Errorf("tikv: delete %q: %w", key, err)
	}
	return nil
}

// Lock flags keys as locked in the buffer. In an optimistic transaction
// that sends nothing now; at Commit each key without a write becomes an
// Op_Lock mutation, which TiKV checks for conflicts at prewrite and
// records (as a lock-type write) at commit, so later committers conflict
// with it in turn.
func (t *txn) Lock(keys ...[]byte) error {
	if err := t.begin("lock"); err != nil {
		return err
	}
	defer t.e.release()
	t.gen++
	if err := t.tx.LockKeys(t.ctx, kv.NewLockCtx(t.tx.StartTS(), kv.LockNoWait, time.Now()), keys...); err != nil {
		return fmt.Errorf("tikv: lock: %w", err)
	}
	return nil
}

// end marks the transaction closed and stops its iterators. Callers hold
// the engine.
func (t *txn) end() {
	t.closed = true
	for _, it := range t.iters {
		it.stop()
	}
	t.iters = nil
}

func (t *txn) Rollback() {
	if t.closed {
		return
	}
	if t.e.acquire("rollback") != nil {
		t.closed = true // the client is closed; nothing to discard
		return
	}
	defer t.e.release()
	t.end()
	if t.tx != nil {
		_ = t.tx.Rollback() // optimistic: only drops the buffer
	}
}

func (t *txn) Commit(ctx context.Context) error {
	if err := t.begin("commit"); err != nil {
		return err
	}
	defer t.e.release()
	t.end()
	if err := ctx.Err(); err != nil {
		_ = t.tx.Rollback()
		return fmt.Errorf("tikv: commit: %w: %w", storage.ErrUnavailable, err)
	}
	start := time.Now()
	err := t.tx.Commit(ctx)
	t.e.observeCommit(start)
	if ts := t.tx.CommitTS(); ts > 0 {
		t.e.c.seen.saw(ts) // a leader's next reads must see it
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("tikv: commit at %d: %w", t.tx.StartTS(), commitErr(err, t.commitSent.Load()))
}

// commitErr classifies a failed commit. Without async commit and 1PC, a
// transaction commits exactly when its primary key's Commit RPC succeeds,
// so any failure before a Commit RPC was sent is definite.
func commitErr(err error, commitSent bool) error {
	switch {
	case tikverr.IsErrorUndetermined(err):
		return fmt.Errorf("%w: %w", storage.ErrUncertain, err)
	case isConflict(err):
		// Conflicts are found at prewrite, before anything committed.
		return fmt.Errorf("%w: %w", storage.ErrConflict, err)
	case commitSent:
		return fmt.Errorf("%w: %w", storage.ErrUncertain, err)
	case isTooLarge(err):
		return err // retrying cannot help
	default:
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, err)
	}
}

func isConflict(err error) bool {
	var latch *tikverr.ErrWriteConflictInLatch
	var retryable *tikverr.ErrRetryable
	var assertion *tikverr.ErrAssertionFailed
	return tikverr.IsErrWriteConflict(err) || errors.As(err, &latch) || errors.As(err, &retryable) ||
		tikverr.IsErrKeyExist(err) || errors.As(err, &assertion)
}

func isTooLarge(err error) bool {
	var txn *tikverr.ErrTxnTooLarge
	var key *tikverr.ErrKeyTooLarge
	var entry *tikverr.ErrEntryTooLarge
	return errors.As(err, &txn) || errors.As(err, &key) || errors.As(err, &entry)
}

// readErr classifies a failed read: reads change nothing, so the caller
// may always retry.
func readErr(err error) error {
	return fmt.Errorf("%w: %w", storage.ErrUnavailable, err)
}

// TiKV cannot store an empty value in a transaction (the write buffer
// uses it for deletions), so a value that is empty or starts with
// valueMarker is stored with valueMarker in front. Other values, Axon's
// records among them, are stored as they are.
const valueMarker = 0xFF

func encodeValue(v []byte) []byte {
	if len(v) > 0 && v[0] != valueMarker {
		return v
	}
	return append([]byte{valueMarker}, v...)
}

// decodeValue appends the user value of stored value v to dst.
func decodeValue(dst, v []byte) []byte {
	if len(v) > 0 && v[0] == valueMarker {
		v = v[1:]
	}
	return append(dst, v...)
}
