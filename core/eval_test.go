package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// scene drives one core.Node over memkv by hand, so a test decides the
// order in which work runs and reports, and checks every output.
type scene struct {
	t     testing.TB
	ctx   context.Context
	eng   *memkv.Engine
	node  *core.Node
	work  []*core.Work    // handed out, not run yet
	out   []string        // described outputs since the last expect
	resps []core.Response // every response, in release order
	watch []core.WatchResponse
}

func newScene(t testing.TB, cfg core.Config) *scene {
	t.Helper()
	s := &scene{t: t, ctx: context.Background(), eng: memkv.New()}
	st, err := driver.Recover(s.ctx, s.eng)
	if err != nil {
		t.Fatalf("recover an empty engine: %v", err)
	}
	if st.Committed != 1 {
		t.Fatalf("an empty engine is at revision %d, want 1 as in etcd", st.Committed)
	}
	// The scenarios count revisions from 1 for readability.
	st.Committed = 0
	s.node = core.NewNode(cfg, st)
	return s
}

// collect takes the node's outputs and checks its invariants.
func (s *scene) collect() {
	s.t.Helper()
	if err := s.node.Invariants(); err != nil {
		s.t.Fatalf("invariants: %v", err)
	}
	rd := s.node.Ready()
	if s.node.HasReady() {
		s.t.Fatalf("Ready left outputs behind")
	}
	if rd.Committed != s.node.Committed() {
		s.t.Fatalf("Ready.Committed %d, node says %d", rd.Committed, s.node.Committed())
	}
	for _, w := range rd.Work {
		s.work = append(s.work, w)
		s.out = append(s.out, core.DescribeWork(w))
	}
	for _, r := range rd.Responses {
		s.resps = append(s.resps, r)
		s.out = append(s.out, core.DescribeResponse(r))
	}
	for _, wr := range rd.WatchResponses {
		s.watch = append(s.watch, wr)
		s.out = append(s.out, core.DescribeWatchResponse(wr))
	}
}

// expect checks the outputs described since the last call.
func (s *scene) expect(want ...string) {
	s.t.Helper()
	s.collect()
	if want == nil {
		want = []string{}
	}
	got := s.out
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		s.t.Fatalf("outputs:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	s.out = nil
}

func (s *scene) propose(id core.RequestID, op *pb.RequestOp) { s.node.Propose(id, op) }

// take removes the handed-out work matching kind and revision.
func (s *scene) take(kind core.WorkKind, rev int64) *core.Work {
	s.t.Helper()
	for i, w := range s.work {
		if w.Kind == kind && (w.Rev == rev || kind == core.WorkCatchUp) {
			s.work = slices.Delete(s.work, i, i+1)
			return w
		}
	}
	s.t.Fatalf("no %v work at r%d among %d", kind, rev, len(s.work))
	return nil
}

// run runs one work item in its own engine transaction and reports it.
func (s *scene) run(w *core.Work) {
	s.t.Helper()
	if w.Kind == core.WorkCatchUp {
		evs, last, err := driver.CatchUp(s.ctx, s.eng, w, 0)
		s.node.Done(w, core.Result{Events: evs, Last: last, Err: err})
		return
	}
	eff, out, _ := driver.Run(s.ctx, s.eng, w, s.node)
	s.node.Done(w, core.Result{Effects: eff, Outcome: out})
}

func (s *scene) runRev(rev int64) { s.t.Helper(); s.run(s.take(core.WorkRequest, rev)) }

// takeReq removes the handed-out work of request id, dealt or not: the
// WorkRequest of that request, or the WorkBatch holding it. Exactly one
// handed-out item may match.
func (s *scene) takeReq(id core.RequestID) *core.Work {
	s.t.Helper()
	found := -1
	for i, w := range s.work {
		match := w.Kind == core.WorkRequest && w.ID == id
		if w.Kind == core.WorkBatch {
			for _, sub := range w.Batch {
				match = match || sub.ID == id
			}
		}
		if !match {
			continue
		}
		if found >= 0 {
			s.t.Fatalf("two handed-out work items for req%d: %s and %s", id, core.DescribeWork(s.work[found]), core.DescribeWork(w))
		}
		found = i
	}
	if found < 0 {
		s.t.Fatalf("no work for req%d among %d", id, len(s.work))
	}
	w := s.work[found]
	s.work = slices.Delete(s.work, found, found+1)
	return w
}

// resp returns the one response released to request id.
func (s *scene) resp(id core.RequestID) core.Response {
	s.t.Helper()
	var found []core.Response
	for _, r := range s.resps {
		if r.ID == id {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		s.t.Fatalf("%d responses to req%d, want one", len(found), id)
	}
	return found[0]
}

// runReq runs the handed-out work of request id (see takeReq).
func (s *scene) runReq(id core.RequestID) { s.t.Helper(); s.run(s.takeReq(id)) }

// apply evaluates w in a new engine transaction and buffers its writes
// there, leaving the commit (and the report) to the test.
func (s *scene) apply(w *core.Work) (storage.Txn, *core.Effects) {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	eff, err := driver.Apply(txn, w, s.node)
	if err != nil {
		s.t.Fatalf("evaluate %s: %v", core.DescribeWork(w), err)
	}
	return txn, eff
}

// settle runs all work, oldest first, until the node is idle.
func (s *scene) settle() {
	s.t.Helper()
	for i := 0; ; i++ {
		s.collect()
		if len(s.work) == 0 {
			return
		}
		if i > 1000 {
			s.t.Fatalf("no progress: %d work items left", len(s.work))
		}
		w := s.work[0]
		s.work = s.work[1:]
		s.run(w)
	}
}

// rangeAt runs core.Range against a fresh snapshot at the node's C.
func (s *scene) rangeAt(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	s.t.Helper()
	return s.rangeFrom(req, s.node.Committed())
}

// rangeFrom is rangeAt with the commit point a reader knows, which may
// be older than the node's (a follower's).
func (s *scene) rangeFrom(req *pb.RangeRequest, committed int64) (*pb.RangeResponse, error) {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer txn.Rollback()
	return core.Range(storage.NewReader(txn), req, committed, s.node.Compacted())
}

// kvs renders key-values as k=v@mod/create/version.
func kvs(list []*mvccpb.KeyValue) string {
	parts := make([]string, len(list))
	for i, kv := range list {
		parts[i] = fmt.Sprintf("%s=%s@%d/%d/v%d", kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version)
	}
	return strings.Join(parts, " ")
}

func putOp(key, val string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(val)}}}
}

func rangeOp(key, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
}

func TestTxn(t *testing.T) {
	cases := []struct {
		name      string
		value     string // compared against a's value "1"
		succeeded bool
		rev       int64  // the store's revision after the txn: its header
		resp      string // the txn's described response
		want      string // rendered responses of the branch taken
	}{
		// The else branch only reads: the txn changes nothing, so as in
		// etcd it takes no revision and is answered at the store's, r1.
		{"a failing compare returns the else branch range and takes no revision", "2", false, 1, "resp req2 at r1", "range[a=1@1/1/v1]@1"},
		{"a succeeding compare runs the then branch put at its own revision", "1", true, 2, "resp req2 r2", "put@2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScene(t, core.Config{})
			s.propose(1, putOp("a", "1"))
			s.settle()
			txn := &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte(tc.value)}}},
				Success: []*pb.RequestOp{putOp("a", "3")},
				Failure: []*pb.RequestOp{rangeOp("a", "")},
			}
			s.out = nil
			s.propose(2, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}})
			s.expect("work req2 txn cmp=1 then=1 else=1")
			s.runReq(2)
			s.expect(tc.resp)
			r := s.resps[len(s.resps)-1]
			tr := r.Response.GetResponseTxn()
			if r.Err != nil || r.Rev != tc.rev || r.Wrote != tc.succeeded || tr.Succeeded != tc.succeeded || tr.Header.Revision != tc.rev {
				t.Fatalf("response %s (wrote=%v): %v", core.DescribeResponse(r), r.Wrote, tr)
			}
			if s.node.Committed() != tc.rev {
				t.Fatalf("C=%d after the txn, want r%d", s.node.Committed(), tc.rev)
			}
			var parts []string
			for _, op := range tr.Responses {
				switch {
				case op.GetResponseRange() != nil:
					parts = append(parts, fmt.Sprintf("range[%s]@%d", kvs(op.GetResponseRange().Kvs), op.GetResponseRange().Header.Revision))
				case op.GetResponsePut() != nil:
					parts = append(parts, fmt.Sprintf("put@%d", op.GetResponsePut().Header.Revision))
				}
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Fatalf("branch responses %q, want %q", got, tc.want)
			}
			// The next write takes the revision after the store's: a
			// failed compare left no gap.
			s.propose(3, putOp("b", "3"))
			s.expect(fmt.Sprintf(`work r%d req3 put "b"="3"`, tc.rev+1))
		})
	}
}

