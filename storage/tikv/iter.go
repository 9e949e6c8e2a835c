package tikv

import (
	"bytes"
	"fmt"
	"slices"

	kvstore "github.com/tikv/client-go/v2/tikv"

	"github.com/axon-kv/axon/storage"
)

const (
	// defaultBatch is the keys per Scan RPC when the caller's Limit hint
	// does not ask for fewer.
	defaultBatch = 1024
	// parallelMinLimit is the smallest Limit hint for which a scan over
	// several regions reads them in parallel.
	parallelMinLimit = 1000
)

// Iter merges the snapshot (read by one Scanner or by region-parallel
// workers) with the write buffer, whose entries win and whose empty
// values are deletions. It does not use client-go's union iterator, whose
// buffer side panics once the transaction writes; this one reopens the
// buffer side after a write, just past the last key it returned.
func (t *txn) Iter(opts storage.IterOptions) (storage.Iterator, error) {
	if err := t.begin("iter"); err != nil {
		return nil, err
	}
	defer t.e.release()
	it := &iterator{
		t:       t,
		lower:   bytes.Clone(opts.Lower),
		upper:   bytes.Clone(opts.Upper),
		reverse: opts.Reverse,
		limit:   opts.Limit,
	}
	if len(it.lower) == 0 {
		it.lower = nil
	}
	// An empty (non-nil) Upper excludes everything, as does Lower >= Upper;
	// client-go would read an empty upper bound as "no bound".
	if it.upper != nil && bytes.Compare(it.lower, it.upper) >= 0 {
		it.done = true
	}
	t.iters = append(t.iters, it)
	return it, nil
}

type iterator struct {
	t            *txn
	lower, upper []byte
	reverse      bool
	limit        int

	started bool
	done    bool
	closed  bool // by Close
	stopped bool // by the end of the transaction
	err     error

	snap    source
	sk, sv  []byte // the snapshot head, valid while sok
	sok     bool
	sNext   bool // the head was used; advance before looking again
	mem     memSide
	last    []byte // the last key returned, to reopen the buffer side
	hasLast bool

	key, value []byte
}

// source is an ordered stream of committed pairs.
type source interface {
	// next returns the next pair, ok false at the end. Key and value stay
	// valid until the following call.
	next() (k, v []byte, ok bool, err error)
	close()
}

func (it *iterator) Next() bool {
	if it.done || it.err != nil {
		return false
	}
	if it.stopped {
		it.err = fmt.Errorf("tikv: iterator: transaction: %w", storage.ErrClosed)
		return false
	}
	if it.closed {
		return false
	}
	if err := it.t.e.acquire("iterator"); err != nil {
		it.err = err
		return false
	}
	defer it.t.e.release()
	if !it.started {
		it.started = true
		it.snap = it.openSource()
		it.sNext = true
		if !it.openMem() {
			return false
		}
	} else if it.mem.gen != it.t.gen && !it.openMem() {
		return false
	}
	for {
		// The snapshot side moves lazily, so that a read error never
		// follows a row already returned.
		if it.sNext {
			if !it.advanceSnap() {
				return false
			}
			it.sNext = false
		}
		if !it.mem.ok && !it.sok {
			return it.finish()
		}
		cmp := 0
		switch {
		case !it.mem.ok:
			cmp = 1
		case !it.sok:
			cmp = -1
		default:
			cmp = bytes.Compare(it.mem.k, it.sk)
			if it.reverse {
				cmp = -cmp
			}
		}
		if cmp > 0 {
			it.yield(it.sk, it.sv)
			it.sNext = true
			return true
		}
		if cmp == 0 {
			it.sNext = true // the buffer's entry replaces it
		}
		deleted := len(it.mem.v) == 0
		if !deleted {
			it.yield(it.mem.k, it.mem.v)
		}
		if err := it.mem.advance(); err != nil {
			it.err = fmt.Errorf("tikv: iterator: write buffer: %w", err)
			return false
		}
		if !deleted {
			return true
		}
	}
}

func (it *iterator) yield(k, v []byte) {
	it.key = append(it.key[:0], k...)
	it.value = decodeValue(it.value[:0], v)
	it.last = append(it.last[:0], k...)
	it.hasLast = true
}

// advanceSnap moves the snapshot head on; false means an error stopped
// the iteration.
func (it *iterator) advanceSnap() bool {
	k, v, ok, err := it.snap.next()
	if err != nil {
		it.err = fmt.Errorf("tikv: iterator: %w", readErr(err))
		it.sok = false
		return false
	}
	it.sk, it.sv, it.sok = k, v, ok
	return true
}

