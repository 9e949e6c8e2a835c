package server

import (
	"context"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultMaxInflight is the default bound on the requests one instance
// serves at once.
const DefaultMaxInflight = 4096

// admission bounds the unary requests an instance serves at once: past
// the bound a request is answered at once with etcd's "too many requests"
// (which etcd's clients and Kubernetes back off from) instead of queueing
// in memory until it times out. Requests refused here never ran.
//
// Maintenance, Cluster and health calls are never refused: they are how
// an operator looks at an overloaded instance.
type admission struct{ slots chan struct{} }

// newAdmission admits limit requests at once; 0 means DefaultMaxInflight
// and a negative limit none.
func newAdmission(limit int) *admission {
	switch {
	case limit == 0:
		limit = DefaultMaxInflight
	case limit < 0:
		return &admission{}
	}
	return &admission{slots: make(chan struct{}, limit)}
}

func (a *admission) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if a.slots == nil || exempt(info.FullMethod) {
		return handler(ctx, req)
	}
	select {
	case a.slots <- struct{}{}:
	default:
		return nil, rpctypes.ErrGRPCRequestTooManyRequests
	}
	defer func() { <-a.slots }()
	return handler(ctx, req)
}

// exempt says whether a method is one admission never refuses.
func exempt(fullMethod string) bool {
	svc, _ := splitMethod(fullMethod)
	switch svc {
	case pb.Maintenance_ServiceDesc.ServiceName, pb.Cluster_ServiceDesc.ServiceName, healthpb.Health_ServiceDesc.ServiceName:
		return true
	}
	return strings.HasPrefix(svc, "grpc.")
}