func TestNestedTxnAndRangeCompare(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("b", "2"))
	s.settle()
	// A ranged compare makes the txn serial; the nested txn's compare
	// fails, so its else branch reads the range sorted by value, desc.
	inner := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("b"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 5}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
			Key: []byte("a"), RangeEnd: []byte("d"), SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND,
		}}}},
	}
	outer := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), RangeEnd: []byte("c"), Target: pb.Compare_MOD, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_ModRevision{ModRevision: 3}}},
		Success: []*pb.RequestOp{putOp("c", "3"), {Request: &pb.RequestOp_RequestTxn{RequestTxn: inner}}},
	}
	s.out = nil
	s.propose(3, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: outer}})
	// A txn may change nothing: it goes out undealt, and is dealt r3
	// only once its evaluation shows it writes c.
	s.expect(`work req3 txn cmp=1 then=2 else=0 serial`)
	s.runReq(3)
	s.expect("resp req3 r3")
	tr := s.resps[len(s.resps)-1].Response.GetResponseTxn()
	nested := tr.GetResponses()[1].GetResponseTxn()
	if !tr.Succeeded || nested.Succeeded {
		t.Fatalf("outer %v nested %v, want true and false", tr.Succeeded, nested.Succeeded)
	}
	// The range sees the txn's own put of c.
	if got := kvs(nested.Responses[0].GetResponseRange().Kvs); got != "c=3@3/3/v1 b=2@2/2/v1 a=1@1/1/v1" {
		t.Fatalf("nested range: %s", got)
	}
}

// revisionRecords lists the revisions with a revision record in the
// engine: the revisions something was written at.
func (s *scene) revisionRecords() []int64 {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer txn.Rollback()
	var revs []int64
	for rev := int64(0); rev <= s.node.Committed()+8; rev++ {
		if _, found, err := storage.NewReader(txn).Get(core.RevisionKey(rev)); err != nil {
			s.t.Fatal(err)
		} else if found {
			revs = append(revs, rev)
		}
	}
	if n := s.countKeys(core.RevisionKey(0)[:5]); n != len(revs) {
		s.t.Fatalf("%d revision records, %d of them at r0..r%d", n, len(revs), s.node.Committed()+8)
	}
	return revs
}

// TestRequestsThatChangeNothingTakeNoRevision: as in etcd, the store's
// revision moves only when a key changes. A txn whose compare fails and
// whose else branch only reads, a delete of a missing key, a put with
// ignore_value on a missing key and a lease grant all go out undealt,
// write no revision record and are answered at the store's revision.
// TestAnswersThatTookNoRevision checks what testdata/scenes/norevision.txt
// does not print: the bodies of answers to requests that changed
// nothing, and that the grant among them still stored its lease.
func TestAnswersThatTookNoRevision(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("b", "2"))
	s.propose(3, casOp("a", 7, "3"))
	s.propose(4, delOp("missing"))
	s.node.Grant(5, 0, 10)
	s.settle()
	for id := core.RequestID(3); id <= 5; id++ {
		if r := s.resp(id); r.Wrote || r.Rev != 2 {
			t.Fatalf("req%d: wrote=%v at r%d, want an answer at r2", id, r.Wrote, r.Rev)
		}
	}
	tr := s.resp(3).Response.GetResponseTxn()
	rr := tr.Responses[0].GetResponseRange()
	if tr.Succeeded || tr.Header.Revision != 2 || rr.Header.Revision != 2 || kvs(rr.Kvs) != "a=1@1/1/v1" {
		t.Fatalf("failed compare: %v", tr)
	}
	if dr := s.resp(4).Response.GetResponseDeleteRange(); dr.Deleted != 0 || dr.Header.Revision != 2 {
		t.Fatalf("delete of a missing key: %v", dr)
	}
	if r := s.resp(5); r.Err != nil || r.Lease != 1 || r.LeaseTTL != 10 {
		t.Fatalf("grant: %+v", r)
	}
	if st, err := driver.Recover(s.ctx, s.eng); err != nil || len(st.Leases) != 1 || st.Leases[0].ID != 1 || st.Committed != 2 {
		t.Fatalf("recovered %+v, %v; want lease 1 at r2", st, err)
	}
}

func TestUncertainCommitIsResolvedByAFence(t *testing.T) {
	cases := []struct {
		name    string
		applied bool // whether the uncertain transaction really landed
		after   []string
	}{
		{"an applied write is answered after its fence", true, []string{"resp req1 r1"}},
		{"a lost write is fenced and dealt again", false, []string{`work r2 req1 put "a"="1" attempt=1`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScene(t, core.Config{})
			s.propose(1, putOp("a", "1"))
			s.collect()
			s.out = nil
			w := s.take(core.WorkRequest, 1)
			txn, eff := s.apply(w)
			if tc.applied {
				if err := txn.Commit(s.ctx); err != nil {
					t.Fatal(err)
				}
			}
			s.node.Done(w, core.Result{Effects: eff, Outcome: core.Uncertain})
			s.expect("fence r1 req1 attempt=0")
			// A fence that fails is simply tried again.
			f := s.take(core.WorkFence, 1)
			s.node.Done(f, core.Result{Outcome: core.NotApplied})
			s.expect("fence r1 req1 attempt=1")
			s.run(s.take(core.WorkFence, 1))
			s.expect(tc.after...)
			if tc.applied {
				return
			}
			// The delayed original can never land over the fence.
			if err := txn.Commit(s.ctx); !errors.Is(err, storage.ErrConflict) {
				t.Fatalf("late commit of the fenced transaction: %v, want a conflict", err)
			}
			s.runRev(2)
			s.expect("resp req1 r2")
		})
	}
}

