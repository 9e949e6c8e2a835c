package linearizability

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Short builders for hand-written histories.

func kv(key, val string, create, mod, ver int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), CreateRevision: create, ModRevision: mod, Version: ver}
}

func leased(k *mvccpb.KeyValue, lease int64) *mvccpb.KeyValue {
	k.Lease = lease
	return k
}

func hdr(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

func put(key, val string) Input {
	return PutInput(&pb.PutRequest{Key: []byte(key), Value: []byte(val)})
}

func putLease(key, val string, lease int64) Input {
	return PutInput(&pb.PutRequest{Key: []byte(key), Value: []byte(val), Lease: lease})
}

// touchLease is a put that keeps key's value and attaches lease: etcd
// checks the lease first, then that the key exists.
func touchLease(key string, lease int64) Input {
	return PutInput(&pb.PutRequest{Key: []byte(key), Lease: lease, IgnoreValue: true})
}

func putOK(rev int64) Output { return PutOutput(&pb.PutResponse{Header: hdr(rev)}) }

func get(key string) Input { return RangeInput(&pb.RangeRequest{Key: []byte(key)}) }

func getAt(key string, rev int64) Input {
	return RangeInput(&pb.RangeRequest{Key: []byte(key), Revision: rev})
}

func prefix(p string) Input {
	if p == "" {
		// clientv3's WithPrefix of "": etcd refuses an empty key.
		return RangeInput(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	}
	return RangeInput(&pb.RangeRequest{Key: []byte(p), RangeEnd: prefixEnd([]byte(p))})
}

func got(rev int64, kvs ...*mvccpb.KeyValue) Output {
	return RangeOutput(&pb.RangeResponse{Header: hdr(rev), Kvs: kvs, Count: int64(len(kvs))})
}

func del(key string) Input { return DeleteInput(&pb.DeleteRangeRequest{Key: []byte(key)}) }

func delOK(rev, n int64) Output {
	return DeleteOutput(&pb.DeleteRangeResponse{Header: hdr(rev), Deleted: n})
}

func grant(id int64) Input { return Input{Grant: &pb.LeaseGrantRequest{ID: id, TTL: 10}} }

func granted(rev, id int64) Output {
	return Output{Grant: &pb.LeaseGrantResponse{Header: hdr(rev), ID: id, TTL: 10}}
}

func revoke(id int64) Input { return Input{Revoke: &pb.LeaseRevokeRequest{ID: id}} }

func revoked(rev int64) Output { return Output{Revoke: &pb.LeaseRevokeResponse{Header: hdr(rev)}} }

func compact(rev int64) Input { return Input{Compact: &pb.CompactionRequest{Revision: rev}} }

func compacted(rev int64) Output { return Output{Compact: &pb.CompactionResponse{Header: hdr(rev)}} }

func errOut(text string) Output { return Output{Err: text} }

func reqPut(key, val string) *pb.RequestOp { return put(key, val).KV }

func reqGet(key string) *pb.RequestOp { return get(key).KV }

func respPut() *pb.ResponseOp {
	return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}}
}

func respGet(kvs ...*mvccpb.KeyValue) *pb.ResponseOp {
	return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Kvs: kvs, Count: int64(len(kvs))}}}
}

func cmpValue(key, val string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte(val)}}
}

func cmpMod(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

func cmpVersion(key string, res pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VERSION, Result: res, TargetUnion: &pb.Compare_Version{Version: v}}
}

func txn(cmps []*pb.Compare, then, els []*pb.RequestOp) Input {
	return TxnInput(&pb.TxnRequest{Compare: cmps, Success: then, Failure: els})
}

func txnOut(rev int64, ok bool, resps ...*pb.ResponseOp) Output {
	return TxnOutput(&pb.TxnResponse{Header: hdr(rev), Succeeded: ok, Responses: resps})
}

// fate of a hand-written operation.
type fate int

const (
	answered fate = iota
	unknownOp
	patchedOp
	droppedOp
)

type op struct {
	call, ret int64
	in        Input
	out       Output
	fate      fate
}

// recordOps builds a history; the client of each op is its index, so ops
// never share a client and overlap only as their times say.
func recordOps(ops []op) *Recorder {
	var r Recorder
	for i, o := range ops {
		id := r.Call(i, o.in, o.call)
		switch o.fate {
		case answered:
			r.Return(id, o.out, o.ret)
		case unknownOp:
			r.Unknown(id)
		case patchedOp:
			r.Unknown(id)
			r.Patch(id, o.out)
		case droppedOp:
			r.Unknown(id)
			r.Drop(id)
		}
	}
	return &r
}

func cmpLease(key string, res pb.Compare_CompareResult, id int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_LEASE, Result: res, TargetUnion: &pb.Compare_Lease{Lease: id}}
}

// over makes c a compare over every key in [c.Key, end).
func over(c *pb.Compare, end string) *pb.Compare {
	c.RangeEnd = []byte(end)
	return c
}

func reqGetAt(key string, rev int64) *pb.RequestOp { return getAt(key, rev).KV }
