package tikvserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pingcap/kvproto/pkg/errorpb"
	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	"github.com/pingcap/kvproto/pkg/tikvpb"
	"github.com/tikv/client-go/v2/tikvrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kvService answers TiKV's transactional calls by handing them to the
// mock's RPC client, the one tikv.NewMock uses in process.
type kvService struct {
	tikvpb.UnimplementedTikvServer
	s        *Server
	feedback atomic.Uint64 // sequence of health feedback
}

// kvRequest is what every transactional request has.
type kvRequest interface {
	GetContext() *kvrpcpb.Context
}

// run answers one TiKV request: refused if it names another cluster,
// failed with an injected region error, or as the mock store answers it.
func (s *Server) run(ctx context.Context, typ tikvrpc.CmdType, req kvRequest) (any, error) {
	var rctx kvrpcpb.Context
	if c := req.GetContext(); c != nil {
		rctx = *c
	}
	r := tikvrpc.NewRequest(typ, req, rctx)
	var regionErr *errorpb.Error
	if id := rctx.GetClusterId(); id != 0 && id != s.clusterID {
		// A client of an earlier process: this store is not the one it
		// knows, whatever region IDs say.
		regionErr = &errorpb.Error{
			Message:       fmt.Sprintf("cluster id mismatch: this is %d, not %d", s.clusterID, id),
			StoreNotMatch: &errorpb.StoreNotMatch{ActualStoreId: s.storeID},
		}
	} else {
		regionErr = s.faults.regionError(&rctx, s.cluster)
	}
	if regionErr != nil {
		resp, err := tikvrpc.GenRegionErrorResp(r, regionErr)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "tikv-server: region error for %s: %v", typ, err)
		}
		return resp.Resp, nil
	}
	resp, err := s.mock.SendRequest(ctx, s.addr, r, 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unknown, "tikv-server: %s: %v", typ, err)
	}
	return resp.Resp, nil
}

// unary runs a unary call and returns its response as the method's type.
func unary[Resp any](ctx context.Context, k *kvService, typ tikvrpc.CmdType, req kvRequest) (Resp, error) {
	var zero Resp
	resp, err := k.s.run(ctx, typ, req)
	if err != nil {
		return zero, err
	}
	r, ok := resp.(Resp)
	if !ok {
		return zero, status.Errorf(codes.Internal, "tikv-server: %s answered with %T", typ, resp)
	}
	return r, nil
}

func (k *kvService) KvGet(ctx context.Context, r *kvrpcpb.GetRequest) (*kvrpcpb.GetResponse, error) {
	return unary[*kvrpcpb.GetResponse](ctx, k, tikvrpc.CmdGet, r)
}

func (k *kvService) KvScan(ctx context.Context, r *kvrpcpb.ScanRequest) (*kvrpcpb.ScanResponse, error) {
	return unary[*kvrpcpb.ScanResponse](ctx, k, tikvrpc.CmdScan, r)
}

func (k *kvService) KvBatchGet(ctx context.Context, r *kvrpcpb.BatchGetRequest) (*kvrpcpb.BatchGetResponse, error) {
	return unary[*kvrpcpb.BatchGetResponse](ctx, k, tikvrpc.CmdBatchGet, r)
}

func (k *kvService) KvPrewrite(ctx context.Context, r *kvrpcpb.PrewriteRequest) (*kvrpcpb.PrewriteResponse, error) {
	return unary[*kvrpcpb.PrewriteResponse](ctx, k, tikvrpc.CmdPrewrite, r)
}

func (k *kvService) KvCommit(ctx context.Context, r *kvrpcpb.CommitRequest) (*kvrpcpb.CommitResponse, error) {
	return unary[*kvrpcpb.CommitResponse](ctx, k, tikvrpc.CmdCommit, r)
}

func (k *kvService) KvPessimisticLock(ctx context.Context, r *kvrpcpb.PessimisticLockRequest) (*kvrpcpb.PessimisticLockResponse, error) {
	return unary[*kvrpcpb.PessimisticLockResponse](ctx, k, tikvrpc.CmdPessimisticLock, r)
}

func (k *kvService) KVPessimisticRollback(ctx context.Context, r *kvrpcpb.PessimisticRollbackRequest) (*kvrpcpb.PessimisticRollbackResponse, error) {
	return unary[*kvrpcpb.PessimisticRollbackResponse](ctx, k, tikvrpc.CmdPessimisticRollback, r)
}

func (k *kvService) KvTxnHeartBeat(ctx context.Context, r *kvrpcpb.TxnHeartBeatRequest) (*kvrpcpb.TxnHeartBeatResponse, error) {
	return unary[*kvrpcpb.TxnHeartBeatResponse](ctx, k, tikvrpc.CmdTxnHeartBeat, r)
}

func (k *kvService) KvCheckTxnStatus(ctx context.Context, r *kvrpcpb.CheckTxnStatusRequest) (*kvrpcpb.CheckTxnStatusResponse, error) {
	return unary[*kvrpcpb.CheckTxnStatusResponse](ctx, k, tikvrpc.CmdCheckTxnStatus, r)
}

