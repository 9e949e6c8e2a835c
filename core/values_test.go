package core_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// record reads the engine record under key, or nil.
func (s *scene) record(key []byte) *core.Record {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer txn.Rollback()
	v, ok, err := storage.NewReader(txn).Get(key)
	if err != nil || !ok {
		return nil
	}
	rec, err := core.DecodeRecord(v)
	if err != nil {
		s.t.Fatalf("record %q: %v", key, err)
	}
	return &rec
}

// TestValuesAreStoredOnce: a value is written once, in the history record
// of its version; the latest record, which every touch rewrites, holds
// none, and reads still answer with the value.
func TestValuesAreStoredOnce(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "one"))
	s.settle()
	// A txn that compares a's value and writes b leaves a's records as
	// they were: a key only read is not written back.
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("one")}}},
		Success: []*pb.RequestOp{putOp("b", "two")},
	}
	s.propose(2, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}})
	s.settle()
	if r := s.resps[len(s.resps)-1]; r.Err != nil || !r.Response.GetResponseTxn().Succeeded {
		t.Fatalf("the txn comparing a's value: %s", core.DescribeResponse(r))
	}
	for k, touch := range map[string]int64{"a": 1, "b": 2} {
		latest := s.record(core.LatestKey([]byte(k)))
		if latest == nil || latest.Tombstone || len(latest.Value) != 0 {
			t.Fatalf("latest record of %s: %+v, want one with no value", k, latest)
		}
		if latest.Touch != touch {
			t.Fatalf("latest record of %s touched at %d, want %d", k, latest.Touch, touch)
		}
		hist := s.record(core.HistoryKey([]byte(k), latest.ModRev))
		if hist == nil {
			t.Fatalf("no history record of %s at %d", k, latest.ModRev)
		}
	}
	if v := s.record(core.HistoryKey([]byte("a"), 1)).Value; string(v) != "one" {
		t.Fatalf("history of a at 1 holds %q", v)
	}
	got, err := s.rangeAt(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c")})
	if err != nil || kvs(got.Kvs) != "a=one@1/1/v1 b=two@2/2/v1" {
		t.Fatalf("range: %v %v", got, err)
	}
}

// TestListValuesComeFromHistory lists a range whose page holds a hot key
// (hundreds of versions in the span, so the scan of the page's history
// gives up and reads the rest point by point) and a deleted key, at the
// commit point and at an older revision, before and after a compaction
// leaves one version per key (one scan serves the page).
func TestListValuesComeFromHistory(t *testing.T) {
	s := newScene(t, core.Config{})
	id := core.RequestID(0)
	do := func(op *pb.RequestOp) {
		id++
		s.propose(id, op)
		s.settle()
	}
	want := map[string]string{}
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		do(putOp(k, "v-"+k))
		want[k] = "v-" + k
	}
	old := s.node.Committed()
	wantOld := map[string]string{}
	for k, v := range want {
		wantOld[k] = v
	}
	for i := range 300 {
		do(putOp("k05", fmt.Sprintf("hot-%d", i)))
	}
	want["k05"] = "hot-299"
	do(&pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k07")}}})
	delete(want, "k07")

	check := func(t *testing.T, rev int64, want map[string]string) {
		t.Helper()
		for _, limit := range []int64{0, 3, 8, 30} {
			for _, keysOnly := range []bool{false, true} {
				got, err := s.rangeAt(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Limit: limit, KeysOnly: keysOnly, Revision: rev})
				if err != nil {
					t.Fatalf("limit %d keysOnly %v: %v", limit, keysOnly, err)
				}
				if got.Count != int64(len(want)) {
					t.Fatalf("limit %d: count %d, want %d", limit, got.Count, len(want))
				}
				n := int64(len(want))
				if limit > 0 {
					n = min(n, limit)
				}
				if int64(len(got.Kvs)) != n {
					t.Fatalf("limit %d: %d kvs, want %d", limit, len(got.Kvs), n)
				}
				for _, kv := range got.Kvs {
					w, ok := want[string(kv.Key)]
					if keysOnly {
						w = ""
					}
					if !ok || string(kv.Value) != w {
						t.Fatalf("limit %d keysOnly %v: %s=%q, want %q (listed: %v)", limit, keysOnly, kv.Key, kv.Value, w, ok)
					}
				}
			}
		}
	}
	t.Run("hot key in the span", func(t *testing.T) {
		check(t, 0, want)
		check(t, old, wantOld)
	})
	do(&pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k00")}}})
	s.node.Compact(id+1, s.node.Committed())
	s.settle()
	if s.node.Compacted() != s.node.Committed() {
		t.Fatalf("compacted to %d, want %d", s.node.Compacted(), s.node.Committed())
	}
	t.Run("one version per key after compaction", func(t *testing.T) { check(t, 0, want) })
}

// TestAValueMissingFromHistoryIsAnError: a live key whose history record
// is gone (a damaged store) fails its reads with ErrBadRecord; it does not
// read as an empty value.
func TestAValueMissingFromHistoryIsAnError(t *testing.T) {
	s := newScene(t, core.Config{})
	for i, k := range []string{"a", "b", "c", "d"} {
		s.propose(core.RequestID(i+1), putOp(k, strings.ToUpper(k)))
		s.settle()
	}
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.Delete(core.HistoryKey([]byte("c"), 3)); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	for _, req := range []*pb.RangeRequest{
		{Key: []byte("c")},
		{Key: []byte("a"), RangeEnd: []byte("z")},
		{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 3},
	} {
		if got, err := s.rangeAt(req); !errors.Is(err, core.ErrBadRecord) {
			t.Fatalf("range %q-%q limit %d: %v, %v; want ErrBadRecord", req.Key, req.RangeEnd, req.Limit, got, err)
		}
	}
	if got, err := s.rangeAt(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), KeysOnly: true}); err != nil || len(got.Kvs) != 4 {
		t.Fatalf("a keys-only list needs no value: %v, %v", got, err)
	}
}
