// Command axon is Axon's one binary: an etcd v3 compatible metadata store.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/memlimit"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	badgerkv "github.com/axon-kv/axon/storage/badger"
	"github.com/axon-kv/axon/storage/tikv"
)

func main() {
	if err := rootCmd().ExecuteContext(context.Background()); err != nil {
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{Use: "axon", Short: "Axon: an etcd v3 compatible metadata store", SilenceUsage: true}
	root.AddCommand(serveCmd(), snapshotCmd(), simCmd(), &cobra.Command{
		Use: "version", Short: "Print versions",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "axon (etcd API %s)\n", server.Version)
		},
	})
	return root
}

type serveFlags struct {
	listenClient, advertiseClient, listenMetrics []string
	listenPeer, advertisePeer                    []string
	dataDir, name                                string
	maxRequestBytes                              int
	maxTxnOps                                    int
	progressNotify                               time.Duration
	autoCompactionMode, autoCompactionRetention  string
	enablePprof                                  bool
	metrics, logLevel                            string
	store                                        string
	pdEndpoints                                  []string
	pdCA, pdCert, pdKey                          string
	leaderLease, maxClockDrift, engineDeadline   time.Duration
	upgradeData                                  bool
	keepAlive                                    server.KeepAlive
	quota                                        server.Quota
	maxStreams                                   uint32
	maxInflight, maxPending                      int
	watchCacheBytes                              int64
	memoryBudget                                 int64
	compression                                  string
	valueThreshold                               int64
	readMemory                                   int64
	clientTLS, peerTLS                           tlsFlags
	tlsVersions                                  tlsVersions
	tikvMock                                     tikvMockFlags
	authToken                                    string
	authTokenTTL                                 uint
	bcryptCost                                   int
}

func serveCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the etcd v3 API over Badger (embedded) or TiKV (several instances)",
		RunE:  func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.listenClient, "listen-client-urls", []string{"http://127.0.0.1:2379"}, "URLs to serve clients on (gRPC and the JSON gateway), comma-separated; http and https may be mixed")
	fl.StringSliceVar(&f.advertiseClient, "advertise-client-urls", nil, "client URLs to advertise (default: the listen URLs)")
	fl.StringSliceVar(&f.listenMetrics, "listen-metrics-urls", []string{"http://127.0.0.1:2381"}, "URLs to serve /health, /readyz and /metrics on (https uses the client TLS flags)")
	fl.StringSliceVar(&f.listenPeer, "listen-peer-urls", nil, "URLs other instances forward to (default: none, they use the client URLs); https uses the peer TLS flags")
	fl.StringSliceVar(&f.advertisePeer, "initial-advertise-peer-urls", nil, "peer URLs to advertise (default: the listen peer URLs)")
	f.registerEngine(fl)
	f.tikvMock.register(fl)
	fl.StringVar(&f.name, "name", "default", "human-readable name of this instance")
	fl.IntVar(&f.maxRequestBytes, "max-request-bytes", 1536*1024, "largest request the server accepts")
	fl.IntVar(&f.maxTxnOps, "max-txn-ops", 128, "most operations in one txn")
	f.clientTLS.register(fl, "client")
	f.peerTLS.register(fl, "peer")
	f.tlsVersions.register(fl)
	fl.Uint32Var(&f.maxStreams, "max-concurrent-streams", math.MaxUint32, "most concurrent gRPC streams on one client connection")
	fl.IntVar(&f.maxInflight, "max-inflight-requests", server.DefaultMaxInflight, "most KV and lease requests served at once; past it they are answered 'too many requests' (negative: no bound)")
	fl.IntVar(&f.maxPending, "max-pending-writes", 10000, "most writes admitted and not yet committed; past it they are answered 'too many requests'")
	fl.Int64Var(&f.watchCacheBytes, "watch-cache-bytes", 32<<20, "memory for the leader's recent events (values and previous values), which watchers near the head are served from; older events are read from the engine (negative: only the 65,536-event bound)")
	fl.Int64Var(&f.memoryBudget, "memory-budget-bytes", 0, "memory to stay near: sizes Badger's memtables (1/64 of it) and, for compressed tables, its block cache (1/8), drops its tables' blocks from the resident set (not the page cache) when it passes it, bounds the answers of reads in flight to a quarter (at most 512 MiB), and sets Go's soft memory limit to it unless GOMEMLIMIT is set (0: GOMEMLIMIT if set, else 3/4 of the memory limit of the process's cgroup, else half the machine's memory; negative: none, Badger's 64 MiB memtables, no bound on reads and Go's default GC)")
	fl.Int64Var(&f.readMemory, "read-memory-bytes", 0, "memory the answers of reads in flight may hold; past it a large list waits before copying more (0: a quarter of the memory budget, at most 512 MiB; negative: no bound)")
	fl.Int64Var(&f.quota.Bytes, "quota-backend-bytes", 0, "raise the NOSPACE alarm when the data takes more than this on disk (0: 2 GiB, as etcd; negative: no quota)")
	fl.Int64Var(&f.quota.MinFree, "disk-free-floor-bytes", 0, "raise the NOSPACE alarm when the data directory's filesystem has less free (0: max(192 MiB, 5%); negative: none)")
	fl.DurationVar(&f.keepAlive.MinTime, "grpc-keepalive-min-time", 5*time.Second, "shortest interval at which a client may ping the server")
	fl.DurationVar(&f.keepAlive.Interval, "grpc-keepalive-interval", 2*time.Hour, "how often the server pings an idle connection")
	fl.DurationVar(&f.keepAlive.Timeout, "grpc-keepalive-timeout", 20*time.Second, "how long the server waits for a ping's answer before closing the connection")
	fl.StringVar(&f.autoCompactionMode, "auto-compaction-mode", "periodic", "periodic: keep --auto-compaction-retention of history; revision: keep that many revisions")
	fl.StringVar(&f.autoCompactionRetention, "auto-compaction-retention", "0", "history to keep: a duration or hours (periodic), a revision count (revision); 0 turns auto-compaction off")
	fl.DurationVar(&f.progressNotify, "experimental-watch-progress-notify-interval", 10*time.Minute, "how often watches with progress_notify get a progress notification")
	fl.BoolVar(&f.enablePprof, "enable-pprof", false, "serve net/http/pprof under /debug/pprof/ on the client and metrics URLs")
	fl.StringVar(&f.metrics, "metrics", server.MetricsBasic, "metrics to export: basic, or extensive (adds gRPC latency histograms)")
	fl.StringVar(&f.logLevel, "log-level", "info", "lowest level logged: debug, info, warn or error")
	fl.DurationVar(&f.leaderLease, "leader-lease", 3*time.Second, "how long a leader holds leadership without renewing; a crashed leader is replaced after about this long")
	fl.DurationVar(&f.maxClockDrift, "max-clock-drift", 100*time.Millisecond, "largest clock difference between instances (safety depends on it)")
	fl.DurationVar(&f.engineDeadline, "engine-deadline", 2*time.Second, "longest an engine transaction may take; later commits are abandoned")
	fl.StringVar(&f.authToken, "auth-token", "simple", "kind of auth token, as etcd's: simple (signed by a secret the instances share in the engine), or jwt,pub-key=FILE,priv-key=FILE,sign-method=RS256|PS256|ES256|EdDSA|HS256|...,ttl=5m")
	fl.UintVar(&f.authTokenTTL, "auth-token-ttl", 300, "seconds a simple token stays valid after Authenticate and after each use on an instance")
	fl.IntVar(&f.bcryptCost, "bcrypt-cost", bcrypt.DefaultCost, fmt.Sprintf("cost of the bcrypt hashes of passwords (%d to %d)", bcrypt.MinCost, bcrypt.MaxCost))
	fl.BoolVar(&f.upgradeData, "upgrade-data", false, "upgrade a data directory (or TiKV store) of an older format in place before serving; back it up first: older binaries cannot read it afterwards")
	return cmd
}

