package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
)

// The peer service is what instances ask each other beyond the etcd
// API. Its messages are etcd's own, so no new protobuf is needed.
const (
	peerService   = "axon.Peer"
	readIndexPath = "/" + peerService + "/ReadIndex"
	nudgePath     = "/" + peerService + "/Nudge"
)

type peerServer interface {
	serveReadIndex(context.Context) (*pb.ResponseHeader, error)
	serveNudge(context.Context) (*pb.ResponseHeader, error)
	serveFollow(from int64, ss grpc.ServerStream) error
}

var peerServiceDesc = grpc.ServiceDesc{
	ServiceName: peerService,
	HandlerType: (*peerServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "ReadIndex", Handler: peerHandler("ReadIndex", peerServer.serveReadIndex)},
		{MethodName: "Nudge", Handler: peerHandler("Nudge", peerServer.serveNudge)},
	},
	Streams: []grpc.StreamDesc{followDesc},
}

func peerHandler(method string, fn func(peerServer, context.Context) (*pb.ResponseHeader, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		req := &pb.StatusRequest{}
		if err := dec(req); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, _ any) (any, error) { return fn(srv.(peerServer), ctx) }
		if interceptor == nil {
			return call(ctx, req)
		}
		// The interceptors decide who may call (instance.go).
		return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + peerService + "/" + method}, call)
	}
}

// readIndex answers a follower's read index: the commit point, safe to
// read at because a leader holds its lease (docs/design.md,
// "Lease-based reads").
func (s *Server) serveReadIndex(context.Context) (*pb.ResponseHeader, error) {
	c, _, ok := s.drv.ReadPoint()
	if !ok {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	return s.header(c), nil
}

// nudge makes this instance read the election record now: the leader
// handed it leadership.
func (s *Server) serveNudge(context.Context) (*pb.ResponseHeader, error) {
	s.drv.Refresh()
	return s.header(0), nil
}

// peers holds one connection per instance this one talks to.
type peers struct {
	s     *Server
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// cutUntil is a test hook (DropPeerConnections in export_test.go):
	// until then conn fails as if the network to the peers were down.
	cutUntil time.Time
	// noFollow is the leader that answered the Follow stream
	// Unimplemented (a binary from before it): while it leads, this
	// instance relays its clients' watch streams to it instead.
	noFollow atomic.Pointer[string]
	// refuseFollow is a test hook (RefuseFollow): serve Follow as a
	// binary without it would.
	refuseFollow atomic.Bool
}

func newPeers(s *Server) *peers { return &peers{s: s, conns: map[string]*grpc.ClientConn{}} }

func (p *peers) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.cutUntil) {
		return nil, fmt.Errorf("dial leader %s: connections cut by a test", addr)
	}
	if cc := p.conns[addr]; cc != nil {
		return cc, nil
	}
	creds := insecure.NewCredentials()
	if p.s.cfg.PeerTLS != nil {
		creds = credentials.NewTLS(p.s.cfg.PeerTLS)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)),
		grpc.WithChainUnaryInterceptor(p.s.metrics.etcd.peerUnary(addr), p.s.proveUnary),
		grpc.WithChainStreamInterceptor(p.s.metrics.etcd.peerStream(addr), p.s.proveStream))
	if err != nil {
		return nil, fmt.Errorf("dial leader %s: %w", addr, err)
	}
	p.conns[addr] = cc
	return cc, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, cc := range p.conns {
		cc.Close()
		delete(p.conns, addr)
	}
}

func (p *peers) nudge(addr string) {
	cc, err := p.conn(addr)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.s.ctx, time.Second)
	defer cancel()
	_ = cc.Invoke(ctx, nudgePath, &pb.StatusRequest{}, &pb.ResponseHeader{})
}

// forwardContext passes on who the caller of a call forwarded to the
// leader is: its token, which the leader resolves and checks itself, or
// the user of its client certificate, which the call's instance proof
// vouches for (see prove). A stream is proved when it opens; its
// requests (watch creations, keepalives) are checked as they come, as
// that user's.
func (s *Server) forwardContext(ctx context.Context) context.Context {
	if tok, ok := tokenOf(ctx); ok {
		return metadata.AppendToOutgoingContext(ctx, "token", s.auth.tokens.forward(tok, func() (*auth.Store, error) { return s.authView(ctx, nil, false) }))
	}
	if user := s.certVouch(ctx); user != "" {
		return context.WithValue(ctx, vouchKey{}, user)
	}
	return ctx
}

// refused reports whether an error from the leader means the call was
// definitely not applied there and may go to the next leader.
func refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, core.ErrNotLeader) || errors.Is(err, core.ErrNoLeader) || errors.Is(err, errUnsent) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	msg := st.Message()
	if msg == rpctypes.ErrNotLeader.Error() || msg == rpctypes.ErrNoLeader.Error() {
		return true
	}
	// A call that never reached the leader's process was not applied.
	return st.Code() == codes.Unavailable && (strings.Contains(msg, "while dialing") || strings.Contains(msg, "connection refused"))
}

// brokeOff keeps a failure of the leg to the leader from passing for the
// client's own cancellation or deadline. clientv3 retries ANY call that
// fails with Canceled or DeadlineExceeded while its context is alive,
// writes included, so a forwarded write that the leader applied but
// whose answer was lost (connection to the leader closed: its process
// stopping, or ours) would run twice. Unavailable tells the client the
// outcome is unknown; it retries reads, never writes.
func brokeOff(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
		return status.Error(codes.Unavailable, "axon: the call to the leader broke off: "+status.Convert(err).Message())
	}
	return err
}