func TestLateWriteIsDealtAgain(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.expect(`work r1 req1 put "a"="1"`)
	// Latches keep one leader's requests on a key in order, so a key
	// touched by a later revision is another leader's doing: a rival of
	// a later term writes a at r2 first.
	rival := core.NewNode(core.Config{Term: 1}, core.State{Committed: 1})
	rival.Propose(9, putOp("a", "rival"))
	rw := rival.Ready().Work[0]
	txn, _ := s.apply(rw)
	if err := txn.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	// r1 finds a touched by r2: its revision is abandoned, and marked
	// by a fence before C may pass it. r2's record is the rival's, so
	// the request goes on to r3.
	s.runRev(1)
	s.expect("fence r1 req1 attempt=0", `work r2 req1 put "a"="1" attempt=1`)
	s.run(s.take(core.WorkFence, 1))
	s.runRev(2)
	s.expect("fence r2 req1 attempt=0", `work r3 req1 put "a"="1" attempt=2`)
	s.run(s.take(core.WorkFence, 2))
	s.expect()
	s.runRev(3)
	s.expect("resp req1 r3")
	got, err := s.rangeAt(&pb.RangeRequest{Key: []byte("a")})
	if err != nil || kvs(got.Kvs) != "a=1@3/2/v2" {
		t.Fatalf("range a: %v, %v", got, err)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	s := newScene(t, core.Config{MaxAttempts: 2})
	s.propose(1, putOp("a", "1"))
	s.collect()
	s.node.Done(s.take(core.WorkRequest, 1), core.Result{Outcome: core.NotApplied})
	s.collect()
	s.out = nil
	s.node.Done(s.take(core.WorkRequest, 2), core.Result{Outcome: core.NotApplied})
	s.expect("fence r2 req1 attempt=0", `resp req1 err="core: request retried too often; engine keeps failing"`)
	// A report of work the node no longer tracks is ignored.
	s.node.Done(&core.Work{Kind: core.WorkRequest, Rev: 2}, core.Result{Outcome: core.Committed})
	s.expect()
}

func TestReadsAtARevision(t *testing.T) {
	s := newScene(t, core.Config{})
	for i, v := range []string{"1", "2", "3"} {
		s.propose(core.RequestID(i+1), putOp("a", v))
		s.settle()
	}
	s.node.Compact(10, 9)
	s.node.Compact(11, 2)
	s.settle()
	s.node.Compact(12, 1)
	s.collect()
	cases := []struct {
		name string
		rev  int64
		want string
		err  error
	}{
		{"the commit point by default", 0, "a=3@3/1/v3", nil},
		{"the compact revision itself", 2, "a=2@2/1/v2", nil},
		{"a future revision fails", 4, "", core.ErrFutureRev},
		{"a revision below compact fails", 1, "", core.ErrCompacted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.rangeAt(&pb.RangeRequest{Key: []byte("a"), Revision: tc.rev})
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err == nil && kvs(got.Kvs) != tc.want {
				t.Fatalf("got %s, want %s", kvs(got.Kvs), tc.want)
			}
		})
	}
	t.Run("compaction answers in order", func(t *testing.T) {
		want := []string{
			`resp req10 err="mvcc: required revision is a future revision"`,
			"resp req11 at r3", // compaction changes no key: answered at C
			`resp req12 err="mvcc: required revision has been compacted"`,
		}
		var got []string
		for _, r := range s.resps[3:] {
			got = append(got, core.DescribeResponse(r))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	t.Run("a txn reading a future revision gets the error at the current revision", func(t *testing.T) {
		txn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 99}}}}}
		s.propose(20, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}})
		s.settle()
		r := s.resps[len(s.resps)-1]
		// The error changes nothing: it takes no revision, as in etcd.
		if r.ID != 20 || !errors.Is(r.Err, core.ErrFutureRev) || r.Rev != 3 || r.Wrote || s.node.Committed() != 3 {
			t.Fatalf("got %s at r%d (wrote=%v), C=%d", core.DescribeResponse(r), r.Rev, r.Wrote, s.node.Committed())
		}
	})
	t.Run("a txn reading an old revision sees that version", func(t *testing.T) {
		txn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 2}}}}}
		s.propose(21, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}})
		s.settle()
		r := s.resps[len(s.resps)-1]
		tr := r.Response.GetResponseTxn()
		got := tr.Responses[0].GetResponseRange()
		// A read-only txn is a read at the current revision, r3.
		if r.Err != nil || kvs(got.Kvs) != "a=2@2/1/v2" || r.Rev != 3 || r.Wrote || tr.Header.Revision != 3 || got.Header.Revision != 3 || s.node.Committed() != 3 {
			t.Fatalf("got %s: %v", core.DescribeResponse(r), tr)
		}
	})
}

func TestRangeShapesItsResult(t *testing.T) {
	s := newScene(t, core.Config{})
	for i, kv := range [][2]string{{"a", "3"}, {"b", "1"}, {"c", "2"}, {"b", "4"}} {
		s.propose(core.RequestID(i+1), putOp(kv[0], kv[1]))
	}
	s.settle()
	all := func(r *pb.RangeRequest) *pb.RangeRequest { r.Key, r.RangeEnd = []byte("a"), []byte("\x00"); return r }
	cases := []struct {
		name      string
		req       *pb.RangeRequest
		want      string
		count     int64
		more      bool
		keysOnly  bool
		countOnly bool
	}{
		{"a prefix range lists keys in order", all(&pb.RangeRequest{}), "a=3@1/1/v1 b=4@4/2/v2 c=2@3/3/v1", 3, false, false, false},
		{"a limit cuts the list and says more", all(&pb.RangeRequest{Limit: 2}), "a=3@1/1/v1 b=4@4/2/v2", 3, true, false, false},
		{"count only returns no keys", all(&pb.RangeRequest{CountOnly: true}), "", 3, false, false, true},
		{"keys only drops values", all(&pb.RangeRequest{KeysOnly: true}), "a=@1/1/v1 b=@4/2/v2 c=@3/3/v1", 3, false, true, false},
		{"sort by version descending", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_DESCEND}), "b=4@4/2/v2 a=3@1/1/v1 c=2@3/3/v1", 3, false, false, false},
		{"sort by create revision defaults to ascending", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE}), "a=3@1/1/v1 b=4@4/2/v2 c=2@3/3/v1", 3, false, false, false},
		{"sort by mod revision ascending", all(&pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_ASCEND}), "a=3@1/1/v1 c=2@3/3/v1 b=4@4/2/v2", 3, false, false, false},
		{"sort by key descending", all(&pb.RangeRequest{SortOrder: pb.RangeRequest_DESCEND}), "c=2@3/3/v1 b=4@4/2/v2 a=3@1/1/v1", 3, false, false, false},
		{"mod and create revision filters", all(&pb.RangeRequest{MinModRevision: 2, MaxModRevision: 4, MinCreateRevision: 1, MaxCreateRevision: 2}), "b=4@4/2/v2", 3, false, false, false},
		{"a range over a later-modified key reads history", all(&pb.RangeRequest{Revision: 3}), "a=3@1/1/v1 b=1@2/2/v1 c=2@3/3/v1", 3, false, false, false},
		{"an empty range has nothing", &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte("a")}, "", 0, false, false, false},
		{"a missing single key has nothing", &pb.RangeRequest{Key: []byte("zz")}, "", 0, false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.rangeAt(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if kvs(got.Kvs) != tc.want || got.Count != tc.count || got.More != tc.more || got.Header.Revision != 4 {
				t.Fatalf("got %s count=%d more=%v hdr=%d", kvs(got.Kvs), got.Count, got.More, got.Header.Revision)
			}
		})
	}
	if _, err := s.rangeAt(&pb.RangeRequest{}); !errors.Is(err, core.ErrEmptyKey) {
		t.Fatalf("range of an empty key: %v", err)
	}
}

func TestProposeRefusesInvalidRequestsAtOnce(t *testing.T) {
	s := newScene(t, core.Config{MaxTxnOps: 1})
	s.propose(1, &pb.RequestOp{})
	s.propose(2, putOp("", "v"))
	s.propose(3, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{}}})
	s.propose(4, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "1"), putOp("b", "2")}}}})
	s.propose(5, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), Lease: 77}}})
	s.expect(
		`resp req1 err="etcdserver: key not found"`,
		`resp req2 err="etcdserver: key is not provided"`,
		`resp req3 err="etcdserver: key is not provided"`,
		`resp req4 err="etcdserver: too many operations in txn request"`,
		`resp req5 err="etcdserver: requested lease not found"`,
	)
	if s.node.Committed() != 0 || s.node.Config().MaxTxnOps != 1 || s.node.Config().RingSize != 1<<16 {
		t.Fatalf("C=%d config=%+v", s.node.Committed(), s.node.Config())
	}
}

// Propose must answer a request whose oneof holds a nil message (a Go
// caller can build one) with an error, as Txn validation already does,
// not crash the node.
func TestProposeOfANilRequestMessageIsRefused(t *testing.T) {
	cases := []struct {
		name string
		op   *pb.RequestOp
	}{
		{"a nil put", &pb.RequestOp{Request: &pb.RequestOp_RequestPut{}}},
		{"a nil delete", &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{}}},
		{"a nil txn", &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is answered with an error", func(t *testing.T) {
			s := newScene(t, core.Config{})
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Propose panicked: %v", r)
					}
				}()
				s.propose(1, tc.op)
			}()
			s.collect()
			if len(s.resps) != 1 || s.resps[0].Err == nil || len(s.work) != 0 {
				t.Fatalf("got %q", s.out)
			}
		})
	}
}

