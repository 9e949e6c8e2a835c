package tikvserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pingcap/kvproto/pkg/meta_storagepb"
	"github.com/pingcap/kvproto/pkg/pdpb"
	"github.com/pingcap/kvproto/pkg/tikvpb"
	"github.com/tikv/client-go/v2/testutils"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Options configure a Server. The zero value serves without faults.
type Options struct {
	// SplitKeys are keys at which regions begin besides the first, as
	// the engine writes them (PD holds them encoded).
	SplitKeys [][]byte
	// RPCDelay is waited before each PD and TiKV call is answered; in a
	// stream (BatchCommands, Tso) before each request in it.
	RPCDelay time.Duration
	// RegionErrorRate is the fraction of TiKV requests answered with a
	// region error, one of RegionErrors drawn at random, instead of
	// running.
	RegionErrorRate float64
	// RegionErrors are the kinds injected; empty means all.
	RegionErrors []RegionErrorKind
	// SplitEvery, if positive, is how often a region holding two keys or
	// more is split at its middle key.
	SplitEvery time.Duration
	// Seed seeds the choice of requests to fail and regions to split.
	Seed uint64
	// Log receives the server's log; nil means slog.Default().
	Log *slog.Logger
}

// DefaultRestartPause is how long Restart keeps the address closed
// unless told otherwise: long enough for clients to see their
// connections fail and back off, short enough for a test.
const DefaultRestartPause = time.Second

// Server serves PD and TiKV on one address over an in-memory mock store.
type Server struct {
	opts      Options
	log       *slog.Logger
	addr      string // host:port, fixed by the first listen
	clusterID uint64
	storeID   uint64
	mock      *testutils.MockClient
	cluster   *testutils.MockCluster
	tso       tso
	faults    *faults
	calls     calls // every call
	missing   calls // calls answered Unimplemented
	load      load  // requests and busy periods

	stopSplits chan struct{}
	splitsDone sync.WaitGroup

	mu      sync.Mutex // guards what follows
	grpc    *grpc.Server
	serving sync.WaitGroup // Serve of the current grpc.Server
	closed  bool
}

// Start listens on addr (host:port; port 0 picks one) and serves until
// Close.
func Start(addr string, opts Options) (*Server, error) {
	kinds := opts.RegionErrors
	if len(kinds) == 0 {
		kinds = AllRegionErrors
	}
	for _, k := range kinds {
		if !slices.Contains(AllRegionErrors, k) {
			return nil, fmt.Errorf("tikvserver: region error %q: want one of %v", k, AllRegionErrors)
		}
	}
	if opts.RegionErrorRate < 0 || opts.RegionErrorRate > 1 {
		return nil, fmt.Errorf("tikvserver: region error rate %v: want 0 to 1", opts.RegionErrorRate)
	}
	if opts.RPCDelay < 0 || opts.SplitEvery < 0 {
		return nil, fmt.Errorf("tikvserver: negative delay %v or split interval %v", opts.RPCDelay, opts.SplitEvery)
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	mock, cluster, _, err := testutils.NewMockTiKV("", nil)
	if err != nil {
		return nil, fmt.Errorf("tikvserver: mock store: %w", err)
	}
	splits, err := sortedSplits(opts.SplitKeys)
	if err != nil {
		_ = mock.Close()
		return nil, err
	}
	storeID, _, _ := testutils.BootstrapWithMultiRegions(cluster, splits...)
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Server{
		opts:       opts,
		log:        log,
		clusterID:  rand.Uint64()>>1 | 1,
		storeID:    storeID,
		mock:       mock,
		cluster:    cluster,
		faults:     newFaults(opts.RegionErrorRate, kinds, seed),
		stopSplits: make(chan struct{}),
	}
	lis, err := listen(addr)
	if err != nil {
		_ = mock.Close()
		return nil, err
	}
	s.addr = lis.Addr().String()
	// The store is this server: client-go dials what PD says it is at.
	cluster.UpdateStoreAddr(storeID, s.addr)
	s.serve(lis)
	log.Info("tikv-server: listening", "addr", s.addr, "cluster-id", s.clusterID, "store-id", storeID,
		"regions", len(splits)+1, "seed", seed)
	if opts.SplitEvery > 0 {
		s.splitsDone.Add(1)
		go s.splitLoop(opts.SplitEvery, seed)
	}
	return s, nil
}

// sortedSplits returns keys sorted and distinct, refusing an empty one.
func sortedSplits(keys [][]byte) ([][]byte, error) {
	out := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if len(k) == 0 {
			return nil, errors.New("tikvserver: empty split key")
		}
		out = append(out, bytes.Clone(k))
	}
	slices.SortFunc(out, bytes.Compare)
	return slices.CompactFunc(out, bytes.Equal), nil
}

