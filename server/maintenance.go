package server

import (
	"context"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Version is the etcd version Axon reports: at least 3.5.13, so the
// Kubernetes apiserver enables RequestWatchProgress.
const Version = "3.6.0"

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

func (m maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	c := m.s.committed()
	m.s.mu.Lock()
	term := m.s.member.Term()
	m.s.mu.Unlock()
	// etcdctl divides by the db size: never report 0.
	size := int64(1)
	if sz, ok := m.s.eng.(interface{ Size() int64 }); ok {
		size = max(sz.Size(), 1)
	}
	return &pb.StatusResponse{
		DbSize: size, DbSizeInUse: size,
		Header: m.s.header(c), Version: Version, Leader: m.s.leaderID(ctx),
		RaftIndex: uint64(c), RaftTerm: uint64(max(term, 1)), RaftAppliedIndex: uint64(c), StorageVersion: "3.6.0",
	}, nil
}

func (m maintenanceServer) Defragment(context.Context, *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return &pb.DefragmentResponse{Header: m.s.header(0)}, nil
}

// Alarm answers with no alarms: Axon raises none (the engine has no
// quota of its own). etcdctl's endpoint health asks for the list.
func (m maintenanceServer) Alarm(_ context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return &pb.AlarmResponse{Header: m.s.header(m.s.committed())}, nil
}

// HashKV hashes the history up to a revision, for consistency checks.
func (m maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	txn, c, compacted, err := m.s.snapshot(ctx, false)
	if err != nil {
		return nil, toGRPC(err)
	}
	defer txn.Rollback()
	rev := r.Revision
	switch {
	case rev == 0:
		rev = c
	case rev > c:
		return nil, rpctypes.ErrGRPCFutureRev
	case rev < compacted:
		return nil, rpctypes.ErrGRPCCompacted
	}
	h, err := core.HashKV(storage.NewReader(txn), rev)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.HashKVResponse{Header: m.s.header(c), Hash: h, CompactRevision: compacted, HashRevision: rev}, nil
}

// MoveLeader hands leadership to another instance (etcdctl move-leader).
func (m maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return m.s.moveLeader(ctx, r)
}

// Register adds Axon's etcd services, the peer service other instances
// call, and gRPC health to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, kvServer{s: s})
	pb.RegisterWatchServer(g, watchServer{s: s})
	pb.RegisterMaintenanceServer(g, maintenanceServer{s: s})
	pb.RegisterClusterServer(g, clusterServer{s: s})
	pb.RegisterLeaseServer(g, leaseServer{s: s})
	g.RegisterService(&peerServiceDesc, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
}