func TestPutWithIgnoreValueNeedsAnExistingKey(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), IgnoreValue: true}}})
	// It may be refused, so it goes out undealt; refused, it takes no
	// revision (etcd's store revision does not move on the error).
	s.expect(`work req1 put "a"=""`)
	s.runReq(1)
	s.expect(`resp req1 err="etcdserver: key not found"`)
	if r := s.resps[0]; r.Wrote || r.Rev != 0 || s.node.Committed() != 0 {
		t.Fatalf("refused put: wrote=%v at r%d, C=%d; want no revision taken", r.Wrote, r.Rev, s.node.Committed())
	}
	s.propose(2, putOp("a", "keep"))
	s.propose(3, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), IgnoreValue: true, PrevKv: true}}})
	s.expect(`work r1 req2 put "a"="keep"`)
	s.runRev(1)
	s.expect(`work req3 put "a"=""`, "resp req2 r1")
	s.runReq(3)
	s.expect("resp req3 r2")
	pr := s.resps[2].Response.GetResponsePut()
	if kvs([]*mvccpb.KeyValue{pr.PrevKv}) != "a=keep@1/1/v1" {
		t.Fatalf("prev kv: %v", pr.PrevKv)
	}
	got, _ := s.rangeAt(&pb.RangeRequest{Key: []byte("a")})
	if kvs(got.Kvs) != "a=keep@2/1/v2" {
		t.Fatalf("after ignore_value put: %s", kvs(got.Kvs))
	}
}