// lead runs a call on the leader through the driver's loop
// (driver.Lead): local when this instance leads, otherwise forwarded over
// the peer connection; a call the leader refused before applying it runs
// again on the next leader. It reports whether the loop ended (a caller
// that leaves early gets false, and must not read what local or remote
// may still write).
func (s *Server) lead(ctx context.Context, local func() (int64, error), remote func(ctx context.Context, cc *grpc.ClientConn) (int64, error)) (ended bool, err error) {
	ch := make(chan error, 1)
	alive := func() bool { return ctx.Err() == nil && s.ctx.Err() == nil }
	s.drv.Lead(forwarded(ctx), alive, func(addr string, done func(driver.Answer)) {
		if addr == "" {
			rev, err := local()
			done(driver.Answer{Rev: rev, Err: err})
			return
		}
		done(s.sendToLeader(ctx, addr, remote))
	}, func(err error) { ch <- err })
	select {
	case err := <-ch:
		if ctx.Err() != nil && refused(err) {
			return true, toGRPC(ctx.Err())
		}
		return true, err
	case <-ctx.Done():
		return false, toGRPC(ctx.Err())
	case <-s.ctx.Done():
		return false, rpctypes.ErrGRPCStopped
	}
}

// sendToLeader forwards a call to the leader at addr.
func (s *Server) sendToLeader(ctx context.Context, addr string, remote func(ctx context.Context, cc *grpc.ClientConn) (int64, error)) driver.Answer {
	cc, err := s.peers.conn(addr)
	if err != nil {
		s.log.Warn("leader connection", "addr", addr, "err", err)
		return driver.Answer{Err: fmt.Errorf("%w: %v", core.ErrNotLeader, err)}
	}
	rev, err := remote(s.forwardContext(ctx), cc)
	return driver.Answer{Rev: rev, Err: brokeOff(ctx, err)}
}

// peerTransport asks the leader for its read index over gRPC.
type peerTransport struct{ s *Server }

func (t peerTransport) ReadIndex(addr string, done func(int64, error)) {
	s := t.s
	cc, err := s.peers.conn(addr)
	if err != nil {
		done(0, fmt.Errorf("%w: %v", core.ErrNotLeader, err))
		return
	}
	s.bg.work.Add(1)
	go func() {
		defer s.bg.work.Done()
		ctx, cancel := context.WithTimeout(s.ctx, s.drv.FailoverWait())
		defer cancel()
		h := &pb.ResponseHeader{}
		start := time.Now()
		err := cc.Invoke(ctx, readIndexPath, &pb.StatusRequest{}, h)
		s.metrics.etcd.observeReadIndex(time.Since(start), err)
		if err != nil {
			done(0, err)
			return
		}
		done(h.Revision, nil)
	}()
}

// readIndex waits for the driver's read index: a commit point at least
// as new as any write acknowledged before the call.
func (s *Server) readIndex(ctx context.Context) (int64, error) {
	type point struct {
		rev int64
		err error
	}
	ch := make(chan point, 1)
	s.drv.ReadIndex(func(rev int64, err error) { ch <- point{rev, err} })
	select {
	case p := <-ch:
		return p.rev, p.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// forward runs a unary call on the leader (see lead) and returns its
// answer, whose header revision the driver learns.
func forward[T interface{ GetHeader() *pb.ResponseHeader }](s *Server, ctx context.Context, local func() (T, error), remote func(context.Context, *grpc.ClientConn) (T, error)) (T, error) {
	var out T
	ended, err := s.lead(ctx, func() (rev int64, err error) {
		out, err = local()
		return headerRev(out, err), err
	}, func(ctx context.Context, cc *grpc.ClientConn) (rev int64, err error) {
		out, err = remote(ctx, cc)
		return headerRev(out, err), err
	})
	if !ended {
		var zero T
		return zero, err
	}
	return out, toGRPC(err)
}

// headerRev is the revision in a successful answer's header.
func headerRev[T interface{ GetHeader() *pb.ResponseHeader }](out T, err error) int64 {
	if err != nil {
		return 0
	}
	return out.GetHeader().GetRevision()
}

// snapshot returns an engine transaction that sees every revision up to
// a commit point, with that point and the compact revision. The leader
// knows both; a follower learns the point from the leader (or, for a
// serializable read, uses the last one it learned) and reads the compact
// revision from the engine.
func (s *Server) snapshot(ctx context.Context, serializable bool) (storage.Txn, int64, int64, error) {
	r, err := s.readSnapshot(ctx, serializable)
	if err != nil {
		return nil, 0, 0, err
	}
	return r.Txn, r.Rev, r.Compacted, nil
}

// readSnapshot is snapshot as the driver begins it (driver.BeginRead),
// with whether this instance led and the look at the auth store its
// check needs.
func (s *Server) readSnapshot(ctx context.Context, serializable bool) (*driver.Read, error) {
	rev, compacted, led := s.drv.ReadPoint()
	if !led {
		if rev = s.drv.FollowerPoint(serializable); rev == 0 {
			var err error
			if rev, err = s.readIndex(ctx); err != nil {
				return nil, err
			}
		}
	}
	return s.drv.BeginRead(ctx, s.eng, rev, compacted, led)
}
