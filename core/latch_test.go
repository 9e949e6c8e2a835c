package core_test

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
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
	s.runRev(1)
	s.expect(`batch [work r3 req2 txn cmp=1 then=1 else=1; work r4 req4 txn cmp=1 then=1 else=1]`, "resp req1 r1", "resp req3 r2")
	s.run(s.take(core.WorkBatch, 3))
	s.expect("resp req2 r3", "resp req4 r4")
	if ok := s.resps[2].Response.GetResponseTxn().Succeeded; !ok {
		t.Errorf("the first CAS on mod revision 1 failed")
	}
	if ok := s.resps[3].Response.GetResponseTxn().Succeeded; ok {
		t.Errorf("the second CAS on mod revision 1 succeeded too (a lost update)")
	}
}

func TestBatchThatFailsIsDealtAgainRequestByRequest(t *testing.T) {
	for _, out := range []core.Outcome{core.NotApplied, core.Uncertain} {
		t.Run(fmt.Sprintf("outcome %d", out), func(t *testing.T) {
			s := newScene(t, core.Config{})
			s.propose(1, putOp("a", "1"))
			s.propose(2, putOp("a", "2"))
			s.propose(3, putOp("a", "3"))
			s.collect()
			s.runRev(1)
			s.collect()
			b := s.take(core.WorkBatch, 2)
			s.out = nil
			s.node.Report(b, nil, out)
			// Dealt again one after another, not all at once: retries
			// that raced on a hot key would conflict in the engine.
			s.expect("fence r2 req2 attempt=0", `work r4 req2 put "a"="2" attempt=1`, "fence r3 req3 attempt=0")
			s.runRev(4)
			s.expect(`work r5 req3 put "a"="3" attempt=1`)
			s.settle()
			got := fmt.Sprint(s.resps[1].Rev < s.resps[2].Rev, s.resps[1].Err, s.resps[2].Err)
			if got != "true <nil> <nil>" {
				t.Fatalf("after a failed batch: %v", s.resps)
			}
			r, err := s.rangeAt(&pb.RangeRequest{Key: []byte("a")})
			if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "3" || r.Kvs[0].Version != 3 {
				t.Fatalf("range a: %v, %v", r, err)
			}
		})
	}
}

func TestUncertainOutcomeHoldsTheLatchUntilFenced(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("a", "2"))
	s.expect(`work r1 req1 put "a"="1"`)
	s.node.Report(s.take(core.WorkRequest, 1), nil, core.NotApplied)
	// Definitely not applied: dealt again at once, still ahead of req2.
	s.expect("fence r1 req1 attempt=0", `work r2 req1 put "a"="1" attempt=1`)
	w := s.take(core.WorkRequest, 2)
	txn, eff := s.apply(w)
	if err := txn.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.node.Report(w, eff, core.Uncertain)
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
	s.expect(`work r1 req1 delete "b".."d" serial`, `work r2 req3 put "d"="3"`, `work r3 req4 put "a"="4"`)
	s.runRev(1)
	s.expect(`work r4 req2 put "c"="2"`, "resp req1 r1")
	s.runRev(3)
	s.expect(`work r5 req7 put "a"="7"`)
	s.runRev(4)
	s.runRev(2)
	// req5 is dealt r6 but, serial, waits for r5 to be final.
	s.expect("resp req3 r2", "resp req4 r3", "resp req2 r4")
	s.runRev(5)
	s.expect(`work r6 req5 delete "c".."\x00" serial`, "resp req7 r5")
	s.runRev(6)
	s.expect(`work r7 req6 put "zz"="6"`, "resp req5 r6")
	s.runRev(7)
	s.expect("resp req6 r7")
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
	// The revoke waits for the put of x; the put of y for the revoke.
	s.expect(`work r3 req3 put "x"="3"`)
	s.runRev(3)
	s.expect(`work r4 req4 revoke lease100 keys=1 serial`, "resp req3 r3")
	s.runRev(4)
	s.expect(`work r5 req5 put "y"="5"`, "resp req4 r4")
	s.runRev(5)
	s.expect("resp req5 r5")
}

func TestWaitingPutOfARevokedLeaseGivesWay(t *testing.T) {
	s := newScene(t, core.Config{})
	s.node.Grant(1, 100, 10)
	s.settle()
	s.out = nil
	s.propose(2, putOp("a", "2"))
	s.propose(3, putOpLease("a", "3", 100))
	s.node.Revoke(4, 100)
	s.expect(`work r2 req2 put "a"="2"`)
	// req3 gets its turn while the lease is being revoked: it parks and
	// lets go of its latch, or the revoke (which waits for every latch)
	// and req3 would wait for each other.
	s.runRev(2)
	s.expect(`work r3 req4 revoke lease100 keys=0 serial`, "resp req2 r2")
	s.runRev(3)
	s.expect(`resp req3 err="etcdserver: requested lease not found"`, "resp req4 r3")
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
			if r.Response.GetResponseTxn().Succeeded {
				wins++
				modRev = r.Rev
			}
		}
		if wins != round+1 {
			t.Fatalf("after round %d: %d CAS succeeded, want %d", round, wins, round+1)
		}
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