func TestWatch(t *testing.T) {
	t.Run("a watch from C gets new events as they commit", func(t *testing.T) {
		s := newScene(t, core.Config{})
		if err := s.node.AddWatch(core.Watch{ID: 1, Key: []byte("a"), End: []byte("c"), PrevKV: true}); err != nil {
			t.Fatal(err)
		}
		if err := s.node.AddWatch(core.Watch{ID: 2, Key: []byte("a"), NoPut: true}); err != nil {
			t.Fatal(err)
		}
		s.propose(1, putOp("a", "1"))
		s.propose(2, putOp("z", "1"))
		s.propose(3, putOp("b", "1"))
		s.propose(4, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}})
		s.settle()
		var got []string
		for _, wr := range s.watch {
			got = append(got, core.DescribeWatchResponse(wr))
		}
		want := []string{`watch1 r1 [PUT "a"]`, `watch1 r3 [PUT "b"]`, `watch1 r4 [DELETE "a"]`, `watch2 r4 [DELETE "a"]`}
		if !slices.Equal(got, want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
		if s.watch[2].Events[0].PrevKv == nil || s.watch[3].Events[0].PrevKv != nil {
			t.Fatalf("prev_kv sent against the watch's wish")
		}
		if rev, ok := s.node.Progress(1, 2, 99); !ok || rev != 4 {
			t.Fatalf("Progress = %d, %v; want 4, true", rev, ok)
		}
	})

	t.Run("a watch from an old revision with a tiny ring catches up from the engine", func(t *testing.T) {
		s := newScene(t, core.Config{RingSize: 1, CatchUpBatch: 2})
		for i, k := range []string{"a", "b", "c"} {
			s.propose(core.RequestID(i+1), putOp(k, "v"))
		}
		s.settle()
		s.out = nil
		if err := s.node.AddWatch(core.Watch{ID: 7, Key: []byte("a"), End: []byte("\x00"), StartRev: 1}); err != nil {
			t.Fatal(err)
		}
		s.expect("catchup watch7 r1..r2")
		if _, ok := s.node.Progress(7); ok {
			t.Fatalf("Progress ok while the watch catches up")
		}
		w := s.take(core.WorkCatchUp, 0)
		// A failed read is retried.
		s.node.Done(w, core.Result{Err: errors.New("read failed")})
		s.expect("catchup watch7 r1..r2")
		s.run(s.take(core.WorkCatchUp, 0))
		s.expect(`watch7 r3 [PUT "a"] [PUT "b"] [PUT "c"]`)
		// A duplicate completion of the same read is ignored.
		s.node.Done(w, core.Result{Last: 2})
		s.expect()
		if rev, ok := s.node.Progress(7); !ok || rev != 3 {
			t.Fatalf("Progress = %d, %v; want 3, true", rev, ok)
		}
	})

	t.Run("a catch-up read with a limit continues where it stopped", func(t *testing.T) {
		s := newScene(t, core.Config{RingSize: 1})
		for i, k := range []string{"a", "b", "c", "d"} {
			s.propose(core.RequestID(i+1), putOp(k, "v"))
		}
		s.settle()
		s.out = nil
		if err := s.node.AddWatch(core.Watch{ID: 3, Key: []byte("a"), End: []byte("\x00"), StartRev: 1, NoDelete: true}); err != nil {
			t.Fatal(err)
		}
		s.expect("catchup watch3 r1..r4")
		w := s.take(core.WorkCatchUp, 0)
		evs, last, err := driver.CatchUp(s.ctx, s.eng, w, 2)
		if err != nil || last != 2 || len(evs) != 2 {
			t.Fatalf("CatchUp limit 2: %d events, last %d, %v", len(evs), last, err)
		}
		s.node.Done(w, core.Result{Events: evs, Last: last})
		s.expect("catchup watch3 r3..r4", `watch3 r2 [PUT "a"] [PUT "b"]`)
		s.run(s.take(core.WorkCatchUp, 0))
		s.expect(`watch3 r4 [PUT "c"] [PUT "d"]`)
	})

	t.Run("a watch below the compact revision is canceled at once", func(t *testing.T) {
		s := newScene(t, core.Config{})
		s.propose(1, putOp("a", "1"))
		s.propose(2, putOp("a", "2"))
		s.settle()
		s.node.Compact(9, 2)
		s.settle()
		s.out = nil
		if err := s.node.AddWatch(core.Watch{ID: 4, Key: []byte("a"), StartRev: 1}); err != nil {
			t.Fatal(err)
		}
		s.expect("watch4 canceled compact=2")
	})

	t.Run("a catching-up watch is canceled when compaction passes it", func(t *testing.T) {
		s := newScene(t, core.Config{RingSize: 1})
		for i, k := range []string{"a", "b", "c"} {
			s.propose(core.RequestID(i+1), putOp(k, "v"))
		}
		s.settle()
		s.out = nil
		if err := s.node.AddWatch(core.Watch{ID: 5, Key: []byte("a"), End: []byte("\x00"), StartRev: 1}); err != nil {
			t.Fatal(err)
		}
		s.expect("catchup watch5 r1..r3")
		w := s.take(core.WorkCatchUp, 0)
		s.node.Compact(9, 3)
		s.expect("compact r3 req9")
		s.run(s.take(core.WorkCompact, 3))
		s.expect("sweep r3", "resp req9 at r3", "watch5 canceled compact=3")
		// The read that was out is dropped.
		s.run(w)
		s.expect()
		if s.node.CancelWatch(5) {
			t.Fatalf("the canceled watch was still registered")
		}
	})

	t.Run("canceling a watch stops its events", func(t *testing.T) {
		s := newScene(t, core.Config{})
		if err := s.node.AddWatch(core.Watch{ID: 1, Key: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		if !s.node.CancelWatch(1) || s.node.CancelWatch(1) {
			t.Fatalf("CancelWatch should succeed once")
		}
		s.propose(1, putOp("a", "1"))
		s.settle()
		if len(s.watch) != 0 {
			t.Fatalf("events after cancel: %v", s.watch)
		}
	})

	t.Run("registering a watch twice or without a key fails", func(t *testing.T) {
		s := newScene(t, core.Config{})
		if err := s.node.AddWatch(core.Watch{ID: 1, Key: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		if err := s.node.AddWatch(core.Watch{ID: 1, Key: []byte("b")}); !errors.Is(err, core.ErrWatcherExists) {
			t.Fatalf("duplicate id: %v", err)
		}
		if err := s.node.AddWatch(core.Watch{ID: 2}); !errors.Is(err, core.ErrEmptyKey) {
			t.Fatalf("empty key: %v", err)
		}
	})

	t.Run("progress is false for a watch behind C", func(t *testing.T) {
		s := newScene(t, core.Config{})
		s.propose(1, putOp("a", "1"))
		s.settle()
		// A watch from r1 is served from the ring at once.
		if err := s.node.AddWatch(core.Watch{ID: 1, Key: []byte("zz"), StartRev: 1}); err != nil {
			t.Fatal(err)
		}
		if rev, ok := s.node.Progress(1); !ok || rev != 1 {
			t.Fatalf("Progress = %d, %v; want 1, true", rev, ok)
		}
	})
}

func TestRecoverAfterWrites(t *testing.T) {
	s := newScene(t, core.Config{})
	for i, k := range []string{"a", "b", "c", "a"} {
		s.propose(core.RequestID(i+1), putOp(k, "v"))
	}
	s.settle()
	s.node.Compact(10, 3)
	s.settle()
	st, err := driver.Recover(s.ctx, s.eng)
	if err != nil {
		t.Fatal(err)
	}
	if st.Committed != 4 || st.Compacted != 3 || len(st.Leases) != 0 {
		t.Fatalf("Recover = %+v, want committed 4, compacted 3", st)
	}
	// A node started from it continues the revision sequence.
	s.node = core.NewNode(core.Config{}, st)
	s.out = nil
	s.propose(20, putOp("d", "v"))
	s.expect("sweep r3", `work r5 req20 put "d"="v"`) // a predecessor's sweep may be unfinished
	if s.node.Compacted() != 3 {
		t.Fatalf("Compacted = %d", s.node.Compacted())
	}
}

func TestRecoverRejectsABadCompactRecord(t *testing.T) {
	eng := memkv.New()
	txn, _ := eng.Begin(context.Background())
	if err := txn.Set(core.MetaKey(core.MetaCompact), []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := driver.Recover(context.Background(), eng); !errors.Is(err, core.ErrBadRecord) {
		t.Fatalf("got %v, want ErrBadRecord", err)
	}
}

// TestLeases checks what testdata/scenes/leases.txt does not print: a
// node recovered from the engine knows a lease and its keys, and a grant
// that keeps failing gives its lease ID back.
func TestLeases(t *testing.T) {
	s := newScene(t, core.Config{})
	s.node.Grant(1, 0, 10)
	s.settle()
	s.propose(2, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 1}}})
	s.settle()
	st, err := driver.Recover(s.ctx, s.eng)
	if err != nil || len(st.Leases) != 1 || st.Leases[0].ID != 1 || st.Leases[0].TTL != 10 || len(st.Leases[0].Keys) != 1 {
		t.Fatalf("recovered leases %+v, %v", st.Leases, err)
	}
	if got := core.NewNode(core.Config{}, st).Leases(); !slices.Equal(got, []int64{1}) {
		t.Fatalf("recovered node's leases %v", got)
	}
	t.Run("a grant that keeps failing gives the lease id back", func(t *testing.T) {
		s := newScene(t, core.Config{MaxAttempts: 1})
		s.node.Grant(1, 5, 1)
		s.collect()
		s.out = nil
		s.node.Done(s.takeReq(1), core.Result{Outcome: core.NotApplied})
		s.expect(`resp req1 err="core: request retried too often; engine keeps failing"`)
		s.node.Grant(2, 5, 1)
		s.expect("work req2 grant lease5 ttl=2")
	})
}

func TestDescribeIsStable(t *testing.T) {
	put := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v"), Version: 2, CreateRevision: 3}}
	del := &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("k\x00")}}
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"a put request", core.DescribeWork(&core.Work{Kind: core.WorkRequest, Rev: 4, ID: 2, Request: putOp("a", "b")}), `work r4 req2 put "a"="b"`},
		{"a retried serial delete", core.DescribeWork(&core.Work{Kind: core.WorkRequest, Rev: 5, ID: 3, Serial: true, Attempt: 2, Request: &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}}}}), `work r5 req3 delete "a".."b" serial attempt=2`},
		{"an undealt txn", core.DescribeWork(&core.Work{Kind: core.WorkRequest, ID: 2, Request: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "b")}}}}}), "work req2 txn cmp=0 then=1 else=0"},
		{"a lease grant", core.DescribeWork(&core.Work{Kind: core.WorkRequest, ID: 1, Lease: &core.LeaseOp{ID: 9, TTL: 5}}), "work req1 grant lease9 ttl=5"},
		{"a lease revoke", core.DescribeWork(&core.Work{Kind: core.WorkRequest, Rev: 1, Lease: &core.LeaseOp{Revoke: true, ID: 9, Keys: [][]byte{[]byte("a")}}}), "work r1 req0 revoke lease9 keys=1"},
		{"a fence", core.DescribeWork(&core.Work{Kind: core.WorkFence, Rev: 7, ID: 1, Attempt: 1}), "fence r7 req1 attempt=1"},
		{"a compaction", core.DescribeWork(&core.Work{Kind: core.WorkCompact, Rev: 7, ID: 1}), "compact r7 req1"},
		{"a catch-up", core.DescribeWork(&core.Work{Kind: core.WorkCatchUp, Watch: 3, From: 2, To: 9}), "catchup watch3 r2..r9"},
		{"an election observe", core.DescribeWork(&core.Work{Kind: core.WorkElect, Elect: &core.ElectOp{Observe: true}}), "elect observe"},
		{"an election campaign", core.DescribeWork(&core.Work{Kind: core.WorkElect, Elect: &core.ElectOp{Next: core.ElectionRecord{Holder: "n1", Term: 2, Deadline: 3 * time.Second}}}), "elect n1 term=2 deadline=3s"},
		{"a recovery", core.DescribeWork(&core.Work{Kind: core.WorkRecover}), "recover"},
		{"an unknown work kind", core.DescribeWork(&core.Work{}), "work ?"},
		{"a range request", core.DescribeRequest(rangeOp("a", "\x00")), `range "a".."\x00"`},
		{"a txn request", core.DescribeRequest(&pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "b")}}}}), "txn cmp=0 then=1 else=0"},
		{"an empty request", core.DescribeRequest(&pb.RequestOp{}), "empty"},
		{"a put event", core.DescribeEvent(core.Event{Rev: 4, Event: put}), `r4 put "k"="v" v2 c3`},
		{"a delete event with a binary key", core.DescribeEvent(core.Event{Rev: 5, Event: del}), `r5 delete "k\x00"`},
		{"a write's response", core.DescribeResponse(core.Response{ID: 3, Rev: 8, Wrote: true}), "resp req3 r8"},
		{"a response that wrote nothing", core.DescribeResponse(core.Response{ID: 3, Rev: 8}), "resp req3 at r8"},
		{"an error response", core.DescribeResponse(core.Response{ID: 3, Err: core.ErrCompacted}), `resp req3 err="mvcc: required revision has been compacted"`},
		{"a watch response with events", core.DescribeWatchResponse(core.WatchResponse{ID: 2, Revision: 5, Events: []*mvccpb.Event{put, del}}), `watch2 r5 [PUT "k"] [DELETE "k\x00"]`},
		{"a canceled watch", core.DescribeWatchResponse(core.WatchResponse{ID: 2, Canceled: true, CompactRevision: 4}), "watch2 canceled compact=4"},
		{"a progress notification", core.DescribeWatchResponse(core.WatchResponse{ID: 2, Progress: true, Revision: 6}), "watch2 progress r6"},
		{"a new member", core.DescribeMember(core.NewMember(core.MemberConfig{ID: "n1"})), "n1 follower term=0"},
	}
	for _, tc := range cases {
		t.Run(tc.name+" renders the same line", func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %s\nwant %s", tc.got, tc.want)
			}
		})
	}
}