// openMem (re)opens the buffer side after the last key returned.
func (it *iterator) openMem() bool {
	lower, upper := it.lower, it.upper
	if it.hasLast {
		if it.reverse {
			upper = it.last
		} else {
			lower = append(slices.Clip(it.last), 0) // the least key after last
		}
	}
	if err := it.mem.open(it.t, lower, upper, it.reverse); err != nil {
		it.err = fmt.Errorf("tikv: iterator: write buffer: %w", err)
		return false
	}
	return true
}

func (it *iterator) finish() bool {
	it.done = true
	it.key, it.value = nil, nil
	it.release()
	return false
}

// release stops the sources; the caller holds the engine or the
// transaction is over.
func (it *iterator) release() {
	if it.snap != nil {
		it.snap.close()
		it.snap = nil
	}
	it.mem.close()
}

func (it *iterator) Key() []byte   { return it.key }
func (it *iterator) Value() []byte { return it.value }
func (it *iterator) Err() error    { return it.err }

func (it *iterator) Close() {
	if it.closed {
		return
	}
	it.closed = true
	it.release()
	if i := slices.Index(it.t.iters, it); i >= 0 {
		it.t.iters = slices.Delete(it.t.iters, i, i+1)
	}
}

// stop ends the iterator with the transaction.
func (it *iterator) stop() {
	it.stopped = true
	it.release()
}

// memSide is the buffer side of an iteration: a copy of its current entry
// and the buffer iterator positioned after it.
type memSide struct {
	it   kvstore.Iterator
	gen  uint64 // the transaction's write count when it was opened
	k, v []byte
	ok   bool
}

func (m *memSide) open(t *txn, lower, upper []byte, reverse bool) error {
	m.close()
	m.gen = t.gen
	buf := t.tx.GetMemBuffer()
	var err error
	if reverse {
		m.it, err = buf.IterReverse(upper, lower)
	} else {
		m.it, err = buf.Iter(lower, upper)
	}
	if err != nil {
		m.it = nil
		return err
	}
	m.load()
	return nil
}

func (m *memSide) load() {
	m.ok = m.it.Valid()
	if m.ok {
		m.k = append(m.k[:0], m.it.Key()...)
		m.v = append(m.v[:0], m.it.Value()...)
	}
}

func (m *memSide) advance() error {
	if err := m.it.Next(); err != nil {
		m.ok = false
		return err
	}
	m.load()
	return nil
}

func (m *memSide) close() {
	if m.it != nil {
		m.it.Close()
		m.it = nil
	}
	m.ok = false
}

// scannerSource reads committed pairs with one client-go Scanner, which
// walks the regions one after another.
type scannerSource struct {
	snap         scanSnapshot
	lower, upper []byte
	reverse      bool
	it           kvstore.Iterator
}

// scanSnapshot is the part of a client-go snapshot a scan needs.
type scanSnapshot interface {
	Iter(k, upperBound []byte) (kvstore.Iterator, error)
	IterReverse(k, lowerBound []byte) (kvstore.Iterator, error)
}

func (s *scannerSource) next() ([]byte, []byte, bool, error) {
	var err error
	if s.it == nil {
		// Opening a Scanner runs its first RPC.
		if s.it, err = openScan(s.snap, s.lower, s.upper, s.reverse); err != nil {
			s.it = nil
			return nil, nil, false, err
		}
	} else if s.it.Valid() {
		if err = s.it.Next(); err != nil {
			return nil, nil, false, err
		}
	}
	if !s.it.Valid() {
		return nil, nil, false, nil
	}
	return s.it.Key(), s.it.Value(), true, nil
}

func (s *scannerSource) close() {
	if s.it != nil {
		s.it.Close()
	}
}

// reverseTop stands in for a missing upper bound of reverse scans:
// client-go locates a reverse scan by the region that ends at its upper
// bound, and for "no bound" it picks the first region instead of the
// last, so it would miss every other region. Keys at or above reverseTop
// (32 bytes of 0xFF) are read forward and reversed in memory instead;
// Axon never writes any.
var reverseTop = bytes.Repeat([]byte{0xFF}, 32)

