package core_test

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// BenchmarkDealCommit measures the node's own bookkeeping per write:
// dealing, ordering and releasing, with the engine out of the picture.
func BenchmarkDealCommit(b *testing.B) {
	req := putOp("k", "v")
	eff := &core.Effects{Response: &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}}}
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		n := core.NewNode(core.Config{}, core.State{})
		for i := 0; i < b.N; i++ {
			n.Propose(core.RequestID(i+1), req)
			w := n.Ready().Work[0]
			n.Done(w, core.Result{Effects: eff, Outcome: core.Committed})
			if len(n.Ready().Responses) != 1 {
				b.Fatal("no response")
			}
		}
	})
	b.Run("64 in flight completing in reverse", func(b *testing.B) {
		b.ReportAllocs()
		const inflight = 64
		// One key each: writes to one key wait for each other (latches).
		reqs := make([]*pb.RequestOp, inflight)
		for j := range reqs {
			reqs[j] = putOp(fmt.Sprintf("k%d", j), "v")
		}
		n := core.NewNode(core.Config{}, core.State{})
		for i := 0; i < b.N; i += inflight {
			batch := min(inflight, b.N-i)
			for j := 0; j < batch; j++ {
				n.Propose(core.RequestID(i+j+1), reqs[j])
			}
			work := n.Ready().Work
			for j := len(work) - 1; j >= 0; j-- {
				n.Done(work[j], core.Result{Effects: eff, Outcome: core.Committed})
			}
			if len(n.Ready().Responses) != batch {
				b.Fatal("responses missing")
			}
		}
	})
}

func benchEvent(rev int64) core.Event {
	return core.Event{Rev: rev, Event: &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: rev}}}
}

func BenchmarkRingAppend(b *testing.B) {
	b.ReportAllocs()
	r := core.NewRing(1024, 1)
	ev := benchEvent(1)
	for i := 0; i < b.N; i++ {
		ev.Rev = int64(i + 1)
		r.Append(ev)
	}
}

func BenchmarkRingSince(b *testing.B) {
	const size = 1 << 16
	r := core.NewRing(size, 1)
	for i := int64(1); i <= size; i++ {
		r.Append(benchEvent(i))
	}
	for _, tail := range []int64{1, 16, 1024} {
		b.Run(fmt.Sprintf("last %d of a full ring", tail), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if evs, ok := r.Since(size - tail + 1); !ok || int64(len(evs)) != tail {
					b.Fatal("wrong events")
				}
			}
		})
	}
}

// benchEngine returns memkv holding keys key0000..key(n-1), written
// through a node so the records are exactly what Axon stores.
func benchEngine(b *testing.B, n int) (*memkv.Engine, int64) {
	b.Helper()
	ctx := context.Background()
	eng := memkv.New()
	node := core.NewNode(core.Config{}, core.State{})
	for i := 0; i < n; i++ {
		node.Propose(core.RequestID(i+1), putOp(fmt.Sprintf("key%04d", i), "value"))
		for _, w := range node.Ready().Work {
			eff, out, _ := driver.Run(ctx, eng, w, node)
			node.Done(w, core.Result{Effects: eff, Outcome: out})
		}
	}
	if node.Committed() != int64(n) {
		b.Fatalf("loaded to r%d, want r%d", node.Committed(), n)
	}
	return eng, node.Committed()
}

func BenchmarkEvaluatePut(b *testing.B) {
	eng, c := benchEngine(b, 100)
	ctx := context.Background()
	req := putOp("key0042", "new value")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		txn, err := eng.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// Nothing commits, so every revision above C is fresh.
		w := &core.Work{Kind: core.WorkRequest, Rev: c + 1 + int64(i), ID: 1, Request: req, Committed: c}
		eff, err := core.Evaluate(storage.NewReader(txn), w)
		if err != nil || eff.Late || len(eff.Writes) == 0 {
			b.Fatalf("evaluate: %+v, %v", eff, err)
		}
		txn.Rollback()
	}
}

func BenchmarkHistoryKey(b *testing.B) {
	for _, k := range []struct{ name, key string }{
		{"plain 16-byte key", "/registry/pods/a"},
		{"key with zero bytes", "a\x00b\x00c\x00d\x00e\x00f\x00g\x00h"},
	} {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			key := []byte(k.key)
			for i := 0; i < b.N; i++ {
				_ = core.HistoryKey(key, int64(i))
			}
		})
	}
}

func BenchmarkRange(b *testing.B) {
	eng, c := benchEngine(b, 1000)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *pb.RangeRequest
		want int
	}{
		{"all 1000 keys", &pb.RangeRequest{Key: []byte("key"), RangeEnd: []byte("kez")}, 1000},
		{"first 10 of 1000 keys", &pb.RangeRequest{Key: []byte("key"), RangeEnd: []byte("kez"), Limit: 10}, 10},
		{"one key", &pb.RangeRequest{Key: []byte("key0500")}, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				txn, err := eng.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				resp, err := core.Range(storage.NewReader(txn), tc.req, c, 0)
				if err != nil || len(resp.Kvs) != tc.want {
					b.Fatalf("range: %d kvs, %v", len(resp.GetKvs()), err)
				}
				txn.Rollback()
			}
		})
	}
}

// BenchmarkCommitAmongWatchers commits puts, each into one of 5,000
// namespaces, each namespace watched (a reconnect storm's aftermath):
// a commit should cost the watchers it touches, not all of them.
func BenchmarkCommitAmongWatchers(b *testing.B) {
	s := newScene(b, core.Config{})
	const watchers = 5000
	for i := range watchers {
		ns := fmt.Sprintf("/ns/%04d/", i)
		if err := s.node.AddWatch(core.Watch{ID: core.WatchID(i + 1), Key: []byte(ns), End: []byte(fmt.Sprintf("/ns/%04d0", i))}); err != nil {
			b.Fatal(err)
		}
	}
	s.collect()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := core.RequestID(i + 1)
		s.propose(id, putOp(fmt.Sprintf("/ns/%04d/obj", i%watchers), "v"))
		s.settle()
		if len(s.watch) != 1 {
			b.Fatalf("%d watch responses to one put, want 1", len(s.watch))
		}
		s.watch, s.resps, s.out = s.watch[:0], s.resps[:0], s.out[:0]
	}
}

// BenchmarkNodeCreate is one Kubernetes create (Txn If ModRevision==0
// Then Put Else Get) through everything core and the driver's apply layer do for it:
// propose, latch, evaluate undealt, deal, evaluate again, buffer, commit
// (memkv), report and release the response.
func BenchmarkNodeCreate(b *testing.B) {
	ctx := context.Background()
	eng := memkv.New()
	node := core.NewNode(core.Config{}, core.State{})
	value := []byte(fmt.Sprintf("%0512d", 0))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := []byte(fmt.Sprintf("/registry/pods/ns/pod-%08d", i))
		node.Propose(core.RequestID(i+1), &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: value}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
		}}})
		for _, w := range node.Ready().Work {
			eff, out, _ := driver.Run(ctx, eng, w, node)
			node.Done(w, core.Result{Effects: eff, Outcome: out})
		}
		rs := node.Ready().Responses
		if len(rs) != 1 || rs[0].Err != nil || !rs[0].Response.GetResponseTxn().GetSucceeded() {
			b.Fatalf("create: %+v", rs)
		}
	}
}