func TestEvaluateRefusesUnknownWork(t *testing.T) {
	eng := memkv.New()
	txn, _ := eng.Begin(context.Background())
	defer txn.Rollback()
	if _, err := core.Evaluate(storage.NewReader(txn), &core.Work{Kind: core.WorkCatchUp}); !errors.Is(err, core.ErrEmptyRequest) {
		t.Fatalf("got %v", err)
	}
}

// member drives a core.Member over memkv on a virtual clock.
type member struct {
	t   *testing.T
	ctx context.Context
	eng *memkv.Engine
	m   *core.Member
	out []string
}

// step ticks the member to now and runs its work until it has none.
func (mb *member) step(now time.Duration) {
	mb.t.Helper()
	mb.m.Tick(now)
	for i := 0; ; i++ {
		if i > 100 {
			mb.t.Fatalf("member never went idle")
		}
		rd := mb.m.Ready()
		if rd.RoleChanged {
			mb.out = append(mb.out, "role "+mb.m.Role().String())
		}
		for _, r := range rd.Responses {
			mb.out = append(mb.out, core.DescribeResponse(r))
		}
		if len(rd.Work) == 0 {
			return
		}
		for _, w := range rd.Work {
			mb.out = append(mb.out, core.DescribeWork(w))
			if w.Kind == core.WorkRecover {
				st, err := driver.Recover(mb.ctx, mb.eng)
				mb.m.Done(w, core.Result{State: st, Err: err})
				continue
			}
			eff, out, _ := driver.Run(mb.ctx, mb.eng, w, mb.m)
			mb.m.Done(w, core.Result{Effects: eff, Outcome: out})
		}
	}
}

func (mb *member) expect(want ...string) {
	mb.t.Helper()
	if want == nil {
		want = []string{}
	}
	got := mb.out
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		mb.t.Fatalf("member outputs:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	mb.out = nil
}

func TestMemberLeadership(t *testing.T) {
	eng := memkv.New()
	cfg := core.MemberConfig{ID: "n1", Addr: "h1", Lease: 3 * time.Second, EngineDeadline: time.Second}
	a := &member{t: t, ctx: context.Background(), eng: eng, m: core.NewMember(cfg)}
	b := &member{t: t, ctx: context.Background(), eng: eng, m: core.NewMember(core.MemberConfig{ID: "n2", Addr: "h2", Lease: 3 * time.Second, EngineDeadline: time.Second})}

	a.step(0)
	a.expect("elect observe")
	a.step(0)
	a.expect("elect n1 term=1 deadline=3s", "recover", "role leader")
	if a.m.Node() == nil || a.m.Term() != 1 || a.m.Role() != core.Leader {
		t.Fatalf("a: %s", core.DescribeMember(a.m))
	}
	if rec, ok := a.m.Leader(); !ok || rec.Holder != "n1" || rec.Addr != "h1" {
		t.Fatalf("Leader() = %+v, %v", rec, ok)
	}

	b.step(0)
	b.expect("elect observe")
	if b.m.Node() != nil {
		t.Fatalf("a follower has a node")
	}
	if rec, ok := b.m.Leader(); !ok || rec.Holder != "n1" {
		t.Fatalf("b believes in %+v, %v", rec, ok)
	}

	// The leader serves writes through its node.
	a.m.Node().Propose(1, putOp("a", "1"))
	a.step(500 * time.Millisecond)
	a.expect(`work r2 req1 put "a"="1"`, "resp req1 r2") // revision 1 is the empty store
	if got := core.DescribeMember(a.m); got != "n1 leader term=1 C=2 inflight=0" {
		t.Fatalf("DescribeMember = %q", got)
	}

	// Renewal keeps the lease ahead of the clock.
	a.step(time.Second)
	a.expect("elect n1 term=1 deadline=4s")

	// Handing over drains, then writes the successor's record.
	if err := b.m.Transfer("n1", "h1"); !errors.Is(err, core.ErrNotLeader) {
		t.Fatalf("a follower transferred: %v", err)
	}
	if err := a.m.Transfer("n2", "h2"); err != nil {
		t.Fatal(err)
	}
	a.m.Node().Propose(2, putOp("b", "1"))
	a.step(1100 * time.Millisecond)
	a.expect(`resp req2 err="etcdserver: not leader"`, "elect n2 term=2 deadline=4.1s", "role follower")

	// The successor takes over without waiting the old lease out.
	b.m.Refresh()
	b.step(1200 * time.Millisecond)
	b.expect("elect observe")
	b.step(1250 * time.Millisecond)
	b.expect("recover", "role leader")
	if b.m.Node().Committed() != 2 || b.m.Term() != 2 {
		t.Fatalf("b: %s", core.DescribeMember(b.m))
	}

	// The old leader, now a follower, sees n2 and does not campaign.
	a.m.Refresh()
	a.step(1300 * time.Millisecond)
	a.expect("elect observe")

	// b stops renewing (its clock jumps past the lease) and steps down.
	b.step(10 * time.Second)
	b.expect("role follower")

	// a campaigns once n2's lease is over for sure.
	a.step(10 * time.Second)
	a.expect("elect n1 term=3 deadline=13s", "recover", "role leader")
}

// TestRecoveredLeaseKeys checks the lease attachment index through puts
// that attach, move and detach keys and deletes, and the fallback scan
// of a store written before the index existed.
func TestRecoveredLeaseKeys(t *testing.T) {
	s := newScene(t, core.Config{})
	s.node.Tick(0)
	s.node.Grant(1, 100, 30)
	s.node.Grant(2, 200, 30)
	s.settle()
	put := func(id core.RequestID, key string, lease int64) {
		s.propose(id, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease}}})
		s.settle()
	}
	put(3, "a", 100)
	put(4, "b", 100)
	put(5, "c", 200)
	put(6, "b", 200) // moves to lease 200
	s.propose(7, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}})
	s.settle()
	put(8, "d", 100)
	put(9, "d", 0) // detached
	s.propose(10, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("e"), Value: []byte("v"), Lease: 200}}},
	}}}})
	s.settle()
	want := map[int64]string{100: "", 200: "b c e"}
	check := func(what string) {
		t.Helper()
		st, err := driver.Recover(s.ctx, s.eng)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]string{}
		for _, l := range st.Leases {
			var keys []string
			for _, k := range l.Keys {
				keys = append(keys, string(k))
			}
			slices.Sort(keys)
			got[l.ID] = strings.Join(keys, " ")
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: recovered lease keys %v, want %v", what, got, want)
		}
	}
	check("index")
	// The index holds exactly the live attachments.
	txn, _ := s.eng.Begin(s.ctx)
	for _, a := range []struct {
		lease int64
		key   string
		want  bool
	}{{100, "a", false}, {100, "b", false}, {100, "d", false}, {200, "b", true}, {200, "c", true}, {200, "e", true}} {
		_, err := txn.Get(core.AttachKey(a.lease, []byte(a.key)))
		if got := err == nil; got != a.want {
			t.Errorf("attachment %d/%s present = %v, want %v (%v)", a.lease, a.key, got, a.want, err)
		}
	}
	// A store without the index: drop every attachment record.
	for _, k := range []string{"b", "c", "e"} {
		if err := txn.Delete(core.AttachKey(200, []byte(k))); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	check("fallback scan")
}

