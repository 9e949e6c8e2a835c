package server

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
)

// coreErrors maps core's etcd errors to etcd's gRPC errors.
var coreErrors = []struct {
	err  error
	grpc error
}{
	{core.ErrCompacted, rpctypes.ErrGRPCCompacted},
	{core.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
	{core.ErrEmptyKey, rpctypes.ErrGRPCEmptyKey},
	{core.ErrTooManyOps, rpctypes.ErrGRPCTooManyOps},
	{core.ErrDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
	{core.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
	{core.ErrValueProvided, rpctypes.ErrGRPCValueProvided},
	{core.ErrLeaseProvided, rpctypes.ErrGRPCLeaseProvided},
	{core.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{core.ErrLeaseExist, rpctypes.ErrGRPCLeaseExist},
	{core.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
	{core.ErrInvalidSortOption, rpctypes.ErrGRPCInvalidSortOption},
	{core.ErrStopped, rpctypes.ErrGRPCStopped},
	{core.ErrRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge},
	{core.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
	{core.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{core.ErrTimeout, rpctypes.ErrGRPCTimeout},
	{core.ErrEmptyRequest, rpctypes.ErrGRPCKeyNotFound},
	{core.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
	{core.ErrTooManyRequests, rpctypes.ErrGRPCRequestTooManyRequests},
	{auth.ErrAuthRootUserNotExist, rpctypes.ErrGRPCRootUserNotExist},
	{auth.ErrAuthRootRoleNotExist, rpctypes.ErrGRPCRootRoleNotExist},
	{auth.ErrAuthUserAlreadyExist, rpctypes.ErrGRPCUserAlreadyExist},
	{auth.ErrAuthUserEmpty, rpctypes.ErrGRPCUserEmpty},
	{auth.ErrAuthUserNotFound, rpctypes.ErrGRPCUserNotFound},
	{auth.ErrAuthRoleAlreadyExist, rpctypes.ErrGRPCRoleAlreadyExist},
	{auth.ErrAuthRoleNotFound, rpctypes.ErrGRPCRoleNotFound},
	{auth.ErrAuthRoleEmpty, rpctypes.ErrGRPCRoleEmpty},
	{auth.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed},
	{auth.ErrAuthPermissionNotGiven, rpctypes.ErrGRPCPermissionNotGiven},
	{auth.ErrAuthPermissionDenied, rpctypes.ErrGRPCPermissionDenied},
	{auth.ErrAuthRoleNotGranted, rpctypes.ErrGRPCRoleNotGranted},
	{auth.ErrAuthPermissionNotGranted, rpctypes.ErrGRPCPermissionNotGranted},
	{auth.ErrAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
	{auth.ErrAuthInvalidToken, rpctypes.ErrGRPCInvalidAuthToken},
	{auth.ErrAuthInvalidMgmt, rpctypes.ErrGRPCInvalidAuthMgmt},
	{auth.ErrAuthOldRevision, rpctypes.ErrGRPCAuthOldRevision},
	{auth.ErrAuthNoPasswordUser, status.Error(codes.Unknown, auth.ErrAuthNoPasswordUser.Error())},
}

// toGRPC turns an error into the status etcd would answer with.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a gRPC status, e.g. from the leader
	}
	if errors.Is(err, errLeaderChanged) {
		return rpctypes.ErrGRPCLeaderChanged
	}
	for _, m := range coreErrors {
		if errors.Is(err, m.err) {
			return m.grpc
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, core.ErrRetriesExhausted), errors.Is(err, storage.ErrUnavailable),
		errors.Is(err, storage.ErrConflict), errors.Is(err, storage.ErrUncertain):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (s *Server) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: s.cfg.ClusterID, MemberId: s.cfg.MemberID, Revision: rev, RaftTerm: 1}
}

// fillHeader gives a top-level response etcd's identity fields.
func (s *Server) fillHeader(h *pb.ResponseHeader) {
	if h != nil {
		h.ClusterId, h.MemberId, h.RaftTerm = s.cfg.ClusterID, s.cfg.MemberID, 1
	}
}

type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
}

func (k kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp, err := k.s.rangeChecked(ctx, r, rangeCheck(r))
	if err != nil {
		return nil, toGRPC(err)
	}
	k.s.fillHeader(resp.Header)
	return resp, nil
}

// rangeCheck is the auth check of a range: read permission on its keys.
func rangeCheck(r *pb.RangeRequest) authCheck {
	return func(st *auth.Store, id auth.Identity) error { return st.CheckRange(id, r) }
}

// rangeChecked answers r once check allows its caller; a nil check is
// the instance's own read, which runs as no user (etcd's health read runs
// as root).
func (s *Server) rangeChecked(ctx context.Context, r *pb.RangeRequest, check authCheck) (*pb.RangeResponse, error) {
	txn, rd, c, compacted, err := s.rangeSnapshot(ctx, r, check)
	if err != nil {
		return nil, err
	}
	defer txn.Rollback()
	return core.RangeCounted(rd, r, c, compacted, &s.rpc.counts, memoryFor(ctx))
}

// rangeSnapshot validates r, takes the snapshot it is read from (see
// readSnapshot), with its commit point and compact revision, and returns
// a reader of it once check allows the caller (nil: no check), against
// the store in the read's own snapshot, looked at before it began. The
// caller rolls txn back.
func (s *Server) rangeSnapshot(ctx context.Context, r *pb.RangeRequest, check authCheck) (txn storage.Txn, rd core.Reader, c, compacted int64, err error) {
	if err := core.ValidateRange(r); err != nil {
		return nil, nil, 0, 0, err
	}
	snap, err := s.readSnapshot(ctx, r.Serializable)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	txn, c, compacted = snap.Txn, snap.Rev, snap.Compacted
	la := core.RangeLookahead(r, c)
	if !snap.Led && check != nil {
		// A follower checks against the auth store in the read's own
		// snapshot: its counter is read with the range's first reads.
		la.Gets = append(la.Gets, core.MetaKey(auth.MetaAuthSeq))
	}
	if rd, err = driver.Reader(txn, la); err == nil && check != nil {
		err = s.drv.Authorize(snap.Auth, rd, s.checker(ctx, check))
	}
	if err != nil {
		txn.Rollback()
		return nil, nil, 0, 0, err
	}
	return txn, rd, c, compacted, nil
}

// HealthRead is etcd's health read, a one-key range (serializable: from
// this instance's snapshot; else linearizable, through the leader's
// commit point), run by the instance itself so that auth does not fail
// it: etcd runs its own as root.
func (s *Server) HealthRead(ctx context.Context, serializable bool) error {
	_, err := s.rangeChecked(ctx, &pb.RangeRequest{Key: []byte("health"), KeysOnly: true, Limit: 1, Serializable: serializable}, nil)
	return err
}

// RangeStream answers a range in chunks (etcd 3.7): the chunks' kvs in
// order are Range's at one revision; header, more and count come with
// the last. A pageable range (core.Pageable: key order, no filter) is
// read a page at a time from one snapshot, each page sent before the next
// is read, so neither the first byte nor the memory waits for the whole
// answer. Any other is answered by Range and cut into chunks: etcd
// refuses sorted and filtered streams as Unimplemented, Axon answers them
// as a Range.
func (k kvServer) RangeStream(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	if !core.Pageable(r) {
		return k.rangeStreamWhole(r, stream)
	}
	return toGRPC(k.s.streamPages(stream.Context(), r, stream.Send))
}

// firstPageKeys is the keys of a streamed range's first page: few, for a
// quick first byte.
const firstPageKeys = 10

// nextPageKeys sizes a streamed range's next page after one of last keys
// and size bytes, as etcd sizes its chunks: twice the keys while a page
// is under half the target size, half while it is over twice that.
func nextPageKeys(last, size, target int) int {
	switch {
	case size < target/2:
		last *= 2
	case size > target*2:
		last /= 2
	}
	return max(last, 1)
}

// streamPages sends r's pages (core.RangePages) from one snapshot, each
// page's read memory given back as it goes out (chunkMemory). Send
// blocks while the client is slow to read, and the snapshot stays open
// that long: the engine keeps the versions it sees meanwhile, as for any
// long read.
func (s *Server) streamPages(ctx context.Context, r *pb.RangeRequest, send func(*pb.RangeStreamResponse) error) error {
	txn, rd, c, compacted, err := s.rangeSnapshot(ctx, r, rangeCheck(r))
	if err != nil {
		return err
	}
	defer txn.Rollback()
	pages, err := core.NewRangePages(rd, r, c, compacted)
	if err != nil {
		return err
	}
	mem := chunkMemoryFor(ctx)
	for size := firstPageKeys; ; {
		resp, done, err := pages.Next(size, mem.allowance())
		if err != nil {
			return err
		}
		s.fillHeader(resp.Header)
		if err := send(&pb.RangeStreamResponse{RangeResponse: resp}); err != nil {
			return err
		}
		mem.sent()
		if done {
			return nil
		}
		size = nextPageKeys(size, proto.Size(resp), s.cfg.MaxRequestBytes)
	}
}

// rangeStreamChunk bounds the key-values one message of a whole range's
// stream holds.
const rangeStreamChunk = 1000

// rangeStreamWhole answers a range that is not pageable by Range, in
// chunks.
func (k kvServer) rangeStreamWhole(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	resp, err := k.Range(stream.Context(), r)
	if err != nil {
		return err
	}
	kvs := resp.Kvs
	for len(kvs) > rangeStreamChunk {
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Kvs: kvs[:rangeStreamChunk]}}); err != nil {
			return err
		}
		kvs = kvs[rangeStreamChunk:]
	}
	resp.Kvs = kvs
	return stream.Send(&pb.RangeStreamResponse{RangeResponse: resp})
}

// tooLarge reports whether a write request exceeds MaxRequestBytes; etcd
// refuses such a proposal with ErrGRPCRequestTooLarge.
func (k kvServer) tooLarge(r proto.Message) bool {
	return requestSize(r) > k.s.cfg.MaxRequestBytes
}

// write proposes a write on the leader; a follower forwards the request.
func write[T interface{ GetHeader() *pb.ResponseHeader }](k kvServer, ctx context.Context, r proto.Message, op *pb.RequestOp, pick func(*pb.ResponseOp) T, remote func(context.Context, pb.KVClient) (T, error)) (T, error) {
	if k.tooLarge(r) {
		var zero T
		return zero, rpctypes.ErrGRPCRequestTooLarge
	}
	out, err := forward(k.s, ctx, func() (T, error) {
		var zero T
		if err := k.s.authorizeLeader(ctx, func(st *auth.Store, id auth.Identity) error {
			return st.CheckWrite(id, op, k.s.drv.LeaseKeys)
		}); err != nil {
			return zero, err
		}
		if err := k.s.checkSpace(ctx); err != nil {
			return zero, err
		}
		resp, err := k.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return k.s.drv.Write(op, answer) })
		if err != nil {
			return zero, err
		}
		return pick(resp.Response), nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (T, error) { return remote(ctx, pb.NewKVClient(cc)) })
	if err != nil {
		return out, err
	}
	k.s.fillHeader(out.GetHeader())
	return out, nil
}

func (k kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return write(k, ctx, r, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r}}, (*pb.ResponseOp).GetResponsePut,
		func(ctx context.Context, c pb.KVClient) (*pb.PutResponse, error) { return c.Put(ctx, r) })
}

