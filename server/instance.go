package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/storage"
)

// Who may call what. A client listener serves clients; a peer listener
// serves the instances only. An instance proves it is one by sealing
// each call (auth.PeerProof) with a secret the instances share through
// the engine, which no client can read: holding a peer certificate is
// not enough, and neither is reaching the port. So, as on etcd:
//
//   - on a peer listener, a call without a valid proof is refused as a
//     service that is not there (Unimplemented), whatever certificate
//     came with it, and no call there is ever run as a certificate's
//     user;
//   - on a client listener, the instances' own service (axon.Peer) is
//     not there for a caller without a proof, and the client services
//     run as the client's token or certificate say;
//   - a call with a proof is another instance's forward: it runs as the
//     token it carries, or as the user the proof vouches for, or as
//     nobody. A stream is checked when it opens and keeps what it was
//     proved to be, as a client's TLS connection keeps its certificate.

// peerProofKey is the metadata that carries a call's auth.PeerProof.
const peerProofKey = "axon-peer-proof"

// peerSecretKey names the instances' shared secret in the engine, beside
// their presence records: outside the revisioned keyspace, created by
// the first instance of a shared engine that needs one (to seal a call,
// or to check a proof). An exclusive engine has one instance, which
// never needs one.
const peerSecretKey = "peer-secret"

// proofTTL bounds how long a proof may be replayed by someone who saw it
// on a plaintext peer link; it covers the call's transit and the clock
// drift between instances. A receiver refuses a proof that claims to
// live longer than this, by its own clock, plus the drift allowed.
const proofTTL = 30 * time.Second

// secretRetry is how long an instance that failed to read or create the
// shared secret answers from that failure before it tries the engine
// again: anyone can send a proof, and none may cost an engine read each.
const secretRetry = time.Second

// errUnsent: a call to another instance was not sent, for want of the
// secret to seal it with (the engine could not be read); it did not run.
var errUnsent = errors.New("axon: call to another instance not sent")

// listener says which listener a gRPC server serves.
type listener int

const (
	clientListener listener = iota
	peerListener
)

// instanceCallKey marks the context of a call another instance proved
// it made; its value is the proof.
type instanceCallKey struct{}

// vouchKey carries, on an outgoing forward, the user to vouch for.
type vouchKey struct{}

// fromInstance returns the proof of a call another instance made.
func fromInstance(ctx context.Context) (auth.PeerProof, bool) {
	p, ok := ctx.Value(instanceCallKey{}).(auth.PeerProof)
	return p, ok
}

// forwarded reports whether a call came from another instance.
func forwarded(ctx context.Context) bool {
	_, ok := fromInstance(ctx)
	return ok
}

// peerSecret is the instances' shared secret, read (or created) once.
type peerSecret struct {
	mu      sync.Mutex
	val     []byte
	err     error     // the last failure to read or create it
	retryAt time.Time // when to try the engine again after err
}

// get returns the secret, reading it from the engine, or writing a new
// one there if there is none, until it has it. After a failure it
// answers with that failure for secretRetry without reading again.
func (p *peerSecret) get(ctx context.Context, eng storage.Engine) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.val != nil {
		return p.val, nil
	}
	if p.err != nil && time.Now().Before(p.retryAt) {
		return nil, p.err
	}
	key := core.MetaKey(peerSecretKey)
	var err error
	// Two instances may create it at once: the engine lets one commit,
	// and the other reads what it wrote next time round.
	for range 3 {
		var v []byte
		if v, err = readOrCreate(ctx, eng, key); err == nil {
			p.val, p.err = v, nil
			return v, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	p.err, p.retryAt = err, time.Now().Add(secretRetry)
	return nil, err
}

// readOrCreate reads key; if it is absent, it writes 32 random bytes
// there.
func readOrCreate(ctx context.Context, eng storage.Engine, key []byte) ([]byte, error) {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer txn.Rollback()
	v, err := txn.Get(key)
	switch {
	case err == nil:
		return v, nil
	case !errors.Is(err, storage.ErrNotFound):
		return nil, err
	}
	v = make([]byte, 32)
	_, _ = rand.Read(v)
	if err := txn.Set(key, v); err != nil {
		return nil, err
	}
	if err := txn.Commit(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// prove returns ctx with the proof of an outgoing call to another
// instance, vouching for the user forwardContext named.
func (s *Server) prove(ctx context.Context) (context.Context, error) {
	secret, err := s.auth.peerSecret.get(ctx, s.eng)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnsent, err)
	}
	user, _ := ctx.Value(vouchKey{}).(string)
	proof := auth.SealPeerProof(secret, auth.PeerProof{Instance: s.id, User: user, Expires: time.Now().Add(proofTTL).UnixNano()})
	return metadata.AppendToOutgoingContext(ctx, peerProofKey, proof), nil
}

// proveUnary and proveStream seal every call on a connection to another
// instance.
func (s *Server) proveUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, err := s.prove(ctx)
	if err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (s *Server) proveStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, err := s.prove(ctx)
	if err != nil {
		return nil, err
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// admit decides whether a call may be served on a listener of kind l,
// and returns its context: marked with the proof for another instance's
// call. A proof that does not hold (forged, of another store's
// instances, expired, or living longer than any instance seals one for)
// counts for nothing: the call is a client's. On an exclusive engine no
// other instance exists, so no proof holds and none is checked.
func (s *Server) admit(ctx context.Context, l listener, method string) (context.Context, error) {
	if v := metadata.ValueFromIncomingContext(ctx, peerProofKey); len(v) > 0 {
		if !s.cfg.Exclusive {
			secret, err := s.auth.peerSecret.get(ctx, s.eng)
			if err != nil {
				// The engine could not be read: the call does not run.
				return nil, status.Error(codes.Unavailable, "axon: reading the instances' shared secret: "+err.Error())
			}
			if p, ok := auth.OpenPeerProof(secret, v[0], time.Now().UnixNano(), int64(proofTTL+s.mcfg.MaxDrift)); ok {
				return context.WithValue(ctx, instanceCallKey{}, p), nil
			}
		}
		if now := time.Now().UnixNano(); now-s.auth.badProofAt.Load() > int64(time.Minute) {
			// At most once a minute: anyone can send a bad proof.
			s.auth.badProofAt.Store(now)
			s.log.Warn("a call's instance proof does not hold; taken as a client's", "method", method)
		}
	}
	if l == peerListener || strings.HasPrefix(method, "/"+peerService+"/") {
		return nil, unknownService(method)
	}
	return ctx, nil
}

// unknownService is gRPC's own answer for a service a server does not
// have, which is what etcd's peer port and client port answer.
func unknownService(method string) error {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return status.Errorf(codes.Unimplemented, "unknown service %s", svc)
}

// gate returns the interceptors that admit calls on a listener of kind l.
func (s *Server) gate(l listener) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := s.admit(ctx, l, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := s.admit(ss.Context(), l, info.FullMethod)
		if err != nil {
			return err
		}
		if ctx != ss.Context() {
			ss = admittedStream{ServerStream: ss, ctx: ctx}
		}
		return handler(srv, ss)
	}
	return unary, stream
}

type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a admittedStream) Context() context.Context { return a.ctx }
