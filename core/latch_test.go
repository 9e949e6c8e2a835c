package core_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// casOp is Kubernetes' update: if key's mod revision is modRev, put val.
func casOp(key string, modRev int64, val string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: modRev}}},
		Success: []*pb.RequestOp{putOp(key, val)},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}},
	}}}
}

func TestRequestsOnOneKeyWaitForEachOther(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.propose(2, casOp("a", 1, "2"))
	s.propose(3, putOp("b", "3"))
	s.propose(4, casOp("a", 1, "4"))
	// Only the first request on a is dealt; b is independent.
	s.expect(`work r1 req1 put "a"="1"`, `work r2 req3 put "b"="3"`)
	s.runRev(2)
	s.expect()
	// Once it is applied, the requests queued behind it go together, in
	// order, in one transaction: each reads what the one before wrote.
	// Both go out undealt: each is dealt only if it turns out to write.
	s.runRev(1)
	s.expect(`batch [work req2 txn cmp=1 then=1 else=1; work req4 txn cmp=1 then=1 else=1]`, "resp req1 r1", "resp req3 r2")
	s.runReq(2)
	// The first CAS writes a at r3; the second fails and changes nothing:
	// it takes no revision and is answered at r3, whose write it read.
	s.expect("resp req2 r3", "resp req4 at r3")
	if ok := s.resps[2].Response.GetResponseTxn().Succeeded; !ok {
		t.Errorf("the first CAS on mod revision 1 failed")
	}
	tr := s.resps[3].Response.GetResponseTxn()
	if tr.Succeeded {
		t.Errorf("the second CAS on mod revision 1 succeeded too (a lost update)")
	}
	if rr := tr.Responses[0].GetResponseRange(); kvs(rr.Kvs) != "a=2@3/1/v2" || tr.Header.Revision != 3 || rr.Header.Revision != 3 {
		t.Errorf("the failed CAS read %s at r%d (range header r%d), want a=2@3/1/v2 at r3", kvs(rr.Kvs), tr.Header.Revision, rr.Header.Revision)
	}
	if s.node.Committed() != 3 {
		t.Errorf("C=%d, want 3: the failed CAS took a revision", s.node.Committed())
	}
}