func (k kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return write(k, ctx, r, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}, (*pb.ResponseOp).GetResponseDeleteRange,
		func(ctx context.Context, c pb.KVClient) (*pb.DeleteRangeResponse, error) {
			return c.DeleteRange(ctx, r)
		})
}

func (k kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	return write(k, ctx, r, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r}}, (*pb.ResponseOp).GetResponseTxn,
		func(ctx context.Context, c pb.KVClient) (*pb.TxnResponse, error) { return c.Txn(ctx, r) })
}

func (k kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := forward(k.s, ctx, func() (*pb.CompactionResponse, error) {
		if err := k.s.authorizeLeader(ctx, admin); err != nil {
			return nil, err
		}
		resp, err := k.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return k.s.drv.Compact(r.Revision, answer) })
		if err != nil {
			return nil, err
		}
		// etcd's physical compaction: with it the call returns once the
		// old versions are gone; without, the sweep runs behind.
		if r.Physical {
			if _, err := k.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return k.s.drv.AwaitSweep(r.Revision, answer) }); err != nil {
				return nil, err
			}
		}
		return &pb.CompactionResponse{Header: k.s.header(resp.Rev)}, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.CompactionResponse, error) {
		return pb.NewKVClient(cc).Compact(ctx, r)
	})
	if err == nil {
		k.s.drv.LearnCompacted(r.Revision)
	}
	return resp, err
}
