package server

import (
	"context"

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
	m.s.mu.Lock()
	c := m.s.node.Committed()
	m.s.mu.Unlock()
	return &pb.StatusResponse{
		Header: m.s.header(c), Version: Version, Leader: m.s.cfg.MemberID,
		RaftIndex: uint64(c), RaftTerm: 1, RaftAppliedIndex: uint64(c), StorageVersion: "3.6.0",
	}, nil
}

func (m maintenanceServer) Defragment(context.Context, *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return &pb.DefragmentResponse{Header: m.s.header(0)}, nil
}

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c clusterServer) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	me := &pb.Member{ID: c.s.cfg.MemberID, Name: c.s.cfg.Name, ClientURLs: c.s.cfg.ClientURLs, PeerURLs: c.s.cfg.ClientURLs}
	return &pb.MemberListResponse{Header: c.s.header(0), Members: []*pb.Member{me}}, nil
}

// Register adds Axon's etcd services and gRPC health to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, kvServer{s: s})
	pb.RegisterWatchServer(g, watchServer{s: s})
	pb.RegisterMaintenanceServer(g, maintenanceServer{s: s})
	pb.RegisterClusterServer(g, clusterServer{s: s})
	pb.RegisterLeaseServer(g, leaseServer{s: s})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
}
