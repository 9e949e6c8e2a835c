package core_test

import (
	"context"
	"reflect"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// TestRedealEqualsEvaluate: finishing an undealt evaluation at the dealt
// revision (Redeal) gives exactly what evaluating the work afresh at that
// revision gives: writes, events, response, lateness.
func TestRedealEqualsEvaluate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		eng := memkv.New()
		node := core.NewNode(core.Config{}, core.State{})
		h := &harness{}
		for i, n := 0, rapid.IntRange(0, 12).Draw(t, "writes"); i < n; i++ {
			node.Propose(core.RequestID(i+1), genRequest(t, h, 0))
			for {
				work := node.Ready().Work
				if len(work) == 0 {
					break
				}
				for _, w := range work {
					eff, out, _ := driver.Run(ctx, eng, w, node)
					node.Done(w, core.Result{Effects: eff, Outcome: out})
				}
			}
		}
		c := node.Committed()
		req := genRequest(t, h, 0)
		serial := hasRange(req)
		// A revision at or below a key's touch makes the work late.
		rev := c + int64(rapid.IntRange(-2, 2).Draw(t, "rev"))
		if rev < 1 {
			rev = 1
		}

		txn, err := eng.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txn.Rollback()
		rd := storage.NewReader(txn)
		w := &core.Work{Kind: core.WorkRequest, ID: 1, Request: req, Serial: serial, Committed: c, Term: 1}
		probe, err := core.Evaluate(rd, w)
		if err != nil || !probe.NeedsRevision() {
			return // answered undealt, or failed: nothing to deal
		}
		w.Rev = rev
		got, gerr := core.Redeal(rd, w, probe)
		fresh := &core.Work{Kind: core.WorkRequest, ID: 1, Request: req, Serial: serial, Committed: c, Term: 1, Rev: rev}
		want, werr := core.Evaluate(rd, fresh)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%s at r%d: Redeal error %v, Evaluate %v", core.DescribeRequest(req), rev, gerr, werr)
		}
		if gerr != nil {
			return
		}
		if got.Late != want.Late || !reflect.DeepEqual(got.Writes, want.Writes) || !proto.Equal(got.Response, want.Response) || !reflect.DeepEqual(got.Err, want.Err) {
			t.Fatalf("%s at r%d:\nRedeal   late %v writes %v response %v\nEvaluate late %v writes %v response %v",
				core.DescribeRequest(req), rev, got.Late, got.Writes, got.Response, want.Late, want.Writes, want.Response)
		}
		if len(got.Events) != len(want.Events) {
			t.Fatalf("%s: %d events, want %d", core.DescribeRequest(req), len(got.Events), len(want.Events))
		}
		for i := range got.Events {
			if got.Events[i].Rev != want.Events[i].Rev || !proto.Equal(got.Events[i].Event, want.Events[i].Event) {
				t.Fatalf("%s: event %d %v, want %v", core.DescribeRequest(req), i, got.Events[i], want.Events[i])
			}
		}
	})
}

// hasRange reports whether a request names a key range anywhere (the
// node would hand it out serial).
func hasRange(op *pb.RequestOp) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestDeleteRange:
		return len(tv.RequestDeleteRange.GetRangeEnd()) > 0
	case *pb.RequestOp_RequestRange:
		return len(tv.RequestRange.GetRangeEnd()) > 0
	case *pb.RequestOp_RequestTxn:
		for _, c := range tv.RequestTxn.GetCompare() {
			if len(c.GetRangeEnd()) > 0 {
				return true
			}
		}
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.GetSuccess(), tv.RequestTxn.GetFailure()} {
			for _, o := range ops {
				if hasRange(o) {
					return true
				}
			}
		}
	}
	return false
}