// registerEngine registers the flags that choose and reach the engine
// (openEngine), shared by serve and snapshot restore.
func (f *serveFlags) registerEngine(fl *pflag.FlagSet) {
	fl.StringVar(&f.dataDir, "data-dir", "axon.data", "directory of the Badger engine")
	fl.Int64Var(&f.valueThreshold, "badger-value-threshold", 0, "values larger than this many bytes, written from now on, go to Badger's value log, out of the tables that every write's reads and every compaction walk; the log is collected every minute, a 16 MiB file at a time (0: 256 for uncompressed tables, keeping Kubernetes objects out of them; 1048576, every value in the tables, for compressed ones, since the log does not compress)")
	fl.StringVar(&f.compression, "badger-compression", "", "compression of the Badger tables written from now on: none (as etcd's bbolt; reads use the tables in place), snappy or zstd (about half the disk for Kubernetes objects, but reads decompress into the heap and a block cache of 1/8 of the memory budget holds blocks); each table keeps its own. Unset: as the store's newest table, none for a new store")
	fl.StringVar(&f.store, "store", "badger", "engine: badger (embedded, one instance) or tikv (shared by several instances)")
	fl.StringSliceVar(&f.pdEndpoints, "pd-endpoints", nil, "PD addresses of the TiKV cluster (host:port,...), with --store tikv")
	fl.StringVar(&f.pdCA, "pd-cacert", "", "CA file for TLS to PD and TiKV")
	fl.StringVar(&f.pdCert, "pd-cert", "", "client certificate file for TLS to PD and TiKV")
	fl.StringVar(&f.pdKey, "pd-key", "", "client key file for TLS to PD and TiKV")
}

// quotaFor is the quota the flags ask for; with Badger it watches the data
// directory.
func (f serveFlags) quotaFor() server.Quota {
	q := f.quota
	if f.store == "badger" {
		q.Dir = f.dataDir
	}
	return q
}

// maxReadMemory caps the default bound on the answers of reads in
// flight: a core builds and encodes answers at a few hundred MB/s, so
// past half a GiB in flight more concurrent lists add memory, not speed.
const maxReadMemory = 512 << 20

// readMemory is the bound on the answers of reads in flight: the flag's
// if given (negative: none), else a quarter of the memory budget up to
// maxReadMemory (none without a budget).
func readMemory(flag, budget int64) int64 {
	switch {
	case flag != 0:
		return max(flag, 0)
	case budget > 0:
		return min(budget/4, maxReadMemory)
	}
	return 0
}

// autoCompaction parses etcd's --auto-compaction-mode and -retention.
func autoCompaction(mode, retention string) (server.AutoCompaction, error) {
	switch mode {
	case "periodic":
		if d, err := time.ParseDuration(retention); err == nil {
			return server.AutoCompaction{Mode: mode, Retention: d}.On(), nil
		}
		h, err := strconv.ParseFloat(retention, 64)
		if err != nil || h < 0 {
			return server.AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: want a duration or a number of hours", retention)
		}
		return server.AutoCompaction{Mode: mode, Retention: time.Duration(h * float64(time.Hour))}.On(), nil
	case "revision":
		n, err := strconv.ParseInt(retention, 10, 64)
		if err != nil || n < 0 {
			return server.AutoCompaction{}, fmt.Errorf("--auto-compaction-retention %q: want a revision count", retention)
		}
		return server.AutoCompaction{Mode: mode, Revisions: n}.On(), nil
	}
	return server.AutoCompaction{}, fmt.Errorf("--auto-compaction-mode %q: want periodic or revision", mode)
}

// shutdownTimeout bounds the shutdown that SIGTERM or SIGINT starts
// (leadership handoff 5 s, grace for calls 5 s, engine close 10 s, with
// room to spare): past it the process exits with status 1 whatever is
// still running.
const shutdownTimeout = 30 * time.Second

// failedFunc reports why the engine stopped taking writes, or nil.
type failedFunc func() error

