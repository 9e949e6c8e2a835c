package core

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/pkg/v3/adt"
)

// WatchID names a watch; the driver picks it, unique within the node.
type WatchID int64

// Watch is a watch registration.
type Watch struct {
	ID       WatchID
	Key, End []byte // etcd range conventions
	// StartRev is the first revision to deliver; 0 means after C.
	StartRev        int64
	PrevKV          bool
	NoPut, NoDelete bool
}

// WatchResponse is a batch of events for one watch, or a notice.
type WatchResponse struct {
	ID     WatchID
	Events []*mvccpb.Event
	// Unread lists the Events whose PrevKv lacks the value, which the
	// write did not read: the driver reads them (ReadPrevValues) before
	// it sends the response. Events are shared with the ring and other
	// watchers: they are replaced, never changed.
	Unread []int
	// Revision is the revision the watch is now synced to: it has been
	// sent every event at or below it.
	Revision int64
	// Canceled: the watch ended; CompactRevision is set when it ended
	// because it asked for compacted history.
	Canceled        bool
	CompactRevision int64
	// Progress marks an empty progress notification.
	Progress bool
	// Requested marks the answer to RequestProgress, for all the
	// watches of the request (etcd sends it with watch ID -1).
	Requested bool
}

type watcher struct {
	Watch
	seq      uint64 // registration order
	next     int64  // next revision to deliver, unless live
	catching bool   // a catch-up read is out at the driver
	// live: synced to C and indexed by key; its next revision is C+1,
	// advanced for all live watchers at once, not one by one.
	live    bool
	pending *WatchResponse
}

// watchers are a node's watches. Those synced to C are live: indexed by
// their key or range, so that a committed revision costs the watchers
// its events touch, not every watcher (5,000 idle watchers would
// otherwise each take a step on every write).
type watchers struct {
	compactRev int64 // events with a compacted previous revision lose prev_kv
	byID       map[WatchID]*watcher
	list       []*watcher  // in registration order, for deterministic output
	dirty      []*watcher  // with a pending response
	asked      [][]WatchID // RequestProgress calls not yet answered
	seq        uint64

	keys      map[string][]*watcher // live watchers of one key
	ranges    adt.IntervalTree      // live watchers of a range, a group per interval
	groups    map[[2]string]*rangeGroup
	waiting   []*watcher // neither live nor catching up: starting after C+1
	published int64      // the last revision published
	touched   []*watcher // scratch of publish
}

// rangeGroup holds the live watchers of one interval: the interval tree
// keeps one value per interval.
type rangeGroup struct{ ws []*watcher }

func newWatchers(compacted int64) watchers {
	return watchers{compactRev: compacted, byID: make(map[WatchID]*watcher),
		keys: make(map[string][]*watcher), ranges: adt.NewIntervalTree(), groups: make(map[[2]string]*rangeGroup)}
}

func (w *watcher) matches(ev *mvccpb.Event) bool {
	if (w.NoPut && ev.Type == mvccpb.PUT) || (w.NoDelete && ev.Type == mvccpb.DELETE) {
		return false
	}
	return span{w.Key, w.End}.contains(ev.Kv.Key)
}

// interval is w's range in the interval tree (an empty end, past every
// key, for etcd's "\x00"), and false for a range that holds no key.
func (w *watcher) interval() (adt.Interval, bool) {
	end := w.End
	if isInfinite(end) {
		end = nil
	} else if bytes.Compare(w.Key, end) >= 0 {
		return adt.Interval{}, false
	}
	return adt.NewBytesAffineInterval(w.Key, end), true
}

// goLive indexes w, synced to C.
func (ws *watchers) goLive(w *watcher) {
	w.live = true
	if len(w.End) == 0 {
		ws.keys[string(w.Key)] = append(ws.keys[string(w.Key)], w)
		return
	}
	ivl, ok := w.interval()
	if !ok {
		return
	}
	gk := [2]string{string(w.Key), string(w.End)}
	g := ws.groups[gk]
	if g == nil {
		g = &rangeGroup{}
		ws.groups[gk] = g
		ws.ranges.Insert(ivl, g)
	}
	g.ws = append(g.ws, w)
}

// unindex removes a live w from the index.
func (ws *watchers) unindex(w *watcher) {
	drop := func(list []*watcher) []*watcher {
		return slices.DeleteFunc(list, func(x *watcher) bool { return x == w })
	}
	if len(w.End) == 0 {
		if rest := drop(ws.keys[string(w.Key)]); len(rest) > 0 {
			ws.keys[string(w.Key)] = rest
		} else {
			delete(ws.keys, string(w.Key))
		}
		return
	}
	gk := [2]string{string(w.Key), string(w.End)}
	g := ws.groups[gk]
	if g == nil {
		return
	}
	if g.ws = drop(g.ws); len(g.ws) == 0 {
		delete(ws.groups, gk)
		ivl, _ := w.interval()
		ws.ranges.Delete(ivl)
	}
}

// settle makes w live if it is synced to committed, or lists it as
// waiting if it starts later.
func (ws *watchers) settle(w *watcher, committed int64) {
	switch {
	case w.catching || w.live:
	case w.next == committed+1:
		ws.goLive(w)
	case w.next > committed+1:
		ws.waiting = append(ws.waiting, w)
	}
}

