package embed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/memlimit"
	"github.com/axon-kv/axon/internal/urls"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
)

// clusterID is the etcd cluster ID every Axon reports: instances of one
// store are one cluster whatever their names.
const clusterID = 0xa1b2c3d4

const (
	// handoffTimeout bounds the leadership handoff Close starts with.
	handoffTimeout = 5 * time.Second
	// grace is how long Close lets calls in flight finish before it cuts
	// the rest.
	grace = 5 * time.Second
)

// failedFunc reports why the engine stopped taking writes, or nil.
type failedFunc func() error

// Axon is a serving instance: its listeners, its gRPC and HTTP servers,
// the server.Server and its engine.
type Axon struct {
	log *slog.Logger

	// ready, srv and failed are read by the metrics listeners, which
	// serve before the rest exists.
	ready  atomic.Bool
	srv    atomic.Pointer[server.Server]
	failed atomic.Pointer[failedFunc]

	eng                            storage.Engine
	clientLis, peerLis, metricsLis []net.Listener
	g, pg                          *grpc.Server
	lb                             *loopback
	metricsHTTP, clientHTTP        *http.Server
	clientConns                    []*connTracker // the client listeners' connections
	errc                           chan error
	closing                        atomic.Bool
	once                           sync.Once
	err                            error // Close's
}

// Start serves cfg and returns once the instance serves: its listeners
// are bound, the engine is open and, for an exclusive engine (Badger),
// the node has recovered and leads. ctx bounds the opening of the
// engine; once Start has returned, only Close stops the instance.
func Start(ctx context.Context, cfg *Config) (*Axon, error) {
	a := &Axon{log: cfg.logger(), eng: cfg.Engine}
	if err := a.start(ctx, cfg); err != nil {
		a.abort()
		return nil, err
	}
	return a, nil
}

