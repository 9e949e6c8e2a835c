package core

import (
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Ring keeps the most recent committed events in revision order, so
// watchers near the head are served from memory. Older events come from
// the engine's revision records (ReadEvents). It is bounded by a count
// and, if set, by the bytes its events hold: Kubernetes objects of tens
// of KiB, each event with its previous value, would otherwise make a
// count-bounded ring the largest thing in the process.
type Ring struct {
	buf []Event
	// weights holds each slot's EventBytes, so that evicting the oldest
	// event does not read it again: by then it is out of the CPU's
	// caches (EventBytes was 0.5 % of a create's CPU, nearly all of it
	// in the evicted event's cache misses).
	weights []int64
	start   int // index of the oldest event
	n       int // number of events held
	// first is the lowest revision whose events are all held: every
	// event with Rev ≥ first is in the ring.
	first int64
	// bytes is what the held events weigh (EventBytes); maxBytes bounds
	// it (0: no bound). The newest event is kept whatever it weighs.
	bytes, maxBytes int64
	// evicted counts the events dropped for room (not by compaction).
	evicted int64
}

// NewRing returns a ring of capacity events that holds every event
// from revision first on.
func NewRing(capacity int, first int64) *Ring {
	capacity = max(capacity, 1)
	return &Ring{buf: make([]Event, capacity), weights: make([]int64, capacity), first: first}
}

// SetByteLimit bounds the bytes the held events weigh (0: no bound).
func (r *Ring) SetByteLimit(n int64) {
	r.maxBytes = max(n, 0)
	r.evict()
}

// Bytes returns what the held events weigh.
func (r *Ring) Bytes() int64 { return r.bytes }

// EventBytes is about what ev keeps alive in memory: its keys and values
// and the structures around them.
func EventBytes(ev *Event) int64 {
	const overhead = 160 // Event, mvccpb.Event and the KeyValues
	n := int64(overhead)
	for _, kv := range []*mvccpb.KeyValue{ev.Kv, ev.PrevKv} {
		if kv != nil {
			n += int64(len(kv.Key) + len(kv.Value))
		}
	}
	return n
}

// First returns the lowest revision whose events are all in the ring.
func (r *Ring) First() int64 { return r.first }

// Len returns the number of events held.
func (r *Ring) Len() int { return r.n }

func (r *Ring) at(i int) *Event { return &r.buf[(r.start+i)%len(r.buf)] }

// Append adds ev, which must not be older than the newest event held,
// evicting the oldest event when full. Evicting part of a revision drops
// the whole revision from what the ring claims to hold.
func (r *Ring) Append(ev Event) {
	if r.n == len(r.buf) {
		r.evictOldest()
	}
	i := (r.start + r.n) % len(r.buf)
	r.buf[i], r.weights[i] = ev, EventBytes(&ev)
	r.n++
	r.bytes += r.weights[i]
	r.evict()
}

// evict drops the oldest events while the ring weighs more than its
// byte limit, keeping at least the newest.
func (r *Ring) evict() {
	for r.maxBytes > 0 && r.bytes > r.maxBytes && r.n > 1 {
		r.evictOldest()
	}
}

// evictOldest drops the oldest event; its revision is no longer whole.
func (r *Ring) evictOldest() {
	old := r.at(0)
	if old.Rev+1 > r.first {
		r.first = old.Rev + 1
	}
	r.evicted++
	r.drop()
}

// drop forgets the oldest event.
func (r *Ring) drop() {
	r.bytes -= r.weights[r.start]
	r.buf[r.start], r.weights[r.start] = Event{}, 0
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

// Since returns the held events with Rev ≥ rev, oldest first. ok is
// false when events at rev may have been evicted (rev < First).
func (r *Ring) Since(rev int64) (events []Event, ok bool) {
	if rev < r.first {
		return nil, false
	}
	i := sort.Search(r.n, func(i int) bool { return r.at(i).Rev >= rev })
	events = make([]Event, 0, r.n-i)
	for ; i < r.n; i++ {
		events = append(events, *r.at(i))
	}
	return events, true
}

// Compact forgets events below rev and raises First to at least rev.
func (r *Ring) Compact(rev int64) {
	for r.n > 0 && r.at(0).Rev < rev {
		r.drop()
	}
	if rev > r.first {
		r.first = rev
	}
}
