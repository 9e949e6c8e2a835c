package tikvserver

import (
	"maps"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The load the server answers, for a benchmark to count the round trips
// of its clients' operations: requests by type, the timestamps handed
// out, and the busy periods (the times the requests in flight rose from
// none). A request is one round trip: a unary call, one entry of a
// BatchCommands stream, or one request on the Tso or QueryRegion stream.
// Opening a stream is none. A request is in flight from its arrival to
// its answer, the delay included.

// TSO is the type of a timestamp request on PD's Tso stream; it may ask
// for several timestamps, which the PD client batches.
const TSO = "TSO"

// MetricsPath is where `axon-bench tikv-server --metrics-listen` serves
// the Collector, in the Prometheus text format.
const MetricsPath = "/metrics"

// The metrics of the Collector.
const (
	// MetricRequests counts the requests answered, by label "type": TSO;
	// the tikvrpc name (Get, Prewrite, Commit, ...) of a TiKV
	// transactional request, unary or in BatchCommands; Service/Method
	// for any other (PD/GetRegion, PD/QueryRegion, Tikv/GetStoreSafeTS,
	// BatchCommands/Empty, Cluster/MemberList, ...).
	MetricRequests = "tikv_server_requests_total"
	// MetricTimestamps counts the timestamps the TSO requests asked for.
	MetricTimestamps = "tikv_server_tso_timestamps_total"
	// MetricBusyPeriods counts the times the requests in flight rose from
	// none.
	MetricBusyPeriods = "tikv_server_busy_periods_total"
)

// Load is a copy of the server's load counts.
type Load struct {
	Requests    map[string]int64
	Timestamps  int64
	BusyPeriods int64
}

// load counts the requests as they arrive and end.
type load struct {
	mu         sync.Mutex
	requests   map[string]int64
	timestamps int64
	inflight   int
	busy       int64
}

// begin counts a request of type typ arriving; the returned func marks
// its end, once answered or failed.
func (l *load) begin(typ string) (end func()) {
	l.mu.Lock()
	if l.requests == nil {
		l.requests = map[string]int64{}
	}
	l.requests[typ]++
	if l.inflight == 0 {
		l.busy++
	}
	l.inflight++
	l.mu.Unlock()
	return l.end
}

func (l *load) end() {
	l.mu.Lock()
	l.inflight--
	l.mu.Unlock()
}

func (l *load) addTimestamps(n uint32) {
	l.mu.Lock()
	l.timestamps += int64(n)
	l.mu.Unlock()
}

func (l *load) snapshot() Load {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Load{Requests: maps.Clone(l.requests), Timestamps: l.timestamps, BusyPeriods: l.busy}
}

// Load returns the load counts so far.
func (s *Server) Load() Load { return s.load.snapshot() }

// requestType names a unary call by its full gRPC method, as
// MetricRequests labels it.
func requestType(fullMethod string) string {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return fullMethod
	}
	if service == "tikvpb.Tikv" {
		// KvGet is tikvrpc's Get, KVPessimisticRollback its
		// PessimisticRollback: named as in BatchCommands.
		for _, p := range []string{"Kv", "KV"} {
			if rest, ok := strings.CutPrefix(method, p); ok {
				return rest
			}
		}
	}
	if i := strings.LastIndexByte(service, '.'); i >= 0 {
		service = service[i+1:]
	}
	return service + "/" + method
}

var (
	descRequests    = prometheus.NewDesc(MetricRequests, "Requests answered (unary calls, BatchCommands entries, Tso and QueryRegion stream requests), by type.", []string{"type"}, nil)
	descTimestamps  = prometheus.NewDesc(MetricTimestamps, "Timestamps the TSO requests asked for.", nil, nil)
	descBusyPeriods = prometheus.NewDesc(MetricBusyPeriods, "Times the requests in flight rose from none.", nil, nil)
)

// Collector exports the server's load counts, read at each scrape.
func (s *Server) Collector() prometheus.Collector { return loadCollector{s} }

type loadCollector struct{ s *Server }

func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRequests
	ch <- descTimestamps
	ch <- descBusyPeriods
}

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.s.Load()
	for typ, n := range l.Requests {
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(n), typ)
	}
	ch <- prometheus.MustNewConstMetric(descTimestamps, prometheus.CounterValue, float64(l.Timestamps))
	ch <- prometheus.MustNewConstMetric(descBusyPeriods, prometheus.CounterValue, float64(l.BusyPeriods))
}