func (a *Axon) start(ctx context.Context, cfg *Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	token, err := cfg.authToken()
	if err != nil {
		return err
	}
	ac, err := autoCompaction(cfg.AutoCompactionMode, cfg.AutoCompactionRetention)
	if err != nil {
		return err
	}
	us, err := cfg.urls()
	if err != nil {
		return err
	}
	tl, err := cfg.listenTLS(us)
	if err != nil {
		return err
	}
	log := a.log
	for _, u := range us.peer {
		if !u.Secure() {
			log.Warn("a plain peer URL: calls between instances, with the tokens and data they carry, cross the network in clear; use https peer URLs with --peer-client-cert-auth off a trusted network", "url", u.String())
		}
	}
	budget, _ := memlimit.Budget(cfg.MemoryBudget)

	// The metrics listeners come up first so that /readyz answers 503
	// while the engine opens and the node recovers.
	mux := a.metricsMux(cfg)
	a.metricsHTTP = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if a.metricsLis, err = listenAll(us.metrics, tl.client); err != nil {
		return err
	}
	for _, lis := range a.metricsLis {
		go func() {
			if err := a.metricsHTTP.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener", "err", err)
			}
		}()
	}
	// Client and peer listeners are bound now, as etcd's are, and served
	// once the node has recovered: a port in use fails the start before
	// the engine opens, and a port the system chose is known before the
	// instance advertises it.
	if a.clientLis, err = listenAll(us.client, tl.client); err != nil {
		return err
	}
	if a.peerLis, err = listenAll(us.peer, tl.peer); err != nil {
		return err
	}

	exclusive := cfg.EngineExclusive
	quota := server.Quota{Bytes: cfg.QuotaBackendBytes, MinFree: cfg.DiskFreeFloorBytes}
	if a.eng == nil {
		if a.eng, exclusive, err = openEngine(ctx, cfg, budget); err != nil {
			return err
		}
		if cfg.Store == "badger" {
			quota.Dir = cfg.DataDir // the quota watches the data directory
		}
	}
	if fe, ok := a.eng.(storage.Failer); ok {
		failed := failedFunc(fe.Failed)
		a.failed.Store(&failed)
	}
	adv := urls.Strings(us.advClient)
	if len(adv) == 0 {
		adv = bound(us.client, a.clientLis)
	}
	advPeer := urls.Strings(us.advPeer)
	if len(advPeer) == 0 {
		advPeer = bound(us.peer, a.peerLis)
	}
	srv, err := server.New(server.Config{
		Core:      core.Config{MaxTxnOps: cfg.MaxTxnOps, MaxPending: cfg.MaxPendingWrites, RingBytes: cfg.WatchCacheBytes},
		ClusterID: clusterID, Exclusive: exclusive, UpgradeData: cfg.UpgradeData,
		Lease: cfg.LeaderLease, MaxDrift: cfg.MaxClockDrift, EngineDeadline: cfg.EngineDeadline, TickInterval: cfg.TickInterval,
		Name: cfg.Name, ClientURLs: adv, PeerURLs: advPeer, PeerTLS: tl.dial, Logger: log,
		ProgressNotifyInterval: cfg.ProgressNotifyInterval, MaxRequestBytes: cfg.MaxRequestBytes, AutoCompaction: ac,
		KeepAlive: cfg.KeepAlive, Quota: quota, MaxConcurrentStreams: cfg.MaxConcurrentStreams, MaxInflight: cfg.MaxInflightRequests,
		ReadMemory: readMemory(cfg.ReadMemory, budget), KeyCache: cfg.KeyCacheBytes, Metrics: cfg.Metrics, MemoryBudget: budget,
		Auth:           server.AuthConfig{Token: token, TokenTTL: cfg.AuthTokenTTL, BcryptCost: cfg.BcryptCost},
		ClientCertAuth: cfg.ClientTLS.ClientCertAuth,
		SlowTraceDir:   cfg.SlowRequestTraceDir,
	}, a.eng)
	if err != nil {
		return err
	}
	a.srv.Store(srv)

	// Clients and instances are served by gRPC servers of their own: the
	// one on peer listeners serves only calls other instances prove they
	// made (a forward of any service, or the peer service), and never
	// takes a certificate there for a user.
	a.g = grpc.NewServer(slices.Concat(srv.ServerOptions(), cfg.GRPCServerOptions)...)
	srv.Register(a.g)
	a.pg = grpc.NewServer(srv.PeerServerOptions()...)
	srv.Register(a.pg)
	if a.lb, err = newLoopback(a.g); err != nil {
		return err
	}
	// The gateway's handlers take their contexts from their requests.
	gateway, err := gatewayMux(context.Background(), a.lb.conn)
	if err != nil {
		return err
	}
	a.clientHTTP = clientHTTPServer(clientHTTP(gateway, mux))

	log.Info("serving", "client", bound(us.client, a.clientLis), "peer", bound(us.peer, a.peerLis),
		"metrics", bound(us.metrics, a.metricsLis), "data-dir", cfg.DataDir)
	a.ready.Store(true)
	a.errc = make(chan error, len(a.clientLis)+len(a.peerLis))
	for _, lis := range a.clientLis {
		t := trackConns(lis)
		a.clientConns = append(a.clientConns, t)
		go func() { a.report(serveClient(t, a.g, a.clientHTTP)) }()
	}
	for _, lis := range a.peerLis {
		go func() { a.report(a.pg.Serve(lis)) }()
	}
	return nil
}

// report passes on why a client or peer listener stopped serving, unless
// the instance is closing, which is what stopped it.
func (a *Axon) report(err error) {
	if err == nil || a.closing.Load() {
		return
	}
	select {
	case a.errc <- err:
	default:
	}
}

// Err reports a client or peer listener that failed while serving; the
// instance goes on with the others until Close.
func (a *Axon) Err() <-chan error { return a.errc }

// Server is the server.Server the instance runs.
func (a *Axon) Server() *server.Server { return a.srv.Load() }

