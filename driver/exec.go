package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// Dealer deals undealt request work its revision: core.Node and
// core.Member, called under the driver's lock.
type Dealer interface {
	Deal(w *core.Work) error
}

// Apply evaluates w inside txn and buffers its writes there; the caller
// commits (unless the effects are late) and reports with Outcome. Request
// work that comes undealt is evaluated once, dealt by d only if it changes
// keys, and evaluated again at its revision. When d is a *Driver, its key
// cache answers reads of latest records it holds (keycache.go).
func Apply(txn storage.Txn, w *core.Work, d Dealer) (*core.Effects, error) {
	return apply(txn, w, d, nil)
}

// apply is Apply; written holds the latest records earlier requests of
// the batch wrote, which the key cache must not answer for.
func apply(txn storage.Txn, w *core.Work, d Dealer, written map[string]bool) (*core.Effects, error) {
	if w.Kind == core.WorkBatch {
		// Each request reads what the ones before it wrote.
		effs := make([]*core.Effects, len(w.Batch))
		earlier := map[string]bool{}
		for i, sub := range w.Batch {
			eff, err := apply(txn, sub, d, earlier)
			if err != nil {
				return nil, err
			}
			effs[i] = eff
			eachLatest(eff, func(wr core.Write) { earlier[string(wr.Key)] = true })
		}
		return &core.Effects{Batch: effs}, nil
	}
	var (
		rd  core.Reader = storage.NewReader(txn)
		eff *core.Effects
		err error
	)
	undealt := w.Kind == core.WorkRequest && w.Rev == 0
	var keys *keyCache
	if dr, ok := d.(*Driver); ok {
		keys = dr.keys
		if undealt && dr.cfg.Testing.DealEagerly {
			// The planted bug: deal before knowing whether it writes.
			if err := d.Deal(w); err != nil {
				return nil, err
			}
			undealt = false
		}
	}
	var la core.Lookahead
	if _, ok := txn.(storage.BatchReader); ok {
		// Predicted only where prefetch will read it: on Badger it was
		// thrown away, at four allocations a create.
		la = core.WorkLookahead(w)
		if keys != nil {
			la = keys.skipCached(la)
		}
	}
	if m, perr := prefetch(txn, la); perr != nil {
		return nil, perr
	} else if m != nil {
		rd = m
	} else if undealt {
		// Evaluated twice: the second evaluation reads nothing again.
		rd = newMemo(rd)
	}
	if keys != nil {
		rd = cachedReader{Reader: rd, c: keys, written: written}
	}
	switch {
	case undealt:
		if eff, err = core.Evaluate(rd, w); err == nil && eff.NeedsRevision() {
			if err = d.Deal(w); err == nil {
				eff, err = core.Redeal(rd, w, eff)
			}
		}
	default:
		eff, err = core.Evaluate(rd, w)
	}
	if err != nil {
		return nil, err
	}
	if err := Buffer(txn, eff.Writes); err != nil {
		return nil, err
	}
	return eff, nil
}