// add queues events of one revision for w, whole or not at all. Like
// etcd, an event whose previous revision is compacted has no prev_kv.
func (ws *watchers) add(w *watcher, rev int64, events []Event) {
	if w.pending == nil {
		w.pending = &WatchResponse{ID: w.ID}
		ws.dirty = append(ws.dirty, w)
	}
	for _, ev := range events {
		if ev.Rev != rev || !w.matches(ev.Event) {
			continue
		}
		e := ev.Event
		switch {
		case e.PrevKv != nil && (!w.PrevKV || rev-1 < ws.compactRev):
			e = &mvccpb.Event{Type: e.Type, Kv: e.Kv}
		case ev.PrevUnread:
			w.pending.Unread = append(w.pending.Unread, len(w.pending.Events))
		}
		w.pending.Events = append(w.pending.Events, e)
	}
	w.pending.Revision = rev
	w.next = rev + 1
}

// publish offers a committed revision to the watchers its events touch;
// the other live watchers move past it silently.
func (ws *watchers) publish(rev int64, events []Event) {
	ws.published = rev
	ws.wake(rev - 1)
	t := ws.touched[:0]
	for _, ev := range events {
		if ev.Rev != rev {
			continue
		}
		key := ev.Event.Kv.Key
		t = append(t, ws.keys[string(key)]...)
		if ws.ranges.Len() == 0 {
			continue // no range watched: skip the tree's three allocations
		}
		ws.ranges.Visit(adt.NewBytesAffinePoint(key), func(iv *adt.IntervalValue) bool {
			t = append(t, iv.Val.(*rangeGroup).ws...)
			return true
		})
	}
	slices.SortFunc(t, func(a, b *watcher) int { return cmp.Compare(a.seq, b.seq) })
	t = slices.Compact(t)
	for _, w := range t {
		ws.add(w, rev, events)
	}
	clear(t)
	ws.touched = t[:0]
}

// wake makes live the waiting watchers that start at committed+1 or
// before (live watchers are synced to C by being live).
func (ws *watchers) wake(committed int64) {
	if len(ws.waiting) == 0 {
		return
	}
	ws.waiting = slices.DeleteFunc(ws.waiting, func(w *watcher) bool {
		if w.next > committed+1 {
			return false
		}
		w.next = committed + 1
		ws.goLive(w)
		return true
	})
}

// flush moves pending responses with events into rd, in registration
// order. Watchers keep up with revisions that had nothing for them
// silently; a live watcher's response says it is synced to the last
// revision published.
func (ws *watchers) flush(rd *Ready) {
	slices.SortFunc(ws.dirty, func(a, b *watcher) int { return cmp.Compare(a.seq, b.seq) })
	for _, w := range ws.dirty {
		if p := w.pending; p != nil && len(p.Events) > 0 {
			if w.live {
				p.Revision = max(p.Revision, ws.published)
			}
			rd.WatchResponses = append(rd.WatchResponses, *p)
		}
		w.pending = nil
	}
	clear(ws.dirty)
	ws.dirty = ws.dirty[:0]
}

// compacted cancels catching-up watchers whose next revision is gone.
func (ws *watchers) compacted(rev int64, rd *Ready) {
	for _, w := range slices.Clone(ws.list) {
		if w.next < rev && w.catching {
			ws.remove(w.ID)
			rd.WatchResponses = append(rd.WatchResponses, WatchResponse{ID: w.ID, Canceled: true, CompactRevision: rev})
		}
	}
}

func (ws *watchers) insert(w *watcher) {
	ws.seq++
	w.seq = ws.seq
	ws.byID[w.ID] = w
	ws.list = append(ws.list, w)
}

func (ws *watchers) remove(id WatchID) bool {
	w, ok := ws.byID[id]
	if !ok {
		return false
	}
	delete(ws.byID, id)
	if w.live {
		ws.unindex(w)
	}
	drop := func(x *watcher) bool { return x == w }
	ws.list = slices.DeleteFunc(ws.list, drop)
	ws.dirty = slices.DeleteFunc(ws.dirty, drop)
	ws.waiting = slices.DeleteFunc(ws.waiting, drop)
	return true
}

// DescribeWatchResponse renders a watch response on one line.
func DescribeWatchResponse(r WatchResponse) string {
	switch {
	case r.Canceled:
		return fmt.Sprintf("watch%d canceled compact=%d", r.ID, r.CompactRevision)
	case r.Progress && r.Requested:
		return fmt.Sprintf("watch%d requested progress r%d", r.ID, r.Revision)
	case r.Progress:
		return fmt.Sprintf("watch%d progress r%d", r.ID, r.Revision)
	}
	s := fmt.Sprintf("watch%d r%d", r.ID, r.Revision)
	for _, e := range r.Events {
		s += fmt.Sprintf(" [%s %q]", e.Type, e.Kv.Key)
	}
	return s
}

// AddWatch registers a watch on the node's hub (Hub.AddWatch).
func (n *Node) AddWatch(w Watch) error { return n.hub.AddWatch(w) }

// CancelWatch removes a watch from the node's hub (Hub.CancelWatch).
func (n *Node) CancelWatch(id WatchID) bool { return n.hub.CancelWatch(id) }

// Progress is the node's hub's Progress.
func (n *Node) Progress(ids ...WatchID) (rev int64, ok bool) { return n.hub.Progress(ids...) }

// RequestProgress is the node's hub's RequestProgress.
func (n *Node) RequestProgress(ids ...WatchID) bool { return n.hub.RequestProgress(ids...) }
