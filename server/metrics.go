package server

import (
	"math"
	"net/http"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
)

// metrics are one server's Prometheus metrics, on a registry of its own.
// Counters and histograms are updated on the request path; the gauges
// that describe the node are read under the server's lock at scrape time
// (nodeCollector), so serving requests costs nothing for them.
type metrics struct {
	reg *prometheus.Registry

	// grpc is etcd's gRPC families, from the library etcd takes them
	// from, wired as etcd wires it (v3rpc.Server): interceptors on both
	// listeners, the latency histogram only with --metrics extensive, and
	// every method's series created where the services are registered
	// (Register).
	grpc *grpcprom.ServerMetrics

	roleChanges    prometheus.Counter
	commitDuration prometheus.Histogram
	// outcomes is indexed by core.Outcome.
	outcomes [core.Uncertain + 1]prometheus.Counter

	etcd *etcdMetrics
	axon *axonMetrics
}

// Metrics levels, etcd's --metrics: extensive adds the gRPC latency
// histogram.
const (
	MetricsBasic     = "basic"
	MetricsExtensive = "extensive"
)

func newMetrics(s *Server) *metrics {
	var grpcOpts []grpcprom.ServerMetricsOption
	if s.cfg.Metrics == MetricsExtensive {
		grpcOpts = append(grpcOpts, grpcprom.WithServerHandlingTimeHistogram())
	}
	m := &metrics{
		reg:  prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcOpts...),
		roleChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_leader_changes_seen_total",
			Help: "The number of leader changes seen.",
		}),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "axon_engine_commit_duration_seconds",
			Help:    "Time to run one work item's engine transaction, from begin to commit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 0.1ms .. ~13s
		}),
	}
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "axon_engine_outcomes_total",
		Help: "Engine transactions by outcome: committed, not_applied or uncertain.",
	}, []string{"outcome"})
	m.outcomes[core.Committed] = outcomes.WithLabelValues("committed")
	m.outcomes[core.NotApplied] = outcomes.WithLabelValues("not_applied")
	m.outcomes[core.Uncertain] = outcomes.WithLabelValues("uncertain")
	m.axon = newAxonMetrics(s, m.reg)
	m.etcd = newEtcdMetrics(s, m.reg, m.axon)
	m.reg.MustRegister(
		m.grpc, m.roleChanges, m.commitDuration, outcomes,
		nodeCollector{s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// observeRun records one driver.Run.
func (m *metrics) observeRun(w *core.Work, d time.Duration, eff *core.Effects, out core.Outcome) {
	m.commitDuration.Observe(d.Seconds())
	m.etcd.observeRun(w.Kind, d)
	m.axon.observeRun(w, eff, out)
	if int(out) < len(m.outcomes) && m.outcomes[out] != nil {
		m.outcomes[out].Inc()
	}
}

var (
	descCommitted = prometheus.NewDesc("axon_committed_revision",
		"The commit point C: the highest revision visible to reads.", nil, nil)
	descCompacted = prometheus.NewDesc("axon_compact_revision",
		"The revision the store is compacted to.", nil, nil)
	descInflight = prometheus.NewDesc("axon_inflight_revisions",
		"Revisions dealt to the engine but not yet committed or abandoned.", nil, nil)
	descWatchers = prometheus.NewDesc("axon_watchers",
		"Number of open watches.", nil, nil)
	descLeases = prometheus.NewDesc("axon_leases",
		"Number of live leases.", nil, nil)
	descHasLeader = prometheus.NewDesc("etcd_server_has_leader",
		"Whether or not a leader exists. 1 is existence, 0 is not.", nil, nil)
	descIsLeader = prometheus.NewDesc("etcd_server_is_leader",
		"Whether or not this member is a leader. 1 if is, 0 otherwise.", nil, nil)
)

// nodeCollector reports the node's gauges, read under the server's lock
// once per scrape.
type nodeCollector struct{ s *Server }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCommitted, descCompacted, descInflight, descWatchers, descLeases, descHasLeader, descIsLeader} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := s.drv.Status()
	committed, compacted, inflight, leases, hasLeader := st.Committed, st.Compacted, st.InFlight, st.Leases, st.HasLeader
	var watchers int
	if st.Leading {
		watchers, _ = s.drv.WatchCounts()
	}
	ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(committed))
	ch <- prometheus.MustNewConstMetric(descCompacted, prometheus.GaugeValue, float64(compacted))
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(inflight))
	ch <- prometheus.MustNewConstMetric(descWatchers, prometheus.GaugeValue, float64(watchers))
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(leases))
	ch <- prometheus.MustNewConstMetric(descHasLeader, prometheus.GaugeValue, gauge(hasLeader || st.Leading))
	ch <- prometheus.MustNewConstMetric(descIsLeader, prometheus.GaugeValue, gauge(st.Leading))
}

