package linearizability

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The committed history the watch tests share (r5 is a gap):
//
//	r2 put a=1, r3 put b=1, r4 put a=2 + delete b, r6 put c=1, r7 delete a
var (
	evA1 = Event{2, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("a", "1", 2, 2, 1)}}
	evB1 = Event{3, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("b", "1", 3, 3, 1)}}
	evA2 = Event{4, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("a", "2", 2, 4, 2), PrevKv: kv("a", "1", 2, 2, 1)}}
	evDB = Event{4, &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("b"), ModRevision: 4}, PrevKv: kv("b", "1", 3, 3, 1)}}
	evC1 = Event{6, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("c", "1", 6, 6, 1)}}
	evDA = Event{7, &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 7}, PrevKv: kv("a", "2", 2, 4, 2)}}

	committed = []Event{evA1, evB1, evA2, evDB, evC1, evDA}
)

// plain is ev as a watcher without prev_kv gets it.
func plain(ev Event) *mvccpb.Event { return &mvccpb.Event{Type: ev.Type, Kv: ev.Kv} }

func full(ev Event) *mvccpb.Event { return ev.Event }

func resp(rev int64, evs ...*mvccpb.Event) Received { return Received{Events: evs, HeaderRev: rev} }

func progress(rev int64) Received { return Received{Progress: true, HeaderRev: rev} }

func TestCheckWatch(t *testing.T) {
	all := WatchSpec{Key: []byte("a"), End: []byte{0}}
	withPrev := WatchSpec{Key: []byte("a"), End: []byte{0}, PrevKV: true}
	from := func(w WatchSpec, rev int64) WatchSpec { w.StartRev = rev; return w }
	tests := []struct {
		name string
		w    WatchSpec
		got  []Received
		want string // substring of the error; "" means valid
	}{
		// Valid streams.
		{"everything, one revision per response", from(all, 1), []Received{
			resp(2, plain(evA1)), resp(3, plain(evB1)), resp(4, plain(evA2), plain(evDB)), resp(6, plain(evC1)), resp(7, plain(evDA)),
		}, ""},
		{"batched revisions and progress over a gap", from(all, 1), []Received{
			resp(4, plain(evA1), plain(evB1), plain(evA2), plain(evDB)), progress(5), resp(7, plain(evC1), plain(evDA)), progress(9),
		}, ""},
		{"resumed with prev_kv", from(withPrev, 4), []Received{
			resp(4, full(evA2), full(evDB)), resp(7, full(evC1), full(evDA)),
		}, ""},
		{"single key, deletes only", WatchSpec{Key: []byte("a"), StartRev: 1, NoPut: true}, []Received{
			progress(6), resp(7, plain(evDA)),
		}, ""},
		{"prefix, puts only", WatchSpec{Key: []byte("b"), End: []byte("c"), StartRev: 1, NoDelete: true}, []Received{
			resp(3, plain(evB1)), progress(7),
		}, ""},
		{"start unknown, taken from first event", all, []Received{
			resp(6, plain(evC1)), resp(7, plain(evDA)),
		}, ""},
		{"canceled by compaction it needed", from(all, 2), []Received{
			{Canceled: true, CompactRevision: 5},
		}, ""},
		{"stream cut short", from(all, 1), []Received{resp(2, plain(evA1))}, ""},

		// Streams that must be rejected.
		{"duplicated event", from(all, 1), []Received{
			resp(2, plain(evA1)), resp(2, plain(evA1)),
		}, "not unique"},
		{"gap", from(all, 1), []Received{
			resp(2, plain(evA1)), resp(4, plain(evA2), plain(evDB)),
		}, "not reliable"},
		{"reordered events", from(all, 1), []Received{
			resp(3, plain(evB1)), resp(3, plain(evA1)),
		}, "not reliable"},
		{"reordered responses after a gap was filled", from(all, 2), []Received{
			resp(2, plain(evA1)), resp(3, plain(evB1)), resp(6, plain(evA2), plain(evDB), plain(evC1)), resp(6, plain(evB1)),
		}, "not unique"},
		{"revision split across responses", from(all, 1), []Received{
			resp(4, plain(evA1), plain(evB1), plain(evA2)), resp(4, plain(evDB)),
		}, "not atomic"},
		{"wrong prev_kv", from(withPrev, 4), []Received{
			resp(4, &mvccpb.Event{Type: mvccpb.PUT, Kv: evA2.Kv, PrevKv: kv("a", "0", 2, 2, 1)}, full(evDB)),
		}, "wrong prev_kv"},
		{"missing prev_kv", from(withPrev, 4), []Received{
			resp(4, plain(evA2), full(evDB)),
		}, "prev_kv missing"},
		{"prev_kv not asked for", from(all, 4), []Received{
			resp(4, full(evA2), plain(evDB)),
		}, "prev_kv not asked"},
		{"filter violated: key outside range", WatchSpec{Key: []byte("a"), StartRev: 1}, []Received{
			resp(2, plain(evA1)), resp(3, plain(evB1)),
		}, "filter violated"},
		{"filter violated: NoDelete", WatchSpec{Key: []byte("a"), End: []byte{0}, StartRev: 4, NoDelete: true}, []Received{
			resp(4, plain(evA2), plain(evDB)),
		}, "filter violated"},
		{"progress ahead of events", from(all, 1), []Received{
			resp(2, plain(evA1)), progress(3), resp(3, plain(evB1)),
		}, "progress r3 ahead of events"},
		{"progress behind events", from(all, 1), []Received{
			resp(3, plain(evA1), plain(evB1)), {Progress: true, HeaderRev: 2},
		}, "went back"},
		{"progress behind events without headers", from(all, 1), []Received{
			{Events: []*mvccpb.Event{plain(evA1), plain(evB1)}}, {Progress: true, HeaderRev: 2},
		}, "behind delivered event r3"},
		{"start revision not honoured", from(all, 3), []Received{
			resp(2, plain(evA1)),
		}, "not resumable"},
		{"event never committed", from(all, 1), []Received{
			resp(2, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("z", "9", 2, 2, 1)}),
		}, "never committed"},
		{"wrong key-value", from(all, 1), []Received{
			resp(2, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("a", "1", 2, 2, 2)}),
		}, "wrong key-value"},
		{"canceled by compaction it did not need", from(all, 6), []Received{
			{Canceled: true, CompactRevision: 5},
		}, "needed only r6"},
		{"response after cancel", from(all, 1), []Received{
			{Canceled: true}, resp(2, plain(evA1)),
		}, "after the watch was canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckWatch(committed, tt.w, tt.got)
			if err != nil {
				t.Log(err)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckWatch = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("CheckWatch = nil, want error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("CheckWatch = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestCheckWatchBadHistory(t *testing.T) {
	bad := []Event{evB1, evA1}
	if err := CheckWatch(bad, WatchSpec{Key: []byte("a")}, nil); err == nil {
		t.Fatal("CheckWatch accepted a committed history out of revision order")
	}
}

func TestCheckWatchIsCreate(t *testing.T) {
	// A create must have create_revision == mod_revision: version 1 with
	// an older create revision is a broken IsCreate, even if committed so.
	ev := Event{5, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv("a", "1", 3, 5, 1)}}
	err := CheckWatch([]Event{ev}, WatchSpec{Key: []byte("a"), StartRev: 1}, []Received{resp(5, plain(ev))})
	if err == nil || !strings.Contains(err.Error(), "IsCreate") {
		t.Fatalf("CheckWatch = %v, want IsCreate violation", err)
	}
}
