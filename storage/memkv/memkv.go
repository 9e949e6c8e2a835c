package memkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/axon-kv/axon/storage"
)

var _ storage.Engine = (*Engine)(nil)

// Engine is the in-memory engine. The zero value is not usable; call New.
type Engine struct {
	mu      sync.Mutex
	tree    *btree.BTreeG[*item]
	ts      uint64 // timestamp of the latest commit
	now     time.Duration
	inj     Injector
	windows []window
	pending []*Txn // held transactions, sorted by (applyAt, seq)
	seq     uint64
	closed  bool
}

// item is one key with its committed versions, oldest first.
type item struct {
	key      []byte
	versions []version
	// touched is the timestamp of the latest commit that wrote or locked
	// the key; it is what conflict checks compare against.
	touched uint64
}

type version struct {
	ts      uint64
	value   []byte
	deleted bool
}

type window struct{ from, to time.Duration }

func lessItem(a, b *item) bool { return bytes.Compare(a.key, b.key) < 0 }

// New returns an empty engine at virtual time 0 with no faults.
func New() *Engine {
	return &Engine{tree: btree.NewG(16, lessItem)}
}

// SetInjector replaces the fault injector; nil injects nothing.
func (e *Engine) SetInjector(inj Injector) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inj = inj
}

// SetNow advances virtual time to now and applies, in order of apply time
// (ties in order of their Commit calls), every held transaction that is due.
// Time never goes backwards: a now earlier than the current time only
// applies what is already due.
func (e *Engine) SetNow(now time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now > e.now {
		e.now = now
	}
	for len(e.pending) > 0 && e.pending[0].applyAt <= e.now && !e.closed {
		t := e.pending[0]
		e.pending = e.pending[1:]
		_ = e.apply(t) // a conflict drops it; t.outcome records which
	}
}

// Now returns the current virtual time.
func (e *Engine) Now() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// SetUnavailable makes every operation fail with storage.ErrUnavailable
// while virtual time is in [from, to). Windows accumulate.
func (e *Engine) SetUnavailable(from, to time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if to > from {
		e.windows = append(e.windows, window{from, to})
	}
}

// Pending reports how many transactions are held for a delayed apply.
func (e *Engine) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// Hash is an FNV-1a hash of the latest committed state: every live key and
// its value, in key order. Two engines with the same data hash the same,
// whatever their histories.
func (e *Engine) Hash() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := fnv.New64a()
	var n [binary.MaxVarintLen64]byte
	writeBytes := func(b []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	e.tree.Ascend(func(it *item) bool {
		if len(it.versions) == 0 {
			return true
		}
		if v := it.versions[len(it.versions)-1]; !v.deleted {
			writeBytes(it.key)
			writeBytes(v.value)
		}
		return true
	})
	return h.Sum64()
}

// Close makes the engine and its transactions unusable and drops held
// transactions unapplied. Closing twice is harmless.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for _, t := range e.pending {
		t.outcome = NotApplied
	}
	e.pending = nil
	return nil
}

// check reports why an operation cannot run now (closed engine or
// unavailable window), else it asks the injector. Callers hold e.mu.
func (e *Engine) check(op Op) (Fault, error) {
	if e.closed {
		return Fault{}, fmt.Errorf("memkv: %s: engine: %w", op.Kind, storage.ErrClosed)
	}
	for _, w := range e.windows {
		if e.now >= w.from && e.now < w.to {
			return Fault{}, fmt.Errorf("memkv: %s: unavailable window [%v, %v): %w", op.Kind, w.from, w.to, storage.ErrUnavailable)
		}
	}
	if e.inj == nil {
		return Fault{}, nil
	}
	f := e.inj.Inject(op)
	switch f.Kind {
	case FaultError:
		return f, fmt.Errorf("memkv: %s: %w", op.Kind, ErrInjected)
	case FaultUnavailable:
		return f, fmt.Errorf("memkv: %s: injected: %w", op.Kind, storage.ErrUnavailable)
	}
	return f, nil
}