func serve(ctx context.Context, f serveFlags) (err error) {
	authToken, err := f.checkAuth()
	if err != nil {
		return err
	}
	// hardStop ends the process if a shutdown hangs; serve disarms it
	// when it returns (tests run serve in their own process).
	var hardStop struct {
		sync.Mutex
		t    *time.Timer
		done bool
	}
	defer func() {
		hardStop.Lock()
		hardStop.done = true
		if hardStop.t != nil {
			hardStop.t.Stop()
		}
		hardStop.Unlock()
	}()
	log, err := newLogger(f.logLevel)
	if err != nil {
		return err
	}
	if f.metrics != server.MetricsBasic && f.metrics != server.MetricsExtensive {
		return fmt.Errorf("--metrics %q: want basic or extensive", f.metrics)
	}
	tl, err := f.listenTLS()
	if err != nil {
		return err
	}
	for _, u := range f.listenPeer {
		if !strings.HasPrefix(u, "https://") {
			log.Warn("a plain http peer URL: calls between instances, with the tokens and data they carry, cross the network in clear; use https peer URLs with --peer-client-cert-auth off a trusted network", "url", u)
		}
	}
	ac, err := autoCompaction(f.autoCompactionMode, f.autoCompactionRetention)
	if err != nil {
		return err
	}
	budget, from := memlimit.Budget(f.memoryBudget)
	if budget > 0 && os.Getenv("GOMEMLIMIT") == "" {
		// The GC works harder near the budget instead of letting garbage
		// double the heap.
		debug.SetMemoryLimit(budget)
	}
	f.memoryBudget = budget
	log.Info("memory budget", "bytes", budget, "from", from, "go-soft-limit", debug.SetMemoryLimit(-1))
	// Set only on a change: setting it stops the runtime from following
	// the CPU quota.
	cur := runtime.GOMAXPROCS(0)
	if n := procs(os.Getenv("GOMAXPROCS"), cur, runtime.NumCPU()); n != cur {
		runtime.GOMAXPROCS(n)
	}
	log.Info("procs", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
	// The metrics listener comes up first so that /readyz answers 503
	// while the engine opens and the node recovers.
	var (
		ready   atomic.Bool
		srvP    atomic.Pointer[server.Server]
		healthP atomic.Pointer[http.HandlerFunc]
		failedP atomic.Pointer[failedFunc]
	)
	mux := withPprof(metricsMux(&ready, &srvP, &healthP, &failedP), f.enablePprof)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	metricsLis, err := listenAll(f.listenMetrics, tl.client)
	if err != nil {
		return err
	}
	for _, lis := range metricsLis {
		go func() {
			if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener", "err", err)
			}
		}()
	}
	defer hs.Close()
	var (
		eng       storage.Engine
		exclusive bool
	)
	if f.store == "tikv-mock" {
		eng, exclusive, err = openTiKVMock(f.tikvMock, mux, log)
	} else {
		eng, exclusive, err = openEngine(ctx, f, log)
	}
	if err != nil {
		return err
	}
	defer func() {
		// A failed data directory ends the process with an error: writes
		// were refused and some may be lost (Close logs what).
		var failure error
		if fe, ok := eng.(storage.Failer); ok {
			failure = fe.Failed()
		}
		if cerr := eng.Close(); cerr != nil {
			log.Error("closing the engine", "err", cerr)
			if err == nil {
				err = cerr
			}
		}
		if failure != nil && err == nil {
			err = fmt.Errorf("stopped after the data directory failed: %w", failure)
		}
	}()
	if fe, ok := eng.(storage.Failer); ok {
		failed := failedFunc(fe.Failed)
		failedP.Store(&failed)
	}
	adv := f.advertiseClient
	if len(adv) == 0 {
		adv = f.listenClient
	}
	advPeer := f.advertisePeer
	if len(advPeer) == 0 {
		advPeer = f.listenPeer
	}
	srv, err := server.New(server.Config{
		Core: core.Config{MaxTxnOps: f.maxTxnOps, MaxPending: f.maxPending, RingBytes: f.watchCacheBytes}, ClusterID: 0xa1b2c3d4, Exclusive: exclusive, UpgradeData: f.upgradeData,
		Lease: f.leaderLease, MaxDrift: f.maxClockDrift, EngineDeadline: f.engineDeadline,
		Name: f.name, ClientURLs: adv, PeerURLs: advPeer, PeerTLS: tl.dial, Logger: log, ProgressNotifyInterval: f.progressNotify,
		MaxRequestBytes: f.maxRequestBytes, AutoCompaction: ac, KeepAlive: f.keepAlive, Quota: f.quotaFor(), MaxConcurrentStreams: f.maxStreams, MaxInflight: f.maxInflight,
		ReadMemory: readMemory(f.readMemory, f.memoryBudget), Metrics: f.metrics, MemoryBudget: f.memoryBudget,
		Auth: server.AuthConfig{Token: authToken, TokenTTL: time.Duration(f.authTokenTTL) * time.Second, BcryptCost: f.bcryptCost}, ClientCertAuth: f.clientTLS.clientCertAuth,
	}, eng)
	if err != nil {
		return err
	}
	defer srv.Close()
	srvP.Store(srv)
	clientLis, err := listenAll(f.listenClient, tl.client)
	if err != nil {
		return err
	}
	peerLis, err := listenAll(f.listenPeer, tl.peer)
	if err != nil {
		return err
	}
	// Clients and instances are served by gRPC servers of their own: the
	// one on peer listeners serves only calls other instances prove they
	// made (a forward of any service, or the peer service), and never
	// takes a certificate there for a user.
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	pg := grpc.NewServer(srv.PeerServerOptions()...)
	srv.Register(pg)
	lb, err := newLoopback(g)
	if err != nil {
		return err
	}
	defer lb.Close()
	gateway, err := gatewayMux(ctx, lb.conn)
	if err != nil {
		return err
	}
	healthH := serveHealth(lb.conn, srv.ObserveHealth)
	healthP.Store(&healthH)
	hc := clientHTTPServer(clientHTTP(gateway, hs.Handler))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		log.Info("shutting down")
		ready.Store(false)
		// Nothing below may hang the process: a failed data directory
		// can leave engine calls stuck for good.
		hardStop.Lock()
		if !hardStop.done {
			hardStop.t = time.AfterFunc(shutdownTimeout, func() {
				log.Error("shutdown did not finish in time; exiting", "timeout", shutdownTimeout)
				os.Exit(1)
			})
		}
		hardStop.Unlock()
		// Hand leadership over first, so clients of other instances see
		// no error and their watches resume at once.
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Handoff(hctx); err != nil {
			log.Warn("leadership handoff", "err", err)
		}
		cancel()
		// HTTP streams (gateway watches) are cut with their connections.
		hc.Close()
		// Let unary calls finish; watch streams never end on their own,
		// so after a grace period the rest is cut (clients reconnect and
		// resume from their revision).
		done := make(chan struct{})
		go func() { g.GracefulStop(); pg.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			g.Stop()
			pg.Stop()
		}
	}()
	log.Info("serving", "client", f.listenClient, "peer", f.listenPeer, "metrics", f.listenMetrics, "data-dir", f.dataDir)
	ready.Store(true)
	errc := make(chan error, len(clientLis)+len(peerLis))
	for _, lis := range clientLis {
		go func() { errc <- serveClient(lis, g, hc) }()
	}
	for _, lis := range peerLis {
		go func() { errc <- pg.Serve(lis) }()
	}
	err = <-errc
	if ctx.Err() != nil {
		<-stopped
		return nil
	}
	return err
}