// TestExclusiveMember: a member alone on its engine takes over at once
// from a previous incarnation's live record, and keeps leading when a
// renewal is late (an engine stalled under load) instead of failing every
// request in flight.
func TestExclusiveMember(t *testing.T) {
	eng := memkv.New()
	cfg := core.MemberConfig{ID: "n1", Lease: 3 * time.Second, EngineDeadline: time.Second, Exclusive: true}
	old := &member{t: t, ctx: context.Background(), eng: eng, m: core.NewMember(cfg)}
	old.step(0)
	old.step(0)
	if old.m.Role() != core.Leader {
		t.Fatalf("old: %s", core.DescribeMember(old.m))
	}
	// A restart: the new incarnation does not wait out n1's lease.
	cfg.ID = "n1-restarted"
	mb := &member{t: t, ctx: context.Background(), eng: eng, m: core.NewMember(cfg)}
	mb.step(time.Second)
	mb.step(time.Second)
	if mb.m.Role() != core.Leader || mb.m.Term() != 2 {
		t.Fatalf("restarted: %s", core.DescribeMember(mb.m))
	}
	// Renewals fail from now on; the lease runs out on the clock.
	eng.SetUnavailable(0, time.Hour)
	mb.step(10 * time.Second)
	if mb.m.Role() != core.Leader {
		t.Fatalf("an exclusive leader stepped down when a renewal was late: %s", core.DescribeMember(mb.m))
	}
}

// TestExclusiveFreshRevisions: an exclusive member's revision records
// are Fresh (an engine without Insert reads none first) only above every
// revision stored and every revision its earlier terms dealt, whose
// writes may still land; a shared engine's never are.
func TestExclusiveFreshRevisions(t *testing.T) {
	ctx := context.Background()
	eng := memkv.New()
	cfg := core.MemberConfig{ID: "n1", Lease: 3 * time.Second, EngineDeadline: time.Second, Exclusive: true}
	a := &member{t: t, ctx: ctx, eng: eng, m: core.NewMember(cfg)}
	a.step(0)
	a.step(0)
	put := func(mb *member, id core.RequestID, key string) *core.Work {
		t.Helper()
		mb.m.Node().Propose(id, putOp(key, "v"))
		rd := mb.m.Ready()
		if len(rd.Work) != 1 || rd.Work[0].Rev == 0 {
			t.Fatalf("put %s: work %v; want one dealt", key, rd.Work)
		}
		return rd.Work[0]
	}
	fresh := func(w *core.Work) bool {
		t.Helper()
		txn, err := eng.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txn.Rollback()
		eff, err := core.Evaluate(storage.NewReader(txn), w)
		if err != nil || len(eff.Writes) == 0 {
			t.Fatalf("evaluate %s: %v", core.DescribeWork(w), err)
		}
		rec := eff.Writes[len(eff.Writes)-1]
		if !bytes.Equal(rec.Key, core.RevisionKey(w.Rev)) || !rec.New {
			t.Fatalf("last write of %s is not its New revision record", core.DescribeWork(w))
		}
		return rec.Fresh
	}
	run := func(w *core.Work) core.Outcome {
		t.Helper()
		eff, out, _ := driver.Run(ctx, eng, w, a.m)
		a.m.Done(w, core.Result{Effects: eff, Outcome: out})
		return out
	}
	w1 := put(a, 1, "a")
	if !fresh(w1) {
		t.Errorf("term 1's revision %d is not Fresh", w1.Rev)
	}
	if out := run(w1); out != core.Committed {
		t.Fatalf("put a: %v", out)
	}
	// Two puts still in flight when the member steps down: another holder
	// takes the record (exclusivity broken only to make it step down).
	w2, w3 := put(a, 2, "b"), put(a, 3, "c")
	txn, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rival := core.ElectionRecord{Holder: "rival", Term: 5, Deadline: time.Second}
	if err := txn.Set(core.MetaKey(core.MetaLeader), core.AppendElectionRecord(nil, &rival)); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a.step(2 * time.Second)
	a.step(2 * time.Second)
	if a.m.Role() != core.Leader || a.m.Term() != 6 {
		t.Fatalf("after the record was taken: %s; want leading term 6", core.DescribeMember(a.m))
	}
	// The new term deals from above what is stored (w1), again at w2's and
	// w3's revisions: those may still land, and must be checked.
	w4, w5, w6 := put(a, 4, "d"), put(a, 5, "e"), put(a, 6, "f")
	if w4.Rev != w2.Rev || w5.Rev != w3.Rev {
		t.Fatalf("term 6 dealt %d, %d; want %d, %d again", w4.Rev, w5.Rev, w2.Rev, w3.Rev)
	}
	if fresh(w4) || fresh(w5) {
		t.Errorf("revisions %d and %d, dealt by term 1 too, are Fresh in term 6", w4.Rev, w5.Rev)
	}
	if !fresh(w6) {
		t.Errorf("revision %d, above every one dealt, is not Fresh", w6.Rev)
	}
	// Term 1's put lands late; term 6's at its revision must not.
	if eff, out, _ := driver.Run(ctx, eng, w2, a.m); out != core.Committed {
		t.Fatalf("term 1's late put: %v (%v)", out, eff)
	}
	if out := run(w4); out == core.Committed {
		t.Errorf("term 6 overwrote term 1's record at %d", w4.Rev)
	}
	// A member sharing its engine never writes Fresh.
	b := newLeader(t)
	eng = b.eng
	if w := put(b, 1, "a"); fresh(w) {
		t.Errorf("a shared engine's revision %d is Fresh", w.Rev)
	}
}

// TestUndealtWorkSeesAnotherLeadersWriteAsLate: a request that changes
// nothing is answered without a revision of its own, so it needs the
// lateness check too. Here another leader (the safety assumptions broken)
// writes a key this node believes it owns; a failed compare on that key
// must not be answered with data newer than its header revision.
func TestUndealtWorkSeesAnotherLeadersWriteAsLate(t *testing.T) {
	s := newScene(t, core.Config{MaxAttempts: 3})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("b", "1"))
	s.settle()
	rival := core.NewNode(core.Config{Term: 1}, core.State{Committed: 2})
	rival.Propose(9, putOp("a", "rival"))
	txn, _ := s.apply(rival.Ready().Work[0])
	if err := txn.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.collect()
	s.out = nil
	s.propose(3, casOp("a", 1, "2"))
	s.settle()
	r := s.resp(3)
	if r.Err != core.ErrRetriesExhausted {
		t.Fatalf("answer %s %v: want the request to give up, late each time", core.DescribeResponse(r), r.Response)
	}
}

// newLeader is member n1 leading over a new engine, its outputs cleared.
func newLeader(t *testing.T) *member {
	t.Helper()
	cfg := core.MemberConfig{ID: "n1", Addr: "h1", Lease: 3 * time.Second, EngineDeadline: time.Second}
	a := &member{t: t, ctx: context.Background(), eng: memkv.New(), m: core.NewMember(cfg)}
	a.step(0)
	a.step(0)
	a.out = nil
	return a
}

// TestUncertainHandoverStopsReads: a handover whose record write comes
// back uncertain may have landed, and the successor may already
// acknowledge writes; the old leader must not serve reads again until it
// knows (it steps down either way).
func TestUncertainHandoverStopsReads(t *testing.T) {
	a := newLeader(t)
	eng := a.eng
	if !a.m.Serving() {
		t.Fatalf("a leader does not serve: %s", core.DescribeMember(a.m))
	}
	if err := a.m.Transfer("n2", "h2"); err != nil {
		t.Fatal(err)
	}
	a.m.Tick(100 * time.Millisecond)
	rd := a.m.Ready()
	if len(rd.Work) != 1 || rd.Work[0].Kind != core.WorkElect {
		t.Fatalf("want the handover's election write, got %d work", len(rd.Work))
	}
	if a.m.Serving() {
		t.Fatal("serving while the handover is written")
	}
	w := rd.Work[0]
	eff, out, _ := driver.Run(a.ctx, eng, w, a.m)
	if out != core.Committed {
		t.Fatalf("handover write: %v", out)
	}
	a.m.Done(w, core.Result{Effects: eff, Outcome: core.Uncertain}) // it landed, but the member does not know
	if a.m.Serving() {
		t.Fatal("serving again after an uncertain handover")
	}
	a.step(200 * time.Millisecond)
	if a.m.Role() != core.Follower {
		t.Fatalf("not stepped down: %s", core.DescribeMember(a.m))
	}
}

