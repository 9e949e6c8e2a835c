package core

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Latches order requests whose keys overlap (docs/design.md, "Latches").
// Without them the leader deals revisions to every request on a hot key
// at once; all but one find the key changed under them, come back late or
// conflicted, are fenced and dealt again, and under enough contention
// give up. With them a request whose keys overlap an earlier request
// still in flight waits, undealt, until that request's outcome is known;
// the engine's conflict check stays the safety net.
//
// Latches are exclusive and granted in arrival order (first come, first
// served per key), as CockroachDB's spanlatch manager and TiKV's scheduler
// latches do: a request waits for every earlier latch it overlaps, so the
// waits form no cycle. A request keeps its latch across the revisions it
// is dealt (a retry after a no-op keeps its place) and releases it when
// its outcome is final: applied, or answered with an error.

// latch is one request's claim on the keys its evaluation reads or writes
// at the latest revision.
type latch struct {
	seq   uint64
	keys  [][]byte // single keys
	spans []span   // ranges [key, end)
	// all claims every key: a lease revoke, whose keys are known only
	// when it runs.
	all bool
	// waiting counts earlier latches it overlaps that are not released.
	waiting int
	// blocks lists later latches waiting for this one.
	blocks []*latch
	// work is the request to deal once waiting reaches zero; nil once
	// dealt (or answered without being dealt).
	work *Work
	// mark dedups the latches a new one waits for.
	mark uint64
	// batches names every batch work the latch was granted in (by the
	// seq of its first latch). Granted latches that shared a batch may
	// overlap: their requests run in order in one engine transaction,
	// and after it fails one may be dealt again while another's outcome
	// is still being fenced (the engine's conflict check orders them).
	batches  []uint64
	released bool
}

func (l *latch) sharesBatch(o *latch) bool {
	for _, b := range l.batches {
		if slices.Contains(o.batches, b) {
			return true
		}
	}
	return false
}

func (l *latch) overlapsKey(k []byte) bool {
	return l.all || anyContains(l.spans, k)
}

func (l *latch) overlapsSpan(s span) bool {
	if l.all {
		return true
	}
	for _, t := range l.spans {
		if spansOverlap(s, t) {
			return true
		}
	}
	return false
}

// spansOverlap reports whether two ranges (end non-empty) share a key.
func spansOverlap(a, b span) bool {
	below := func(key, end []byte) bool { return isInfinite(end) || bytes.Compare(key, end) < 0 }
	return below(a.key, b.end) && below(b.key, a.end)
}

// latches is the table of latches not yet released.
type latches struct {
	seq uint64
	// byKey lists the latches on each single key, oldest first. A
	// newcomer waits for all of them, not just the newest, so that one
	// withdrawn while still waiting (a drain) lets no one through early.
	byKey map[string][]*latch
	// ranged lists latches with spans or all, oldest first.
	ranged []*latch
	// live holds every latch not yet released (a revoke waits for all).
	live map[*latch]struct{}
	// missRangeStart is the planted LatchMissesRangeStart.
	missRangeStart bool
}

func newLatches(missRangeStart bool) latches {
	return latches{byKey: map[string][]*latch{}, live: map[*latch]struct{}{}, missRangeStart: missRangeStart}
}