// newLogger logs text to stderr from level on (etcd's --log-level).
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// listening is the TLS of each kind of listener (nil: plaintext) and of
// this instance's calls to the others.
type listening struct {
	client, peer, dial *tls.Config
}

// listenTLS makes the TLS configurations the URLs need: https client or
// metrics URLs take the client flags, https peer URLs the peer flags.
// Instances dial each other with the peer flags, or, without peer URLs,
// at the client URLs with the client flags.
func (f serveFlags) listenTLS() (listening, error) {
	var l listening
	if err := f.checkPeerURLs(); err != nil {
		return l, err
	}
	if anyHTTPS(f.listenClient) || anyHTTPS(f.listenMetrics) {
		info, err := f.clientTLS.info("client", f.dataDir, f.listenClient, f.tlsVersions)
		if err != nil {
			return l, err
		}
		if l.client, err = serverTLS(info); err != nil {
			return l, err
		}
		if len(f.listenPeer) == 0 && anyHTTPS(f.listenClient) {
			if l.dial, err = clientTLS(info); err != nil {
				return l, err
			}
		}
	}
	if anyHTTPS(f.listenPeer) {
		info, err := f.peerTLS.info("peer", f.dataDir, f.listenPeer, f.tlsVersions)
		if err != nil {
			return l, err
		}
		if l.peer, err = serverTLS(info); err != nil {
			return l, err
		}
		if l.dial, err = clientTLS(info); err != nil {
			return l, err
		}
	}
	return l, nil
}

// checkPeerURLs refuses peer listeners that would take callers without
// a peer certificate while clients must show one (--client-cert-auth):
// instances' calls carry the users they vouch for and clients' tokens,
// which such a set-up asks to keep off an unauthenticated, perhaps
// plaintext, link. (The peer listener serves nothing but proved calls of
// instances either way.)
func (f serveFlags) checkPeerURLs() error {
	if !f.clientTLS.clientCertAuth {
		return nil
	}
	for _, u := range f.listenPeer {
		if !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("--client-cert-auth with --listen-peer-urls %s: a plain peer URL takes instances without a certificate; use an https peer URL with --peer-client-cert-auth and --peer-trusted-ca-file", u)
		}
		if !f.peerTLS.clientCertAuth {
			return fmt.Errorf("--client-cert-auth with --listen-peer-urls %s but without --peer-client-cert-auth: the peer listener would take instances without a certificate; add --peer-client-cert-auth and --peer-trusted-ca-file", u)
		}
	}
	return nil
}

