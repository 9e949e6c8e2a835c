package server

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// engineFailed reports why the engine stopped taking writes, or nil.
//
// A failed engine is answered as a stopped etcd member: writes fail with
// etcd's "etcdserver: server stopped" (gRPC Unavailable), which is what
// etcd answers while it stops, and etcd stops (fatally) when its backend
// cannot commit. Unavailable is the code clients treat as "this member
// cannot serve: try another or later", and clientv3 never retries a
// write on it by itself. Reads of what the engine holds go on; /health
// reports the member unhealthy and Status lists the failure.
func (s *Server) engineFailed() error {
	if f, ok := s.eng.(storage.Failer); ok {
		if err := f.Failed(); err != nil {
			return fmt.Errorf("%w: %w", core.ErrStopped, err)
		}
	}
	return nil
}

// defragError is the status a failed Defragment answers with. A refusal
// for want of space is etcd-worded ("etcdserver: not enough free space to
// defragment: need N bytes, have M"; etcd has no such text: its defrag
// just fails half-way) with ResourceExhausted, the code etcd gives its
// other out-of-space error (NOSPACE) and gRPC's for "the file system is
// out of space"; clients do not retry it.
func (s *Server) defragError(err error) error {
	var se storage.DefragSpaceError
	if errors.As(err, &se) {
		need, have := se.DefragSpace()
		return status.Errorf(codes.ResourceExhausted, "etcdserver: not enough free space to defragment: need %d bytes, have %d", need, have)
	}
	if ferr := s.engineFailed(); ferr != nil {
		return toGRPC(ferr)
	}
	return toGRPC(err)
}
