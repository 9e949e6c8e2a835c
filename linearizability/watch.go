package linearizability

import (
	"bytes"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Event is one committed change at revision Rev, with its previous
// key-value. It has core.Event's shape, so one converts to the other.
type Event struct {
	Rev int64
	*mvccpb.Event
}

// WatchSpec is what a watcher asked for.
type WatchSpec struct {
	Key, End []byte // etcd range conventions
	// StartRev is the first revision wanted; 0 means "from now", which
	// the checker cannot know: it takes the first thing the watcher got.
	StartRev        int64
	PrevKV          bool
	NoPut, NoDelete bool
	// Compacted bounds the compact revision while the watch ran: like
	// etcd, an event whose previous revision is compacted may come
	// without prev_kv.
	Compacted int64
}

// Received is one watch response as the client saw it.
type Received struct {
	Events          []*mvccpb.Event
	HeaderRev       int64
	Progress        bool
	Canceled        bool
	CompactRevision int64
}

func (w WatchSpec) matches(ev *mvccpb.Event) bool {
	if (w.NoPut && ev.Type == mvccpb.PUT) || (w.NoDelete && ev.Type == mvccpb.DELETE) {
		return false
	}
	return InSpan(ev.Kv.Key, w.Key, w.End)
}

// InSpan reports whether k is in etcd's range [key, end): end empty is
// key alone, "\x00" every key from key on.
func InSpan(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	}
	return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
}

// CheckWatch checks one watcher's stream against the committed history
// (every applied event, in revision order) and returns the first
// violation of etcd's watch guarantees, or nil.
func CheckWatch(committed []Event, w WatchSpec, got []Received) error {
	for i, ev := range committed {
		if ev.Event == nil || ev.Kv == nil || ev.Kv.ModRevision != ev.Rev {
			return fmt.Errorf("committed[%d]: malformed event (mod_revision must equal Rev %d)", i, ev.Rev)
		}
		if i > 0 && ev.Rev < committed[i-1].Rev {
			return fmt.Errorf("committed[%d]: r%d after r%d: history not in revision order", i, ev.Rev, committed[i-1].Rev)
		}
	}
	c := watchCheck{committed: committed, w: w}
	if w.StartRev > 0 {
		c.begin(w.StartRev)
	}
	for i, r := range got {
		if err := c.response(r); err != nil {
			return fmt.Errorf("watch response %d: %w", i, err)
		}
	}
	return nil
}

type watchCheck struct {
	committed []Event
	w         WatchSpec
	started   bool
	start     int64
	matching  []Event // committed events the watcher must get, in order
	next      int     // index in matching of the next event due
	lastRev   int64   // revision of the last event delivered
	progress  int64   // highest progress revision announced
	header    int64
	canceled  bool
}

func (c *watchCheck) begin(start int64) {
	c.started, c.start = true, start
	for _, ev := range c.committed {
		if ev.Rev >= start && c.w.matches(ev.Event) {
			c.matching = append(c.matching, ev)
		}
	}
}

func (c *watchCheck) response(r Received) error {
	if c.canceled {
		return fmt.Errorf("response after the watch was canceled")
	}
	if r.HeaderRev != 0 {
		if r.HeaderRev < c.header {
			return fmt.Errorf("header revision r%d went back from r%d", r.HeaderRev, c.header)
		}
		c.header = r.HeaderRev
	}
	switch {
	case r.Canceled:
		return c.cancel(r)
	case r.Progress:
		return c.progressed(r)
	}
	if len(r.Events) == 0 {
		return nil
	}
	if !c.started {
		c.begin(r.Events[0].GetKv().GetModRevision())
	}
	for j, e := range r.Events {
		if err := c.event(e); err != nil {
			return fmt.Errorf("event %d: %w", j, err)
		}
	}
	if r.HeaderRev != 0 && r.HeaderRev < c.lastRev {
		return fmt.Errorf("header revision r%d is below its events (r%d)", r.HeaderRev, c.lastRev)
	}
	// Atomic: the response must hold every matching event of its last
	// revision.
	if c.next < len(c.matching) && c.matching[c.next].Rev == c.lastRev {
		return fmt.Errorf("not atomic: revision r%d split across responses (%s comes later or never)", c.lastRev, describeEvent(c.matching[c.next].Event))
	}
	return nil
}

func (c *watchCheck) cancel(r Received) error {
	c.canceled = true
	if len(r.Events) > 0 {
		return fmt.Errorf("canceled response carries %d events", len(r.Events))
	}
	if r.CompactRevision == 0 {
		return nil
	}
	if !c.started {
		return nil // started "now" and got nothing: no way to tell
	}
	// etcd cancels for compaction only a watcher that still needs a
	// compacted revision.
	if need := max(c.start, c.lastRev+1, c.progress+1); need >= r.CompactRevision {
		return fmt.Errorf("canceled for compaction at r%d, but the watcher needed only r%d on", r.CompactRevision, need)
	}
	return nil
}

