// Command axon is Axon's one binary: an etcd v3 compatible metadata store.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/bcrypt"

	"github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/internal/memlimit"
	"github.com/axon-kv/axon/server"
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

// serveFlags are serve's flags: the instance's configuration, bound to
// the fields of an embed.Config, and what belongs to the process.
type serveFlags struct {
	embed.Config
	logLevel     string
	authTokenTTL uint // seconds, as etcd's flag
	tikvMock     tikvMockFlags
}

func serveCmd() *cobra.Command {
	f := serveFlags{Config: *embed.NewConfig()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the etcd v3 API over Badger (embedded) or TiKV (several instances)",
		RunE:  func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f) },
	}
	// Each flag's default is NewConfig's value of its field.
	fl := cmd.Flags()
	fl.StringSliceVar(&f.ListenClientURLs, "listen-client-urls", f.ListenClientURLs, "URLs to serve clients on (gRPC and the JSON gateway), comma-separated: http://host:port, https://host:port (TLS with the client TLS flags), unix://path, unixs://path; http and https may be mixed")
	fl.StringSliceVar(&f.AdvertiseClientURLs, "advertise-client-urls", f.AdvertiseClientURLs, "client URLs to advertise (default: the listen URLs)")
	fl.StringSliceVar(&f.ListenMetricsURLs, "listen-metrics-urls", f.ListenMetricsURLs, "URLs to serve /health, /livez, /readyz and /metrics on (https uses the client TLS flags)")
	fl.StringSliceVar(&f.ListenPeerURLs, "listen-peer-urls", f.ListenPeerURLs, "URLs other instances forward to (default: none, they use the client URLs); https and unixs use the peer TLS flags")
	fl.StringSliceVar(&f.AdvertisePeerURLs, "initial-advertise-peer-urls", f.AdvertisePeerURLs, "peer URLs to advertise (default: the listen peer URLs)")
	registerEngine(fl, &f.Config)
	f.tikvMock.register(fl)
	fl.StringVar(&f.Name, "name", f.Name, "human-readable name of this instance")
	fl.IntVar(&f.MaxRequestBytes, "max-request-bytes", f.MaxRequestBytes, "largest request the server accepts")
	fl.IntVar(&f.MaxTxnOps, "max-txn-ops", f.MaxTxnOps, "most operations in one txn")
	registerTLS(fl, "client", &f.ClientTLS)
	registerTLS(fl, "peer", &f.PeerTLS)
	fl.StringSliceVar(&f.CipherSuites, "cipher-suites", f.CipherSuites, "TLS cipher suites for clients and peers, comma-separated (Go's names; empty: Go's defaults)")
	fl.StringVar(&f.TLSMinVersion, "tls-min-version", f.TLSMinVersion, "lowest TLS version accepted: TLS1.2 or TLS1.3")
	fl.StringVar(&f.TLSMaxVersion, "tls-max-version", f.TLSMaxVersion, "highest TLS version accepted: TLS1.2 or TLS1.3 (empty: Go's highest)")
	fl.Uint32Var(&f.MaxConcurrentStreams, "max-concurrent-streams", f.MaxConcurrentStreams, "most concurrent gRPC streams on one client connection")
	fl.IntVar(&f.MaxInflightRequests, "max-inflight-requests", f.MaxInflightRequests, "most KV and lease requests served at once; past it they are answered 'too many requests' (negative: no bound)")
	fl.IntVar(&f.MaxPendingWrites, "max-pending-writes", f.MaxPendingWrites, "most writes admitted and not yet committed; past it they are answered 'too many requests'")
	fl.Int64Var(&f.WatchCacheBytes, "watch-cache-bytes", f.WatchCacheBytes, "memory for the leader's recent events (values and previous values), which watchers near the head are served from; older events are read from the engine (negative: only the 65,536-event bound)")
	fl.Int64Var(&f.MemoryBudget, "memory-budget-bytes", f.MemoryBudget, "memory to stay near: sizes Badger's memtables (1/64 of it) and, for compressed tables, its block cache (1/8), drops its tables' blocks from the resident set (not the page cache) when it passes it, bounds the answers of reads in flight to a quarter (at most 512 MiB), and sets Go's soft memory limit to it unless GOMEMLIMIT is set (0: GOMEMLIMIT if set, else 3/4 of the memory limit of the process's cgroup, else half the machine's memory; negative: none, Badger's 64 MiB memtables, no bound on reads and Go's default GC)")
	fl.Int64Var(&f.KeyCacheBytes, "key-cache-bytes", f.KeyCacheBytes, "memory the leader's cache of key metadata may hold, which spares a write of a key it wrote before its engine read (0: a 32nd of the memory budget, at most 256 MiB, or 64 MiB without a budget; negative: none)")
	fl.Int64Var(&f.ReadMemory, "read-memory-bytes", f.ReadMemory, "memory the answers of reads in flight may hold; past it a large list waits before copying more (0: a quarter of the memory budget, at most 512 MiB; negative: no bound)")
	fl.Int64Var(&f.QuotaBackendBytes, "quota-backend-bytes", f.QuotaBackendBytes, "raise the NOSPACE alarm when the data takes more than this on disk (0: 2 GiB, as etcd; negative: no quota)")
	fl.Int64Var(&f.DiskFreeFloorBytes, "disk-free-floor-bytes", f.DiskFreeFloorBytes, "raise the NOSPACE alarm when the data directory's filesystem has less free (0: max(192 MiB, 5%); negative: none)")
	fl.DurationVar(&f.KeepAlive.MinTime, "grpc-keepalive-min-time", f.KeepAlive.MinTime, "shortest interval at which a client may ping the server")
	fl.DurationVar(&f.KeepAlive.Interval, "grpc-keepalive-interval", f.KeepAlive.Interval, "how often the server pings an idle connection")
	fl.DurationVar(&f.KeepAlive.Timeout, "grpc-keepalive-timeout", f.KeepAlive.Timeout, "how long the server waits for a ping's answer before closing the connection")
	fl.StringVar(&f.AutoCompactionMode, "auto-compaction-mode", f.AutoCompactionMode, "periodic: keep --auto-compaction-retention of history; revision: keep that many revisions")
	fl.StringVar(&f.AutoCompactionRetention, "auto-compaction-retention", f.AutoCompactionRetention, "history to keep: a duration or hours (periodic), a revision count (revision); 0 turns auto-compaction off")
	fl.DurationVar(&f.ProgressNotifyInterval, "experimental-watch-progress-notify-interval", f.ProgressNotifyInterval, "how often watches with progress_notify get a progress notification")
	fl.BoolVar(&f.EnablePprof, "enable-pprof", f.EnablePprof, "serve net/http/pprof under /debug/pprof/ on the client and metrics URLs")
	fl.StringVar(&f.SlowRequestTraceDir, "slow-request-trace-dir", f.SlowRequestTraceDir, "keep the last seconds of the Go execution trace in memory and write them here when a client's call takes longer than 100ms (at most one a minute, the newest 10 kept; open with go tool trace)")
	fl.StringVar(&f.Metrics, "metrics", f.Metrics, "metrics to export: basic, or extensive (adds gRPC latency histograms)")
	fl.StringVar(&f.logLevel, "log-level", "info", "lowest level logged: debug, info, warn or error")
	fl.DurationVar(&f.LeaderLease, "leader-lease", f.LeaderLease, "how long a leader holds leadership without renewing; a crashed leader is replaced after about this long")
	fl.DurationVar(&f.MaxClockDrift, "max-clock-drift", f.MaxClockDrift, "largest clock difference between instances (safety depends on it)")
	fl.DurationVar(&f.EngineDeadline, "engine-deadline", f.EngineDeadline, "longest an engine transaction may take; later commits are abandoned")
	fl.StringVar(&f.AuthToken, "auth-token", f.AuthToken, "kind of auth token, as etcd's: simple (signed by a secret the instances share in the engine), or jwt,pub-key=FILE,priv-key=FILE,sign-method=RS256|PS256|ES256|EdDSA|HS256|...,ttl=5m")
	fl.UintVar(&f.authTokenTTL, "auth-token-ttl", uint(f.AuthTokenTTL/time.Second), "seconds a simple token stays valid after Authenticate and after each use on an instance")
	fl.IntVar(&f.BcryptCost, "bcrypt-cost", f.BcryptCost, fmt.Sprintf("cost of the bcrypt hashes of passwords (%d to %d)", bcrypt.MinCost, bcrypt.MaxCost))
	fl.BoolVar(&f.UpgradeData, "upgrade-data", f.UpgradeData, "upgrade a data directory (or TiKV store) of an older format in place before serving; back it up first: older binaries cannot read it afterwards")
	return cmd
}