// acquire enters a latch for w's keys (all: every key) and reports whether
// w may be dealt now; otherwise w waits in the latch until release hands
// it back.
func (ls *latches) acquire(w *Work, all bool) bool {
	ls.seq++
	l := &latch{seq: ls.seq, all: all}
	if !all {
		l.keys, l.spans = footprint(w.Request, make([][]byte, 0, 4), nil)
		// A key named twice (a create compares, puts and, failing,
		// gets one key) needs one entry: each costs map work in
		// acquire and in release.
		if len(l.keys) > 1 {
			slices.SortFunc(l.keys, bytes.Compare)
			l.keys = slices.CompactFunc(l.keys, bytes.Equal)
		}
	}
	wait := func(e *latch) {
		if e.mark != l.seq {
			e.mark = l.seq
			e.blocks = append(e.blocks, l)
			l.waiting++
		}
	}
	if all {
		for e := range ls.live {
			wait(e)
		}
	} else {
		for _, k := range l.keys {
			for _, e := range ls.byKey[string(k)] {
				wait(e)
			}
			for _, e := range ls.ranged {
				if e.overlapsKey(k) {
					wait(e)
				}
			}
		}
		for _, s := range l.spans {
			for k, es := range ls.byKey {
				if s.contains([]byte(k)) && !(ls.missRangeStart && k == string(s.key)) {
					for _, e := range es {
						wait(e)
					}
				}
			}
			for _, e := range ls.ranged {
				if e.overlapsSpan(s) {
					wait(e)
				}
			}
		}
	}
	for _, k := range l.keys {
		if es := ls.byKey[string(k)]; len(es) == 0 || es[len(es)-1] != l {
			ls.byKey[string(k)] = append(es, l)
		}
	}
	if all || len(l.spans) > 0 {
		ls.ranged = append(ls.ranged, l)
	}
	ls.live[l] = struct{}{}
	w.latch = l
	if l.waiting > 0 {
		l.work = w
		return false
	}
	return true
}

// release drops l and returns the work of the latches that no longer
// wait, oldest first. Releasing twice is harmless.
func (ls *latches) release(l *latch) []*Work {
	if l == nil || l.released {
		return nil
	}
	l.released = true
	delete(ls.live, l)
	for _, k := range l.keys {
		es := ls.byKey[string(k)]
		i := slices.Index(es, l)
		switch {
		case len(es) == 0:
			delete(ls.byKey, string(k))
		case i < 0:
		case len(es) == 1:
			delete(ls.byKey, string(k))
		default:
			ls.byKey[string(k)] = slices.Delete(es, i, i+1)
		}
	}
	if i := slices.Index(ls.ranged, l); i >= 0 {
		ls.ranged = slices.Delete(ls.ranged, i, i+1)
	}
	var ready []*latch
	for _, b := range l.blocks {
		if b.waiting == 0 {
			continue // granted, with l in its batch: waits for nothing
		}
		if b.waiting--; b.waiting == 0 && b.work != nil {
			ready = append(ready, b)
		}
	}
	l.blocks = nil
	slices.SortFunc(ready, bySeq)
	out := make([]*Work, len(ready))
	for i, b := range ready {
		out[i], b.work = b.work, nil
	}
	return out
}

// follow grants, with w's latch, the latches that wait only for it and
// for each other, oldest first and up to max in all, whose work ok
// accepts. It returns their work after w's, in arrival order (which is a
// valid evaluation order: a latch waits only for older ones), or nil if
// none follows.
func (ls *latches) follow(w *Work, max int, ok func(*Work) bool) []*Work {
	first := w.latch
	group := []*latch{first}
	seen := map[*latch]int{}
	for i := 0; i < len(group) && len(group) < max; i++ {
		for _, b := range slices.SortedFunc(slices.Values(group[i].blocks), bySeq) {
			if b.work == nil || !ok(b.work) {
				continue
			}
			if seen[b]++; seen[b] == b.waiting && len(group) < max {
				group = append(group, b)
			}
		}
	}
	if len(group) == 1 {
		return nil
	}
	slices.SortFunc(group, bySeq)
	out := make([]*Work, len(group))
	for i, l := range group {
		l.batches = append(l.batches, first.seq)
		if l == first {
			out[i] = w
			continue
		}
		out[i], l.work, l.waiting = l.work, nil, 0
	}
	return out
}