// Metrics serves the server's Prometheus metrics.
func (s *Server) Metrics() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{Registry: s.metrics.reg})
}

// streamWorkers is how many goroutines serve gRPC streams: reused, their
// stacks stay grown, where a goroutine per request grows (copies) its
// stack on every call — 11 % of the server's CPU on creates. Past them
// a stream gets a goroutine of its own, as without workers.
const streamWorkers = 256

// readBufferSize is each connection's gRPC read buffer. gRPC reads into
// pooled buffers only from a bare TCP connection; Axon's connections come
// wrapped (the port's protocol sniffing, byte counts, TLS), so each holds
// its buffer for its whole life: gRPC's 32 KiB took 160 MB of heap with
// 5,000 watch clients connected, and kept the GC near the memory budget.
// A read of a small request is no slower from 8 KiB; a large one takes
// more reads.
const readBufferSize = 8 << 10

// ServerOptions are the grpc.ServerOptions the server needs on a client
// listener — who may call what (instance.go), its gRPC metrics, etcd's
// keepalive policy, room for the largest request (with etcd's 512 KiB of
// slack) — to pass to grpc.NewServer.
func (s *Server) ServerOptions() []grpc.ServerOption { return s.serverOptions(clientListener) }

// PeerServerOptions are ServerOptions for a gRPC server on a peer
// listener: it serves the other instances' calls and refuses any other
// as a service it does not have. Register the same services on it.
func (s *Server) PeerServerOptions() []grpc.ServerOption { return s.serverOptions(peerListener) }

func (s *Server) serverOptions(l listener) []grpc.ServerOption {
	gateUnary, gateStream := s.gate(l)
	ka := s.cfg.KeepAlive.withDefaults()
	streams := s.cfg.MaxConcurrentStreams
	if streams == 0 {
		streams = math.MaxUint32
	}
	opts := []grpc.ServerOption{
		grpc.Creds(terminatedTLS{count: s.rpc.reads != nil}),
		grpc.MaxConcurrentStreams(streams),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ChainUnaryInterceptor(s.unaryInterceptors(gateUnary)...),
		grpc.ChainStreamInterceptor(gateStream, s.metrics.grpc.StreamServerInterceptor()),
		grpc.ForceServerCodecV2(newCountingCodec(s.metrics.etcd)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ka.MinTime}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: ka.Interval, Timeout: ka.Timeout}),
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes + 512*1024),
		grpc.ReadBufferSize(readBufferSize),
	}
	if s.rpc.reads != nil {
		opts = append(opts, grpc.StatsHandler(readStats{s.rpc.reads}))
	}
	return opts
}

// splitMethod splits "/pkg.Service/Method".
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

// codeOf is the code a client sees for a handler's error.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// unaryInterceptors are the client listener's: the gate, the metrics, the
// slow-request tracer if on (timing the call as the client sees it, past
// the gate), and admission.
func (s *Server) unaryInterceptors(gate grpc.UnaryServerInterceptor) []grpc.UnaryServerInterceptor {
	in := []grpc.UnaryServerInterceptor{gate, s.metrics.grpc.UnaryServerInterceptor(), s.metrics.etcd.unary}
	if s.rpc.slow != nil {
		in = append(in, s.rpc.slow.unary)
	}
	return append(in, s.rpc.admission.unary)
}