func (k *kvService) KvCleanup(ctx context.Context, r *kvrpcpb.CleanupRequest) (*kvrpcpb.CleanupResponse, error) {
	return unary[*kvrpcpb.CleanupResponse](ctx, k, tikvrpc.CmdCleanup, r)
}

func (k *kvService) KvBatchRollback(ctx context.Context, r *kvrpcpb.BatchRollbackRequest) (*kvrpcpb.BatchRollbackResponse, error) {
	return unary[*kvrpcpb.BatchRollbackResponse](ctx, k, tikvrpc.CmdBatchRollback, r)
}

func (k *kvService) KvScanLock(ctx context.Context, r *kvrpcpb.ScanLockRequest) (*kvrpcpb.ScanLockResponse, error) {
	return unary[*kvrpcpb.ScanLockResponse](ctx, k, tikvrpc.CmdScanLock, r)
}

func (k *kvService) KvResolveLock(ctx context.Context, r *kvrpcpb.ResolveLockRequest) (*kvrpcpb.ResolveLockResponse, error) {
	return unary[*kvrpcpb.ResolveLockResponse](ctx, k, tikvrpc.CmdResolveLock, r)
}

// GetStoreSafeTS answers client-go's periodic poll for the store's safe
// timestamp (used by stale reads, which Axon does not make) with none.
func (k *kvService) GetStoreSafeTS(context.Context, *kvrpcpb.StoreSafeTSRequest) (*kvrpcpb.StoreSafeTSResponse, error) {
	return &kvrpcpb.StoreSafeTSResponse{}, nil
}

func (k *kvService) GetHealthFeedback(context.Context, *kvrpcpb.GetHealthFeedbackRequest) (*kvrpcpb.GetHealthFeedbackResponse, error) {
	return &kvrpcpb.GetHealthFeedbackResponse{HealthFeedback: k.healthFeedback()}, nil
}

// healthFeedback says the store is not slow (1 is the lowest score).
func (k *kvService) healthFeedback() *kvrpcpb.HealthFeedback {
	return &kvrpcpb.HealthFeedback{StoreId: k.s.storeID, FeedbackSeqNo: k.feedback.Add(1), SlowScore: 1}
}

// BatchCommands runs the entries of each batch concurrently, as TiKV
// does, and answers each as it completes. An entry of a kind it does not
// implement ends the stream with codes.Unimplemented.
func (k *kvService) BatchCommands(stream tikvpb.Tikv_BatchCommandsServer) error {
	ctx := stream.Context()
	var (
		sendMu  sync.Mutex
		running sync.WaitGroup
	)
	defer running.Wait()
	for {
		batch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ids := batch.GetRequestIds()
		if len(ids) != len(batch.GetRequests()) {
			return status.Errorf(codes.InvalidArgument, "tikv-server: %d request ids for %d requests", len(ids), len(batch.GetRequests()))
		}
		for i, entry := range batch.GetRequests() {
			name, do, err := k.batchEntry(entry)
			k.s.calls.add("BatchCommands/" + name)
			typ := name
			if _, _, kv := batchRequest(entry); !kv {
				typ = "BatchCommands/" + name
			}
			end := k.s.load.begin(typ)
			if err != nil {
				end()
				k.s.logUnimplemented("BatchCommands/"+name, err)
				return err
			}
			id := ids[i]
			running.Add(1)
			go func() {
				defer running.Done()
				defer end() // after the answer is sent
				resp, err := do(ctx)
				if err != nil {
					// Only a canceled stream gets here: the mock answers
					// everything else. Its client times the entry out.
					if ctx.Err() == nil {
						k.s.log.Warn("tikv-server: batch entry failed", "cmd", name, "err", err)
					}
					return
				}
				sendMu.Lock()
				defer sendMu.Unlock()
				_ = stream.Send(&tikvpb.BatchCommandsResponse{
					Responses:  []*tikvpb.BatchCommandsResponse_Response{resp},
					RequestIds: []uint64{id},
				})
			}()
		}
	}
}

