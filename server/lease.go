package server

import (
	"context"
	"errors"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
)

// now is the server's clock for core: time since start, monotonic.
func (s *Server) now() time.Duration { return time.Since(s.start) }

// tick lets the node expire leases until the server closes.
func (s *Server) tick(every time.Duration) {
	defer s.work.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.step(func(n *core.Node) { n.Tick(s.now()) })
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
	resp, err := l.s.propose(ctx, func(n *core.Node, id core.RequestID) { n.Grant(id, r.ID, r.TTL) })
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseGrantResponse{Header: l.s.header(resp.Rev), ID: resp.Lease, TTL: resp.LeaseTTL}, nil
}

func (l leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := l.s.propose(ctx, func(n *core.Node, id core.RequestID) { n.Revoke(id, r.ID) })
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseRevokeResponse{Header: l.s.header(resp.Rev)}, nil
}

func (l leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var (
			ttl int64
			rev int64
		)
		l.s.step(func(n *core.Node) {
			ttl, err = n.KeepAlive(req.ID, l.s.now())
			rev = n.Committed()
		})
		if errors.Is(err, core.ErrLeaseNotFound) {
			ttl = 0 // etcd answers an unknown lease with TTL 0
		}
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: l.s.header(rev), ID: req.ID, TTL: ttl}); err != nil {
			return err
		}
	}
}

func (l leaseServer) LeaseTimeToLive(_ context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	var (
		info core.LeaseInfo
		rev  int64
		err  error
	)
	l.s.step(func(n *core.Node) {
		info, err = n.TimeToLive(r.ID, l.s.now())
		rev = n.Committed()
	})
	if errors.Is(err, core.ErrLeaseNotFound) {
		// etcd reports a missing lease as TTL -1.
		return &pb.LeaseTimeToLiveResponse{Header: l.s.header(rev), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: l.s.header(rev), ID: r.ID, TTL: int64(info.Remaining.Seconds()), GrantedTTL: info.GrantedTTL}
	if r.Keys {
		resp.Keys = info.Keys
	}
	return resp, nil
}

func (l leaseServer) LeaseLeases(context.Context, *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	var (
		ids []int64
		rev int64
	)
	l.s.step(func(n *core.Node) { ids, rev = n.Leases(), n.Committed() })
	resp := &pb.LeaseLeasesResponse{Header: l.s.header(rev)}
	for _, id := range ids {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	return resp, nil
}
