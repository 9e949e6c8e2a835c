package server

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errStreamMoved ends a stream this instance can no longer serve because
// leadership moved. Unavailable is what makes clientv3 open a new stream
// and resume each watch from its next revision (no relist) rather than
// give up.
var errStreamMoved = status.Error(codes.Unavailable, "axon: leadership moved; resume the stream")

// downstream and upstream are the two ends of a proxied bidi stream.
type downstream[Req, Resp any] interface {
	Send(*Resp) error
	Recv() (*Req, error)
	Context() context.Context
}

type upstream[Req, Resp any] interface {
	Send(*Req) error
	Recv() (*Resp, error)
	CloseSend() error
}

// proxy relays a client's stream to the leader until either end stops.
func proxy[Req, Resp any](s *Server, down downstream[Req, Resp], open func(context.Context, *grpc.ClientConn) (upstream[Req, Resp], error)) error {
	if forwarded(down.Context()) {
		return errStreamMoved // the sender's view is stale; it retries
	}
	cc := s.awaitLeaderConn(down.Context())
	if cc == nil {
		return errStreamMoved // we lead now, or nobody does yet
	}
	ctx, cancel := context.WithCancel(s.forwardContext(down.Context()))
	defer cancel()
	up, err := open(ctx, cc)
	if err != nil {
		return errStreamMoved
	}
	go func() {
		for {
			req, err := down.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err != nil {
				cancel()
				return
			}
			if up.Send(req) != nil {
				return
			}
		}
	}()
	for {
		resp, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if down.Context().Err() != nil {
				return down.Context().Err()
			}
			if leaderRefused(err) {
				return err
			}
			return errStreamMoved
		}
		if err := down.Send(resp); err != nil {
			return err
		}
	}
}

// awaitLeaderConn waits for a leader other than this instance and
// returns a connection to it; nil if this instance leads or no leader
// shows up in time.
func (s *Server) awaitLeaderConn(ctx context.Context) *grpc.ClientConn {
	ch := make(chan string, 1)
	s.drv.LeaderAddr(func() bool { return ctx.Err() == nil && s.ctx.Err() == nil }, func(addr string, ok bool) {
		if !ok {
			addr = ""
		}
		ch <- addr
	})
	var addr string
	select {
	case addr = <-ch:
	case <-ctx.Done():
	}
	if addr == "" {
		return nil
	}
	cc, err := s.peers.conn(addr)
	if err != nil {
		s.log.Warn("leader connection", "addr", addr, "err", err)
		return nil
	}
	return cc
}

func (s *Server) proxyWatch(down pb.Watch_WatchServer) error {
	return proxy(s, down, func(ctx context.Context, cc *grpc.ClientConn) (upstream[pb.WatchRequest, pb.WatchResponse], error) {
		return pb.NewWatchClient(cc).Watch(ctx)
	})
}

func (s *Server) proxyKeepAlive(down pb.Lease_LeaseKeepAliveServer) error {
	return proxy(s, down, func(ctx context.Context, cc *grpc.ClientConn) (upstream[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse], error) {
		return pb.NewLeaseClient(cc).LeaseKeepAlive(ctx)
	})
}

// leaderRefused reports whether a stream's error is the leader's answer
// to the client (an auth check of a keepalive failed), to pass on as it
// is, rather than a broken leg to the leader (anything else).
func leaderRefused(err error) bool {
	for _, refusal := range []error{rpctypes.ErrGRPCUserEmpty, rpctypes.ErrGRPCInvalidAuthToken,
		rpctypes.ErrGRPCPermissionDenied, rpctypes.ErrGRPCAuthOldRevision} {
		if errors.Is(err, refusal) {
			return true
		}
	}
	return false
}