// openScan opens a client-go Scanner over [lower, upper) in either
// direction.
func openScan(snap scanSnapshot, lower, upper []byte, reverse bool) (kvstore.Iterator, error) {
	if !reverse {
		return snap.Iter(lower, upper)
	}
	if upper != nil {
		return reverseScan(snap, upper, lower)
	}
	top := reverseTop
	if bytes.Compare(lower, top) > 0 {
		top = lower
	}
	fwd, err := snap.Iter(top, nil)
	if err != nil {
		return nil, err
	}
	defer fwd.Close()
	var high []pair
	for fwd.Valid() {
		high = append(high, pair{fwd.Key(), fwd.Value()})
		if err := fwd.Next(); err != nil {
			return nil, err
		}
	}
	slices.Reverse(high)
	it := &sliceIter{pairs: high}
	if bytes.Compare(lower, reverseTop) < 0 {
		it.then = func() (kvstore.Iterator, error) { return reverseScan(snap, reverseTop, lower) }
	}
	if err := it.settle(); err != nil {
		return nil, err
	}
	return it, nil
}

// reverseScan opens a reverse Scanner over [lower, upper) that stops by
// itself at lower. client-go's Scanner does not: when a full batch ends
// exactly at lower and lower starts a region, it sends the next request
// for the empty range [lower, lower) to the region before, which TiKV
// (and the mock, by panicking) refuses.
func reverseScan(snap scanSnapshot, upper, lower []byte) (kvstore.Iterator, error) {
	it, err := snap.IterReverse(upper, lower)
	if err != nil {
		return nil, err
	}
	return &stopAtLower{Iterator: it, lower: lower}, nil
}

type stopAtLower struct {
	kvstore.Iterator
	lower []byte
	done  bool
}

func (s *stopAtLower) Valid() bool { return !s.done && s.Iterator.Valid() }

func (s *stopAtLower) Next() error {
	if bytes.Equal(s.Iterator.Key(), s.lower) {
		s.done = true // nothing in range sorts below lower
		return nil
	}
	return s.Iterator.Next()
}

// sliceIter yields pairs from memory, then those of an iterator it opens
// when they run out.
type sliceIter struct {
	pairs []pair
	then  func() (kvstore.Iterator, error)
	rest  kvstore.Iterator
}

// settle opens the rest once the pairs are used up.
func (s *sliceIter) settle() error {
	if len(s.pairs) > 0 || s.then == nil {
		return nil
	}
	rest, err := s.then()
	s.then = nil
	if err != nil {
		return err
	}
	s.rest = rest
	return nil
}

func (s *sliceIter) Valid() bool {
	return len(s.pairs) > 0 || s.rest != nil && s.rest.Valid()
}

func (s *sliceIter) Key() []byte {
	if len(s.pairs) > 0 {
		return s.pairs[0].k
	}
	return s.rest.Key()
}

func (s *sliceIter) Value() []byte {
	if len(s.pairs) > 0 {
		return s.pairs[0].v
	}
	return s.rest.Value()
}

func (s *sliceIter) Next() error {
	if len(s.pairs) > 0 {
		s.pairs = s.pairs[1:]
		return s.settle()
	}
	return s.rest.Next()
}

func (s *sliceIter) Close() {
	if s.rest != nil {
		s.rest.Close()
	}
}

// emptySource is the source of a range that holds nothing.
type emptySource struct{}

func (emptySource) next() ([]byte, []byte, bool, error) { return nil, nil, false, nil }
func (emptySource) close()                              {}

// openSource picks how to read the committed side: region-parallel when
// the caller expects many keys and the range spans several regions, else
// one Scanner with batches sized by the Limit hint.
func (it *iterator) openSource() source {
	if it.done {
		return emptySource{}
	}
	e, ts := it.t.e, it.t.tx.StartTS()
	if e.c.scanConcurrency > 1 && (it.limit <= 0 || it.limit >= parallelMinLimit) {
		// A failed region lookup only costs the parallelism; the Scanner
		// reports real read errors.
		if bounds, err := e.regionBounds(it.t.ctx, it.lower, it.upper); err == nil && len(bounds) > 0 {
			return e.newParallelSource(it.t.ctx, ts, it.lower, it.upper, bounds, it.reverse)
		}
	}
	batch := defaultBatch
	if it.limit > 0 && it.limit < defaultBatch {
		batch = max(it.limit+1, 2) // a Scanner needs at least 2
	}
	snap := e.scanSnapshot(it.t.ctx, ts)
	snap.SetScanBatchSize(batch)
	return &scannerSource{snap: snap, lower: it.lower, upper: it.upper, reverse: it.reverse}
}
