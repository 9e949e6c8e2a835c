package core

import (
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Hub serves watches from a stream of committed revisions, each given
// whole and in order: the node's own commits (a leader's node serves the
// watches that feed every member's hub), or, in a member's hub, the
// revisions that feed brings, on a leader and a follower alike. It keeps
// the recent events in a Ring and reads older ones through catch-up work.
// Like Node it is a pure state machine: not safe for concurrent use, no
// clock, no IO.
type Hub struct {
	// committed is the revision the hub is synced to: every event at or
	// below it has been published.
	committed int64
	compacted int64
	ring      *Ring
	watch     watchers
	batch     int   // Config.CatchUpBatch
	term      int64 // the node's term in its catch-up work
	ready     *Ready
	own       Ready // where a member's hub collects its outputs
}

// NewHub returns a member's hub synced to committed, with history below
// compacted gone. It uses cfg's ring bounds and catch-up batch.
func NewHub(cfg Config, committed, compacted int64) *Hub {
	h := newHub(cfg.withDefaults(), committed, compacted)
	h.ready = &h.own
	return h
}

func newHub(cfg Config, committed, compacted int64) *Hub {
	h := &Hub{committed: committed, compacted: compacted, ring: NewRing(cfg.RingSize, committed+1),
		watch: newWatchers(compacted), batch: cfg.CatchUpBatch, term: cfg.Term}
	h.ring.SetByteLimit(cfg.RingBytes)
	return h
}

// Committed is the revision the hub is synced to.
func (h *Hub) Committed() int64 { return h.committed }

// Compacted is the compact revision the hub knows.
func (h *Hub) Compacted() int64 { return h.compacted }

// FeedEvents returns wr's events as a feed carries them: an event whose
// previous value was not read (wr.Unread) is replaced by a copy whose
// PrevKv's Version is negated (a version is never below 1). Publish takes
// it back as Event.PrevUnread, so that the value is read only where a
// watcher wants it.
func FeedEvents(wr WatchResponse) []*mvccpb.Event {
	if len(wr.Unread) == 0 {
		return wr.Events
	}
	evs := slices.Clone(wr.Events)
	for _, i := range wr.Unread {
		ev := evs[i]
		evs[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv, PrevKv: negateVersion(ev.PrevKv)}
	}
	return evs
}

// negateVersion is a copy of kv with its version negated.
func negateVersion(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: -kv.Version, Value: kv.Value, Lease: kv.Lease}
}

// feedEvent is the Event of a revision a feed brought (FeedEvents).
func feedEvent(rev int64, e *mvccpb.Event) Event {
	if p := e.PrevKv; p == nil || p.Version >= 0 {
		return Event{Rev: rev, Event: e}
	}
	return Event{Rev: rev, Event: &mvccpb.Event{Type: e.Type, Kv: e.Kv, PrevKv: negateVersion(e.PrevKv)}, PrevUnread: true}
}

// Publish takes the events of the revisions after Committed up to synced,
// ordered by revision (each event's Kv.ModRevision is its revision, as in
// etcd), with every revision whole, and hands them to the watches; an
// event's previous value may be unread (FeedEvents). Revisions at or
// below Committed are skipped: a feed resumed from its last revision may
// bring some twice. compacted is the feed's compact revision (0: unknown).
func (h *Hub) Publish(events []*mvccpb.Event, synced, compacted int64) {
	for len(events) > 0 {
		rev := events[0].Kv.ModRevision
		i := 0
		for i < len(events) && events[i].Kv.ModRevision == rev {
			i++
		}
		if rev > h.committed {
			evs := make([]Event, i)
			for j, e := range events[:i] {
				evs[j] = feedEvent(rev, e)
			}
			h.committed = rev
			h.publish(rev, evs)
		}
		events = events[i:]
	}
	h.Compact(compacted)
	h.advance(synced)
}

// Compact learns that history below rev is gone: watches catching up
// from below it are canceled, as etcd cancels them.
func (h *Hub) Compact(rev int64) {
	if rev <= h.compacted {
		return
	}
	h.compacted = rev
	h.watch.compactRev = rev
	// A hub behind the compaction keeps claiming what it has: its feed
	// still brings the revisions up to rev.
	h.ring.Compact(min(rev, h.committed+1))
	h.watch.compacted(rev, h.ready)
}