// TestBatchThatFailsIsDealtAgainRequestByRequest: a batch [put a=2, CAS
// on a's first version, put a=4] fails. Every request is answered exactly
// once, as if the three ran one after another: the puts write, the CAS
// fails and reads a at the revision it is answered at. Retries never race
// on a: at most one work item for it is out at a time, and a request the
// batch left undealt goes out again only once every revision dealt before
// its retry is final (it takes no revision of its own, so no engine
// conflict would order it after an uncertain write).
func TestBatchThatFailsIsDealtAgainRequestByRequest(t *testing.T) {
	const batch = `batch [work req3 txn cmp=1 then=1 else=1 attempt=1; work req4 put "a"="4" attempt=1]`
	cases := []struct {
		name      string
		out       core.Outcome
		evaluated bool // the driver evaluated the batch: its puts were dealt r2 and r3
		landed    bool // and its transaction committed
		trace     []string
		cas       string // what the failed CAS read, at its answer's revision
		committed int64
	}{
		// Nothing was dealt, so nothing needs a fence: req2 goes again
		// alone (a plain put: dealt at once), the others batched behind it.
		{"not applied before evaluation", core.NotApplied, false, false, []string{
			`work r2 req2 put "a"="2" attempt=1`,
			`run work r2 req2 put "a"="2" attempt=1`, batch, "resp req2 r2",
			"run " + batch, "resp req3 at r2", "resp req4 r3",
		}, "a=2@2/1/v2", 3},
		{"uncertain before evaluation", core.Uncertain, false, false, []string{
			`work r2 req2 put "a"="2" attempt=1`,
			`run work r2 req2 put "a"="2" attempt=1`, batch, "resp req2 r2",
			"run " + batch, "resp req3 at r2", "resp req4 r3",
		}, "a=2@2/1/v2", 3},
		// Definitely not applied: the dealt revisions are fenced as
		// no-ops and the requests go again at once, in order.
		{"not applied after evaluation", core.NotApplied, true, false, []string{
			"fence r2 req2 attempt=0", `work r4 req2 put "a"="2" attempt=1`, "fence r3 req4 attempt=0",
			"run fence r2 req2 attempt=0",
			`run work r4 req2 put "a"="2" attempt=1`, batch,
			"run fence r3 req4 attempt=0", "resp req2 r4",
			"run " + batch, "resp req3 at r4", "resp req4 r5",
		}, "a=2@4/1/v2", 5},
		// Uncertain: nothing goes again before the fences say.
		{"uncertain and lost", core.Uncertain, true, false, []string{
			"fence r2 req2 attempt=0", "fence r3 req4 attempt=0",
			"run fence r2 req2 attempt=0", `work r4 req2 put "a"="2" attempt=1`,
			"run fence r3 req4 attempt=0",
			`run work r4 req2 put "a"="2" attempt=1`, batch, "resp req2 r4",
			"run " + batch, "resp req3 at r4", "resp req4 r5",
		}, "a=2@4/1/v2", 5},
		// The puts landed at r2 and r3. The CAS, undealt, goes again
		// only once r3 is final, and reads a=4 there: it was never
		// answered, so it may take effect after req4.
		{"uncertain and landed", core.Uncertain, true, true, []string{
			"fence r2 req2 attempt=0", "fence r3 req4 attempt=0",
			"run fence r2 req2 attempt=0", "resp req2 r2",
			"run fence r3 req4 attempt=0", "work req3 txn cmp=1 then=1 else=1 attempt=1", "resp req4 r3",
			"run work req3 txn cmp=1 then=1 else=1 attempt=1", "resp req3 at r3",
		}, "a=4@3/1/v3", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScene(t, core.Config{})
			s.propose(1, putOp("a", "1"))
			s.propose(2, putOp("a", "2"))
			s.propose(3, casOp("a", 1, "3"))
			s.propose(4, putOp("a", "4"))
			s.expect(`work r1 req1 put "a"="1"`)
			s.runReq(1)
			s.expect(`batch [work req2 put "a"="2"; work req3 txn cmp=1 then=1 else=1; work req4 put "a"="4"]`, "resp req1 r1")
			b := s.takeReq(2)
			var eff *core.Effects
			if tc.evaluated {
				var txn storage.Txn
				txn, eff = s.apply(b)
				if got := core.DescribeWork(b); got != `batch [work r2 req2 put "a"="2"; work req3 txn cmp=1 then=1 else=1; work r3 req4 put "a"="4"]` {
					t.Fatalf("evaluated batch: %s", got)
				}
				if tc.landed {
					if err := txn.Commit(s.ctx); err != nil {
						t.Fatal(err)
					}
				} else {
					txn.Rollback()
				}
			}
			s.node.Done(b, core.Result{Effects: eff, Outcome: tc.out})
			var trace []string
			for step := 0; ; step++ {
				s.collect()
				trace = append(trace, s.out...)
				s.out = nil
				requests := 0
				for _, w := range s.work {
					if w.Kind == core.WorkRequest || w.Kind == core.WorkBatch {
						requests++
					}
				}
				if requests > 1 {
					t.Fatalf("retries race: %d request work items on a out at once (trace %q)", requests, trace)
				}
				if len(s.work) == 0 {
					break
				}
				if step > 20 {
					t.Fatalf("no progress: %q", trace)
				}
				w := s.work[0]
				s.work = s.work[1:]
				trace = append(trace, "run "+core.DescribeWork(w))
				s.run(w)
			}
			if !slices.Equal(trace, tc.trace) {
				t.Fatalf("trace:\n got %s\nwant %s", strings.Join(trace, "\n     "), strings.Join(tc.trace, "\n     "))
			}
			for _, id := range []core.RequestID{2, 3, 4} {
				if r := s.resp(id); r.Err != nil || r.Wrote != (id != 3) {
					t.Fatalf("req%d: %s (wrote=%v)", id, core.DescribeResponse(r), r.Wrote)
				}
			}
			r3 := s.resp(3)
			tr := r3.Response.GetResponseTxn()
			rr := tr.Responses[0].GetResponseRange()
			if tr.Succeeded || kvs(rr.Kvs) != tc.cas || rr.Kvs[0].ModRevision != r3.Rev || tr.Header.Revision != r3.Rev || rr.Header.Revision != r3.Rev {
				t.Fatalf("the CAS at r%d: %v, want it to fail reading %s", r3.Rev, tr, tc.cas)
			}
			got, err := s.rangeAt(&pb.RangeRequest{Key: []byte("a")})
			if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "4" || got.Kvs[0].Version != 3 || s.node.Committed() != tc.committed {
				t.Fatalf("range a: %v, %v; C=%d, want a=4 v3 and C=%d", got, err, s.node.Committed(), tc.committed)
			}
		})
	}
}