// regrant is called before a request is dealt again: were it granted in a
// batch, the earlier requests of the batch it overlaps may be dealt again
// too, and the retries must not race. It waits for every earlier latch it
// overlaps that is not released (each lists it in blocks, from acquire),
// and reports whether w may be dealt now; otherwise w waits in the latch
// until release hands it back.
func (ls *latches) regrant(w *Work) bool {
	l := w.latch
	if l == nil || len(l.batches) == 0 {
		return true // granted alone: every latch it waited for is gone
	}
	for e := range ls.live {
		if e != l && slices.Contains(e.blocks, l) {
			l.waiting++
		}
	}
	if l.waiting > 0 {
		l.work = w
		return false
	}
	return true
}

func bySeq(a, b *latch) int { return cmp.Compare(a.seq, b.seq) }

// takeWaiting returns the work still waiting in latches, oldest first, and
// forgets it (the latches stay until released).
func (ls *latches) takeWaiting() []*Work {
	var ws []*latch
	for l := range ls.live {
		if l.work != nil {
			ws = append(ws, l)
		}
	}
	slices.SortFunc(ws, bySeq)
	out := make([]*Work, len(ws))
	for i, l := range ws {
		out[i], l.work = l.work, nil
	}
	return out
}

// footprint appends the single keys and ranges a request reads or writes
// at the latest revision. Reads at an explicit revision read history,
// which no later write changes, and need no latch. Both branches of a txn
// count: which runs is known only at evaluation.
func footprint(op *pb.RequestOp, keys [][]byte, spans []span) ([][]byte, []span) {
	add := func(key, end []byte) {
		if len(end) == 0 {
			keys = append(keys, key)
		} else {
			spans = append(spans, span{key: key, end: end})
		}
	}
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		add(tv.RequestPut.GetKey(), nil)
	case *pb.RequestOp_RequestDeleteRange:
		add(tv.RequestDeleteRange.GetKey(), tv.RequestDeleteRange.GetRangeEnd())
	case *pb.RequestOp_RequestRange:
		if tv.RequestRange.GetRevision() <= 0 {
			add(tv.RequestRange.GetKey(), tv.RequestRange.GetRangeEnd())
		}
	case *pb.RequestOp_RequestTxn:
		for _, c := range tv.RequestTxn.GetCompare() {
			add(c.GetKey(), c.GetRangeEnd())
		}
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.GetSuccess(), tv.RequestTxn.GetFailure()} {
			for _, o := range ops {
				keys, spans = footprint(o, keys, spans)
			}
		}
	}
	return keys, spans
}

// check verifies the latch table: waiting latches wait for something, and
// no two granted latches overlap (the guarantee latches exist for).
func (ls *latches) check() error {
	var granted []*latch
	for l := range ls.live {
		switch {
		case l.work != nil && l.waiting == 0:
			return fmt.Errorf("latch %d waits for nothing but was not granted", l.seq)
		case l.work == nil && l.waiting != 0:
			return fmt.Errorf("latch %d granted while waiting for %d", l.seq, l.waiting)
		case l.work == nil:
			granted = append(granted, l)
		}
	}
	slices.SortFunc(granted, bySeq)
	holder := map[string]*latch{}
	for _, l := range granted {
		for _, k := range l.keys {
			if h := holder[string(k)]; h != nil && h != l && !l.sharesBatch(h) {
				return fmt.Errorf("latches %d and %d both hold %q", h.seq, l.seq, k)
			}
			holder[string(k)] = l
		}
	}
	for _, r := range granted {
		if !r.all && len(r.spans) == 0 {
			continue
		}
		for _, o := range granted {
			if o == r || r.sharesBatch(o) {
				continue
			}
			overlap := o.all
			for _, k := range o.keys {
				overlap = overlap || r.overlapsKey(k)
			}
			for _, s := range o.spans {
				overlap = overlap || r.overlapsSpan(s)
			}
			if overlap {
				return fmt.Errorf("granted latches %d and %d overlap", r.seq, o.seq)
			}
		}
	}
	return nil
}