func (c *watchCheck) progressed(r Received) error {
	if len(r.Events) > 0 {
		return fmt.Errorf("progress notification carries %d events", len(r.Events))
	}
	p := r.HeaderRev
	if !c.started {
		c.begin(p + 1)
	}
	if p < c.lastRev {
		return fmt.Errorf("progress r%d is behind delivered event r%d", p, c.lastRev)
	}
	if c.next < len(c.matching) && c.matching[c.next].Rev <= p {
		ev := c.matching[c.next]
		return fmt.Errorf("progress r%d ahead of events: %s not delivered yet", p, describeEvent(ev.Event))
	}
	c.progress = max(c.progress, p)
	return nil
}

// event checks one delivered event: it must be exactly the next matching
// committed event; otherwise say which guarantee it breaks.
func (c *watchCheck) event(e *mvccpb.Event) error {
	if e == nil || e.Kv == nil {
		return fmt.Errorf("event without a key-value")
	}
	rev := e.Kv.ModRevision
	if c.next < len(c.matching) && sameIdentity(c.matching[c.next], e) {
		want := c.matching[c.next]
		c.next++
		c.lastRev = rev
		return c.content(want, e)
	}
	for _, ev := range c.matching[:c.next] {
		if sameIdentity(ev, e) {
			return fmt.Errorf("not unique: %s delivered again", describeEvent(e))
		}
	}
	if rev < c.lastRev {
		return fmt.Errorf("not ordered: %s after r%d", describeEvent(e), c.lastRev)
	}
	if rev <= c.progress {
		return fmt.Errorf("not ordered: %s after progress r%d", describeEvent(e), c.progress)
	}
	for _, ev := range c.matching[c.next:] {
		if sameIdentity(ev, e) {
			return fmt.Errorf("not reliable: %s delivered but %s is missing (gap or reorder)", describeEvent(e), describeEvent(c.matching[c.next].Event))
		}
	}
	for _, ev := range c.committed {
		if !sameIdentity(ev, e) {
			continue
		}
		if !c.w.matches(e) {
			return fmt.Errorf("filter violated: %s does not match the watch", describeEvent(e))
		}
		return fmt.Errorf("not resumable: %s is before start r%d", describeEvent(e), c.start)
	}
	return fmt.Errorf("%s was never committed", describeEvent(e))
}

func sameIdentity(ev Event, e *mvccpb.Event) bool {
	return ev.Rev == e.Kv.ModRevision && ev.Type == e.Type && bytes.Equal(ev.Kv.Key, e.Kv.Key)
}

func (c *watchCheck) content(want Event, e *mvccpb.Event) error {
	if !kvEqual(want.Kv, e.Kv) {
		return fmt.Errorf("wrong key-value: got %s, committed %s", describeKV(e.Kv), describeKV(want.Kv))
	}
	if e.Type == mvccpb.PUT && (e.Kv.Version == 1) != e.IsCreate() {
		return fmt.Errorf("IsCreate wrong: %s has version %d but create_revision r%d", describeEvent(e), e.Kv.Version, e.Kv.CreateRevision)
	}
	switch {
	case !c.w.PrevKV && e.PrevKv != nil:
		return fmt.Errorf("prev_kv not asked for but delivered with %s", describeEvent(e))
	case c.w.PrevKV && e.PrevKv == nil && want.PrevKv != nil && want.Rev-1 < c.w.Compacted:
		// The previous revision was compacted: etcd sends none.
	case c.w.PrevKV && e.PrevKv == nil && want.PrevKv != nil:
		return fmt.Errorf("prev_kv missing from %s (committed %s)", describeEvent(e), describeKV(want.PrevKv))
	case c.w.PrevKV && !kvEqual(want.PrevKv, e.PrevKv):
		return fmt.Errorf("wrong prev_kv on %s: got %s, committed %s", describeEvent(e), describeMaybeKV(e.PrevKv), describeMaybeKV(want.PrevKv))
	case e.IsCreate() && e.PrevKv != nil:
		return fmt.Errorf("create %s carries a prev_kv", describeEvent(e))
	}
	return nil
}

func describeEvent(e *mvccpb.Event) string {
	if e.Type == mvccpb.DELETE {
		return fmt.Sprintf("delete %q r%d", e.Kv.Key, e.Kv.ModRevision)
	}
	return fmt.Sprintf("put %q=%s r%d", e.Kv.Key, short(e.Kv.Value), e.Kv.ModRevision)
}

func describeMaybeKV(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "none"
	}
	return describeKV(kv)
}
