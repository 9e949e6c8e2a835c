package embed

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/memlimit"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// Config is what an Axon serves with: every setting of `axon serve`, each
// field naming its flag. Start from NewConfig, which has the flags'
// defaults; the zero Config is not valid. Errors name the flag of the
// field at fault.
type Config struct {
	// Name identifies this instance in MemberList (--name); every
	// instance of a cluster needs its own.
	Name string
	// DataDir is the Badger engine's directory (--data-dir), and where
	// auto-TLS keeps its certificates.
	DataDir string

	// ListenClientURLs are served gRPC and the JSON gateway
	// (--listen-client-urls); http and https may be mixed. A port of 0 is
	// chosen by the system: ClientAddrs says which.
	ListenClientURLs []string
	// AdvertiseClientURLs are advertised in MemberList
	// (--advertise-client-urls; empty: the listen URLs, with the ports
	// the system chose).
	AdvertiseClientURLs []string
	// ListenPeerURLs are where other instances forward to
	// (--listen-peer-urls; empty: none, they use the client URLs); https
	// ones take PeerTLS.
	ListenPeerURLs []string
	// AdvertisePeerURLs are the peer URLs advertised
	// (--initial-advertise-peer-urls; empty: the listen peer URLs).
	AdvertisePeerURLs []string
	// ListenMetricsURLs serve /health, /readyz and /metrics
	// (--listen-metrics-urls; empty: none); https ones take ClientTLS.
	ListenMetricsURLs []string

	// Store is the engine: badger (embedded, one instance) or tikv
	// (shared by several instances) (--store). Unused with Engine.
	Store string
	// BadgerCompression compresses the Badger tables written from now on:
	// none, snappy or zstd; empty: as the store's newest table
	// (--badger-compression).
	BadgerCompression string
	// BadgerValueThreshold sends larger values written from now on to
	// Badger's value log (--badger-value-threshold; 0: by compression).
	BadgerValueThreshold int64
	// PDEndpoints are the PD addresses of the TiKV cluster, with Store
	// tikv (--pd-endpoints).
	PDEndpoints []string
	// PDCAFile, PDCertFile and PDKeyFile are TLS to PD and TiKV
	// (--pd-cacert, --pd-cert, --pd-key).
	PDCAFile, PDCertFile, PDKeyFile string
	// Engine, when set, is served instead of the one Store names: a test's,
	// or the binary's mock TiKV. Start takes it over: Close closes it, and
	// so does Start when it fails.
	Engine storage.Engine
	// EngineExclusive says Engine is this instance's alone, so it leads
	// at once instead of waiting out the lease a previous incarnation left
	// (an engine Start opens knows this itself: Badger is exclusive).
	EngineExclusive bool
	// UpgradeData upgrades a store of an older format in place before
	// serving (--upgrade-data).
	UpgradeData bool

	// MaxRequestBytes is the largest request served (--max-request-bytes).
	MaxRequestBytes int
	// MaxTxnOps is the most operations in one txn (--max-txn-ops).
	MaxTxnOps int
	// MaxConcurrentStreams bounds the gRPC streams of one client
	// connection (--max-concurrent-streams).
	MaxConcurrentStreams uint32
	// MaxInflightRequests bounds the KV and lease requests served at once
	// (--max-inflight-requests; 0: server.DefaultMaxInflight; negative: no
	// bound).
	MaxInflightRequests int
	// MaxPendingWrites bounds the writes admitted and not yet committed
	// (--max-pending-writes).
	MaxPendingWrites int
	// WatchCacheBytes is the memory of the leader's recent events
	// (--watch-cache-bytes; negative: only the count bound,
	// core.DefaultRingSize).
	WatchCacheBytes int64
	// MemoryBudget is the memory to stay near, in bytes
	// (--memory-budget-bytes): it sizes Badger's memtables and block
	// cache and bounds the answers of reads in flight. 0: GOMEMLIMIT if
	// set, else a share of the cgroup's or the machine's memory;
	// negative: none. Start does not set Go's soft memory limit, which is
	// the process's (axon serve sets it).
	MemoryBudget int64
	// ReadMemory bounds the answers of reads in flight
	// (--read-memory-bytes; 0: a quarter of the memory budget, at most
	// 512 MiB; negative: no bound).
	ReadMemory int64
	// KeyCacheBytes bounds the leader's cache of key metadata (the
	// latest record of each key it wrote), which spares a write of a
	// cached key its engine read (--key-cache-bytes; 0: a 32nd of the
	// memory budget, at most 256 MiB, or 64 MiB without a budget;
	// negative: no cache).
	KeyCacheBytes int64
	// QuotaBackendBytes raises NOSPACE past this much data on disk
	// (--quota-backend-bytes; 0: server.DefaultQuotaBytes; negative:
	// none).
	QuotaBackendBytes int64
	// DiskFreeFloorBytes raises NOSPACE when the data directory's
	// filesystem has less free (--disk-free-floor-bytes; 0: max(192 MiB,
	// 5%); negative: none).
	DiskFreeFloorBytes int64
	// KeepAlive is the gRPC keepalive policy (--grpc-keepalive-min-time,
	// --grpc-keepalive-interval, --grpc-keepalive-timeout).
	KeepAlive server.KeepAlive

	// AutoCompactionMode is periodic or revision
	// (--auto-compaction-mode).
	AutoCompactionMode string
	// AutoCompactionRetention is the history to keep: a duration or
	// hours (periodic), a revision count (revision); 0 turns
	// auto-compaction off (--auto-compaction-retention).
	AutoCompactionRetention string
	// ProgressNotifyInterval is how often watches with progress_notify
	// get a progress notification
	// (--experimental-watch-progress-notify-interval).
	ProgressNotifyInterval time.Duration

	// EnablePprof serves net/http/pprof under /debug/pprof/ on the client
	// and metrics URLs (--enable-pprof).
	EnablePprof bool
	// SlowRequestTraceDir, when set, keeps the last seconds of the Go
	// execution trace in memory and writes them to this directory when a
	// client's call takes longer than 100ms (at most one a minute, the
	// newest 10 kept; read them with go tool trace)
	// (--slow-request-trace-dir).
	SlowRequestTraceDir string
	// Metrics is basic or extensive (adds gRPC latency histograms)
	// (--metrics).
	Metrics string
	// MetricsHandlers are more paths served on the metrics URLs (and, as
	// those are, on the client URLs), e.g. a mock engine's counters.
	MetricsHandlers map[string]http.Handler

	// LeaderLease is how long a leader holds leadership without renewing
	// (--leader-lease).
	LeaderLease time.Duration
	// MaxClockDrift is the largest clock difference between instances
	// (--max-clock-drift).
	MaxClockDrift time.Duration
	// EngineDeadline is the longest an engine transaction may take
	// (--engine-deadline).
	EngineDeadline time.Duration
	// TickInterval is how often the instance's clock moves on its own
	// (renewals, campaigns, lease expiry); 0: server.DefaultTickInterval.
	// No flag: tests shorten it for quicker failover.
	TickInterval time.Duration

	// AuthToken is the kind of auth token, as etcd's --auth-token:
	// simple, or jwt with its options.
	AuthToken string
	// AuthTokenTTL is how long a simple token stays valid after
	// Authenticate and after each use (--auth-token-ttl).
	AuthTokenTTL time.Duration
	// BcryptCost is the cost of password hashes (--bcrypt-cost).
	BcryptCost int

	// ClientTLS is the TLS of https client and metrics URLs, PeerTLS of
	// https peer URLs.
	ClientTLS, PeerTLS TLSInfo
	// CipherSuites are the TLS cipher suites of both sides (Go's names;
	// empty: Go's defaults) (--cipher-suites).
	CipherSuites []string
	// TLSMinVersion and TLSMaxVersion bound the TLS versions of both
	// sides: TLS1.2 or TLS1.3 (--tls-min-version, --tls-max-version;
	// an empty maximum is Go's highest).
	TLSMinVersion, TLSMaxVersion string

	// GRPCServerOptions are added to the client gRPC server's options
	// (tests add interceptors).
	GRPCServerOptions []grpc.ServerOption
	// Logger receives the instance's log (nil: slog.Default()).
	Logger *slog.Logger
}