// checkRead is check for a read of t: an archive reads without faults.
func (e *Engine) checkRead(t *Txn, op Op) (Fault, error) {
	if t.archive {
		return Fault{}, nil
	}
	return e.check(op)
}

// Begin starts a transaction on the latest committed state, or on an
// older one if its fault or ctx plants a stale snapshot (Fault.StaleBy,
// storage.WithStaleSnapshot).
func (e *Engine) Begin(ctx context.Context) (storage.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memkv: begin: %w: %w", storage.ErrUnavailable, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := e.check(Op{Kind: OpBegin})
	if err != nil {
		return nil, err
	}
	return &Txn{
		e:      e,
		snap:   e.ts - min(max(f.StaleBy, storage.StaleSnapshot(ctx)), e.ts),
		writes: make(map[string]write),
		locks:  make(map[string]struct{}),
		delay:  f.Delay,
	}, nil
}

// conflicts reports whether a key of t's write or lock set was touched by a
// commit newer than t's snapshot. Callers hold e.mu.
func (e *Engine) conflicts(t *Txn) bool {
	for _, k := range t.keys() {
		if it, ok := e.tree.Get(&item{key: k}); ok && it.touched > t.snap {
			return true
		}
	}
	return false
}

// apply commits t unless it conflicts (or its fault plants the bug of a
// skipped check), and records the outcome. Callers hold e.mu.
func (e *Engine) apply(t *Txn) error {
	if !t.skipConflictCheck && e.conflicts(t) {
		t.outcome = NotApplied
		return fmt.Errorf("memkv: commit at snapshot %d: %w", t.snap, storage.ErrConflict)
	}
	for k := range t.fresh {
		if it, ok := e.tree.Get(&item{key: []byte(k)}); ok && len(it.versions) > 0 && !it.versions[len(it.versions)-1].deleted {
			t.outcome = NotApplied
			return fmt.Errorf("memkv: commit at snapshot %d: inserted key %q exists: %w", t.snap, k, storage.ErrConflict)
		}
	}
	t.outcome = Applied
	if len(t.writes) == 0 && len(t.locks) == 0 {
		return nil
	}
	e.ts++
	ts := e.ts
	for _, k := range t.keys() {
		it, ok := e.tree.Get(&item{key: k})
		if !ok {
			it = &item{key: []byte(k)}
			e.tree.ReplaceOrInsert(it)
		}
		it.touched = ts
		if w, ok := t.writes[string(k)]; ok {
			it.versions = append(it.versions, version{ts: ts, value: w.value, deleted: w.deleted})
		}
	}
	return nil
}

// hold queues t for a delayed apply. Callers hold e.mu.
func (e *Engine) hold(t *Txn, after time.Duration) {
	e.seq++
	t.applyAt, t.seq = e.now+after, e.seq
	i := sort.Search(len(e.pending), func(i int) bool {
		p := e.pending[i]
		return p.applyAt > t.applyAt || (p.applyAt == t.applyAt && p.seq > t.seq)
	})
	e.pending = slices.Insert(e.pending, i, t)
}

// Archive returns a read-only transaction, without faults, in which
// every key reads as the last value ever committed to it: what a
// compaction sweep deleted is still there. A simulator's ground truth
// of everything that was ever applied.
func (e *Engine) Archive() storage.Txn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return &Txn{e: e, snap: e.ts, writes: map[string]write{}, locks: map[string]struct{}{}, archive: true}
}

// Peek returns the latest committed value of key, outside any
// transaction and without faults: a simulator's ground truth.
func (e *Engine) Peek(key []byte) ([]byte, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.read(key, e.ts)
}

// read returns the value of key at snapshot snap. Callers hold e.mu.
func (e *Engine) read(key []byte, snap uint64) ([]byte, bool) {
	it, ok := e.tree.Get(&item{key: key})
	if !ok {
		return nil, false
	}
	return it.at(snap)
}

