package core

import "sort"

// Ring keeps the most recent committed events in revision order, so
// watchers near the head are served from memory. Older events come from
// the engine's revision records (ReadEvents).
type Ring struct {
	buf   []Event
	start int // index of the oldest event
	n     int // number of events held
	// first is the lowest revision whose events are all held: every
	// event with Rev ≥ first is in the ring.
	first int64
}

// NewRing returns a ring of capacity events that holds every event
// from revision first on.
func NewRing(capacity int, first int64) *Ring {
	return &Ring{buf: make([]Event, max(capacity, 1)), first: first}
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
		old := r.at(0)
		if old.Rev+1 > r.first {
			r.first = old.Rev + 1
		}
		*old = Event{}
		r.start = (r.start + 1) % len(r.buf)
		r.n--
	}
	*r.at(r.n) = ev
	r.n++
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
		*r.at(0) = Event{}
		r.start = (r.start + 1) % len(r.buf)
		r.n--
	}
	if rev > r.first {
		r.first = rev
	}
}