// Restart resumes the hub at compacted, its feed's history below it gone
// before the hub had it: the watches that needed some of it are canceled
// with compacted as their compact revision (their clients list again, as
// after etcd cancels a watch for compaction), the others go on, and the
// hub is synced to compacted-1.
func (h *Hub) Restart(compacted int64) {
	for _, w := range slices.Clone(h.watch.list) {
		next := w.next
		if w.live {
			next = h.committed + 1
		}
		if next < compacted {
			h.watch.remove(w.ID)
			h.ready.WatchResponses = append(h.ready.WatchResponses, WatchResponse{ID: w.ID, Canceled: true, CompactRevision: compacted})
		}
	}
	h.Compact(compacted)
	h.committed = max(h.committed, compacted-1)
	h.ring.Compact(h.committed + 1)
	h.advance(h.committed)
}

// publish hands one committed revision's events to the ring and the
// watches; committed is rev already.
func (h *Hub) publish(rev int64, events []Event) {
	for i := range events {
		h.ring.fillPrev(&events[i])
		h.ring.Append(events[i])
	}
	h.watch.publish(rev, events)
}

// advance syncs the hub to rev: the revisions after the last published
// up to rev had no events, or the caller published them.
func (h *Hub) advance(rev int64) {
	h.committed = max(h.committed, rev)
	h.watch.wake(h.committed)
	h.watch.flush(h.ready)
}

// Ready returns a member's hub's outputs since the last call: watch
// responses and catch-up work (Done takes its result).
func (h *Hub) Ready() Ready {
	h.prepare()
	rd := h.own
	rd.Committed = h.committed
	h.own = Ready{}
	return rd
}

// prepare answers the progress requests that can be, before outputs go.
func (h *Hub) prepare() {
	if len(h.watch.asked) > 0 {
		h.watch.flush(h.ready)
		h.answerProgress()
	}
}

// Done takes a catch-up work item's result.
func (h *Hub) Done(w *Work, r Result) {
	if w.Kind == WorkCatchUp {
		h.Compact(r.Compacted)
		h.catchUpDone(w, r.Events, r.Last, r.Err)
	}
}

// AddWatch registers a watch. Events from its start revision arrive as
// WatchResponses; from history older than the ring via catch-up work.
// A start revision below the compact revision cancels it at once with
// CompactRevision set, as etcd does.
func (h *Hub) AddWatch(w Watch) error {
	if _, ok := h.watch.byID[w.ID]; ok {
		return ErrWatcherExists
	}
	if len(w.Key) == 0 {
		return ErrEmptyKey
	}
	if w.StartRev > 0 && w.StartRev < h.compacted {
		h.ready.WatchResponses = append(h.ready.WatchResponses, WatchResponse{ID: w.ID, Canceled: true, CompactRevision: h.compacted})
		return nil
	}
	wt := &watcher{Watch: w, next: w.StartRev}
	if wt.next <= 0 {
		wt.next = h.committed + 1
	}
	h.watch.insert(wt)
	h.syncWatcher(wt)
	h.watch.flush(h.ready)
	return nil
}

// syncWatcher brings a watcher from its next revision up to C: from the
// ring if it still holds that history, else by a catch-up read.
func (h *Hub) syncWatcher(w *watcher) {
	defer h.watch.settle(w, h.committed)
	if w.next > h.committed {
		return
	}
	events, ok := h.ring.Since(w.next)
	if !ok {
		w.catching = true
		to := min(h.committed, w.next+int64(h.batch)-1)
		h.ready.Work = append(h.ready.Work, &Work{Kind: WorkCatchUp, Watch: w.ID, From: w.next, To: to, Compacted: h.compacted, Term: h.term})
		return
	}
	h.addEvents(w, events)
	if w.next <= h.committed {
		// Revisions up to C without events for anyone.
		if w.pending == nil {
			w.pending = &WatchResponse{ID: w.ID}
			h.watch.dirty = append(h.watch.dirty, w)
		}
		w.pending.Revision = h.committed
		w.next = h.committed + 1
	}
}

// addEvents queues events, ordered by revision, for w, a revision at a
// time.
func (h *Hub) addEvents(w *watcher, events []Event) {
	for len(events) > 0 {
		rev := events[0].Rev
		i := 0
		for i < len(events) && events[i].Rev == rev {
			i++
		}
		h.watch.add(w, rev, events[:i])
		events = events[i:]
	}
}

