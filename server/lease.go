package server

import (
	"context"
	"errors"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
)

// tick moves the member's clock on its own until the server closes:
// renewals, campaigns and lease expiry happen without requests.
func (s *Server) tick(every time.Duration) {
	defer s.bg.work.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.drv.Leading() // ticks the member
		case <-s.ctx.Done():
			return
		}
	}
}

type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (l leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return forward(l.s, ctx, func() (*pb.LeaseGrantResponse, error) {
		if err := l.s.authorizeLeader(ctx, someUser); err != nil {
			return nil, err
		}
		if err := l.s.checkSpace(ctx); err != nil {
			return nil, err
		}
		resp, err := l.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return l.s.drv.Grant(r.ID, r.TTL, answer) })
		if err != nil {
			return nil, err
		}
		return &pb.LeaseGrantResponse{Header: l.s.header(resp.Rev), ID: resp.Lease, TTL: resp.LeaseTTL}, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.LeaseGrantResponse, error) {
		return pb.NewLeaseClient(cc).LeaseGrant(ctx, r)
	})
}

func (l leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return forward(l.s, ctx, func() (*pb.LeaseRevokeResponse, error) {
		if err := l.s.authorizeLeader(ctx, l.s.leaseCheck(r.ID, true)); err != nil {
			return nil, err
		}
		resp, err := l.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return l.s.drv.Revoke(r.ID, answer) })
		if err != nil {
			return nil, err
		}
		return &pb.LeaseRevokeResponse{Header: l.s.header(resp.Rev)}, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.LeaseRevokeResponse, error) {
		return pb.NewLeaseClient(cc).LeaseRevoke(ctx, r)
	})
}

func (l leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	if !l.s.Leading() {
		return l.s.proxyKeepAlive(stream)
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.s.authorizeLeader(stream.Context(), l.s.leaseCheck(req.ID, true)); err != nil {
			if errors.Is(err, core.ErrNotLeader) {
				return errStreamMoved
			}
			return toGRPC(err)
		}
		// An expired lease's keepalive waits here for the expiry's revoke.
		resp, err := l.s.propose(stream.Context(), func(answer func(core.Response)) core.RequestID { return l.s.drv.KeepAlive(req.ID, answer) })
		switch {
		case errors.Is(err, core.ErrLeaseNotFound):
			resp.LeaseTTL = 0 // etcd answers an unknown lease with TTL 0
		case errors.Is(err, core.ErrNotLeader) || errors.Is(err, errLeaderChanged):
			return errStreamMoved
		case err != nil:
			return toGRPC(err)
		default:
			l.s.metrics.etcd.leaseRenewed.Inc()
		}
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: l.s.header(resp.Rev), ID: req.ID, TTL: resp.LeaseTTL}); err != nil {
			return err
		}
	}
}

func (l leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return forward(l.s, ctx, func() (*pb.LeaseTimeToLiveResponse, error) {
		check := someUser
		if r.Keys {
			check = l.s.leaseCheck(r.ID, false)
		}
		if err := l.s.authorizeLeader(ctx, check); err != nil {
			return nil, err
		}
		resp, rev, led, err := l.s.drv.TimeToLive(r.ID, r.Keys)
		if !led {
			return nil, core.ErrNotLeader
		}
		if err != nil {
			return nil, err
		}
		resp.Header = l.s.header(rev)
		return resp, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.LeaseTimeToLiveResponse, error) {
		return pb.NewLeaseClient(cc).LeaseTimeToLive(ctx, r)
	})
}

func (l leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return forward(l.s, ctx, func() (*pb.LeaseLeasesResponse, error) {
		if err := l.s.authorizeLeader(ctx, l.s.leasesCheck); err != nil {
			return nil, err
		}
		ids, rev, led := l.s.drv.Leases()
		if !led {
			return nil, core.ErrNotLeader
		}
		resp := &pb.LeaseLeasesResponse{Header: l.s.header(rev)}
		for _, id := range ids {
			resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
		}
		return resp, nil
	}, func(ctx context.Context, cc *grpc.ClientConn) (*pb.LeaseLeasesResponse, error) {
		return pb.NewLeaseClient(cc).LeaseLeases(ctx, r)
	})
}

// leaseCheck is etcd's check of a call on a lease: a user, and unless
// root, write (revoke, keepalive) or read (time-to-live with keys) on
// every key attached to it.
func (s *Server) leaseCheck(lease int64, write bool) authCheck {
	return func(st *auth.Store, id auth.Identity) error {
		if err := someUser(st, id); err != nil {
			return err
		}
		return st.CheckLeaseKeys(id, s.drv.LeaseKeys(lease), write)
	}
}

// leasesCheck is etcd's check of LeaseLeases: a user, and unless root,
// read on every key attached to any lease.
func (s *Server) leasesCheck(st *auth.Store, id auth.Identity) error {
	if err := someUser(st, id); err != nil || st.CheckAdmin(id) == nil {
		return err
	}
	return st.CheckLeaseKeys(id, s.drv.LeasedKeys(), false)
}