func TestUncertainOutcomeHoldsTheLatchUntilFenced(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("a", "2"))
	s.expect(`work r1 req1 put "a"="1"`)
	s.node.Done(s.take(core.WorkRequest, 1), core.Result{Outcome: core.NotApplied})
	// Definitely not applied: dealt again at once, still ahead of req2.
	s.expect("fence r1 req1 attempt=0", `work r2 req1 put "a"="1" attempt=1`)
	w := s.take(core.WorkRequest, 2)
	txn, eff := s.apply(w)
	if err := txn.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.node.Done(w, core.Result{Effects: eff, Outcome: core.Uncertain})
	// Applied, but the engine did not say: req2 waits for the fence.
	s.expect("fence r2 req1 attempt=0")
	s.run(s.take(core.WorkFence, 2))
	s.expect(`work r3 req2 put "a"="2"`)
	s.run(s.take(core.WorkFence, 1))
	s.expect("resp req1 r2")
	s.runRev(3)
	s.expect("resp req2 r3")
}

func TestRangedLatchBlocksOnlyKeysInItsSpan(t *testing.T) {
	del := func(key, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
	}
	s := newScene(t, core.Config{})
	s.propose(1, del("b", "d"))
	s.propose(2, putOp("c", "2"))  // inside: waits
	s.propose(3, putOp("d", "3"))  // the end is excluded
	s.propose(4, putOp("a", "4"))  // before the span
	s.propose(5, del("c", "\x00")) // overlaps the first delete and req2
	s.propose(6, putOp("zz", "6")) // inside req5's unbounded span
	s.propose(7, putOp("a", "7"))  // behind req4
	// A delete may find nothing: it goes out undealt. The puts are dealt.
	s.expect(`work req1 delete "b".."d" serial`, `work r1 req3 put "d"="3"`, `work r2 req4 put "a"="4"`)
	// [b, d) is empty: the delete takes no revision. It is answered at r2,
	// the newest revision dealt, once C reaches it: neither r1 nor r2
	// writes in its span, and req2's put of c (r3) comes after.
	s.runReq(1)
	s.expect(`work r3 req2 put "c"="2"`)
	s.runReq(4)
	s.expect(`work r4 req7 put "a"="7"`)
	s.runReq(2)
	s.runReq(3)
	// req5, serial, waits for r4 (dealt before it) to be final.
	s.expect("resp req3 r1", "resp req4 r2", "resp req1 at r2", "resp req2 r3")
	s.runReq(7)
	s.expect(`work req5 delete "c".."\x00" serial`, "resp req7 r4")
	// It deletes c and d: dealt r5.
	s.runReq(5)
	s.expect(`work r6 req6 put "zz"="6"`, "resp req5 r5")
	s.runReq(6)
	s.expect("resp req6 r6")
	if dr := s.resp(5).Response.GetResponseDeleteRange(); dr.Deleted != 2 || dr.Header.Revision != 5 {
		t.Fatalf("req5 deleted %d keys at r%d, want c and d at r5", dr.Deleted, dr.Header.Revision)
	}
	if dr := s.resp(1).Response.GetResponseDeleteRange(); dr.Deleted != 0 || dr.Header.Revision != 2 {
		t.Fatalf("req1 deleted %d keys at r%d, want none at r2", dr.Deleted, dr.Header.Revision)
	}
}

func TestRevokeLatchesEveryKey(t *testing.T) {
	s := newScene(t, core.Config{})
	s.node.Grant(1, 100, 10)
	s.settle()
	s.propose(2, putOpLease("a", "2", 100))
	s.settle()
	s.out = nil
	s.propose(3, putOp("x", "3"))
	s.node.Revoke(4, 100)
	s.propose(5, putOp("y", "5"))
	// The grant took no revision: a is r1. The revoke waits for the put
	// of x; the put of y for the revoke.
	s.expect(`work r2 req3 put "x"="3"`)
	s.runReq(3)
	// A revoke may find no keys: it goes out undealt.
	s.expect(`work req4 revoke lease100 keys=1 serial`, "resp req3 r2")
	// It deletes a: dealt r3.
	s.runReq(4)
	s.expect(`work r4 req5 put "y"="5"`, "resp req4 r3")
	s.runReq(5)
	s.expect("resp req5 r4")
}

