package core_test

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

// ringEvent is an event at rev whose key names it, so tests can compare
// what the ring returns by name.
func ringEvent(rev int64, name string) core.Event {
	return core.Event{Rev: rev, Event: &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(name), ModRevision: rev}}}
}

func ringNames(events []core.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = fmt.Sprintf("r%d:%s", ev.Rev, ev.Kv.Key)
	}
	return out
}

func TestRing(t *testing.T) {
	type step struct {
		appendRev int64
		name      string
		compact   int64
	}
	cases := []struct {
		name      string
		capacity  int
		first     int64
		steps     []step
		wantFirst int64
		wantLen   int
		since     int64
		wantOK    bool
		want      []string
	}{
		{
			name: "an empty ring holds everything from its first revision", capacity: 4, first: 5,
			wantFirst: 5, since: 5, wantOK: true, want: []string{},
		},
		{
			name: "an empty ring refuses revisions below its first", capacity: 4, first: 5,
			wantFirst: 5, since: 4, wantOK: false,
		},
		{
			name: "appends below capacity are all returned in order", capacity: 4, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {appendRev: 3, name: "c"}},
			wantFirst: 1, wantLen: 3, since: 1, wantOK: true, want: []string{"r1:a", "r2:b", "r3:c"},
		},
		{
			name: "since skips events older than asked", capacity: 4, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {appendRev: 3, name: "c"}},
			wantFirst: 1, wantLen: 3, since: 3, wantOK: true, want: []string{"r3:c"},
		},
		{
			name: "since beyond the newest event returns nothing but is ok", capacity: 4, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}},
			wantFirst: 1, wantLen: 1, since: 9, wantOK: true, want: []string{},
		},
		{
			name: "a full ring evicts the oldest and raises first", capacity: 2, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {appendRev: 3, name: "c"}},
			wantFirst: 2, wantLen: 2, since: 2, wantOK: true, want: []string{"r2:b", "r3:c"},
		},
		{
			name: "evicting part of a revision drops the whole revision", capacity: 3, first: 1,
			steps: []step{
				{appendRev: 1, name: "a"}, {appendRev: 2, name: "b1"}, {appendRev: 2, name: "b2"},
				{appendRev: 3, name: "c"}, {appendRev: 3, name: "c2"},
			},
			// r2:b1 was evicted, so r2 is no longer whole.
			wantFirst: 3, wantLen: 3, since: 2, wantOK: false,
		},
		{
			name: "after a partial eviction the next revision is still served", capacity: 3, first: 1,
			steps: []step{
				{appendRev: 1, name: "a"}, {appendRev: 2, name: "b1"}, {appendRev: 2, name: "b2"},
				{appendRev: 3, name: "c"}, {appendRev: 3, name: "c2"},
			},
			wantFirst: 3, wantLen: 3, since: 3, wantOK: true, want: []string{"r3:c", "r3:c2"},
		},
		{
			name: "a ring of capacity zero still holds one event", capacity: 0, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}},
			wantFirst: 2, wantLen: 1, since: 2, wantOK: true, want: []string{"r2:b"},
		},
		{
			name: "compact drops older events and raises first", capacity: 4, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {appendRev: 3, name: "c"}, {compact: 3}},
			wantFirst: 3, wantLen: 1, since: 3, wantOK: true, want: []string{"r3:c"},
		},
		{
			name: "compact below first changes nothing", capacity: 2, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {appendRev: 3, name: "c"}, {compact: 1}},
			wantFirst: 2, wantLen: 2, since: 2, wantOK: true, want: []string{"r2:b", "r3:c"},
		},
		{
			name: "compact past every event empties the ring", capacity: 4, first: 1,
			steps:     []step{{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {compact: 10}},
			wantFirst: 10, wantLen: 0, since: 10, wantOK: true, want: []string{},
		},
		{
			name: "appends after compact and wrap-around keep order", capacity: 3, first: 1,
			steps: []step{
				{appendRev: 1, name: "a"}, {appendRev: 2, name: "b"}, {compact: 2},
				{appendRev: 3, name: "c"}, {appendRev: 4, name: "d"}, {appendRev: 5, name: "e"},
			},
			wantFirst: 3, wantLen: 3, since: 3, wantOK: true, want: []string{"r3:c", "r4:d", "r5:e"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := core.NewRing(tc.capacity, tc.first)
			for _, s := range tc.steps {
				if s.compact != 0 {
					r.Compact(s.compact)
				} else {
					r.Append(ringEvent(s.appendRev, s.name))
				}
			}
			if r.First() != tc.wantFirst || r.Len() != tc.wantLen {
				t.Fatalf("First, Len = %d, %d; want %d, %d", r.First(), r.Len(), tc.wantFirst, tc.wantLen)
			}
			events, ok := r.Since(tc.since)
			if ok != tc.wantOK {
				t.Fatalf("Since(%d) ok = %v, want %v", tc.since, ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if got := ringNames(events); !slices.Equal(got, tc.want) {
				t.Fatalf("Since(%d) = %v, want %v", tc.since, got, tc.want)
			}
		})
	}
}

func TestRingSinceReturnsACopy(t *testing.T) {
	r := core.NewRing(2, 1)
	r.Append(ringEvent(1, "a"))
	events, _ := r.Since(1)
	events[0] = ringEvent(9, "z")
	again, _ := r.Since(1)
	if got := ringNames(again); !slices.Equal(got, []string{"r1:a"}) {
		t.Fatalf("ring changed through Since's result: %v", got)
	}
}

func TestRingByteLimit(t *testing.T) {
	sized := func(rev int64, name string, size int) core.Event {
		ev := ringEvent(rev, name)
		ev.Kv.Value = make([]byte, size)
		ev.PrevKv = &mvccpb.KeyValue{Key: []byte(name), Value: make([]byte, size)}
		return ev
	}
	probe := sized(1, "a", 100)
	one := core.EventBytes(&probe)
	r := core.NewRing(16, 1)
	r.SetByteLimit(3 * one)
	for rev := int64(1); rev <= 5; rev++ {
		r.Append(sized(rev, "a", 100))
	}
	if r.Len() != 3 || r.First() != 3 || r.Bytes() != 3*one {
		t.Fatalf("after 5 events under a 3-event byte limit: len %d first r%d bytes %d, want 3, r3, %d", r.Len(), r.First(), r.Bytes(), 3*one)
	}
	if _, ok := r.Since(2); ok {
		t.Fatal("Since(2) claims events the byte limit evicted")
	}
	// An event heavier than the whole limit is still kept, alone.
	r.Append(sized(6, "big", 1000))
	got, ok := r.Since(6)
	if !ok || !slices.Equal(ringNames(got), []string{"r6:big"}) || r.Len() != 1 || r.First() != 6 {
		t.Fatalf("after an event over the limit: %v %v len %d first r%d", ringNames(got), ok, r.Len(), r.First())
	}
	// Compaction gives the bytes back; lowering the limit evicts at once.
	r.Compact(7)
	if r.Len() != 0 || r.Bytes() != 0 {
		t.Fatalf("after compacting everything: len %d bytes %d", r.Len(), r.Bytes())
	}
	for rev := int64(7); rev <= 9; rev++ {
		r.Append(sized(rev, "a", 100))
	}
	r.SetByteLimit(one)
	if got, _ := r.Since(r.First()); !slices.Equal(ringNames(got), []string{"r9:a"}) {
		t.Fatalf("after lowering the limit: %v", ringNames(got))
	}
}
