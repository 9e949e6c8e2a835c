package server

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// TestAdmissionRefusesPastTheBound: with the slots taken by requests in
// flight, a KV call is answered "too many requests" without running, a
// Maintenance call still runs, and a freed slot admits again.
func TestAdmissionRefusesPastTheBound(t *testing.T) {
	a := newAdmission(2)
	release := make(chan struct{})
	running := make(chan struct{})
	blocked := func(context.Context, any) (any, error) {
		running <- struct{}{}
		<-release
		return "done", nil
	}
	put := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Put"}
	results := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := a.unary(t.Context(), nil, put, blocked)
			results <- err
		}()
		<-running
	}
	ran := false
	handler := func(context.Context, any) (any, error) { ran = true; return "ok", nil }
	if _, err := a.unary(t.Context(), nil, put, handler); !errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) || ran {
		t.Fatalf("third put: %v (ran %v), want %v without running", err, ran, rpctypes.ErrGRPCRequestTooManyRequests)
	}
	if rpctypes.Error(rpctypes.ErrGRPCRequestTooManyRequests) != rpctypes.ErrTooManyRequests {
		t.Fatal("the refusal is not the error etcd's client knows")
	}
	status := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.Maintenance/Status"}
	if _, err := a.unary(t.Context(), nil, status, handler); err != nil || !ran {
		t.Fatalf("status while full: %v (ran %v)", err, ran)
	}
	release <- struct{}{}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	ran = false
	if _, err := a.unary(t.Context(), nil, put, handler); err != nil || !ran {
		t.Fatalf("put after a slot freed: %v (ran %v)", err, ran)
	}
	close(release)
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	none := newAdmission(-1)
	if _, err := none.unary(t.Context(), nil, put, handler); err != nil {
		t.Fatalf("no bound: %v", err)
	}
}