// registerEngine registers the flags that choose and reach the engine,
// shared by serve and snapshot restore.
func registerEngine(fl *pflag.FlagSet, cfg *embed.Config) {
	fl.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the Badger engine")
	fl.Int64Var(&cfg.BadgerValueThreshold, "badger-value-threshold", cfg.BadgerValueThreshold, "values larger than this many bytes, written from now on, go to Badger's value log, out of the tables that every write's reads and every compaction walk; the log is collected every minute, a 16 MiB file at a time (0: 256 for uncompressed tables, keeping Kubernetes objects out of them; 1048576, every value in the tables, for compressed ones, since the log does not compress)")
	fl.StringVar(&cfg.BadgerCompression, "badger-compression", cfg.BadgerCompression, "compression of the Badger tables written from now on: none (as etcd's bbolt; reads use the tables in place), snappy or zstd (about half the disk for Kubernetes objects, but reads decompress into the heap and a block cache of 1/8 of the memory budget holds blocks); each table keeps its own. Unset: as the store's newest table, none for a new store")
	fl.StringVar(&cfg.Store, "store", cfg.Store, "engine: badger (embedded, one instance) or tikv (shared by several instances)")
	fl.StringSliceVar(&cfg.PDEndpoints, "pd-endpoints", cfg.PDEndpoints, "PD addresses of the TiKV cluster (host:port,...), with --store tikv")
	fl.StringVar(&cfg.PDCAFile, "pd-cacert", cfg.PDCAFile, "CA file for TLS to PD and TiKV")
	fl.StringVar(&cfg.PDCertFile, "pd-cert", cfg.PDCertFile, "client certificate file for TLS to PD and TiKV")
	fl.StringVar(&cfg.PDKeyFile, "pd-key", cfg.PDKeyFile, "client key file for TLS to PD and TiKV")
}