// Buffer buffers core's writes in txn, for its commit. A New write goes
// to an engine's Insert, which checks at commit that the key is absent;
// an engine without one reads the key first and fails with ErrConflict
// if it exists, unless core knows it cannot (Fresh: on Badger, a read
// per write that, key absent, still probes every memtable and level).
func Buffer(txn storage.Txn, ws []core.Write) error {
	ins, inserts := txn.(storage.Inserter)
	for _, w := range ws {
		var err error
		switch {
		case w.Delete:
			err = txn.Delete(w.Key)
		case w.New && inserts:
			err = ins.Insert(w.Key, w.Value)
		case w.New && !w.Fresh:
			if _, err = txn.Get(w.Key); err == nil {
				return fmt.Errorf("driver: new key %q exists: %w", w.Key, storage.ErrConflict)
			}
			if errors.Is(err, storage.ErrNotFound) {
				err = txn.Set(w.Key, w.Value)
			}
		default:
			err = txn.Set(w.Key, w.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Outcome classifies a commit error.
func Outcome(commitErr error) core.Outcome {
	switch {
	case commitErr == nil:
		return core.Committed
	case errors.Is(commitErr, storage.ErrUncertain):
		return core.Uncertain
	}
	return core.NotApplied
}

// Run executes w in one engine transaction and returns what to report (core.Result),
// with the error that made it fail, if any (the outcome already says
// what became of it; the error says why, for the log).
// Catch-up work is read-only and goes through CatchUp instead.
func Run(ctx context.Context, eng storage.Engine, w *core.Work, d Dealer) (*core.Effects, core.Outcome, error) {
	// Work is the member's, leading or campaigning: the writes its
	// request must see committed through eng before it went out (its
	// latches), so it may read at the newest commit eng saw return.
	txn, err := eng.Begin(storage.WithLeaderSnapshot(ctx))
	if err != nil {
		return nil, core.NotApplied, err
	}
	defer txn.Rollback()
	eff, err := Apply(txn, w, d)
	if out, done := Settled(eff, err); done {
		return eff, out, err
	}
	if err := ctx.Err(); err != nil {
		// Past the engine deadline: a commit now could land after a
		// new leader took over. Not committing is definite.
		return eff, core.NotApplied, err
	}
	err = txn.Commit(ctx)
	return eff, Outcome(err), err
}

// Job is one work item the member handed out, in one engine
// transaction, run in two halves so that a host may let time pass
// between them (the simulator, its engine's latency): StartWork reads,
// or evaluates and buffers the writes; Commit commits them. Both the
// server's executor and the simulator's run work through it.
type Job struct {
	w   *core.Work
	txn storage.Txn // nil: the begin failed
	eff *core.Effects
	// Done says the work ended in StartWork (a read, a failure, nothing
	// to commit); Result is how.
	Done   bool
	Result Result
}

// StartWork begins w's transaction on eng and runs it up to the commit:
// a catch-up or a recovery reads, request work is evaluated (dealt if it
// changes keys) and its writes buffered.
func (d *Driver) StartWork(ctx context.Context, eng storage.Engine, w *core.Work) *Job {
	bctx := ctx
	if w.Kind != core.WorkCatchUp && w.Kind != core.WorkRecover {
		// Work is the member's, leading or campaigning: the writes its
		// request must see committed through eng before it went out
		// (its latches), so it may read at the newest commit eng saw
		// return.
		bctx = storage.WithLeaderSnapshot(ctx)
	}
	txn, err := eng.Begin(d.beginCtx(bctx))
	j := &Job{w: w, txn: txn}
	if err != nil {
		return j.end(Result{Outcome: core.NotApplied, Err: err})
	}
	switch w.Kind {
	case core.WorkCatchUp:
		// The compact revision in the same snapshot: a hub that has not
		// heard of a compaction yet must not read swept history as none.
		rd := storage.NewReader(txn)
		compacted, err := core.ReadCompacted(rd)
		if err != nil {
			return j.end(Result{Err: err})
		}
		evs, last, err := d.scan.ReadEvents(rd, w.From, w.To, d.catchUpBatch)
		return j.end(Result{Events: evs, Last: last, Compacted: compacted, Err: err})
	case core.WorkRecover:
		st, err := recoverIn(ctx, eng, txn)
		return j.end(Result{State: st, Err: err})
	}
	eff, err := Apply(txn, w, d)
	if out, done := Settled(eff, err); done {
		return j.end(Result{Effects: eff, Outcome: out, Err: err})
	}
	j.eff = eff
	return j
}

// end ends the job in StartWork.
func (j *Job) end(r Result) *Job {
	if j.txn != nil {
		j.txn.Rollback()
	}
	j.Done, j.Result = true, r
	return j
}

// Txn is the job's transaction (nil if its begin failed).
func (j *Job) Txn() storage.Txn { return j.txn }

// Commit commits the job's writes, unless ctx is over: past the engine
// deadline a commit could land after a new leader took over, and not
// committing is definite.
func (j *Job) Commit(ctx context.Context) Result {
	defer j.txn.Rollback()
	if err := ctx.Err(); err != nil {
		return Result{Effects: j.eff, Outcome: core.NotApplied, Err: err}
	}
	err := j.txn.Commit(ctx)
	return Result{Effects: j.eff, Outcome: Outcome(err), Err: err}
}

// Abort gives the job up before its commit (err says why).
func (j *Job) Abort(err error) Result {
	j.txn.Rollback()
	return Result{Effects: j.eff, Outcome: core.NotApplied, Err: err}
}

// Settled tells whether an applied work item is over without a commit,
// and how: a failed evaluation or late work was not applied; work that
// writes nothing (a fence that found the revision, an election read)
// needs no commit.
func Settled(eff *core.Effects, err error) (core.Outcome, bool) {
	switch {
	case err != nil || eff.Late:
		return core.NotApplied, true
	case len(eff.Writes) == 0 && eff.Batch == nil:
		return core.Committed, true
	}
	return 0, false
}

// Recover reads the State a new leader starts from. On an engine whose
// transactions leave locks (storage.LockResolver), it first settles those
// of every transaction begun before its own: a predecessor that died
// between prewrite and commit would otherwise hold the keys it wrote, its
// last revision record among them, until the locks' TTL ran out.
func Recover(ctx context.Context, eng storage.Engine) (core.State, error) {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return core.State{}, err
	}
	defer txn.Rollback()
	return recoverIn(ctx, eng, txn)
}

// recoverIn is Recover in txn, begun on eng.
func recoverIn(ctx context.Context, eng storage.Engine, txn storage.Txn) (core.State, error) {
	if r, ok := eng.(storage.LockResolver); ok {
		lower, upper := core.Keyspace()
		if err := r.ResolveLocks(ctx, txn.StartTS(), lower, upper); err != nil {
			return core.State{}, err
		}
	}
	return core.Recover(storage.NewReader(txn))
}

// CatchUp reads the events a catch-up work item asks for.
func CatchUp(ctx context.Context, eng storage.Engine, w *core.Work, limit int) ([]core.Event, int64, error) {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer txn.Rollback()
	return core.ReadEvents(storage.NewReader(txn), w.From, w.To, limit)
}

// ReadPrev reads the previous values the events of wrs lack
// (core.ReadPrevValues), in one engine snapshot, batched where the engine
// can.
func ReadPrev(ctx context.Context, eng storage.Engine, wrs ...*core.WatchResponse) error {
	la := core.PrevLookahead(wrs...)
	if len(la.Gets) == 0 {
		return nil
	}
	txn, err := eng.Begin(ctx)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	rd, err := Reader(txn, la)
	if err != nil {
		return err
	}
	for _, wr := range wrs {
		if err := core.ReadPrevValues(rd, wr); err != nil {
			return err
		}
	}
	return nil
}

// Reader returns the reader to evaluate against txn. On an engine that
// runs reads at once (storage.BatchReader) it first issues la's reads in
// one batch and answers them from memory (and remembers every later
// point read too); elsewhere it reads txn as it is. Nothing may be
// written to txn while it is used.
func Reader(txn storage.Txn, la core.Lookahead) (core.Reader, error) {
	m, err := prefetch(txn, la)
	if m == nil && err == nil {
		return storage.NewReader(txn), nil
	}
	return m, err
}

// prefetch runs la's reads at once if txn can, and returns a memo of
// them (nil if it did not read).
func prefetch(txn storage.Txn, la core.Lookahead) (*memo, error) {
	br, ok := txn.(storage.BatchReader)
	if !ok || len(la.Gets)+len(la.Lasts) == 0 {
		return nil, nil
	}
	m := newMemo(storage.NewReader(txn))
	reads := make([]storage.Read, 0, len(la.Gets)+len(la.Lasts))
	for _, k := range la.Gets {
		reads = append(reads, storage.Read{Key: k})
	}
	for _, b := range la.Lasts {
		reads = append(reads, storage.Read{Key: b.Lower, Upper: b.Upper, Last: true})
	}
	res, err := br.ReadBatch(reads)
	if err != nil {
		return nil, err
	}
	for i, r := range res {
		if !reads[i].Last {
			m.gets[string(reads[i].Key)] = memoGet{r.Value, r.Found}
			continue
		}
		m.lasts = append(m.lasts, memoLast{lower: reads[i].Key, upper: reads[i].Upper, key: r.Key, value: r.Value, found: r.Found})
		if r.Found {
			// The newest record of a key is also what a point read of
			// its version (the value of the latest record) finds.
			m.gets[string(r.Key)] = memoGet{r.Value, true}
		}
	}
	return m, nil
}

// memo answers point reads and last-record reads it has seen before.
type memo struct {
	rd    core.Reader
	gets  map[string]memoGet
	lasts []memoLast
}

func newMemo(rd core.Reader) *memo { return &memo{rd: rd, gets: map[string]memoGet{}} }

type memoGet struct {
	value []byte
	found bool
}

// memoLast is the last record in [lower, upper): key, or none.
type memoLast struct {
	lower, upper, key, value []byte
	found                    bool
}

func (m *memo) Get(key []byte) ([]byte, bool, error) {
	if g, ok := m.gets[string(key)]; ok {
		return g.value, g.found, nil
	}
	v, found, err := m.rd.Get(key)
	if err == nil {
		m.gets[string(key)] = memoGet{v, found}
	}
	return v, found, err
}

func (m *memo) ScanShort(lower, upper []byte, limit, short int, fn func(key, value []byte) bool) error {
	return m.rd.ScanShort(lower, upper, limit, short, fn)
}

func (m *memo) Scan(lower, upper []byte, reverse bool, limit int, fn func(key, value []byte) bool) error {
	if reverse && limit == 1 {
		for _, l := range m.lasts {
			if !bytes.Equal(l.lower, lower) || !bytes.Equal(l.upper, upper) {
				continue
			}
			if !l.found || !fn(l.key, l.value) {
				return nil
			}
			// The caller wants more than the last record: read on below it.
			return m.rd.Scan(lower, l.key, true, limit, fn)
		}
	}
	return m.rd.Scan(lower, upper, reverse, limit, fn)
}
