package fuzz

import (
	"bytes"
	"cmp"
	"context"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/internal/etcdsnap"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// revision maps any int64 onto the revisions Axon deals (never negative).
func revision(r int64) int64 { return r & math.MaxInt64 }

func FuzzKeyRoundTrip(f *testing.F) {
	f.Add([]byte(""), int64(0))
	f.Add([]byte("foo"), int64(1))
	f.Add([]byte{0x00}, int64(255))
	f.Add([]byte{0x00, 0xFF, 0x00, 0x01}, int64(math.MaxInt64))
	f.Add([]byte{0xFF, 0x01, 0x00}, int64(-1))
	f.Fuzz(func(t *testing.T, key []byte, rev int64) {
		got, err := core.DecodeLatestKey(core.LatestKey(key))
		if err != nil || !bytes.Equal(got, key) {
			t.Fatalf("latest %q: got %q, %v", key, got, err)
		}
		hk, hrev, err := core.DecodeHistoryKey(core.HistoryKey(key, rev))
		if err != nil || !bytes.Equal(hk, key) || hrev != rev {
			t.Fatalf("history (%q, %d): got (%q, %d), %v", key, rev, hk, hrev, err)
		}
		if r, err := core.DecodeRevisionKey(core.RevisionKey(rev)); err != nil || r != rev {
			t.Fatalf("revision %d: got %d, %v", rev, r, err)
		}
		if id, err := core.DecodeLeaseKey(core.LeaseKey(rev)); err != nil || id != rev {
			t.Fatalf("lease %d: got %d, %v", rev, id, err)
		}
	})
}

func FuzzKeyOrder(f *testing.F) {
	f.Add([]byte("a"), []byte("b"), int64(1), int64(2))
	f.Add([]byte("a"), []byte("a\x00"), int64(5), int64(1))
	f.Add([]byte{0x00}, []byte{0x00, 0x00}, int64(0), int64(0))
	f.Add([]byte{0x00, 0x01}, []byte{0x01}, int64(7), int64(7))
	f.Add([]byte{0xFF}, []byte{}, int64(256), int64(255))
	f.Fuzz(func(t *testing.T, a, b []byte, r1, r2 int64) {
		r1, r2 = revision(r1), revision(r2)
		want := cmp.Or(bytes.Compare(a, b), cmp.Compare(r1, r2))
		if got := bytes.Compare(core.HistoryKey(a, r1), core.HistoryKey(b, r2)); got != want {
			t.Fatalf("history (%q,%d) vs (%q,%d): encoded %d, raw %d", a, r1, b, r2, got, want)
		}
		la, lb := core.LatestKey(a), core.LatestKey(b)
		if got, want := bytes.Compare(la, lb), bytes.Compare(a, b); got != want {
			t.Fatalf("latest %q vs %q: encoded %d, raw %d", a, b, got, want)
		}
		if !bytes.Equal(a, b) && (bytes.HasPrefix(la, lb) || bytes.HasPrefix(lb, la)) {
			t.Fatalf("latest encodings of %q and %q are prefixes", a, b)
		}
		// Revision records sort by revision within their shard.
		sameShard := (r1-r2)%core.RevisionShards == 0
		if got, want := bytes.Compare(core.RevisionKey(r1), core.RevisionKey(r2)), cmp.Compare(r1, r2); sameShard && got != want || !sameShard && got == 0 {
			t.Fatalf("revision %d vs %d: encoded %d", r1, r2, got)
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(core.LatestKey([]byte("a\x00b")))
	f.Add(core.HistoryKey([]byte{0xFF, 0x00}, 9))
	f.Add(core.AppendRecord(nil, &core.Record{Touch: 3, ModRev: 3, CreateRev: 1, Version: 2, Lease: 5, Value: []byte("v")}))
	f.Add(core.AppendRevisionRecord(nil, &core.RevisionRecord{Events: []core.RevisionEvent{{Key: []byte("a")}, {Delete: true, Key: []byte{0}}}}))
	f.Add(core.AppendRevisionRecord(nil, &core.RevisionRecord{Fenced: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		// Key encodings are canonical: what decodes re-encodes to the input.
		if key, err := core.DecodeLatestKey(b); err == nil && !bytes.Equal(core.LatestKey(key), in) {
			t.Fatalf("latest key %x decodes to %q, which encodes differently", in, key)
		}
		if key, rev, err := core.DecodeHistoryKey(b); err == nil && !bytes.Equal(core.HistoryKey(key, rev), in) {
			t.Fatalf("history key %x decodes to (%q, %d), which encodes differently", in, key, rev)
		}
		_, _ = core.DecodeRevisionKey(b)
		_, _ = core.DecodeLeaseKey(b)
		_, _ = core.DecodeLeaseRecord(b)
		_, _ = core.DecodeElectionRecord(b)
		// Records may use non-minimal varints, so check a second round
		// trip instead of the bytes.
		if rec, err := core.DecodeRecord(b); err == nil {
			again, err := core.DecodeRecord(core.AppendRecord(nil, &rec))
			if err != nil || !reflect.DeepEqual(again, rec) {
				t.Fatalf("record %x: %+v re-decodes to %+v, %v", in, rec, again, err)
			}
		}
		if rec, err := core.DecodeRevisionRecord(b); err == nil {
			again, err := core.DecodeRevisionRecord(core.AppendRevisionRecord(nil, &rec))
			if err != nil || !reflect.DeepEqual(again, rec) {
				t.Fatalf("revision record %x: %+v re-decodes to %+v, %v", in, rec, again, err)
			}
		}
		if !bytes.Equal(b, in) {
			t.Fatalf("a decoder changed its input")
		}
	})
}

// parseRequest reads data as a RequestOp, or failing that as the
// TxnRequest of one, so the fuzzer can reach both shapes.
func parseRequest(data []byte) *pb.RequestOp {
	op := &pb.RequestOp{}
	if proto.Unmarshal(data, op) == nil && op.Request != nil {
		return op
	}
	txn := &pb.TxnRequest{}
	if proto.Unmarshal(data, txn) != nil {
		return nil
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}}
}

func validate(op *pb.RequestOp, maxOps int) error {
	switch tv := op.Request.(type) {
	case *pb.RequestOp_RequestPut:
		return core.ValidatePut(tv.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return core.ValidateDeleteRange(tv.RequestDeleteRange)
	case *pb.RequestOp_RequestRange:
		return core.ValidateRange(tv.RequestRange)
	case *pb.RequestOp_RequestTxn:
		return core.ValidateTxn(tv.RequestTxn, maxOps)
	}
	return core.ErrEmptyRequest
}

func mustMarshal(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

func put(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v), PrevKv: true}}}
}

func FuzzEvaluate(f *testing.F) {
	f.Add(mustMarshal(f, put("a", "1")))
	f.Add(mustMarshal(f, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("\x00"), PrevKv: true}}}))
	f.Add(mustMarshal(f, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}))
	f.Add(mustMarshal(f, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), RangeEnd: []byte("c"), Target: pb.Compare_VALUE, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Value{Value: []byte("0")}}},
		Success: []*pb.RequestOp{put("c", "3"), {Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Revision: 1, SortTarget: pb.RangeRequest_MOD}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{put("a", "x")}, Failure: []*pb.RequestOp{put("a", "y")}}}}},
	}))
	f.Add(mustMarshal(f, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), IgnoreValue: true, IgnoreLease: true}}}))
	f.Add([]byte{0xFF, 0x00})
	const maxOps = 16
	f.Fuzz(func(t *testing.T, data []byte) {
		op := parseRequest(data)
		if op == nil || validate(op, maxOps) != nil {
			return
		}
		ctx := context.Background()
		eng := memkv.New()
		node := core.NewNode(core.Config{MaxTxnOps: maxOps, RingSize: 4}, core.State{})
		// A little history for compares, ranges and reads at a revision.
		seed := []*pb.RequestOp{put("a", "1"), put("b", "2"), put("a", "3")}
		for i, s := range seed {
			node.Propose(core.RequestID(100+i), s)
		}
		node.Propose(1, op)
		answered := 0
		for step := 0; ; step++ {
			if err := node.Invariants(); err != nil {
				t.Fatalf("invariants: %v", err)
			}
			rd := node.Ready()
			for _, r := range rd.Responses {
				if r.ID == 1 {
					answered++
				} else if r.Err != nil {
					t.Fatalf("seed request %d failed: %v", r.ID, r.Err)
				}
			}
			if len(rd.Work) == 0 {
				break
			}
			if step > 100 {
				t.Fatalf("no quiescence after %d rounds", step)
			}
			for _, w := range rd.Work {
				eff, out, _ := driver.Run(ctx, eng, w, node)
				node.Done(w, core.Result{Effects: eff, Outcome: out})
			}
		}
		if answered != 1 || node.InFlight() != 0 {
			t.Fatalf("request answered %d times, %d revisions in flight", answered, node.InFlight())
		}
	})
}