// registerTLS registers etcd's TLS flags of one side, client or peer.
func registerTLS(fl *pflag.FlagSet, side string, info *embed.TLSInfo) {
	prefix, who := "", "client"
	if side == "peer" {
		prefix, who = "peer-", "peer"
	}
	fl.StringVar(&info.CertFile, prefix+"cert-file", "", "certificate of the https "+who+" listener (PEM); also this instance's certificate when it dials "+who+"s")
	fl.StringVar(&info.KeyFile, prefix+"key-file", "", "key of --"+prefix+"cert-file (PEM)")
	fl.StringVar(&info.TrustedCAFile, prefix+"trusted-ca-file", "", "CA bundle that "+who+" certificates must chain to (PEM)")
	fl.BoolVar(&info.ClientCertAuth, prefix+"client-cert-auth", false, "require a "+who+" certificate signed by --"+prefix+"trusted-ca-file")
	fl.StringVar(&info.CRLFile, who+"-crl-file", "", "certificate revocation list (DER): "+who+" certificates it names are refused (read at every handshake)")
	fl.BoolVar(&info.AutoTLS, prefix+"auto-tls", false, "serve https "+who+" URLs with a generated self-signed certificate when no --"+prefix+"cert-file is given")
}

// shutdownTimeout bounds the shutdown that SIGTERM or SIGINT starts
// (leadership handoff 5 s, grace for calls 5 s, engine close 10 s, with
// room to spare): past it the process exits with status 1 whatever is
// still running.
const shutdownTimeout = 30 * time.Second

// serve runs an instance until SIGTERM, SIGINT, the end of ctx or a
// failed listener, after setting what belongs to the process: the
// logger, Go's soft memory limit and GOMAXPROCS.
func serve(ctx context.Context, f serveFlags) error {
	log, err := newLogger(f.logLevel)
	if err != nil {
		return err
	}
	cfg := f.Config
	cfg.Logger = log
	cfg.AuthTokenTTL = time.Duration(f.authTokenTTL) * time.Second
	if cfg.Store == "tikv-mock" {
		mux := http.NewServeMux()
		eng, exclusive, err := openTiKVMock(f.tikvMock, mux, log)
		if err != nil {
			return err
		}
		cfg.Engine, cfg.EngineExclusive = eng, exclusive
		cfg.MetricsHandlers = map[string]http.Handler{tikv.TraceMetricsPath: mux}
	}
	if err := cfg.Validate(); err != nil {
		if cfg.Engine != nil {
			cfg.Engine.Close()
		}
		return err
	}
	budget, from := memlimit.Budget(cfg.MemoryBudget)
	if budget > 0 && os.Getenv("GOMEMLIMIT") == "" {
		// The GC works harder near the budget instead of letting garbage
		// double the heap.
		debug.SetMemoryLimit(budget)
	}
	log.Info("memory budget", "bytes", budget, "from", from, "go-soft-limit", debug.SetMemoryLimit(-1))
	// Start is handed the budget settled here; none is -1, since 0 would
	// be worked out again.
	cfg.MemoryBudget = cmp.Or(budget, -1)
	// Set only on a change: setting it stops the runtime from following
	// the CPU quota.
	cur := runtime.GOMAXPROCS(0)
	if n := procs(os.Getenv("GOMAXPROCS"), cur, runtime.NumCPU()); n != cur {
		runtime.GOMAXPROCS(n)
	}
	log.Info("procs", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())

	a, err := embed.Start(ctx, &cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var lisErr error
	select {
	case <-ctx.Done():
	case lisErr = <-a.Err():
	}
	// Nothing in Close may hang the process: a failed data directory can
	// leave engine calls stuck for good. serve disarms the timer when it
	// returns (tests run serve in their own process).
	hardStop := time.AfterFunc(shutdownTimeout, func() {
		log.Error("shutdown did not finish in time; exiting", "timeout", shutdownTimeout)
		os.Exit(1)
	})
	defer hardStop.Stop()
	// A failed data directory ends the process with an error: writes
	// were refused and some may be lost (the engine's close logs what).
	err = a.Close()
	if lisErr != nil {
		return lisErr
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
