package core_test

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

func put(key string, rev, prevRev int64) *mvccpb.Event {
	ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: rev, CreateRevision: rev, Version: 1}}
	if prevRev > 0 {
		ev.PrevKv = &mvccpb.KeyValue{Key: []byte(key), Value: []byte("old"), ModRevision: prevRev, CreateRevision: prevRev, Version: 1}
		ev.Kv.CreateRevision, ev.Kv.Version = prevRev, 2
	}
	return ev
}

// described renders a hub's watch responses, one per line.
func described(rd core.Ready) []string {
	var out []string
	for _, wr := range rd.WatchResponses {
		out = append(out, core.DescribeWatchResponse(wr))
	}
	return out
}

// TestHubFromAFeed drives a member's hub as a feed does, case by case:
// what its watches are sent, and what it is synced to.
func TestHubFromAFeed(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(h *core.Hub) []string
		want []string
		rev  int64
	}{{
		name: "a revision brought twice is published once",
		run: func(h *core.Hub) []string {
			_ = h.AddWatch(core.Watch{ID: 1, Key: []byte("a")})
			h.Publish([]*mvccpb.Event{put("a", 11, 0)}, 11, 0)
			h.Publish([]*mvccpb.Event{put("a", 11, 0), put("a", 12, 11)}, 12, 0)
			return described(h.Ready())
		},
		want: []string{"watch1 r11 [PUT \"a\"]", "watch1 r12 [PUT \"a\"]"},
		rev:  12,
	}, {
		name: "a watch from ahead waits for the feed",
		run: func(h *core.Hub) []string {
			_ = h.AddWatch(core.Watch{ID: 1, Key: []byte("a"), StartRev: 13})
			h.Publish([]*mvccpb.Event{put("a", 11, 0), put("a", 12, 11)}, 12, 0)
			h.Publish([]*mvccpb.Event{put("a", 13, 12)}, 14, 0)
			return described(h.Ready())
		},
		want: []string{"watch1 r13 [PUT \"a\"]"},
		rev:  14,
	}, {
		name: "a watch from below the compact revision is canceled",
		run: func(h *core.Hub) []string {
			h.Publish(nil, 12, 11)
			_ = h.AddWatch(core.Watch{ID: 1, Key: []byte("a"), StartRev: 10})
			return described(h.Ready())
		},
		want: []string{"watch1 canceled compact=11"},
		rev:  12,
	}, {
		name: "a compaction learned ahead of the feed cancels no live watch",
		run: func(h *core.Hub) []string {
			_ = h.AddWatch(core.Watch{ID: 1, Key: []byte("a")})
			h.Compact(20)
			h.Publish([]*mvccpb.Event{put("a", 15, 0)}, 15, 0)
			return described(h.Ready())
		},
		want: []string{"watch1 r15 [PUT \"a\"]"},
		rev:  15,
	}, {
		name: "a restart past a compaction cancels only the watches that needed the history",
		run: func(h *core.Hub) []string {
			_ = h.AddWatch(core.Watch{ID: 1, Key: []byte("a")})               // next r11
			_ = h.AddWatch(core.Watch{ID: 2, Key: []byte("a"), StartRev: 30}) // waits
			h.Restart(20)
			h.Publish([]*mvccpb.Event{put("a", 30, 0)}, 30, 0)
			return described(h.Ready())
		},
		want: []string{"watch1 canceled compact=20", "watch2 r30 [PUT \"a\"]"},
		rev:  30,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := core.NewHub(core.Config{}, 10, 1)
			got := tc.run(h)
			if len(got) != len(tc.want) {
				t.Fatalf("responses %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("response %d: %q, want %q", i, got[i], tc.want[i])
				}
			}
			if h.Committed() != tc.rev {
				t.Errorf("synced to r%d, want r%d", h.Committed(), tc.rev)
			}
			if err := h.Invariants(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestHubUnreadPreviousValues: a previous value a feed marks unread
// reaches a prev_kv watch listed unread with its metadata whole, and a
// watch without prev_kv without it.
func TestHubUnreadPreviousValues(t *testing.T) {
	h := core.NewHub(core.Config{}, 10, 1)
	_ = h.AddWatch(core.Watch{ID: 1, Key: []byte("a"), PrevKV: true})
	_ = h.AddWatch(core.Watch{ID: 2, Key: []byte("a")})
	ev := put("a", 12, 5)
	ev.PrevKv.Value = nil
	h.Publish(core.FeedEvents(core.WatchResponse{Events: []*mvccpb.Event{ev}, Unread: []int{0}}), 12, 0)
	if ev.PrevKv.Version != 1 {
		t.Fatalf("FeedEvents changed the event it was given: version %d", ev.PrevKv.Version)
	}
	rd := h.Ready()
	if len(rd.WatchResponses) != 2 {
		t.Fatalf("responses: %q", described(rd))
	}
	with, without := rd.WatchResponses[0], rd.WatchResponses[1]
	if len(with.Unread) != 1 || with.Events[0].PrevKv.Version != 1 || with.Events[0].PrevKv.ModRevision != 5 {
		t.Errorf("prev_kv watch: unread %v, prev %v", with.Unread, with.Events[0].PrevKv)
	}
	if len(without.Unread) != 0 || without.Events[0].PrevKv != nil {
		t.Errorf("watch without prev_kv: unread %v, prev %v", without.Unread, without.Events[0].PrevKv)
	}
}