// listen listens on addr, which must name a host clients can dial: PD
// hands the address out as its own and the store's.
func listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tikvserver: listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("tikvserver: listen %q: PD hands this address out to clients to dial; name a host, not all interfaces", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tikvserver: %w", err)
	}
	return lis, nil
}

// Addr is the address served, host:port: PD's endpoint and the store's.
func (s *Server) Addr() string { return s.addr }

// Calls returns how often each method was called, by full gRPC method
// name, and each BatchCommands entry, by "BatchCommands/" and its type.
func (s *Server) Calls() map[string]int64 { return s.calls.snapshot() }

// Unimplemented returns how often each call this server does not
// implement was made, named as in Calls.
func (s *Server) Unimplemented() map[string]int64 { return s.missing.snapshot() }

// InjectedErrors returns how many region errors of each kind were
// injected.
func (s *Server) InjectedErrors() map[RegionErrorKind]int64 { return s.faults.injected() }

// Regions returns the number of regions in the mock cluster.
func (s *Server) Regions() int { return len(s.cluster.ScanRegions(nil, nil, 0)) }

// serve starts a gRPC server on lis. Callers hold mu or own s alone.
func (s *Server) serve(lis net.Listener) {
	g := grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.UnknownServiceHandler(s.unknownMethod),
		// Stop waits for handlers, so none runs on a closed store.
		grpc.WaitForHandlers(true),
	)
	pdpb.RegisterPDServer(g, &pdService{s: s})
	tikvpb.RegisterTikvServer(g, &kvService{s: s})
	etcdserverpb.RegisterClusterServer(g, &etcdCluster{s: s})
	meta_storagepb.RegisterMetaStorageServer(g, &metaStorage{s: s})
	healthpb.RegisterHealthServer(g, health.NewServer())
	s.grpc = g
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		// Stopped before Serve began: a Close or Restart right after.
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("tikv-server: serve", "addr", s.addr, "err", err)
		}
	}()
}

// Restart stops serving, dropping every connection and canceling the
// calls in flight as a crashed process would, waits pause, and listens on
// the same address again. The data is kept.
func (s *Server) Restart(pause time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("tikvserver: restart: closed")
	}
	s.grpc.Stop()
	s.serving.Wait()
	s.log.Info("tikv-server: stopped for a restart", "addr", s.addr, "pause", pause)
	time.Sleep(pause)
	lis, err := listenAgain(s.addr)
	if err != nil {
		return fmt.Errorf("tikvserver: restart: %w", err)
	}
	s.serve(lis)
	s.log.Info("tikv-server: serving again", "addr", s.addr)
	return nil
}

// listenAgain listens on addr, retrying a little: a port just released
// may still be held for a moment.
func listenAgain(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var lis net.Listener
		if lis, err = net.Listen("tcp", addr); err == nil {
			return lis, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// Close stops serving and frees the store.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.grpc.Stop()
	s.serving.Wait()
	s.mu.Unlock()
	close(s.stopSplits)
	s.splitsDone.Wait()
	return s.mock.Close()
}

// wait sleeps for the RPC delay, or until ctx ends.
func (s *Server) wait(ctx context.Context) error {
	if s.opts.RPCDelay <= 0 {
		return nil
	}
	t := time.NewTimer(s.opts.RPCDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

const healthPrefix = "/grpc.health.v1.Health/"

// unaryInterceptor delays the call, checks PD's cluster ID, counts the
// call and logs it when it is not implemented.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	s.calls.add(info.FullMethod)
	defer s.load.begin(requestType(info.FullMethod))()
	if !isHealth(info.FullMethod) {
		if err := s.wait(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.checkCluster(info.FullMethod, req); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	s.logUnimplemented(info.FullMethod, err)
	return resp, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s.calls.add(info.FullMethod)
	err := handler(srv, ss)
	s.logUnimplemented(info.FullMethod, err)
	return err
}

// unknownMethod answers a call to a service this server does not
// register at all (PD's router and TSO microservices, etcd's KV, ...); the
// stream interceptor counts and logs it.
func (s *Server) unknownMethod(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	return status.Errorf(codes.Unimplemented, "tikv-server: %s not implemented", method)
}

func (s *Server) logUnimplemented(method string, err error) {
	if status.Code(err) == codes.Unimplemented {
		s.missing.add(method)
		s.log.Warn("tikv-server: unimplemented call", "method", method, "err", err)
	}
}

func isHealth(method string) bool {
	return strings.HasPrefix(method, healthPrefix)
}

// calls counts calls by name.
type calls struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *calls) add(name string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[name]++
	c.mu.Unlock()
}

func (c *calls) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}