// ClientAddrs are the host:port the client listeners are bound to, in the
// order of ListenClientURLs (with the ports the system chose).
func (a *Axon) ClientAddrs() []string { return addrs(a.clientLis) }

// PeerAddrs are the host:port of the peer listeners.
func (a *Axon) PeerAddrs() []string { return addrs(a.peerLis) }

// MetricsAddrs are the host:port of the metrics listeners.
func (a *Axon) MetricsAddrs() []string { return addrs(a.metricsLis) }

// Close stops the instance as `axon serve` does on SIGTERM: /readyz turns
// 503, leadership is handed over (up to 5 s), HTTP streams are cut, calls
// in flight get 5 s to finish before the rest is cut, then the server and
// the engine close and the metrics listeners go last. Its error is the
// engine's on closing, or says the data directory failed while serving
// (writes were refused, and some may be lost). Close does not bound the
// engine's close: a failed disk can hang it, and a process that must exit
// sets a timer of its own. Later calls return the first's error.
func (a *Axon) Close() error { return a.stop(true) }

// HardStop stops the instance at once, as the process's death would for
// its clients: no handoff, no grace, listeners and connections cut. The
// server and the engine are then closed as by Close.
func (a *Axon) HardStop() error { return a.stop(false) }

func (a *Axon) stop(graceful bool) error {
	a.once.Do(func() {
		a.closing.Store(true)
		a.log.Info("shutting down")
		a.ready.Store(false)
		if graceful {
			// Hand leadership over first, so clients of other instances
			// see no error and their watches resume at once.
			ctx, cancel := context.WithTimeout(context.Background(), handoffTimeout)
			if err := a.srv.Load().Handoff(ctx); err != nil {
				a.log.Warn("leadership handoff", "err", err)
			}
			cancel()
		}
		// HTTP streams (gateway watches) are cut with their connections.
		a.clientHTTP.Close()
		if graceful {
			// Let unary calls finish; watch streams never end on their
			// own, so after the grace the rest is cut (clients reconnect
			// and resume from their revision).
			done := make(chan struct{})
			go func() { a.g.GracefulStop(); a.pg.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(grace):
			}
		}
		a.g.Stop()
		a.pg.Stop()
		// What cmux still sniffs belongs to no server: a gRPC client that
		// got the sniffer's SETTINGS holds it as ready, and its next call
		// would meet a reset, however much later.
		for _, t := range a.clientConns {
			t.closeAll()
		}
		a.err = a.release()
	})
	return a.err
}

// abort undoes a start that failed part way.
func (a *Axon) abort() {
	a.closing.Store(true)
	for _, lis := range slices.Concat(a.clientLis, a.peerLis) {
		lis.Close()
	}
	if a.g != nil {
		a.g.Stop()
		a.pg.Stop()
	}
	_ = a.release() // logged; the start's own error is the one to return
}

// release closes what outlives the gRPC servers, in order: the loopback,
// the server, the engine, the metrics listeners.
func (a *Axon) release() error {
	if a.lb != nil {
		a.lb.Close()
	}
	if s := a.srv.Load(); s != nil {
		s.Close()
	}
	var err error
	if a.eng != nil {
		var failure error
		if fe, ok := a.eng.(storage.Failer); ok {
			failure = fe.Failed()
		}
		if err = a.eng.Close(); err != nil {
			a.log.Error("closing the engine", "err", err)
		}
		if failure != nil && err == nil {
			err = fmt.Errorf("stopped after the data directory failed: %w", failure)
		}
	}
	if a.metricsHTTP != nil {
		a.metricsHTTP.Close()
	}
	for _, lis := range a.metricsLis {
		lis.Close() // if Serve has not taken it yet
	}
	return err
}

func addrs(lis []net.Listener) []string {
	var out []string
	for _, l := range lis {
		out = append(out, l.Addr().String())
	}
	return out
}