// NewConfig returns the defaults of `axon serve`'s flags: those of
// settings the server or core owns are theirs (server.Default…,
// core.Default…); the rest, embed's own, are written here.
func NewConfig() *Config {
	return &Config{
		Name:                    server.DefaultName,
		DataDir:                 "axon.data",
		ListenClientURLs:        []string{"http://127.0.0.1:2379"},
		ListenMetricsURLs:       []string{"http://127.0.0.1:2381"},
		Store:                   "badger",
		MaxRequestBytes:         server.DefaultMaxRequestBytes,
		MaxTxnOps:               core.DefaultMaxTxnOps,
		MaxConcurrentStreams:    math.MaxUint32,
		MaxInflightRequests:     server.DefaultMaxInflight,
		MaxPendingWrites:        core.DefaultMaxPending,
		WatchCacheBytes:         core.DefaultRingBytes,
		KeepAlive:               server.DefaultKeepAlive(),
		AutoCompactionMode:      "periodic",
		AutoCompactionRetention: "0",
		ProgressNotifyInterval:  server.DefaultProgressNotifyInterval,
		Metrics:                 server.MetricsBasic,
		LeaderLease:             core.DefaultLease,
		MaxClockDrift:           100 * time.Millisecond, // embed's own: core assumes no drift
		EngineDeadline:          core.DefaultEngineDeadline,
		AuthToken:               "simple",
		AuthTokenTTL:            server.DefaultAuthTokenTTL,
		BcryptCost:              bcrypt.DefaultCost,
		TLSMinVersion:           string(tlsutil.TLSVersion12),
	}
}

