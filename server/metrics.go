package server

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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

	// gRPC, named and labelled like etcd's (go-grpc-prometheus). The
	// latency histogram carries grpc_code as well.
	grpcStarted  *prometheus.CounterVec
	grpcHandled  *prometheus.CounterVec
	grpcHandling *prometheus.HistogramVec
	grpcMsgRecv  *prometheus.CounterVec
	grpcMsgSent  *prometheus.CounterVec

	watchEventsSent prometheus.Counter
	roleChanges     prometheus.Counter
	commitDuration  prometheus.Histogram
	// outcomes is indexed by core.Outcome.
	outcomes [core.Uncertain + 1]prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	grpcLabels := []string{"grpc_type", "grpc_service", "grpc_method"}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		grpcStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_started_total",
			Help: "Total number of RPCs started on the server.",
		}, grpcLabels),
		grpcHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total",
			Help: "Total number of RPCs completed on the server, regardless of success or failure.",
		}, append(grpcLabels, "grpc_code")),
		grpcHandling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. ~16s
		}, append(grpcLabels, "grpc_code")),
		grpcMsgRecv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_msg_received_total",
			Help: "Total number of RPC stream messages received on the server.",
		}, grpcLabels),
		grpcMsgSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_msg_sent_total",
			Help: "Total number of gRPC stream messages sent by the server.",
		}, grpcLabels),
		watchEventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "axon_watch_events_sent_total",
			Help: "Total number of watch events sent to clients.",
		}),
		roleChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_leader_changes_seen_total",
			Help: "The number of times this instance started or stopped leading.",
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
	m.reg.MustRegister(
		m.grpcStarted, m.grpcHandled, m.grpcHandling, m.grpcMsgRecv, m.grpcMsgSent,
		m.watchEventsSent, m.roleChanges, m.commitDuration, outcomes,
		nodeCollector{s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.initGRPC()
	return m
}

// observeRun records one exec.Run.
func (m *metrics) observeRun(d time.Duration, out core.Outcome) {
	m.commitDuration.Observe(d.Seconds())
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
		"Whether a leader exists: always 1, Axon is its own leader.", nil, nil)
	descIsLeader = prometheus.NewDesc("etcd_server_is_leader",
		"Whether this member is the leader: always 1.", nil, nil)
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
	var committed, compacted int64
	var inflight, watchers, leases int
	s.mu.Lock()
	n := s.member.Node()
	if n != nil {
		committed, compacted = n.Committed(), n.Compacted()
		inflight, watchers, leases = n.InFlight(), len(s.watches), len(n.Leases())
	}
	_, hasLeader := s.member.Leader()
	s.mu.Unlock()
	if n == nil {
		committed = s.drv.Known()
	}
	ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(committed))
	ch <- prometheus.MustNewConstMetric(descCompacted, prometheus.GaugeValue, float64(compacted))
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(inflight))
	ch <- prometheus.MustNewConstMetric(descWatchers, prometheus.GaugeValue, float64(watchers))
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(leases))
	ch <- prometheus.MustNewConstMetric(descHasLeader, prometheus.GaugeValue, gauge(hasLeader || n != nil))
	ch <- prometheus.MustNewConstMetric(descIsLeader, prometheus.GaugeValue, gauge(n != nil))
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

// ServerOptions are the grpc.ServerOptions the server needs — its gRPC
// metrics, etcd's keepalive policy, room for the largest request (with
// etcd's 512 KiB of slack) — to pass to grpc.NewServer.
func (s *Server) ServerOptions() []grpc.ServerOption {
	ka := s.cfg.KeepAlive.withDefaults()
	streams := s.cfg.MaxConcurrentStreams
	if streams == 0 {
		streams = math.MaxUint32
	}
	opts := []grpc.ServerOption{
		grpc.Creds(terminatedTLS{count: s.reads != nil}),
		grpc.MaxConcurrentStreams(streams),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ChainUnaryInterceptor(s.metrics.unary, s.admission.unary),
		grpc.ChainStreamInterceptor(s.metrics.stream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ka.MinTime}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: ka.Interval, Timeout: ka.Timeout}),
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes + 512*1024),
	}
	if s.reads != nil {
		opts = append(opts, grpc.StatsHandler(readStats{s.reads}))
	}
	return opts
}

// initGRPC creates the series of every method of the services Register
// adds, so that they read 0 before the first call rather than being absent.
func (m *metrics) initGRPC() {
	for _, sd := range []*grpc.ServiceDesc{&pb.KV_ServiceDesc, &pb.Watch_ServiceDesc, &pb.Lease_ServiceDesc,
		&pb.Maintenance_ServiceDesc, &pb.Cluster_ServiceDesc, &healthpb.Health_ServiceDesc} {
		for _, md := range sd.Methods {
			m.initMethod("unary", sd.ServiceName, md.MethodName)
		}
		for _, st := range sd.Streams {
			m.initMethod(rpcType(st.ClientStreams, st.ServerStreams), sd.ServiceName, st.StreamName)
		}
	}
}

func (m *metrics) initMethod(typ, svc, method string) {
	m.grpcStarted.WithLabelValues(typ, svc, method)
	m.grpcMsgRecv.WithLabelValues(typ, svc, method)
	m.grpcMsgSent.WithLabelValues(typ, svc, method)
	m.grpcHandled.WithLabelValues(typ, svc, method, codes.OK.String())
}

func rpcType(clientStream, serverStream bool) string {
	switch {
	case clientStream && serverStream:
		return "bidi_stream"
	case clientStream:
		return "client_stream"
	case serverStream:
		return "server_stream"
	}
	return "unary"
}

// splitMethod splits "/pkg.Service/Method".
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

func (m *metrics) done(typ, svc, method string, start time.Time, err error) {
	code := codeOf(err).String()
	m.grpcHandled.WithLabelValues(typ, svc, method, code).Inc()
	m.grpcHandling.WithLabelValues(typ, svc, method, code).Observe(time.Since(start).Seconds())
}

// codeOf is the code a client sees for a handler's error.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

func (m *metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	svc, method := splitMethod(info.FullMethod)
	start := time.Now()
	m.grpcStarted.WithLabelValues("unary", svc, method).Inc()
	m.grpcMsgRecv.WithLabelValues("unary", svc, method).Inc()
	resp, err := handler(ctx, req)
	if err == nil {
		m.grpcMsgSent.WithLabelValues("unary", svc, method).Inc()
	}
	m.done("unary", svc, method, start, err)
	return resp, err
}

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	svc, method := splitMethod(info.FullMethod)
	typ := rpcType(info.IsClientStream, info.IsServerStream)
	start := time.Now()
	m.grpcStarted.WithLabelValues(typ, svc, method).Inc()
	err := handler(srv, &countingStream{
		ServerStream: ss,
		recv:         m.grpcMsgRecv.WithLabelValues(typ, svc, method),
		sent:         m.grpcMsgSent.WithLabelValues(typ, svc, method),
	})
	m.done(typ, svc, method, start, err)
	return err
}

// countingStream counts a stream's messages.
type countingStream struct {
	grpc.ServerStream
	recv, sent prometheus.Counter
}

func (c *countingStream) SendMsg(msg any) error {
	err := c.ServerStream.SendMsg(msg)
	if err == nil {
		c.sent.Inc()
	}
	return err
}

func (c *countingStream) RecvMsg(msg any) error {
	err := c.ServerStream.RecvMsg(msg)
	if err == nil {
		c.recv.Inc()
	}
	return err
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