// TestHandoverWaitsForACompaction: the successor recovers as soon as the
// handover lands, so a compaction still being stored must land first —
// stored after the successor's recovery, it would leave the successor
// reading history the sweep takes and acknowledging compactions below
// it. While handing over, a new compaction is refused as not leader.
func TestHandoverWaitsForACompaction(t *testing.T) {
	a := newLeader(t)
	eng := a.eng
	n := a.m.Node()
	n.Compact(1, n.Committed())
	rd := a.m.Ready()
	if len(rd.Work) != 1 || rd.Work[0].Kind != core.WorkCompact {
		t.Fatalf("want the compaction's work, got %d work", len(rd.Work))
	}
	compact := rd.Work[0]
	if err := a.m.Transfer("n2", "h2"); err != nil {
		t.Fatal(err)
	}
	n.Compact(2, n.Committed())
	a.m.Tick(100 * time.Millisecond)
	rd = a.m.Ready()
	if len(rd.Work) != 0 {
		t.Fatalf("handed over with a compaction in flight: %s", core.DescribeWork(rd.Work[0]))
	}
	if len(rd.Responses) != 1 || rd.Responses[0].ID != 2 || !errors.Is(rd.Responses[0].Err, core.ErrNotLeader) {
		t.Fatalf("a compaction asked while handing over: %v, want not leader", rd.Responses)
	}
	eff, out, _ := driver.Run(a.ctx, eng, compact, a.m)
	a.m.Done(compact, core.Result{Effects: eff, Outcome: out})
	a.m.Tick(200 * time.Millisecond)
	rd = a.m.Ready()
	var elect bool
	for _, w := range rd.Work {
		elect = elect || w.Kind == core.WorkElect
	}
	if !elect {
		t.Fatalf("no handover once the compaction was stored: %d work", len(rd.Work))
	}
}

// TestTxnReadsEachKeyOnce: a txn that compares and then writes many keys
// (more than the evaluation finds by scanning) keeps one state per key,
// so each key gets one latest record and the version the compare saw.
func TestTxnReadsEachKeyOnce(t *testing.T) {
	ctx := context.Background()
	eng := memkv.New()
	var keys []string
	txn := &pb.TxnRequest{}
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		keys = append(keys, k)
		txn.Compare = append(txn.Compare, &pb.Compare{Key: []byte(k), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 0}})
		txn.Success = append(txn.Success, putOp(k, "v"))
	}
	tx, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	w := &core.Work{Kind: core.WorkRequest, Rev: 2, ID: 1, Request: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}}, Committed: 1}
	eff, err := core.Evaluate(storage.NewReader(tx), w)
	if err != nil || eff.Late || !eff.Response.GetResponseTxn().Succeeded {
		t.Fatalf("evaluate: %+v, %v", eff, err)
	}
	latest := map[string]int{}
	for _, wr := range eff.Writes {
		if k, err := core.DecodeLatestKey(wr.Key); err == nil {
			latest[string(k)]++
			rec, err := core.DecodeRecord(wr.Value)
			if err != nil || rec.Version != 1 || rec.ModRev != 2 {
				t.Errorf("latest record of %q: %+v, %v", k, rec, err)
			}
		}
	}
	for _, k := range keys {
		if latest[k] != 1 {
			t.Errorf("%q has %d latest records, want 1", k, latest[k])
		}
	}
	if len(eff.Events) != len(keys) {
		t.Errorf("%d events, want %d", len(eff.Events), len(keys))
	}
}

// TestALeaseOfEtcdsLongestTTLOutlivesAWallClock: etcd grants up to 9e9 s;
// on a wall clock (nanoseconds since 1970) now plus that overflowed a
// Duration and the lease expired at once.
func TestALeaseOfEtcdsLongestTTLOutlivesAWallClock(t *testing.T) {
	s := newScene(t, core.Config{})
	now := time.Duration(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano())
	s.node.Tick(now)
	s.node.Grant(1, 7, core.MaxLeaseTTL)
	s.settle()
	s.node.KeepAlive(2, 7, now)
	s.settle()
	if err := s.resp(2).Err; err != nil {
		t.Fatalf("keepalive: %v", err)
	}
	s.node.Tick(now + time.Hour)
	s.settle()
	if got := s.node.Leases(); !slices.Equal(got, []int64{7}) {
		t.Fatalf("leases an hour after a grant of %d s: %v", core.MaxLeaseTTL, got)
	}
}

// TestALeaseExistsUntilItsRevokeCommits: while a client's revoke is in
// flight the lease still exists, as in etcd, so a keepalive renews it and
// TimeToLive describes it; once the revoke commits both say it is gone.
// A lease whose time is up is another matter: its keepalive waits for the
// expiry's revoke, and is told "not found" only once that commits.
func TestALeaseExistsUntilItsRevokeCommits(t *testing.T) {
	s := newScene(t, core.Config{})
	now := time.Duration(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano())
	s.node.Tick(now)
	s.node.Grant(1, 7, 10)
	s.node.Grant(2, 8, 10)
	s.settle()
	s.node.Revoke(3, 7)
	s.node.KeepAlive(4, 7, now)
	s.collect()
	if r := s.resp(4); r.Err != nil || r.LeaseTTL != 10 {
		t.Fatalf("keepalive while its revoke is in flight: %+v; want TTL 10", r)
	}
	if info, err := s.node.TimeToLive(7, now); err != nil || info.GrantedTTL != 10 {
		t.Fatalf("time to live while its revoke is in flight: %+v, %v", info, err)
	}
	s.settle()
	if err := s.resp(3).Err; err != nil {
		t.Fatalf("revoke: %v", err)
	}
	s.node.KeepAlive(5, 7, now)
	s.collect()
	if err := s.resp(5).Err; !errors.Is(err, core.ErrLeaseNotFound) {
		t.Fatalf("keepalive after its revoke committed: %v, want ErrLeaseNotFound", err)
	}
	s.node.Tick(now + 11*time.Second) // lease 8 expires: its revoke is dealt
	s.node.KeepAlive(6, 8, now+11*time.Second)
	s.collect()
	for _, r := range s.resps {
		if r.ID == 6 {
			t.Fatalf("keepalive of an expired lease answered %s while its revoke is in flight", core.DescribeResponse(r))
		}
	}
	s.settle()
	if err := s.resp(6).Err; !errors.Is(err, core.ErrLeaseNotFound) {
		t.Fatalf("keepalive of an expired lease after its revoke committed: %v, want ErrLeaseNotFound", err)
	}
}

// TestAnExpiredLeaseIsNeverRenewed: an expiry's revoke that fails for good
// leaves the lease in place, but its time is still up: a keepalive waits
// for the next try instead of renewing it (which would resurrect a lease
// an earlier keepalive may have been told was gone).
func TestAnExpiredLeaseIsNeverRenewed(t *testing.T) {
	s := newScene(t, core.Config{MaxAttempts: 1})
	s.node.Tick(time.Second)
	s.node.Grant(1, 7, 10)
	s.settle()
	s.node.Tick(20 * time.Second)
	s.collect()
	w := s.takeReq(0)
	s.node.Done(w, core.Result{Err: errors.New("engine down"), Outcome: core.NotApplied})
	s.node.KeepAlive(2, 7, 21*time.Second)
	s.collect()
	for _, r := range s.resps {
		if r.ID == 2 {
			t.Fatalf("keepalive of a lease whose expiry failed answered %s; want it to wait for the next try", core.DescribeResponse(r))
		}
	}
	s.settle()
	if err := s.resp(2).Err; !errors.Is(err, core.ErrLeaseNotFound) {
		t.Fatalf("keepalive once the expiry is tried again and commits: %v, want ErrLeaseNotFound", err)
	}
	if got := s.node.Leases(); len(got) != 0 {
		t.Fatalf("leases after the expiry: %v", got)
	}
}
