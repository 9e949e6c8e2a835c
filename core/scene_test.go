package core_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

// TestScenes runs the golden scene files in testdata/scenes, one file
// per subject: each command drives a node by hand and prints the outputs
// it produced (work, responses, watch responses). go test -rewrite
// regenerates the expected output after an intended change; review the
// diff.
//
// Commands (ids are request IDs; kinds are request, fence, compact,
// sweep, catchup):
//
//	put id= key= value= [lease=] propose a put
//	ignore-value id= key=      a put keeping the value (ignore_value)
//	delete id= key= [end=]     propose a delete range
//	cas id= key= mod= value=   a txn: put if mod revision is mod, else get
//	txn-read id= key= rev=     a txn that reads key at rev
//	compact id= rev=           compact
//	await-sweep id= rev=       answer once the sweep reaches rev
//	watch id= key= [end=] start=
//	progress ids=(a,b)         RequestProgress for those watches
//	run kind= [rev=] [outcome=committed|not-applied|uncertain]
//	                           run the oldest such work item; not-applied
//	                           reports it without touching the engine,
//	                           uncertain commits it and reports uncertain
//	settle                     run all work until none is left
//	read key= [end=] [rev=] [at=]  a range at C (at=: at an older
//	                           commit point, as a follower's may be)
//	tick at=                   the node's clock is at (a duration)
//	grant id= [lease=] ttl=    grant (lease 0: the node picks the ID)
//	revoke id= lease=          revoke
//	keepalive id= lease= at=   a keepalive at that time
//	ttl lease= at=             TimeToLive at that time
//	run ... [id=]              run ... of that request (undealt work too)
//	records                    the revisions that have a revision record
//	answer id=                 the body of the answer to that request
//	state                      the commit point C and the requests in flight
func TestScenes(t *testing.T) {
	datadriven.Walk(t, "testdata/scenes", func(t *testing.T, path string) {
		s := newScene(t, core.Config{RingSize: 4, SweepBatch: 2})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			s.out = nil
			if out, ok := s.command(d); ok {
				return out
			}
			s.collect()
			if len(s.out) == 0 {
				return "ok\n"
			}
			return strings.Join(s.out, "\n") + "\n"
		})
	})
}

// command runs d; ok with a result when the command prints its own.
func (s *scene) command(d *datadriven.TestData) (string, bool) {
	t := s.t.(*testing.T) // datadriven scenes run in tests only
	var (
		id         int
		key, value string
		rev        int64
	)
	arg := func(name string, dest any) bool {
		if !d.HasArg(name) {
			return false
		}
		d.ScanArgs(t, name, dest)
		return true
	}
	arg("id", &id)
	arg("key", &key)
	arg("value", &value)
	arg("rev", &rev)
	rid := core.RequestID(id)
	switch d.Cmd {
	case "put":
		var lease int64
		arg("lease", &lease)
		s.propose(rid, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease}}})
	case "ignore-value":
		s.propose(rid, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), IgnoreValue: true}}})
	case "tick":
		s.node.Tick(durationArg(t, d, "at"))
	case "grant":
		var lease, ttl int64
		arg("lease", &lease)
		arg("ttl", &ttl)
		s.node.Grant(rid, lease, ttl)
	case "revoke":
		var lease int64
		arg("lease", &lease)
		s.node.Revoke(rid, lease)
	case "keepalive":
		var lease int64
		arg("lease", &lease)
		s.node.KeepAlive(rid, lease, durationArg(t, d, "at"))
	case "ttl":
		var lease int64
		arg("lease", &lease)
		info, err := s.node.TimeToLive(lease, durationArg(t, d, "at"))
		if err != nil {
			return "error: " + err.Error() + "\n", true
		}
		return fmt.Sprintf("granted=%d remaining=%v keys=%q\n", info.GrantedTTL, info.Remaining, info.Keys), true
	case "answer":
		return body(s.resp(rid).Response) + "\n", true
	case "state":
		return fmt.Sprintf("C=r%d inflight=%d\n", s.node.Committed(), s.node.InFlight()), true
	case "records":
		return fmt.Sprintf("%v\n", s.revisionRecords()), true
	case "delete":
		var end string
		arg("end", &end)
		s.propose(rid, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}})
	case "cas":
		var mod int64
		arg("mod", &mod)
		s.propose(rid, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: mod}}},
			Success: []*pb.RequestOp{putOp(key, value)},
			Failure: []*pb.RequestOp{rangeOp(key, "")},
		}}})
	case "txn-read":
		s.propose(rid, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key), Revision: rev}}}},
		}}})
	case "compact":
		s.node.Compact(rid, rev)
	case "await-sweep":
		s.node.AwaitSweep(rid, rev)
	case "watch":
		var end string
		var start int64
		arg("end", &end)
		arg("start", &start)
		if err := s.node.AddWatch(core.Watch{ID: core.WatchID(id), Key: []byte(key), End: []byte(end), StartRev: start}); err != nil {
			return "error: " + err.Error() + "\n", true
		}
	case "progress":
		var ws []core.WatchID
		for _, a := range d.CmdArgs {
			for _, v := range a.Vals {
				n, err := strconv.Atoi(v)
				if a.Key != "ids" || err != nil {
					d.Fatalf(t, "progress ids=(watch IDs), got %s", a)
				}
				ws = append(ws, core.WatchID(n))
			}
		}
		if !s.node.RequestProgress(ws...) {
			return "no watch\n", true
		}
	case "run":
		s.runCommand(d, arg)
	case "settle":
		s.settle()
		s.collect()
	case "read":
		var end string
		at := s.node.Committed()
		arg("end", &end)
		arg("at", &at)
		resp, err := s.rangeFrom(&pb.RangeRequest{Key: []byte(key), RangeEnd: []byte(end), Revision: rev}, at)
		if err != nil {
			return "error: " + err.Error() + "\n", true
		}
		return fmt.Sprintf("r%d %s\n", resp.Header.GetRevision(), kvs(resp.Kvs)), true
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return "", false
}