// batchEntry returns the name of a BatchCommands entry and what answers
// it, or an Unimplemented error.
func (k *kvService) batchEntry(entry *tikvpb.BatchCommandsRequest_Request) (string, func(context.Context) (*tikvpb.BatchCommandsResponse_Response, error), error) {
	switch c := entry.GetCmd().(type) {
	case *tikvpb.BatchCommandsRequest_Request_Empty:
		return "Empty", func(context.Context) (*tikvpb.BatchCommandsResponse_Response, error) {
			return &tikvpb.BatchCommandsResponse_Response{Cmd: &tikvpb.BatchCommandsResponse_Response_Empty{
				Empty: &tikvpb.BatchCommandsEmptyResponse{TestId: c.Empty.GetTestId()},
			}}, nil
		}, nil
	case *tikvpb.BatchCommandsRequest_Request_GetHealthFeedback:
		return "GetHealthFeedback", func(context.Context) (*tikvpb.BatchCommandsResponse_Response, error) {
			return &tikvpb.BatchCommandsResponse_Response{Cmd: &tikvpb.BatchCommandsResponse_Response_GetHealthFeedback{
				GetHealthFeedback: &kvrpcpb.GetHealthFeedbackResponse{HealthFeedback: k.healthFeedback()},
			}}, nil
		}, nil
	}
	typ, req, ok := batchRequest(entry)
	if !ok {
		name := strings.TrimPrefix(fmt.Sprintf("%T", entry.GetCmd()), "*tikvpb.BatchCommandsRequest_Request_")
		return name, nil, status.Errorf(codes.Unimplemented, "tikv-server: BatchCommands entry %s not implemented", name)
	}
	return typ.String(), func(ctx context.Context) (*tikvpb.BatchCommandsResponse_Response, error) {
		if err := k.s.wait(ctx); err != nil {
			return nil, err
		}
		resp, err := k.s.run(ctx, typ, req)
		if err != nil {
			return nil, err
		}
		out, ok := batchResponse(resp)
		if !ok {
			return nil, fmt.Errorf("tikv-server: %s answered with %T", typ, resp)
		}
		return out, nil
	}, nil
}

// batchRequest unwraps a transactional BatchCommands entry.
func batchRequest(entry *tikvpb.BatchCommandsRequest_Request) (tikvrpc.CmdType, kvRequest, bool) {
	switch c := entry.GetCmd().(type) {
	case *tikvpb.BatchCommandsRequest_Request_Get:
		return tikvrpc.CmdGet, c.Get, true
	case *tikvpb.BatchCommandsRequest_Request_Scan:
		return tikvrpc.CmdScan, c.Scan, true
	case *tikvpb.BatchCommandsRequest_Request_BatchGet:
		return tikvrpc.CmdBatchGet, c.BatchGet, true
	case *tikvpb.BatchCommandsRequest_Request_Prewrite:
		return tikvrpc.CmdPrewrite, c.Prewrite, true
	case *tikvpb.BatchCommandsRequest_Request_Commit:
		return tikvrpc.CmdCommit, c.Commit, true
	case *tikvpb.BatchCommandsRequest_Request_PessimisticLock:
		return tikvrpc.CmdPessimisticLock, c.PessimisticLock, true
	case *tikvpb.BatchCommandsRequest_Request_PessimisticRollback:
		return tikvrpc.CmdPessimisticRollback, c.PessimisticRollback, true
	case *tikvpb.BatchCommandsRequest_Request_TxnHeartBeat:
		return tikvrpc.CmdTxnHeartBeat, c.TxnHeartBeat, true
	case *tikvpb.BatchCommandsRequest_Request_CheckTxnStatus:
		return tikvrpc.CmdCheckTxnStatus, c.CheckTxnStatus, true
	case *tikvpb.BatchCommandsRequest_Request_Cleanup:
		return tikvrpc.CmdCleanup, c.Cleanup, true
	case *tikvpb.BatchCommandsRequest_Request_BatchRollback:
		return tikvrpc.CmdBatchRollback, c.BatchRollback, true
	case *tikvpb.BatchCommandsRequest_Request_ScanLock:
		return tikvrpc.CmdScanLock, c.ScanLock, true
	case *tikvpb.BatchCommandsRequest_Request_ResolveLock:
		return tikvrpc.CmdResolveLock, c.ResolveLock, true
	}
	return 0, nil, false
}

// batchResponse wraps a transactional response as a BatchCommands entry.
func batchResponse(resp any) (*tikvpb.BatchCommandsResponse_Response, bool) {
	var cmd tikvpb.BatchCommandsResponse_Response
	switch r := resp.(type) {
	case *kvrpcpb.GetResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_Get{Get: r}
	case *kvrpcpb.ScanResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_Scan{Scan: r}
	case *kvrpcpb.BatchGetResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_BatchGet{BatchGet: r}
	case *kvrpcpb.PrewriteResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_Prewrite{Prewrite: r}
	case *kvrpcpb.CommitResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_Commit{Commit: r}
	case *kvrpcpb.PessimisticLockResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_PessimisticLock{PessimisticLock: r}
	case *kvrpcpb.PessimisticRollbackResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_PessimisticRollback{PessimisticRollback: r}
	case *kvrpcpb.TxnHeartBeatResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_TxnHeartBeat{TxnHeartBeat: r}
	case *kvrpcpb.CheckTxnStatusResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_CheckTxnStatus{CheckTxnStatus: r}
	case *kvrpcpb.CleanupResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_Cleanup{Cleanup: r}
	case *kvrpcpb.BatchRollbackResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_BatchRollback{BatchRollback: r}
	case *kvrpcpb.ScanLockResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_ScanLock{ScanLock: r}
	case *kvrpcpb.ResolveLockResponse:
		cmd.Cmd = &tikvpb.BatchCommandsResponse_Response_ResolveLock{ResolveLock: r}
	default:
		return nil, false
	}
	return &cmd, true
}
