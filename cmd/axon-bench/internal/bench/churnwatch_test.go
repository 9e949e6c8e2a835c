package bench

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestChurnWatcherChecksPrevKV feeds the churn watcher's check events
// as a server could send them: right, with a wrong prev_kv value, with a
// prev_kv of another revision or none, and out of order.
func TestChurnWatcherChecksPrevKV(t *testing.T) {
	cw := &churnWatcher{}
	cw.last.Store(10)
	cw.sample("/a", 16, "a16") // sampled: revision divisible by 16
	cw.sample("/a", 17, "a17") // not sampled
	cw.sample("/b", 32, "b32")
	kv := func(key string, mod, create, version int64, value string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), ModRevision: mod, CreateRevision: create, Version: version, Value: []byte(value)}
	}
	put := func(cur, prev *mvccpb.KeyValue) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: cur, PrevKv: prev}
	}
	del := func(key string, rev int64, prev *mvccpb.KeyValue) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}, PrevKv: prev}
	}
	for _, ev := range []*clientv3.Event{
		put(kv("/a", 16, 12, 2, "a16"), kv("/a", 12, 12, 1, "a12")), // value checked, right
		put(kv("/a", 20, 12, 3, "a20"), kv("/a", 16, 12, 2, "a16")), // prev_kv checked, right
		put(kv("/a", 21, 12, 4, "a21"), kv("/a", 20, 12, 3, "a20")), // not sampled
		del("/a", 22, nil),                                          // missing
		put(kv("/a", 23, 23, 1, "a23"), nil),                        // a create: none due
		put(kv("/b", 32, 30, 2, "bad"), kv("/b", 30, 30, 1, "b30")), // value wrong
		del("/b", 33, kv("/b", 32, 30, 2, "bad")),                   // prev_kv value wrong
		put(kv("/c", 34, 34, 1, "c34"), kv("/c", 5, 5, 1, "c5")),    // a create with a prev_kv
		put(kv("/d", 35, 30, 3, "d35"), kv("/e", 31, 30, 2, "d31")), // prev_kv of another key
		put(kv("/d", 36, 30, 4, "d36"), kv("/d", 31, 30, 2, "d31")), // prev_kv not the previous version
		put(kv("/f", 35, 35, 1, "f35"), nil),                        // out of order
	} {
		cw.check(ev)
	}
	got := cw.res
	want := ChurnWatch{Deletes: 2, ValuesChecked: 2, ValuesWrong: 1, PrevChecked: 2, PrevWrong: 4, PrevMissing: 1, OutOfOrder: 1}
	got.FirstWrong = ""
	if got != want || cw.events.Load() != 11 {
		t.Errorf("%d events, %+v\nwant 11, %+v", cw.events.Load(), got, want)
	}
	if _, ok := cw.samples.Load(sampleKey{"/a", 16}); ok {
		t.Error("the sample of /a at 16 is kept after its prev_kv was checked")
	}
	if cw.res.FirstWrong == "" {
		t.Error("no first wrong")
	}
}