var workKinds = map[string]core.WorkKind{
	"request": core.WorkRequest, "fence": core.WorkFence, "compact": core.WorkCompact,
	"sweep": core.WorkSweep, "catchup": core.WorkCatchUp,
}

// runCommand runs the oldest handed-out work item of a kind (and
// revision, if given) with the outcome asked for.
func (s *scene) runCommand(d *datadriven.TestData, arg func(string, any) bool) {
	t := s.t
	s.collect()
	var kindName, outcome string
	var rev int64
	var id int
	arg("kind", &kindName)
	hasRev := arg("rev", &rev)
	hasID := arg("id", &id)
	arg("outcome", &outcome)
	kind, ok := workKinds[kindName]
	if !ok {
		d.Fatalf(t, "unknown work kind %q", kindName)
	}
	var w *core.Work
	if hasID {
		w = s.takeReq(core.RequestID(id))
	}
	for i, x := range s.work {
		if w == nil && x.Kind == kind && (!hasRev || x.Rev == rev) {
			w = x
			s.work = append(s.work[:i:i], s.work[i+1:]...)
		}
	}
	if w == nil {
		d.Fatalf(t, "no %s work handed out", kindName)
	}
	switch outcome {
	case "", "committed":
		s.run(w)
	case "not-applied":
		s.node.Done(w, core.Result{Outcome: core.NotApplied})
	case "uncertain":
		txn, eff := s.apply(w)
		if err := txn.Commit(s.ctx); err != nil {
			t.Fatal(err)
		}
		s.node.Done(w, core.Result{Effects: eff, Outcome: core.Uncertain})
	default:
		d.Fatalf(t, "unknown outcome %q", outcome)
	}
}

// durationArg reads a duration argument such as at=15s.
func durationArg(t *testing.T, d *datadriven.TestData, name string) time.Duration {
	var v string
	d.ScanArgs(t, name, &v)
	dur, err := time.ParseDuration(v)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", name, v, err)
	}
	return dur
}

// body describes a response's body: header revisions, the keys it read
// or deleted (key=value@mod/create/version), and a txn's branch.
func body(op *pb.ResponseOp) string {
	switch r := op.GetResponse().(type) {
	case *pb.ResponseOp_ResponsePut:
		out := fmt.Sprintf("put hdr=r%d", r.ResponsePut.Header.GetRevision())
		if prev := r.ResponsePut.PrevKv; prev != nil {
			out += " prev " + kvs([]*mvccpb.KeyValue{prev})
		}
		return out
	case *pb.ResponseOp_ResponseRange:
		return fmt.Sprintf("range hdr=r%d count=%d [%s]", r.ResponseRange.Header.GetRevision(), r.ResponseRange.Count, kvs(r.ResponseRange.Kvs))
	case *pb.ResponseOp_ResponseDeleteRange:
		return fmt.Sprintf("delete hdr=r%d deleted=%d prev [%s]", r.ResponseDeleteRange.Header.GetRevision(), r.ResponseDeleteRange.Deleted, kvs(r.ResponseDeleteRange.PrevKvs))
	case *pb.ResponseOp_ResponseTxn:
		parts := make([]string, len(r.ResponseTxn.Responses))
		for i, sub := range r.ResponseTxn.Responses {
			parts[i] = body(sub)
		}
		return fmt.Sprintf("txn hdr=r%d succeeded=%v {%s}", r.ResponseTxn.Header.GetRevision(), r.ResponseTxn.Succeeded, strings.Join(parts, "; "))
	}
	return "none"
}
