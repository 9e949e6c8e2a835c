package linearizability

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		// Histories that must be rejected.
		{"stale read", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: get("a"), out: got(2)},
		}, porcupine.Illegal},
		{"lost write", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "1"), out: putOK(3)},
			{call: 40, ret: 50, in: prefix(""), out: got(3, kv("b", "1", 3, 3, 1))},
		}, porcupine.Illegal},
		{"write seen then unseen", []op{
			{call: 0, ret: 100, in: put("a", "1"), out: putOK(2)},
			{call: 10, ret: 20, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 30, ret: 40, in: get("a"), out: got(2)},
		}, porcupine.Illegal},
		{"write revision goes backwards", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(5)},
			{call: 20, ret: 30, in: put("b", "1"), out: putOK(4)},
		}, porcupine.Illegal},
		{"read header goes backwards", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(5)},
			{call: 20, ret: 30, in: get("b"), out: got(4)},
		}, porcupine.Illegal},
		{"two writes share a revision", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "1"), out: putOK(2)},
		}, porcupine.Illegal},
		{"wrong version", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: get("a"), out: got(3, kv("a", "2", 2, 3, 1))},
		}, porcupine.Illegal},
		{"wrong create revision", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: get("a"), out: got(3, kv("a", "2", 3, 3, 2))},
		}, porcupine.Illegal},
		{"recreated key keeps create revision", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: del("a"), out: delOK(3, 1)},
			{call: 40, ret: 50, in: put("a", "2"), out: putOK(4)},
			{call: 60, ret: 70, in: get("a"), out: got(4, kv("a", "2", 2, 4, 2))},
		}, porcupine.Illegal},
		{"failed compare that should have succeeded", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn([]*pb.Compare{cmpValue("a", "1")}, []*pb.RequestOp{reqPut("b", "x")}, []*pb.RequestOp{reqGet("a")}),
				out: txnOut(2, false, respGet(kv("a", "1", 2, 2, 1)))},
		}, porcupine.Illegal},
		{"compare succeeded on a stale mod revision", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: txn([]*pb.Compare{cmpMod("a", 2)}, []*pb.RequestOp{reqPut("a", "3")}, nil), out: txnOut(4, true, respPut())},
		}, porcupine.Illegal},
		{"read below compaction succeeded", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: compact(3), out: compacted(3)},
			{call: 60, ret: 70, in: getAt("a", 2), out: got(3, kv("a", "1", 2, 2, 1))},
		}, porcupine.Illegal},
		{"a lower compaction succeeded after a higher one", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: put("a", "3"), out: putOK(4)},
			{call: 55, ret: 120, in: compact(2), out: compacted(5)},
			{call: 60, ret: 80, in: compact(3), out: compacted(4)},
			{call: 85, ret: 90, in: put("a", "4"), out: putOK(5)},
		}, porcupine.Illegal},
		{"compacted error not justified", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: getAt("a", 2), out: errOut("etcdserver: " + ErrCompacted)},
		}, porcupine.Illegal},
		{"read at a past revision sees the present", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(5)},
			{call: 40, ret: 50, in: getAt("a", 4), out: got(5, kv("a", "2", 2, 5, 2))},
		}, porcupine.Illegal},
		{"revoke left its key", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: putLease("a", "1", 7), out: putOK(2)},
			{call: 40, ret: 50, in: revoke(7), out: revoked(3)},
			{call: 60, ret: 70, in: get("a"), out: got(3, leased(kv("a", "1", 2, 2, 1), 7))},
		}, porcupine.Illegal},
		{"put on a revoked lease succeeded", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: revoke(7), out: revoked(1)},
			{call: 40, ret: 50, in: putLease("a", "1", 7), out: putOK(2)},
		}, porcupine.Illegal},
		{"grant above the largest TTL succeeded", []op{
			{call: 0, ret: 10, in: Input{Grant: &pb.LeaseGrantRequest{ID: 7, TTL: MaxLeaseTTL + 1}}, out: granted(1, 7)},
		}, porcupine.Illegal},
		{"second grant of a live lease ID succeeded", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: grant(7), out: granted(1, 7)},
		}, porcupine.Illegal},
		{"revoke of a lease never granted succeeded", []op{
			{call: 0, ret: 10, in: revoke(7), out: revoked(1)},
		}, porcupine.Illegal},
		// A revoke of a lease with no keys writes nothing: it may take
		// effect anywhere in its own window, but at one moment for all.
		{"key not found though the revoke surely finished first", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 5, ret: 55, in: revoke(7), out: revoked(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: touchLease("b", 7), out: errOut(ErrKeyNotFound)},
		}, porcupine.Illegal},
		{"lease not found though the revoke surely came later", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 100, ret: 200, in: revoke(7), out: revoked(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: touchLease("b", 7), out: errOut(ErrLeaseNotFound)},
		}, porcupine.Illegal},
		{"a revoked lease comes back", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 5, ret: 200, in: revoke(7), out: revoked(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: touchLease("b", 7), out: errOut(ErrLeaseNotFound)},
			{call: 80, ret: 90, in: touchLease("b", 7), out: errOut(ErrKeyNotFound)},
		}, porcupine.Illegal},
		{"a revoked lease comes back for another op", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 5, ret: 200, in: revoke(7), out: revoked(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: revoke(7), out: errOut(ErrLeaseNotFound)},
			{call: 80, ret: 90, in: touchLease("b", 7), out: errOut(ErrKeyNotFound)},
		}, porcupine.Illegal},
		{"compaction to a future revision succeeded", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: compact(5), out: compacted(2)},
		}, porcupine.Illegal},
		{"compaction to the store's revision refused as future", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: compact(2), out: errOut(ErrFutureRev)},
		}, porcupine.Illegal},
		{"compaction past the store's revision refused as future", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: compact(3), out: errOut(ErrFutureRev)},
			{call: 5, ret: 40, in: put("b", "1"), out: putOK(3)},
		}, porcupine.Ok},
		{"range count ignores limit", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "1"), out: putOK(3)},
			{call: 40, ret: 50, in: RangeInput(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 1}),
				out: RangeOutput(&pb.RangeResponse{Header: hdr(3), Kvs: []*mvccpb.KeyValue{kv("a", "1", 2, 2, 1)}, Count: 1, More: true})},
		}, porcupine.Illegal},
		{"delete reports a key it did not delete", []op{
			{call: 0, ret: 10, in: del("a"), out: delOK(2, 1)},
		}, porcupine.Illegal},
		{"a compare over a range held though one of its keys fails it", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: txn([]*pb.Compare{over(cmpValue("a", "1"), "c")}, []*pb.RequestOp{reqPut("c", "x")}, nil), out: txnOut(4, true, respPut())},
		}, porcupine.Illegal},
		{"a compare over a range of no key held on a value", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn([]*pb.Compare{over(cmpValue("b", ""), "c")}, []*pb.RequestOp{reqPut("c", "x")}, nil), out: txnOut(3, true, respPut())},
		}, porcupine.Illegal},
		{"a lease compare held against another lease", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: putLease("a", "1", 7), out: putOK(2)},
			{call: 40, ret: 50, in: txn([]*pb.Compare{cmpLease("a", pb.Compare_EQUAL, 0)}, []*pb.RequestOp{reqPut("b", "x")}, nil), out: txnOut(3, true, respPut())},
		}, porcupine.Illegal},
		{"a txn read at its own revision", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn(nil, []*pb.RequestOp{reqPut("b", "x"), reqGetAt("a", 3)}, nil), out: txnOut(3, true, respPut(), respGet(kv("a", "1", 2, 2, 1)))},
		}, porcupine.Illegal},
		{"a txn's range at a revision saw the txn's write", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn(nil, []*pb.RequestOp{reqPut("a", "2"), reqGetAt("a", 2)}, nil), out: txnOut(3, true, respPut(), respGet(kv("a", "2", 2, 3, 2)))},
		}, porcupine.Illegal},
		{"a txn's range below a finished compaction succeeded", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: compact(3), out: compacted(3)},
			{call: 60, ret: 70, in: txn(nil, []*pb.RequestOp{reqGetAt("a", 2)}, nil), out: txnOut(3, true, respGet(kv("a", "1", 2, 2, 1)))},
		}, porcupine.Illegal},
		{"a txn failed compacted though no compaction ran", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn(nil, []*pb.RequestOp{reqGetAt("a", 2)}, nil), out: errOut(ErrCompacted)},
		}, porcupine.Illegal},
		{"a txn that reads at no revision failed compacted", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: compact(2), out: compacted(2)},
			{call: 40, ret: 50, in: txn(nil, []*pb.RequestOp{reqGet("a")}, nil), out: errOut(ErrCompacted)},
		}, porcupine.Illegal},

		// Histories that must be accepted.
		{"gaps in revisions", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "1"), out: putOK(7)},
			{call: 40, ret: 50, in: get("a"), out: got(9, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: put("a", "2"), out: putOK(12)},
			{call: 80, ret: 90, in: get("a"), out: got(12, kv("a", "2", 2, 12, 2))},
			{call: 100, ret: 110, in: getAt("a", 11), out: got(12, kv("a", "1", 2, 2, 1))},
		}, porcupine.Ok},
		{"concurrent overlapping ops", []op{
			{call: 0, ret: 100, in: put("a", "1"), out: putOK(3)},
			{call: 10, ret: 20, in: get("a"), out: got(2)},
			{call: 30, ret: 40, in: get("a"), out: got(3, kv("a", "1", 3, 3, 1))},
			{call: 50, ret: 60, in: get("a"), out: got(4, kv("a", "1", 3, 3, 1))},
		}, porcupine.Ok},
		{"a chosen lease ID refused while live, granted once revoked", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: grant(7), out: errOut(ErrLeaseExist)},
			{call: 40, ret: 50, in: Input{Grant: &pb.LeaseGrantRequest{TTL: MaxLeaseTTL + 1}}, out: errOut(ErrLeaseTTLTooLarge)},
			{call: 60, ret: 70, in: revoke(7), out: revoked(1)},
			{call: 80, ret: 90, in: revoke(7), out: errOut(ErrLeaseNotFound)},
			{call: 100, ret: 110, in: grant(7), out: granted(1, 7)},
		}, porcupine.Ok},
		{"revision order beats call order", []op{
			{call: 0, ret: 50, in: put("a", "1"), out: putOK(5)},
			{call: 10, ret: 20, in: put("a", "2"), out: putOK(4)},
			{call: 60, ret: 70, in: get("a"), out: got(5, kv("a", "1", 4, 5, 2))},
		}, porcupine.Ok},
		{"unknown op patched as applied", []op{
			{call: 0, in: put("a", "1"), out: putOK(3), fate: patchedOp},
			{call: 10, ret: 20, in: put("b", "1"), out: putOK(2)},
			{call: 50, ret: 60, in: get("a"), out: got(4, kv("a", "1", 3, 3, 1))},
		}, porcupine.Ok},
		{"unknown op dropped", []op{
			{call: 0, in: put("a", "1"), fate: droppedOp},
			{call: 50, ret: 60, in: get("a"), out: got(4)},
		}, porcupine.Ok},
		{"unknown op never seen", []op{
			{call: 0, in: put("a", "1"), fate: unknownOp},
			{call: 5, in: get("a"), fate: unknownOp},
			{call: 50, ret: 60, in: get("a"), out: got(4)},
		}, porcupine.Ok},
		{"txn compare, then branch, nested txn", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn(
				[]*pb.Compare{cmpValue("a", "1"), cmpVersion("b", pb.Compare_EQUAL, 0)},
				[]*pb.RequestOp{reqPut("b", "x"), reqGet("b"), txn([]*pb.Compare{cmpMod("a", 2)}, []*pb.RequestOp{reqPut("a", "2")}, nil).KV},
				nil),
				out: txnOut(4, true, respPut(), respGet(kv("b", "x", 4, 4, 1)), &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: &pb.TxnResponse{Succeeded: true, Responses: []*pb.ResponseOp{respPut()}}}})},
			{call: 40, ret: 50, in: prefix(""), out: got(4, kv("a", "2", 2, 4, 2), kv("b", "x", 4, 4, 1))},
		}, porcupine.Ok},
		{"read-only txn at a gap revision", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: txn([]*pb.Compare{cmpValue("a", "2")}, []*pb.RequestOp{reqPut("a", "3")}, []*pb.RequestOp{reqGet("a")}),
				out: txnOut(3, false, respGet(kv("a", "1", 2, 2, 1)))},
			{call: 40, ret: 50, in: put("a", "4"), out: putOK(4)},
		}, porcupine.Ok},
		{"range options", []op{
			{call: 0, ret: 10, in: put("k/a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("k/b", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: put("k/c", "3"), out: putOK(4)},
			{call: 60, ret: 70, in: RangeInput(&pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), Limit: 2, KeysOnly: true}),
				out: RangeOutput(&pb.RangeResponse{Header: hdr(4), Count: 3, More: true, Kvs: []*mvccpb.KeyValue{kv("k/a", "", 2, 2, 1), kv("k/b", "", 3, 3, 1)}})},
			{call: 60, ret: 70, in: RangeInput(&pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), CountOnly: true}),
				out: RangeOutput(&pb.RangeResponse{Header: hdr(4), Count: 3})},
			{call: 60, ret: 70, in: RangeInput(&pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND, Limit: 1}),
				out: RangeOutput(&pb.RangeResponse{Header: hdr(4), Count: 3, More: true, Kvs: []*mvccpb.KeyValue{kv("k/c", "3", 4, 4, 1)}})},
		}, porcupine.Ok},
		{"sort ties in any order", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "1"), out: putOK(3)},
			{call: 40, ret: 50, in: RangeInput(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, SortTarget: pb.RangeRequest_VERSION, Limit: 1}),
				out: RangeOutput(&pb.RangeResponse{Header: hdr(3), Count: 2, More: true, Kvs: []*mvccpb.KeyValue{kv("b", "1", 3, 3, 1)}})},
		}, porcupine.Ok},
		{"delete range with prev_kv", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("b", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: DeleteInput(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), PrevKv: true}),
				out: DeleteOutput(&pb.DeleteRangeResponse{Header: hdr(6), Deleted: 2, PrevKvs: []*mvccpb.KeyValue{kv("a", "1", 2, 2, 1), kv("b", "2", 3, 3, 1)}})},
			{call: 60, ret: 70, in: del("a"), out: delOK(6, 0)},
			{call: 80, ret: 90, in: getAt("b", 5), out: got(6, kv("b", "2", 3, 3, 1))},
		}, porcupine.Ok},
		{"lease revoke deletes keys at its revision", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: putLease("a", "1", 7), out: putOK(2)},
			{call: 40, ret: 50, in: revoke(7), out: revoked(4)},
			{call: 60, ret: 70, in: get("a"), out: got(4)},
			{call: 60, ret: 70, in: getAt("a", 3), out: got(4, leased(kv("a", "1", 2, 2, 1), 7))},
			{call: 80, ret: 90, in: putLease("b", "1", 7), out: errOut("etcdserver: " + ErrLeaseNotFound)},
			{call: 80, ret: 90, in: revoke(7), out: errOut(ErrLeaseNotFound)},
		}, porcupine.Ok},
		{"a keyless revoke takes effect late in its window", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 5, ret: 200, in: revoke(7), out: revoked(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: touchLease("b", 7), out: errOut(ErrKeyNotFound)},
			{call: 210, ret: 220, in: touchLease("b", 7), out: errOut(ErrLeaseNotFound)},
		}, porcupine.Ok},
		{"a keyless revoke takes effect early in its window", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 45, ret: 200, in: revoke(7), out: revoked(2)},
			{call: 60, ret: 70, in: touchLease("b", 7), out: errOut(ErrLeaseNotFound)},
			{call: 80, ret: 90, in: revoke(7), out: errOut(ErrLeaseNotFound)},
		}, porcupine.Ok},
		{"a keyless revoke between two failed puts", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: put("a", "1"), out: putOK(2)},
			{call: 5, ret: 200, in: revoke(7), out: revoked(2)},
			{call: 40, ret: 50, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 60, ret: 70, in: touchLease("b", 7), out: errOut(ErrKeyNotFound)},
			{call: 80, ret: 90, in: touchLease("b", 7), out: errOut(ErrLeaseNotFound)},
			{call: 100, ret: 110, in: put("c", "1"), out: putOK(3)},
		}, porcupine.Ok},
		{"compaction", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: compact(3), out: compacted(3)},
			{call: 60, ret: 70, in: getAt("a", 2), out: errOut(ErrCompacted)},
			{call: 60, ret: 70, in: getAt("a", 3), out: got(3, kv("a", "2", 2, 3, 2))},
			{call: 60, ret: 70, in: getAt("a", 9), out: errOut(ErrFutureRev)},
			{call: 80, ret: 90, in: compact(2), out: errOut(ErrCompacted)},
		}, porcupine.Ok},
		{"compares over ranges: every key, none, from a key on; on leases", []op{
			{call: 0, ret: 10, in: grant(7), out: granted(1, 7)},
			{call: 20, ret: 30, in: putLease("a", "1", 7), out: putOK(2)},
			{call: 40, ret: 50, in: put("b", "1"), out: putOK(3)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{over(cmpValue("a", "1"), "c")}, nil, nil), out: txnOut(3, true)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{over(cmpVersion("a", pb.Compare_GREATER, 0), "\x00")}, nil, nil), out: txnOut(3, true)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{over(cmpVersion("c", pb.Compare_EQUAL, 0), "z")}, nil, nil), out: txnOut(3, true)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{over(cmpVersion("c", pb.Compare_EQUAL, 0), "a")}, nil, nil), out: txnOut(3, true)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{over(cmpValue("c", ""), "z")}, nil, nil), out: txnOut(3, false)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{over(cmpLease("a", pb.Compare_EQUAL, 7), "c")}, nil, nil), out: txnOut(3, false)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{cmpLease("a", pb.Compare_EQUAL, 7), cmpLease("b", pb.Compare_EQUAL, 0), cmpLease("x", pb.Compare_LESS, 1)}, nil, nil), out: txnOut(3, true)},
		}, porcupine.Ok},
		{"a txn's ranges at revisions", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
			{call: 20, ret: 30, in: put("a", "2"), out: putOK(3)},
			{call: 40, ret: 50, in: txn(nil, []*pb.RequestOp{reqPut("a", "3"), reqGetAt("a", 2), reqGetAt("a", 3), reqGet("a")}, nil),
				out: txnOut(4, true, respPut(), respGet(kv("a", "1", 2, 2, 1)), respGet(kv("a", "2", 2, 3, 2)), respGet(kv("a", "3", 2, 4, 3)))},
			{call: 60, ret: 70, in: txn(nil, []*pb.RequestOp{reqPut("b", "x"), reqGetAt("a", 5)}, nil), out: errOut(ErrFutureRev)},
			{call: 60, ret: 70, in: txn([]*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 0)}, []*pb.RequestOp{reqGetAt("a", 9)}, []*pb.RequestOp{reqGetAt("a", 4)}), out: txnOut(4, false, respGet(kv("a", "3", 2, 4, 3)))},
			{call: 80, ret: 90, in: compact(3), out: compacted(4)},
			{call: 100, ret: 110, in: txn(nil, []*pb.RequestOp{txn(nil, []*pb.RequestOp{reqGetAt("a", 2)}, nil).KV}, nil), out: errOut(ErrCompacted)},
			{call: 100, ret: 110, in: txn([]*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 0)}, []*pb.RequestOp{reqGetAt("a", 2)}, []*pb.RequestOp{reqGetAt("a", 3)}), out: txnOut(4, false, respGet(kv("a", "2", 2, 3, 2)))},
		}, porcupine.Ok},
		{"a lease that expired at a revision after a failed put that named it", []op{
			{call: 0, ret: 1, in: grant(7), out: granted(1, 7)},
			{call: 1, ret: 100, in: revoke(7), out: revoked(2)},
			{call: 2, ret: 3, in: put("a", "1"), out: putOK(2)},
			{call: 4, ret: 6, in: get("a"), out: got(2, kv("a", "1", 2, 2, 1))},
			{call: 10, ret: 20, in: PutInput(&pb.PutRequest{Key: []byte("b"), Lease: 7, IgnoreValue: true}), out: errOut(ErrKeyNotFound)},
		}, porcupine.Ok},
		{"unknown error text changes nothing", []op{
			{call: 0, ret: 10, in: put("a", "1"), out: errOut("etcdserver: no leader")},
			{call: 20, ret: 30, in: get("a"), out: got(1)},
		}, porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, info := Check(recordOps(tt.ops).Operations(), 0)
			if res != tt.want {
				t.Fatalf("Check = %s, want %s", res, tt.want)
			}
			// The revision-order witness must agree with porcupine.
			if err := CheckRevisionOrder(recordOps(tt.ops).Operations()); (err == nil) != (tt.want == porcupine.Ok) {
				t.Fatalf("CheckRevisionOrder = %v, porcupine says %s", err, tt.want)
			}
			if res == porcupine.Illegal && testing.Verbose() {
				path := filepath.Join(t.TempDir(), "history.html")
				if err := Visualize(info, path); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestVisualize(t *testing.T) {
	ops := []op{
		{call: 0, ret: 10, in: put("a", "1"), out: putOK(2)},
		{call: 5, in: put("b", "1"), out: putOK(3), fate: patchedOp},
		{call: 20, ret: 30, in: get("a"), out: got(2)},
	}
	res, info := Check(recordOps(ops).Operations(), 0)
	if res != porcupine.Illegal {
		t.Fatalf("Check = %s, want Illegal", res)
	}
	path := filepath.Join(t.TempDir(), "history.html")
	if err := Visualize(info, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`put \"a\"=\"1\" -\u003e r2 ok`, `range \"a\" -\u003e r2 count=0 []`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("visualisation lacks %s", want)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		in   Input
		out  Output
		want string
	}{
		{put("a", "1"), putOK(2), `put "a"="1" -> r2 ok`},
		{prefix("k/"), got(3, kv("k/a", "1", 2, 3, 2)), `range "k/"* -> r3 count=1 ["k/a"="1" c2 m3 v2]`},
		{txn([]*pb.Compare{cmpMod("a", 2)}, []*pb.RequestOp{reqPut("a", "2")}, []*pb.RequestOp{reqGet("a")}), txnOut(4, true, respPut()),
			`txn if [mod("a")=2] then [put "a"="2"] else [range "a"] -> r4 then [ok]`},
		{getAt("a", 2), errOut(ErrCompacted), `range "a" @r2 -> err: ` + ErrCompacted},
		{put("a", "1"), Output{unknown: true}, `put "a"="1" -> ?`},
		{revoke(7), revoked(5), `revoke lease=7 -> r5 ok`},
	}
	for _, tt := range tests {
		if got := describeOp(tt.in, tt.out); got != tt.want {
			t.Errorf("describeOp = %s, want %s", got, tt.want)
		}
	}
	s := &state{rev: 4, compact: 2, leases: []int64{7}, kvs: []*mvccpb.KeyValue{leased(kv("a", "1", 2, 3, 2), 7)}}
	if got, want := s.describe(), `r4 compact=r2 leases=[7] {"a"="1" c2 m3 v2 L7}`; got != want {
		t.Errorf("describe = %s, want %s", got, want)
	}
}

func TestRecorder(t *testing.T) {
	var r Recorder
	a := r.Call(0, put("a", "1"), 0)
	b := r.Call(1, get("a"), 1)
	c := r.Call(2, put("b", "1"), 2)
	d := r.Call(3, put("c", "1"), 3)
	_ = r.Call(4, put("d", "1"), 4) // never answered
	r.Return(a, putOK(2), 10)
	r.Unknown(b)
	r.Unknown(c)
	r.Patch(c, putOK(3))
	r.Unknown(d)
	r.Drop(d)
	ops := r.Operations()
	if len(ops) != 3 {
		t.Fatalf("got %d operations, want 3 (unknown read and dropped put left out)", len(ops))
	}
	if ops[0].Return != 10 || ops[1].Return != maxTime || ops[2].Return != maxTime {
		t.Errorf("returns = %d, %d, %d", ops[0].Return, ops[1].Return, ops[2].Return)
	}
	if !ops[2].Output.(Output).unknown || ops[1].Output.(Output).unknown {
		t.Errorf("patched op must carry its output, pending op none")
	}
	if ops[1].ClientId != 2 || ops[1].Metadata != 2 {
		t.Errorf("client of patched op = row %d (%v), want row 2 (client 2)", ops[1].ClientId, ops[1].Metadata)
	}

	// Sparse client numbers become dense rows, in order.
	var s Recorder
	for _, c := range []int{10003, 4, 10000, 4} {
		s.Return(s.Call(c, get("a"), 0), got(1), 1)
	}
	var rows []int
	for _, o := range s.Operations() {
		rows = append(rows, o.ClientId)
	}
	if want := []int{2, 0, 1, 0}; !slices.Equal(rows, want) {
		t.Errorf("rows = %v, want %v", rows, want)
	}
}
