package core

import (
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Previous values are read where they are wanted, as etcd reads them: a
// write reads its key's latest record (the metadata of the version it
// replaces) but not that version's value, a second read of a history
// record, unless its own answer or compares need it (prev_kv, a compare
// on the value, ignore_value). Its event then carries the previous
// version's metadata with the value unread (Event.PrevUnread). The value
// is filled in, without IO, from the ring when the ring holds the
// previous version's own event (Ring.fillPrev, at commit); otherwise a
// watcher that asked for prev_kv gets a response listing the events to
// fill (WatchResponse.Unread), and the driver reads them from the engine
// before it sends it (ReadPrevValues), off the write path, for all the
// responses a stream has queued in one snapshot. A previous version
// compacted by then is dropped, as etcd drops it.

// fillPrev fills ev's unread previous value from the ring, if the ring
// holds the event that wrote that version.
func (r *Ring) fillPrev(ev *Event) {
	if !ev.PrevUnread {
		return
	}
	if v, ok := r.valueAt(ev.PrevKv.Key, ev.PrevKv.ModRevision); ok {
		ev.PrevKv.Value, ev.PrevUnread = v, false
	}
}

// valueAt returns the value key was put with at rev, if the ring holds
// that event.
func (r *Ring) valueAt(key []byte, rev int64) ([]byte, bool) {
	if rev < r.first || r.n == 0 {
		return nil, false
	}
	for i := sort.Search(r.n, func(i int) bool { return r.at(i).Rev >= rev }); i < r.n && r.at(i).Rev == rev; i++ {
		if ev := r.at(i); ev.Type == mvccpb.PUT && string(ev.Kv.Key) == string(key) {
			return ev.Kv.Value, true
		}
	}
	return nil, false
}

// PrevLookahead predicts the reads of ReadPrevValues for wrs.
func PrevLookahead(wrs ...*WatchResponse) Lookahead {
	var la Lookahead
	for _, wr := range wrs {
		for _, i := range wr.Unread {
			p := wr.Events[i].PrevKv
			la.Gets = append(la.Gets, HistoryKey(p.Key, p.ModRevision))
		}
	}
	return la
}

// ReadPrevValues reads from rd the previous values wr's events lack
// (WatchResponse.Unread), replacing each such event by a copy with the
// value; wr then lists nothing unread. A previous version whose history
// record is gone was compacted (the sweep deletes a version only once a
// newer one at or below the compact revision supersedes it, and the
// event's own is one): its event goes without prev_kv, as etcd sends it.
func ReadPrevValues(rd Reader, wr *WatchResponse) error {
	if len(wr.Unread) == 0 {
		return nil
	}
	events := append([]*mvccpb.Event(nil), wr.Events...)
	for _, i := range wr.Unread {
		ev := events[i]
		p := ev.PrevKv
		v, ok, err := historyValue(rd, p.Key, p.ModRevision)
		if err != nil {
			return fmt.Errorf("the value of %q before revision %d: %w", p.Key, ev.Kv.ModRevision, err)
		}
		if !ok {
			events[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
			continue
		}
		events[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv, PrevKv: &mvccpb.KeyValue{Key: p.Key, Value: v,
			CreateRevision: p.CreateRevision, ModRevision: p.ModRevision, Version: p.Version, Lease: p.Lease}}
	}
	wr.Events, wr.Unread = events, nil
	return nil
}
