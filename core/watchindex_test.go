package core_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

// TestWatchIndexDeliversToExactlyTheMatchingWatchers registers watchers
// of every shape (one key, a range, a prefix, from a key, every key, an
// empty range, several on one interval, with filters), cancels a third
// of them, writes and deletes keys, and checks each live watcher against
// a brute-force filter of every event: the index behind publish must
// neither miss a watcher nor wake one with nothing for it.
func TestWatchIndexDeliversToExactlyTheMatchingWatchers(t *testing.T) {
	s := newScene(t, core.Config{})
	rng := rand.New(rand.NewPCG(7, 7))
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	type shape struct {
		key, end string
		noPut    bool
	}
	var shapes []shape
	for i := range 40 {
		shapes = append(shapes, shape{key: key(i * 3)})                    // one key
		shapes = append(shapes, shape{key: key(i * 2), end: key(i*2 + 7)}) // a range
	}
	for d := range 10 {
		p := fmt.Sprintf("k%d", d)
		shapes = append(shapes, shape{key: p, end: fmt.Sprintf("k%d", d+1)}) // a prefix
		shapes = append(shapes, shape{key: p, end: fmt.Sprintf("k%d", d+1)}) // twice
		shapes = append(shapes, shape{key: p, end: fmt.Sprintf("k%d", d+1), noPut: true})
	}
	shapes = append(shapes,
		shape{key: key(50), end: "\x00"},  // from a key
		shape{key: "\x00", end: "\x00"},   // every key
		shape{key: key(60), end: key(10)}, // empty
		shape{key: key(5), end: key(5)},   // empty
	)
	live := map[core.WatchID]shape{}
	for i, sh := range shapes {
		id := core.WatchID(i + 1)
		w := core.Watch{ID: id, Key: []byte(sh.key), NoPut: sh.noPut}
		if sh.end != "" {
			w.End = []byte(sh.end)
		}
		if err := s.node.AddWatch(w); err != nil {
			t.Fatal(err)
		}
		live[id] = sh
	}
	for id := range core.WatchID(len(shapes)) {
		if id%3 == 0 {
			if !s.node.CancelWatch(id + 1) {
				t.Fatalf("watch%d was not registered", id+1)
			}
			delete(live, id+1)
		}
	}
	s.collect()
	s.watch = nil
	// The model: a put makes an event, a delete one if the key exists.
	type event struct {
		del bool
		key string
		rev int64
	}
	var events []event
	exists := map[string]bool{}
	for i := range 300 {
		k := key(rng.IntN(120))
		del := rng.IntN(4) == 0
		id := core.RequestID(i + 1)
		if del {
			s.propose(id, delOp(k))
		} else {
			s.propose(id, putOp(k, "v"))
		}
		s.settle()
		rev := s.resp(id).Rev
		if !del || exists[k] {
			events = append(events, event{del, k, rev})
		}
		exists[k] = !del
	}
	got := map[core.WatchID][]string{}
	for _, wr := range s.watch {
		if len(wr.Events) == 0 {
			t.Fatalf("an empty response to watch%d", wr.ID)
		}
		if _, ok := live[wr.ID]; !ok {
			t.Fatalf("a response to canceled watch%d", wr.ID)
		}
		for _, e := range wr.Events {
			got[wr.ID] = append(got[wr.ID], fmt.Sprintf("%s %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision))
		}
	}
	for id, sh := range live {
		var want []string
		for _, e := range events {
			in := e.key == sh.key
			if sh.end != "" {
				in = e.key >= sh.key && (sh.end == "\x00" || e.key < sh.end)
			}
			typ := mvccpb.PUT
			if e.del {
				typ = mvccpb.DELETE
			}
			if in && !(sh.noPut && !e.del) {
				want = append(want, fmt.Sprintf("%s %s@%d", typ, e.key, e.rev))
			}
		}
		if fmt.Sprint(got[id]) != fmt.Sprint(want) {
			t.Errorf("watch%d %+v:\n got %v\nwant %v", id, sh, got[id], want)
		}
	}
}