// Validate refuses settings Axon cannot serve with. It reads the JWT keys
// AuthToken names, but binds nothing and opens no engine; TLS files are
// read by Start.
func (cfg *Config) Validate() error {
	if _, err := cfg.authToken(); err != nil {
		return err
	}
	if cfg.Metrics != server.MetricsBasic && cfg.Metrics != server.MetricsExtensive {
		return fmt.Errorf("--metrics %q: want basic or extensive", cfg.Metrics)
	}
	us, err := cfg.urls()
	if err != nil {
		return err
	}
	if err := cfg.checkPeerURLs(us.peer); err != nil {
		return err
	}
	if err := cfg.checkCertAuth(); err != nil {
		return err
	}
	if _, err := autoCompaction(cfg.AutoCompactionMode, cfg.AutoCompactionRetention); err != nil {
		return err
	}
	if cfg.Engine == nil {
		if _, err := cfg.checkEngine(); err != nil {
			return err
		}
	}
	return nil
}

// authToken refuses auth settings Axon cannot honour and reads the JWT
// keys AuthToken names.
func (cfg *Config) authToken() (*server.AuthToken, error) {
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("--bcrypt-cost %d: want %d to %d", cfg.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	t, err := server.ParseAuthToken(cfg.AuthToken)
	if err != nil {
		return nil, fmt.Errorf("--auth-token: %w", err)
	}
	return t, nil
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

// checkEngine refuses an engine choice Start could not open, and returns
// Badger's compression.
func (cfg *Config) checkEngine() (badgerkv.Compression, error) {
	switch cfg.Store {
	case "badger":
		compression, err := badgerkv.ParseCompression(cfg.BadgerCompression)
		if err != nil {
			return compression, fmt.Errorf("--badger-compression: %w", err)
		}
		if cfg.BadgerValueThreshold < 0 || cfg.BadgerValueThreshold > badgerkv.MaxValueThreshold {
			return compression, fmt.Errorf("--badger-value-threshold %d: want 1 to 1048576 bytes, or 0 for the default", cfg.BadgerValueThreshold)
		}
		return compression, nil
	case "tikv":
		if len(cfg.PDEndpoints) == 0 {
			return badgerkv.CompressionAsStored, errors.New("--store tikv needs --pd-endpoints")
		}
		return badgerkv.CompressionAsStored, nil
	}
	return badgerkv.CompressionAsStored, fmt.Errorf("--store %q: want badger or tikv", cfg.Store)
}

// maxReadMemory caps the default bound on the answers of reads in
// flight: a core builds and encodes answers at a few hundred MB/s, so
// past half a GiB in flight more concurrent lists add memory, not speed.
const maxReadMemory = 512 << 20

// readMemory is the bound on the answers of reads in flight: the
// setting's if given (negative: none), else a quarter of the memory
// budget up to maxReadMemory (none without a budget).
func readMemory(setting, budget int64) int64 {
	return memlimit.Share(setting, budget, 4, maxReadMemory, 0)
}

// logger is the instance's logger.
func (cfg *Config) logger() *slog.Logger {
	if cfg.Logger == nil {
		return slog.Default()
	}
	return cfg.Logger
}
