package server_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
)

// fuzzClients are the stubs a fuzz input is sent through.
type fuzzClients struct {
	kv    pb.KVClient
	lease pb.LeaseClient
}

// fuzzMethod is one RPC the fuzzer drives: a fresh request to unmarshal
// into, and the call.
type fuzzMethod struct {
	name string
	new  func() proto.Message
	call func(ctx context.Context, c fuzzClients, req proto.Message) error
}

func unary[Req proto.Message, Resp any](name string, newReq func() Req, call func(c fuzzClients) func(context.Context, Req, ...grpc.CallOption) (Resp, error)) fuzzMethod {
	return fuzzMethod{
		name: name,
		new:  func() proto.Message { return newReq() },
		call: func(ctx context.Context, c fuzzClients, req proto.Message) error {
			_, err := call(c)(ctx, req.(Req))
			return err
		},
	}
}

// fuzzMethods is indexed by a fuzz input's first byte (mod its length).
var fuzzMethods = []fuzzMethod{
	unary("Range", func() *pb.RangeRequest { return &pb.RangeRequest{} }, func(c fuzzClients) func(context.Context, *pb.RangeRequest, ...grpc.CallOption) (*pb.RangeResponse, error) {
		return c.kv.Range
	}),
	unary("Put", func() *pb.PutRequest { return &pb.PutRequest{} }, func(c fuzzClients) func(context.Context, *pb.PutRequest, ...grpc.CallOption) (*pb.PutResponse, error) {
		return c.kv.Put
	}),
	unary("DeleteRange", func() *pb.DeleteRangeRequest { return &pb.DeleteRangeRequest{} }, func(c fuzzClients) func(context.Context, *pb.DeleteRangeRequest, ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
		return c.kv.DeleteRange
	}),
	unary("Txn", func() *pb.TxnRequest { return &pb.TxnRequest{} }, func(c fuzzClients) func(context.Context, *pb.TxnRequest, ...grpc.CallOption) (*pb.TxnResponse, error) {
		return c.kv.Txn
	}),
	unary("Compact", func() *pb.CompactionRequest { return &pb.CompactionRequest{} }, func(c fuzzClients) func(context.Context, *pb.CompactionRequest, ...grpc.CallOption) (*pb.CompactionResponse, error) {
		return c.kv.Compact
	}),
	unary("LeaseGrant", func() *pb.LeaseGrantRequest { return &pb.LeaseGrantRequest{} }, func(c fuzzClients) func(context.Context, *pb.LeaseGrantRequest, ...grpc.CallOption) (*pb.LeaseGrantResponse, error) {
		return c.lease.LeaseGrant
	}),
	unary("LeaseRevoke", func() *pb.LeaseRevokeRequest { return &pb.LeaseRevokeRequest{} }, func(c fuzzClients) func(context.Context, *pb.LeaseRevokeRequest, ...grpc.CallOption) (*pb.LeaseRevokeResponse, error) {
		return c.lease.LeaseRevoke
	}),
	unary("LeaseTimeToLive", func() *pb.LeaseTimeToLiveRequest { return &pb.LeaseTimeToLiveRequest{} }, func(c fuzzClients) func(context.Context, *pb.LeaseTimeToLiveRequest, ...grpc.CallOption) (*pb.LeaseTimeToLiveResponse, error) {
		return c.lease.LeaseTimeToLive
	}),
}

// fuzzAllowed are the codes an etcd client may see for a bad or unlucky
// request; Unknown and Internal mean the server failed to classify an
// error (or panicked in a handler).
var fuzzAllowed = map[codes.Code]bool{
	codes.InvalidArgument: true, codes.OutOfRange: true, codes.FailedPrecondition: true,
	codes.NotFound: true, codes.Unimplemented: true, codes.Unavailable: true,
	codes.ResourceExhausted: true, codes.DeadlineExceeded: true, codes.Canceled: true,
}

func fuzzSeed(f *testing.F, method string, req proto.Message) {
	for i, m := range fuzzMethods {
		if m.name == method {
			b, err := proto.Marshal(req)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(append([]byte{byte(i)}, b...))
			return
		}
	}
	f.Fatalf("no fuzz method %s", method)
}

// FuzzGRPC sends arbitrary well-formed requests of the KV and Lease
// methods to one server (per fuzz worker) over a real gRPC connection: the
// server must not crash, must keep answering, and must answer errors with
// one of etcd's client-facing codes.
func FuzzGRPC(f *testing.F) {
	put := &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}
	fuzzSeed(f, "Range", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 10, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD})
	fuzzSeed(f, "Range", &pb.RangeRequest{Key: []byte("a"), Revision: 2, CountOnly: true})
	fuzzSeed(f, "Put", put)
	fuzzSeed(f, "Put", &pb.PutRequest{Key: []byte("b"), Value: []byte("2"), PrevKv: true, Lease: 7})
	fuzzSeed(f, "Put", &pb.PutRequest{Key: []byte("a"), IgnoreValue: true})
	fuzzSeed(f, "DeleteRange", &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, PrevKv: true})
	fuzzSeed(f, "Txn", &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 0}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}},
	})
	fuzzSeed(f, "Txn", &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}},
		{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put}}}}}},
	}})
	fuzzSeed(f, "Compact", &pb.CompactionRequest{Revision: 1})
	fuzzSeed(f, "Compact", &pb.CompactionRequest{Revision: 1 << 40, Physical: true})
	fuzzSeed(f, "LeaseGrant", &pb.LeaseGrantRequest{TTL: 60})
	fuzzSeed(f, "LeaseGrant", &pb.LeaseGrantRequest{TTL: 60, ID: 7})
	fuzzSeed(f, "LeaseRevoke", &pb.LeaseRevokeRequest{ID: 7})
	fuzzSeed(f, "LeaseTimeToLive", &pb.LeaseTimeToLiveRequest{ID: 7, Keys: true})

	// One server per fuzz worker process, reused across inputs.
	_, cli := startServerIn(f, f.TempDir(), server.Config{Core: core.Config{RingSize: 16}, MemberID: 1, ClusterID: 2, Name: "fuzz"})
	conn := cli.ActiveConnection()
	c := fuzzClients{kv: pb.NewKVClient(conn), lease: pb.NewLeaseClient(conn)}

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		m := fuzzMethods[int(data[0])%len(fuzzMethods)]
		req := m.new()
		if err := proto.Unmarshal(data[1:], req); err != nil {
			t.Skip()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.call(ctx, c, req); err != nil {
			st, ok := status.FromError(err)
			if !ok || !fuzzAllowed[st.Code()] {
				t.Fatalf("%s(%v): error %v (code %v)", m.name, req, err, status.Code(err))
			}
		}
		if _, err := c.kv.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 1}); err != nil {
			t.Fatalf("after %s(%v): Range failed: %v", m.name, req, err)
		}
	})
}