// view is at, or with archive the newest version at snap that is not a
// delete.
func (it *item) view(snap uint64, archive bool) ([]byte, bool) {
	if !archive {
		return it.at(snap)
	}
	for i := len(it.versions) - 1; i >= 0; i-- {
		if v := it.versions[i]; v.ts <= snap && !v.deleted {
			return v.value, true
		}
	}
	return nil, false
}

// at returns the newest version visible at snap.
func (it *item) at(snap uint64) ([]byte, bool) {
	i := sort.Search(len(it.versions), func(i int) bool { return it.versions[i].ts > snap })
	if i == 0 || it.versions[i-1].deleted {
		return nil, false
	}
	return it.versions[i-1].value, true
}

// Outcome is what really became of a transaction.
type Outcome int

// Outcomes. Undecided covers both an open transaction and one held for a
// delayed apply.
const (
	Undecided Outcome = iota
	Applied
	NotApplied
)

func (o Outcome) String() string {
	switch o {
	case Undecided:
		return "undecided"
	case Applied:
		return "applied"
	case NotApplied:
		return "not-applied"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Txn is a memkv transaction. Begin returns it as a storage.Txn; the
// simulator type-asserts to *Txn to read Delay and Outcome.
type Txn struct {
	e      *Engine
	snap   uint64
	writes map[string]write
	locks  map[string]struct{}
	// fresh are written keys that must not exist when t applies (Insert).
	fresh  map[string]struct{}
	closed bool

	// Guarded by e.mu.
	delay             time.Duration
	outcome           Outcome
	applyAt           time.Duration
	seq               uint64
	skipConflictCheck bool // Fault.SkipConflictCheck of its commit
	// archive: every key reads as the last value ever committed to it,
	// deletes ignored (Archive).
	archive bool
}

type write struct {
	value   []byte
	deleted bool
}

var _ storage.Txn = (*Txn)(nil)

// Delay is the virtual latency accumulated by the transaction's
// operations, including Begin and Commit.
func (t *Txn) Delay() time.Duration {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	return t.delay
}

// Outcome reports whether the transaction was applied. It is Undecided
// until Commit, and stays Undecided while the transaction is held for a
// delayed apply.
func (t *Txn) Outcome() Outcome {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	return t.outcome
}

// StartTS is the commit timestamp of the latest commit in the snapshot.
func (t *Txn) StartTS() uint64 { return t.snap }

// keys returns the write and lock set, sorted, without duplicates.
func (t *Txn) keys() [][]byte {
	ks := make([][]byte, 0, len(t.writes)+len(t.locks))
	for k := range t.writes {
		ks = append(ks, []byte(k))
	}
	for k := range t.locks {
		if _, ok := t.writes[k]; !ok {
			ks = append(ks, []byte(k))
		}
	}
	slices.SortFunc(ks, bytes.Compare)
	return ks
}

// usable reports whether the transaction may still be used. Callers do not
// hold e.mu.
func (t *Txn) usable(op string) error {
	if t.closed {
		return fmt.Errorf("memkv: %s: transaction: %w", op, storage.ErrClosed)
	}
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	if t.e.closed {
		return fmt.Errorf("memkv: %s: engine: %w", op, storage.ErrClosed)
	}
	return nil
}

// Get returns the value of key as the transaction sees it.
func (t *Txn) Get(key []byte) ([]byte, error) {
	if err := t.usable("get"); err != nil {
		return nil, err
	}
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	f, err := t.e.checkRead(t, Op{Kind: OpGet, Keys: [][]byte{key}})
	t.delay += f.Delay
	if err != nil {
		return nil, err
	}
	if w, ok := t.writes[string(key)]; ok {
		if w.deleted {
			return nil, fmt.Errorf("memkv: get %q: %w", key, storage.ErrNotFound)
		}
		return bytes.Clone(w.value), nil
	}
	var (
		v  []byte
		ok bool
	)
	if it, found := t.e.tree.Get(&item{key: key}); found {
		v, ok = it.view(t.snap, t.archive)
	}
	if !ok {
		return nil, fmt.Errorf("memkv: get %q: %w", key, storage.ErrNotFound)
	}
	return bytes.Clone(v), nil
}

// Set buffers a write. It copies key and value.
func (t *Txn) Set(key, value []byte) error {
	if err := t.usable("set"); err != nil {
		return err
	}
	t.writes[string(key)] = write{value: bytes.Clone(value)}
	return nil
}

// Delete buffers a deletion.
func (t *Txn) Delete(key []byte) error {
	if err := t.usable("delete"); err != nil {
		return err
	}
	t.writes[string(key)] = write{deleted: true}
	return nil
}

// Lock adds keys to the conflict set.
func (t *Txn) Lock(keys ...[]byte) error {
	if err := t.usable("lock"); err != nil {
		return err
	}
	for _, k := range keys {
		t.locks[string(k)] = struct{}{}
	}
	return nil
}

// Rollback discards the transaction. A transaction already committed, or
// held for a delayed apply, is not affected.
func (t *Txn) Rollback() { t.closed = true }

// Commit applies the buffered writes, subject to the injected fault.
func (t *Txn) Commit(ctx context.Context) error {
	if err := t.usable("commit"); err != nil {
		return err
	}
	t.closed = true
	e := t.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		t.outcome = NotApplied
		return fmt.Errorf("memkv: commit: %w: %w", storage.ErrUnavailable, err)
	}
	f, err := e.check(Op{Kind: OpCommit, Keys: t.keys()})
	t.delay += f.Delay
	t.skipConflictCheck = f.SkipConflictCheck
	if err != nil {
		t.outcome = NotApplied
		return err
	}
	uncertain := fmt.Errorf("memkv: commit: injected %s: %w", f.Kind, storage.ErrUncertain)
	switch f.Kind {
	case FaultUncertainNotApplied:
		t.outcome = NotApplied
		return uncertain
	case FaultUncertainApplied:
		_ = e.apply(t)
		return uncertain
	case FaultUncertainAppliedLater:
		if len(t.writes) == 0 && len(t.locks) == 0 {
			t.outcome = Applied
		} else {
			e.hold(t, max(f.ApplyAfter, 0))
		}
		return uncertain
	}
	return e.apply(t)
}

// Iter returns an iterator over the transaction's view of [Lower, Upper).
// It sees the writes buffered before the call.
func (t *Txn) Iter(opts storage.IterOptions) (storage.Iterator, error) {
	if err := t.usable("iter"); err != nil {
		return nil, err
	}
	t.e.mu.Lock()
	f, err := t.e.checkRead(t, Op{Kind: OpIter, Keys: [][]byte{opts.Lower, opts.Upper}})
	t.delay += f.Delay
	t.e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	it := &iterator{t: t, opts: opts, batch: 64}
	if opts.Limit > 0 {
		it.batch = min(opts.Limit, 1024)
	}
	for k, w := range t.writes {
		if inRange([]byte(k), opts.Lower, opts.Upper) {
			it.own = append(it.own, entry{key: []byte(k), value: w.value, deleted: w.deleted})
		}
	}
	slices.SortFunc(it.own, func(a, b entry) int { return it.cmp(a.key, b.key) })
	return it, nil
}

func inRange(k, lower, upper []byte) bool {
	return bytes.Compare(k, lower) >= 0 && (upper == nil || bytes.Compare(k, upper) < 0)
}

type entry struct {
	key, value []byte
	deleted    bool
}

// iterator merges the transaction's own writes with committed data read
// from the tree in batches. It holds no lock between calls, so the caller
// may use the transaction while iterating; batches stay consistent because
// versions visible at the snapshot never change.
type iterator struct {
	t     *Txn
	opts  storage.IterOptions
	own   []entry // buffered writes in range, in iteration order
	batch int

	rows  []entry // committed rows fetched, in iteration order
	last  []byte  // key of the last row fetched
	begun bool
	done  bool // the tree has no more rows in range

	key, value []byte
	err        error
	closed     bool
}

// cmp orders keys in iteration order.
func (it *iterator) cmp(a, b []byte) int {
	if it.opts.Reverse {
		return bytes.Compare(b, a)
	}
	return bytes.Compare(a, b)
}

func (it *iterator) Next() bool {
	if it.closed || it.err != nil {
		return false
	}
	if it.t.closed {
		it.err = fmt.Errorf("memkv: iterator: transaction: %w", storage.ErrClosed)
		return false
	}
	for {
		if len(it.rows) == 0 && !it.done {
			if err := it.fill(); err != nil {
				it.err = err
				return false
			}
		}
		var e entry
		switch {
		case len(it.rows) == 0 && len(it.own) == 0:
			it.key, it.value = nil, nil
			return false
		case len(it.rows) == 0:
			e, it.own = it.own[0], it.own[1:]
		case len(it.own) == 0:
			e, it.rows = it.rows[0], it.rows[1:]
		default:
			switch c := it.cmp(it.own[0].key, it.rows[0].key); {
			case c < 0:
				e, it.own = it.own[0], it.own[1:]
			case c > 0:
				e, it.rows = it.rows[0], it.rows[1:]
			default: // own write shadows the committed row
				e, it.own, it.rows = it.own[0], it.own[1:], it.rows[1:]
			}
		}
		if e.deleted {
			continue
		}
		it.key, it.value = bytes.Clone(e.key), bytes.Clone(e.value)
		if it.opts.Short > 0 && len(e.value) > it.opts.Short {
			// Left unread, as badger leaves a value in its log: the
			// simulator's callers meet the nil they may get there.
			it.value = nil
		}
		return true
	}
}

// fill fetches the next batch of committed rows visible at the snapshot.
func (it *iterator) fill() error {
	e := it.t.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("memkv: iterator: engine: %w", storage.ErrClosed)
	}
	lower, upper := it.opts.Lower, it.opts.Upper
	visit := func(i *item) bool {
		if it.begun && bytes.Equal(i.key, it.last) {
			return true // resume point, already returned
		}
		if !inRange(i.key, lower, upper) {
			// Forward: past upper. Reverse: below lower (or at upper).
			if it.opts.Reverse && upper != nil && bytes.Compare(i.key, upper) >= 0 {
				return true
			}
			it.done = true
			return false
		}
		it.last = i.key
		if v, ok := i.view(it.t.snap, it.t.archive); ok {
			it.rows = append(it.rows, entry{key: i.key, value: v})
		}
		return len(it.rows) < it.batch
	}
	switch {
	case !it.opts.Reverse && it.begun:
		e.tree.AscendGreaterOrEqual(&item{key: it.last}, visit)
	case !it.opts.Reverse:
		e.tree.AscendGreaterOrEqual(&item{key: lower}, visit)
	case it.begun:
		e.tree.DescendLessOrEqual(&item{key: it.last}, visit)
	case upper != nil:
		e.tree.DescendLessOrEqual(&item{key: upper}, visit)
	default:
		e.tree.Descend(visit)
	}
	it.begun = true
	if len(it.rows) < it.batch {
		// The walk ended without filling the batch: the tree is exhausted.
		it.done = true
	}
	it.batch = min(it.batch*2, 1024)
	return nil
}

func (it *iterator) Key() []byte   { return it.key }
func (it *iterator) Value() []byte { return it.value }
func (it *iterator) Err() error    { return it.err }
func (it *iterator) Close()        { it.closed = true }

var _ storage.BatchReader = (*Txn)(nil)

// ReadBatch runs the reads one after another, each as Get or Iter would
// (with their faults and latency): the simulator then drives the same
// batched read path as the server over TiKV.
func (t *Txn) ReadBatch(reads []storage.Read) ([]storage.ReadResult, error) {
	return storage.ReadEach(t, reads)
}

var _ storage.Inserter = (*Txn)(nil)

// Insert buffers a write of a key that must not exist when the
// transaction applies, checked then (also by a delayed apply), as TiKV
// checks an assertion at prewrite.
func (t *Txn) Insert(key, value []byte) error {
	if err := t.Set(key, value); err != nil {
		return err
	}
	if t.fresh == nil {
		t.fresh = map[string]struct{}{}
	}
	t.fresh[string(key)] = struct{}{}
	return nil
}
