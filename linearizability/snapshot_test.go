package linearizability

import (
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

func TestCheckSnapshotRead(t *testing.T) {
	put := func(rev int64, k, v string, created, version int64) Event {
		return Event{Rev: rev, Event: &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v), ModRevision: rev, CreateRevision: created, Version: version}}}
	}
	del := func(rev int64, k string) Event {
		return Event{Rev: rev, Event: &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: rev}}}
	}
	// r2 a=1, r3 b=1, r4 a=2, r5 delete b.
	committed := []Event{put(2, "a", "1", 2, 1), put(3, "b", "1", 3, 1), put(4, "a", "2", 2, 2), del(5, "b")}
	kv := func(k, v string, mod, created, version int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v), ModRevision: mod, CreateRevision: created, Version: version}
	}
	resp := func(at int64, kvs ...*mvccpb.KeyValue) *pb.RangeResponse {
		return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: at}, Kvs: kvs, Count: int64(len(kvs))}
	}
	all := &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), Serializable: true}
	one := &pb.RangeRequest{Key: []byte("b"), Serializable: true}
	at := func(r *pb.RangeRequest, rev int64) *pb.RangeRequest {
		r = proto.Clone(r).(*pb.RangeRequest)
		r.Revision = rev
		return r
	}
	cases := []struct {
		name string
		r    *pb.RangeRequest
		got  *pb.RangeResponse
		want string // "" for no error, else a substring of it
	}{
		{"an old snapshot is fine", all, resp(3, kv("a", "1", 2, 2, 1), kv("b", "1", 3, 3, 1)), ""},
		{"the newest too", all, resp(5, kv("a", "2", 4, 2, 2)), ""},
		{"a revision with no event in the range", one, resp(6), ""},
		{"a key missing at its revision", all, resp(4, kv("b", "1", 3, 3, 1)), "the store at r4 holds"},
		{"a value from after the header", all, resp(3, kv("a", "2", 4, 2, 2), kv("b", "1", 3, 3, 1)), "at r3 answered"},
		{"a deleted key still there", one, resp(5, kv("b", "1", 3, 3, 1)), "at r5 answered"},
		{"a wrong count", one, &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 3}, Kvs: []*mvccpb.KeyValue{kv("b", "1", 3, 3, 1)}, Count: 2}, "count=2"},
		{"no header", one, &pb.RangeResponse{}, "no header"},
		{"at a past revision", at(all, 3), resp(5, kv("a", "1", 2, 2, 1), kv("b", "1", 3, 3, 1)), ""},
		{"at a past revision, the newest state", at(all, 3), resp(5, kv("a", "2", 4, 2, 2)), "the store at r3 holds"},
		{"at a revision past its header", at(one, 5), resp(4), "below the revision it reads at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSnapshotRead(committed, tc.r, tc.got)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