func anyHTTPS(urls []string) bool {
	return slices.ContainsFunc(urls, func(u string) bool { return strings.HasPrefix(u, "https://") })
}

// listenAll listens on every URL; https ones hand out TLS connections
// (the handshake runs in the connection's own goroutine).
func listenAll(urls []string, cfg *tls.Config) ([]net.Listener, error) {
	var out []net.Listener
	for _, u := range urls {
		addr, err := server.HostPort(u)
		if err != nil {
			return nil, err
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, err
		}
		if strings.HasPrefix(u, "https://") {
			lis = tls.NewListener(lis, cfg)
		}
		out = append(out, lis)
	}
	return out, nil
}

// openEngine opens the engine --store names; exclusive says no other
// instance can share it.
func openEngine(ctx context.Context, f serveFlags, log *slog.Logger) (storage.Engine, bool, error) {
	switch f.store {
	case "badger":
		compression, err := badgerkv.ParseCompression(f.compression)
		if err != nil {
			return nil, false, fmt.Errorf("--badger-compression: %w", err)
		}
		if f.valueThreshold < 0 || f.valueThreshold > badgerkv.MaxValueThreshold {
			return nil, false, fmt.Errorf("--badger-value-threshold %d: want 1 to 1048576 bytes, or 0 for the default", f.valueThreshold)
		}
		eng, err := badgerkv.Open(f.dataDir, badgerkv.Options{Logger: log, MemoryBudget: f.memoryBudget, Compression: compression, ValueThreshold: f.valueThreshold})
		if err != nil {
			return nil, false, fmt.Errorf("open %s: %w", f.dataDir, err)
		}
		return eng, true, nil
	case "tikv":
		if len(f.pdEndpoints) == 0 {
			return nil, false, errors.New("--store tikv needs --pd-endpoints")
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		eng, err := tikv.Open(octx, f.pdEndpoints, tikv.Options{CAPath: f.pdCA, CertPath: f.pdCert, KeyPath: f.pdKey})
		if err != nil {
			return nil, false, err
		}
		return eng, false, nil
	}
	return nil, false, fmt.Errorf("--store %q: want badger or tikv", f.store)
}

// metricsMux serves /health, /readyz and /metrics. /readyz is 200 once
// ready is set (the node has recovered and the client listener is bound)
// and 503 before that, once shutdown begins and once the engine failed;
// /health is etcd's check (check) once ready, and false once the engine
// failed; /metrics serves the server's registry once it exists.
func metricsMux(ready *atomic.Bool, srv *atomic.Pointer[server.Server], check *atomic.Pointer[http.HandlerFunc], failed *atomic.Pointer[failedFunc]) *http.ServeMux {
	mux := http.NewServeMux()
	failure := func() error {
		if f := failed.Load(); f != nil {
			return (*f)()
		}
		return nil
	}
	unhealthy := func() {
		if s := srv.Load(); s != nil {
			s.ObserveHealth(false)
		}
	}
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if err := failure(); err != nil {
			unhealthy()
			// etcd's health answers false with a reason when the member
			// cannot serve; etcd itself would have exited.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ := json.Marshal(health{Health: "false", Reason: "STORAGE ERROR:" + err.Error()})
			fmt.Fprintln(w, string(b))
			return
		}
		if h := check.Load(); h != nil && ready.Load() {
			(*h)(w, r)
			return
		}
		unhealthy()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"health":"false","reason":"not serving"}`)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := failure(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		s := srv.Load()
		if s == nil {
			http.Error(w, "recovering", http.StatusServiceUnavailable)
			return
		}
		s.Metrics().ServeHTTP(w, r)
	})
	return mux
}

// checkAuth refuses auth flags Axon cannot honour and reads the JWT
// keys --auth-token names.
func (f serveFlags) checkAuth() (*server.AuthToken, error) {
	if f.bcryptCost < bcrypt.MinCost || f.bcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("--bcrypt-cost %d: want %d to %d", f.bcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	t, err := server.ParseAuthToken(f.authToken)
	if err != nil {
		return nil, fmt.Errorf("--auth-token: %w", err)
	}
	return t, nil
}