// catchUpDone takes what a catch-up read found: the events of revisions
// From..last, read by ReadEvents. err reports a failed read, which is
// retried.
func (h *Hub) catchUpDone(cw *Work, events []Event, last int64, err error) {
	w := h.watch.byID[cw.Watch]
	if w == nil || !w.catching || w.next != cw.From {
		return // canceled meanwhile
	}
	if cw.From < h.compacted {
		h.watch.remove(w.ID)
		h.ready.WatchResponses = append(h.ready.WatchResponses, WatchResponse{ID: w.ID, Canceled: true, CompactRevision: h.compacted})
		return
	}
	if err != nil {
		h.ready.Work = append(h.ready.Work, &Work{Kind: WorkCatchUp, Watch: w.ID, From: cw.From, To: cw.To, Compacted: h.compacted, Term: cw.Term, Attempt: cw.Attempt + 1})
		return
	}
	h.addEvents(w, events)
	w.next = last + 1
	if w.pending != nil {
		w.pending.Revision = last
	}
	w.catching = false
	h.syncWatcher(w)
	h.watch.flush(h.ready)
}

// CancelWatch removes a watch. It reports whether the watch existed.
func (h *Hub) CancelWatch(id WatchID) bool {
	return h.watch.remove(id)
}

// Progress reports the revision every given watch is synced to, if all
// of them are synced: each has been handed every event up to C. The
// driver must deliver earlier WatchResponses first; then a progress
// notification at this revision never runs ahead of delivered events.
func (h *Hub) Progress(ids ...WatchID) (rev int64, ok bool) {
	for _, id := range ids {
		w := h.watch.byID[id]
		if w == nil {
			continue
		}
		if !w.live && (w.catching || w.next <= h.committed) {
			return 0, false
		}
	}
	return h.committed, true
}

// RequestProgress asks for etcd's RequestProgress answer covering the
// watches ids (one stream's): once every one of them is synced, Ready
// carries a WatchResponse{Progress, Requested} at C for one of them,
// after every event it covers. It reports false and asks nothing when
// none of ids is registered: the driver may answer at C at once.
func (h *Hub) RequestProgress(ids ...WatchID) bool {
	live := h.watch.registered(ids)
	if len(live) == 0 {
		return false
	}
	h.watch.asked = append(h.watch.asked, live)
	return true
}

// registered keeps the ids of ids that are registered watches.
func (ws *watchers) registered(ids []WatchID) []WatchID {
	live := make([]WatchID, 0, len(ids))
	for _, id := range ids {
		if ws.byID[id] != nil {
			live = append(live, id)
		}
	}
	return live
}

// answerProgress answers the RequestProgress calls whose watches are
// all synced now; a call whose watches are all gone is dropped.
func (h *Hub) answerProgress() {
	ws := &h.watch
	kept := ws.asked[:0]
	for _, ids := range ws.asked {
		// In place: the hub owns each asked list (RequestProgress), and
		// this runs at every step while a list waits.
		live := slices.DeleteFunc(ids, func(id WatchID) bool { return ws.byID[id] == nil })
		if len(live) == 0 {
			continue
		}
		rev, ok := h.Progress(live...)
		if !ok {
			kept = append(kept, live)
			continue
		}
		h.ready.WatchResponses = append(h.ready.WatchResponses, WatchResponse{ID: live[0], Progress: true, Requested: true, Revision: rev})
	}
	clear(ws.asked[len(kept):])
	ws.asked = kept
}

// Watches is how many watches the hub serves.
func (h *Hub) Watches() int { return len(h.watch.list) }

// RingStats reports what the ring holds and has evicted.
func (h *Hub) RingStats() (events int, bytes, evicted int64) {
	return h.ring.Len(), h.ring.Bytes(), h.ring.evicted
}

// Invariants checks the hub's consistency: the ring holds nothing past
// C, in order, and every watch synced to C is live.
func (h *Hub) Invariants() error {
	if h.ring.First() > h.committed+1 {
		return fmt.Errorf("ring claims events from r%d beyond C=%d", h.ring.First(), h.committed)
	}
	var last int64
	for i := 0; i < h.ring.Len(); i++ {
		ev := h.ring.at(i)
		if ev.Rev < last || ev.Rev > h.committed {
			return fmt.Errorf("ring event r%d after r%d (C=%d)", ev.Rev, last, h.committed)
		}
		last = ev.Rev
	}
	for _, w := range h.watch.list {
		switch {
		case w.live && w.catching:
			return fmt.Errorf("watch%d live while catching up", w.ID)
		case !w.live && !w.catching && w.next <= h.committed+1:
			return fmt.Errorf("watch%d synced at next r%d (C=%d) but not live", w.ID, w.next, h.committed)
		}
	}
	return nil
}