func TestWaitingPutOfARevokedLeaseGivesWay(t *testing.T) {
	s := newScene(t, core.Config{})
	s.node.Grant(1, 100, 10)
	s.settle()
	s.out = nil
	s.propose(2, putOp("a", "2"))
	s.propose(3, putOpLease("a", "3", 100))
	s.node.Revoke(4, 100)
	s.expect(`work r1 req2 put "a"="2"`)
	// req3 gets its turn while the lease is being revoked: it parks and
	// lets go of its latch, or the revoke (which waits for every latch)
	// and req3 would wait for each other.
	s.runReq(2)
	s.expect(`work req4 revoke lease100 keys=0 serial`, "resp req2 r1")
	// The lease has no keys: its revoke deletes nothing and takes no
	// revision, as in etcd; it is answered at r1.
	s.runReq(4)
	s.expect(`resp req3 err="etcdserver: requested lease not found"`, "resp req4 at r1")
	if s.node.Committed() != 1 || len(s.node.Leases()) != 0 {
		t.Fatalf("C=%d leases=%v after the revoke, want r1 and none", s.node.Committed(), s.node.Leases())
	}
}

func TestDrainAnswersRequestsWaitingInLatches(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("a", "2"))
	s.propose(3, putOp("b", "3"))
	s.expect(`work r1 req1 put "a"="1"`, `work r2 req3 put "b"="3"`)
	s.node.Drain()
	// req2 was never dealt: the client may send it to the successor.
	s.expect(`resp req2 err="etcdserver: not leader"`)
	s.propose(4, putOp("c", "4"))
	s.expect(`resp req4 err="etcdserver: not leader"`)
	s.runRev(1)
	s.runRev(2)
	s.expect("resp req1 r1", "resp req3 r2")
	if n := s.node.InFlight(); n != 0 {
		t.Fatalf("%d revisions in flight after the drain", n)
	}
}

// TestContentionNeverExhaustsRetries: a hundred CAS requests on one key,
// each from a client that read the key's latest mod revision, finish with
// exactly one success per mod revision and never a retry.
func TestContentionNeverExhaustsRetries(t *testing.T) {
	s := newScene(t, core.Config{MaxAttempts: 2})
	s.propose(1, putOp("hot", "0"))
	s.settle()
	modRev := s.node.Committed()
	wins := 0
	for round := range 10 {
		for i := range 10 {
			id := core.RequestID(100 + round*10 + i)
			s.propose(id, casOp("hot", modRev, fmt.Sprint(id)))
		}
		s.settle()
		for _, r := range s.resps[len(s.resps)-10:] {
			if r.Err != nil {
				t.Fatalf("round %d: %v", round, r.Err)
			}
			if ok := r.Response.GetResponseTxn().Succeeded; ok != r.Wrote {
				t.Fatalf("round %d: req%d succeeded=%v wrote=%v", round, r.ID, ok, r.Wrote)
			} else if ok {
				wins++
				modRev = r.Rev
			}
		}
		if wins != round+1 {
			t.Fatalf("after round %d: %d CAS succeeded, want %d", round, wins, round+1)
		}
	}
	// Only the winners took revisions: the failed CAS left no gaps.
	if s.node.Committed() != int64(1+wins) {
		t.Fatalf("C=%d after %d writes", s.node.Committed(), 1+wins)
	}
	for _, out := range s.out {
		if strings.Contains(out, "attempt=") || strings.Contains(out, "fence") {
			t.Fatalf("a request was dealt again: %s", out)
		}
	}
}

func putOpLease(key, val string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(val), Lease: lease}}}
}

func TestTooManyPendingRequestsAreRefused(t *testing.T) {
	s := newScene(t, core.Config{MaxPending: 3})
	for id := range core.RequestID(5) {
		s.propose(id+1, putOp("hot", "v"))
	}
	s.expect(`work r1 req1 put "hot"="v"`, `resp req4 err="etcdserver: too many requests"`, `resp req5 err="etcdserver: too many requests"`)
	s.settle()
	s.out = nil
	s.propose(6, putOp("hot", "v"))
	s.expect(`work r4 req6 put "hot"="v"`)
}