// FuzzRestore feeds arbitrary key-bucket entries, compact revision and
// lease to an etcd snapshot restore: it never panics, and a restore that
// succeeds leaves a store that recovers and answers a range at its head.
func FuzzRestore(f *testing.F) {
	put := func(key string, rev, create, version int64) []byte {
		b, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: rev, CreateRevision: create, Version: version})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	del, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte("a")})
	if err != nil {
		f.Fatal(err)
	}
	rev := func(r int64) []byte { return etcdsnap.BucketKey(r, 0, false)[:17] }
	lease, err := proto.Marshal(&leasepb.Lease{ID: 7, TTL: 60})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(etcdsnap.BucketKey(2, 0, false), put("a", 2, 2, 1), etcdsnap.BucketKey(3, 0, true), del, []byte(nil), []byte(nil))
	f.Add(etcdsnap.BucketKey(2, 0, false), put("a", 2, 2, 1), etcdsnap.BucketKey(5, 1, false), put("b", 5, 4, 2), rev(4), lease)
	f.Add([]byte("not a revision"), []byte("nor a key-value"), etcdsnap.BucketKey(1, 0, false), put("", 1, 1, 1), []byte{1}, []byte{0xff})
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, compact, leaseRec []byte) {
		path := filepath.Join(t.TempDir(), "db")
		w, err := etcdsnap.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w.UnsafePut(schema.Key, k1, v1)
		w.UnsafePut(schema.Key, k2, v2)
		if compact != nil {
			w.UnsafePut(schema.Meta, schema.FinishedCompactKeyName, compact)
		}
		if leaseRec != nil {
			w.UnsafePut(schema.Lease, []byte{0, 0, 0, 0, 0, 0, 0, 7}, leaseRec)
		}
		if err := w.Finish(0); err != nil {
			t.Skip("bbolt refuses the entries:", err)
		}
		ctx := context.Background()
		eng := memkv.New()
		if _, err := etcdsnap.Restore(ctx, path, eng, etcdsnap.RestoreOptions{SkipHashCheck: true}); err != nil {
			return
		}
		st, err := driver.Recover(ctx, eng)
		if err != nil {
			t.Fatalf("a restored store does not recover: %v", err)
		}
		txn, err := eng.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txn.Rollback()
		if _, err := core.Range(storage.NewReader(txn), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, st.Committed, st.Compacted); err != nil {
			t.Fatalf("a restored store does not answer a range at r%d: %v", st.Committed, err)
		}
	})
}
