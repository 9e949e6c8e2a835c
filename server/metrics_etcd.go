package server

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/version"
	etcdruntime "go.etcd.io/etcd/pkg/v3/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// etcd's metric families that mean on Axon what they mean on etcd, with
// etcd's names, labels, help texts and buckets (README, "Metrics", says
// what each maps to). Families whose source a given engine lacks are not
// registered rather than exported as zeros.
type etcdMetrics struct {
	walFsync      prometheus.Histogram // engine sync (Badger group commit)
	backendCommit prometheus.Histogram // engine Commit
	defrag        prometheus.Histogram
	defragging    prometheus.Gauge

	proposalsFailed prometheus.Counter
	slowApply       prometheus.Counter
	slowReadIndex   prometheus.Counter
	readIndexFailed prometheus.Counter

	rangeTotal, putTotal, deleteTotal, txnTotal prometheus.Counter

	sentBytes, receivedBytes prometheus.Counter

	peerRTT      *prometheus.HistogramVec
	peerFailures *prometheus.CounterVec

	healthSuccess, healthFailures prometheus.Counter
	healthCheck                   *prometheus.GaugeVec   // etcd's healthcheck: 1 passed, 0 failed
	healthChecks                  *prometheus.CounterVec // etcd's healthchecks_total
	eventsSent                    prometheus.Counter

	leaseGranted, leaseRevoked, leaseRenewed, leaseExpired prometheus.Counter
	leaseTTL                                               prometheus.Histogram
}

// slowApplyAfter is etcd's warning-apply-duration (100ms): a write whose
// engine transaction takes longer counts as a slow apply.
const slowApplyAfter = 100 * time.Millisecond

// slowReadIndexAfter is etcd's read index retry time: a read index that
// takes longer counts as slow.
const slowReadIndexAfter = 500 * time.Millisecond

func newEtcdMetrics(s *Server, reg *prometheus.Registry, axon *axonMetrics) *etcdMetrics {
	counter := func(subsystem, name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: subsystem, Name: name, Help: help})
	}
	e := &etcdMetrics{
		walFsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "wal_fsync_duration_seconds",
			Help:    "The latency distributions of fsync called by WAL.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		backendCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "backend_commit_duration_seconds",
			Help:    "The latency distributions of commit called by backend.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		defrag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "backend_defrag_duration_seconds",
			Help:    "The latency distribution of backend defragmentation.",
			Buckets: prometheus.ExponentialBuckets(.1, 2, 13),
		}),
		defragging: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "defrag_inflight",
			Help: "Whether or not defrag is active on the member. 1 means active, 0 means not.",
		}),
		proposalsFailed: counter("server", "proposals_failed_total", "The total number of failed proposals seen."),
		slowApply:       counter("server", "slow_apply_total", "The total number of slow apply requests (likely overloaded from slow disk)."),
		slowReadIndex:   counter("server", "slow_read_indexes_total", "The total number of pending read indexes not in sync with leader's or timed out read index requests."),
		readIndexFailed: counter("server", "read_indexes_failed_total", "The total number of failed read indexes seen."),
		rangeTotal:      counter("mvcc", "range_total", "Total number of ranges seen by this member."),
		putTotal:        counter("mvcc", "put_total", "Total number of puts seen by this member."),
		deleteTotal:     counter("mvcc", "delete_total", "Total number of deletes seen by this member."),
		txnTotal:        counter("mvcc", "txn_total", "Total number of txns seen by this member."),
		sentBytes:       counter("network", "client_grpc_sent_bytes_total", "The total number of bytes sent to grpc clients."),
		receivedBytes:   counter("network", "client_grpc_received_bytes_total", "The total number of bytes received from grpc clients."),
		peerRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "etcd", Subsystem: "network", Name: "peer_round_trip_time_seconds",
			Help:    "Round-Trip-Time histogram between peers",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"To"}),
		peerFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd", Subsystem: "network", Name: "peer_sent_failures_total",
			Help: "The total number of send failures from peers.",
		}, []string{"To"}),
		healthSuccess:  counter("server", "health_success", "The total number of successful health checks"),
		healthFailures: counter("server", "health_failures", "The total number of failed health checks"),
		healthCheck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "etcd", Subsystem: "server", Name: "healthcheck",
			Help: "The result of each kind of healthcheck.",
		}, []string{"type", "name"}),
		healthChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd", Subsystem: "server", Name: "healthchecks_total",
			Help: "The total number of each kind of healthcheck.",
		}, []string{"type", "name", "status"}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "events_total",
			Help: "Total number of events sent by this member.",
		}),
		leaseGranted: debugCounter("lease", "granted_total", "The total number of granted leases."),
		leaseRevoked: debugCounter("lease", "revoked_total", "The total number of revoked leases."),
		leaseRenewed: debugCounter("lease", "renewed_total", "The number of renewed leases seen by the leader."),
		leaseExpired: debugCounter("server", "lease_expired_total", "The total number of expired leases."),
		leaseTTL: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "etcd_debugging", Subsystem: "lease", Name: "ttl_total",
			Help:    "Bucketed histogram of lease TTLs.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 24),
		}),
	}
	reg.MustRegister(e.backendCommit, e.defrag, e.defragging, e.proposalsFailed, e.slowApply, e.slowReadIndex,
		e.readIndexFailed, e.rangeTotal, e.putTotal, e.deleteTotal, e.txnTotal, e.sentBytes, e.receivedBytes,
		e.peerRTT, e.peerFailures, e.healthSuccess, e.healthFailures, e.healthCheck, e.healthChecks, e.eventsSent,
		e.leaseGranted, e.leaseRevoked, e.leaseRenewed, e.leaseExpired, e.leaseTTL, etcdInfo(s), &etcdNode{s: s})
	if o, ok := s.eng.(storage.CommitObserver); ok {
		o.ObserveCommits(func(d time.Duration) { e.backendCommit.Observe(d.Seconds()) })
	}
	if o, ok := s.eng.(storage.SyncObserver); ok {
		reg.MustRegister(e.walFsync)
		o.ObserveSyncs(func(d time.Duration, txns int) {
			e.walFsync.Observe(d.Seconds())
			axon.groupTxns.Observe(float64(txns))
			if d > slowApplyAfter {
				// Every write of the group waited this long: etcd's
				// "apply request took too long", once for them all.
				s.log.Warn("engine commit took too long", "took", d, "expected-duration", slowApplyAfter, "transactions", txns)
			}
		})
	}
	reg.MustRegister(&etcdSpace{s: s})
	return e
}

func debugCounter(subsystem, name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: subsystem, Name: name, Help: help})
}

// unclaimed counts the node's own work that no client waits for: a
// lease expiry (ID 0), which etcd counts as expired and revoked.
func (e *etcdMetrics) unclaimed(r core.Response) {
	if r.ID == 0 && r.Err == nil {
		e.leaseExpired.Inc()
		e.leaseRevoked.Inc()
	}
}

// etcdInfo is etcd's constant gauges: versions and this member's ID.
func etcdInfo(s *Server) prometheus.Collector {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_server_version",
		Help: "Which version is running. 1 for 'server_version' label with current version."}, []string{"server_version"})
	info.WithLabelValues(Version).Set(1)
	goVersion := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_server_go_version",
		Help: "Which Go version server is running with. 1 for 'server_go_version' label with current version."}, []string{"server_go_version"})
	goVersion.WithLabelValues(runtime.Version()).Set(1)
	id := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_server_id",
		Help: "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID."}, []string{"server_id"})
	id.WithLabelValues(fmt.Sprintf("%x", s.cfg.MemberID)).Set(1)
	cluster := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_cluster_version",
		Help: "Which version is running. 1 for 'cluster_version' label with current cluster version"}, []string{"cluster_version"})
	cluster.WithLabelValues(version.Cluster(Version)).Set(1)
	return multi{info, goVersion, id, cluster}
}

// multi is several collectors registered as one.
type multi []prometheus.Collector

func (cs multi) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs multi) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

var (
	descProposalsCommitted = prometheus.NewDesc("etcd_server_proposals_committed_total",
		"The total number of consensus proposals committed.", nil, nil)
	descProposalsApplied = prometheus.NewDesc("etcd_server_proposals_applied_total",
		"The total number of consensus proposals applied.", nil, nil)
	descProposalsPending = prometheus.NewDesc("etcd_server_proposals_pending",
		"The current number of pending proposals to commit.", nil, nil)
	descCurrentRev = prometheus.NewDesc("etcd_debugging_mvcc_current_revision",
		"The current revision of store.", nil, nil)
	descCompactRev = prometheus.NewDesc("etcd_debugging_mvcc_compact_revision",
		"The revision of the last compaction in store.", nil, nil)
	descKeys = prometheus.NewDesc("etcd_debugging_mvcc_keys_total",
		"Total number of keys.", nil, nil)
	descEtcdWatchers = prometheus.NewDesc("etcd_debugging_mvcc_watcher_total",
		"Total number of watchers.", nil, nil)
	descWatchStreams = prometheus.NewDesc("etcd_debugging_mvcc_watch_stream_total",
		"Total number of watch streams.", nil, nil)
	descIsLearner = prometheus.NewDesc("etcd_server_is_learner",
		"Whether or not this member is a learner. 1 if is, 0 otherwise.", nil, nil)
	descFDUsed  = prometheus.NewDesc("os_fd_used", "The number of used file descriptors.", nil, nil)
	descFDLimit = prometheus.NewDesc("os_fd_limit", "The file descriptor limit.", nil, nil)
)

// etcdNode reports etcd's gauges of the raft log and the store, read at
// scrape time: the leader's dealt revisions stand for raft's committed
// index, its commit point for the applied index. A follower reports the
// commit point it last learned for both, and nothing pending.
type etcdNode struct {
	s    *Server
	keys scanCache
}

func (c *etcdNode) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProposalsCommitted, descProposalsApplied, descProposalsPending,
		descCurrentRev, descCompactRev, descKeys, descEtcdWatchers, descWatchStreams, descIsLearner, descFDUsed, descFDLimit} {
		ch <- d
	}
}

func (c *etcdNode) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	status := s.drv.Status()
	st, pending, compacted := status.Stats, status.InFlight, status.Compacted
	if !status.Leading {
		st.Dealt = status.Committed
		st.Committed = st.Dealt
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descProposalsCommitted, float64(st.Dealt))
	gauge(descProposalsApplied, float64(st.Committed))
	gauge(descProposalsPending, float64(pending+st.LatchWaiting))
	gauge(descCurrentRev, float64(st.Committed))
	gauge(descCompactRev, float64(compacted))
	watchers, streams := s.drv.WatchCounts()
	gauge(descEtcdWatchers, float64(watchers))
	gauge(descWatchStreams, float64(streams))
	gauge(descIsLearner, 0) // every instance can lead
	if keys, ok := c.keys.get(func() (int64, bool) { return s.countKeys() }); ok {
		gauge(descKeys, float64(keys))
	}
	// etcd's own readers, which etcd reads every 10 minutes; a scrape
	// reads them here, and an error (not Linux) leaves the two out.
	if used, err := etcdruntime.FDUsage(); err == nil {
		gauge(descFDUsed, float64(used))
	}
	if limit, err := etcdruntime.FDLimit(); err == nil {
		gauge(descFDLimit, float64(limit))
	}
}

// countKeys counts the keys alive at the commit point, as a count-only
// range over every key does.
func (s *Server) countKeys() (int64, bool) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	txn, c, compacted, err := s.snapshot(ctx, true)
	if err != nil {
		return 0, false
	}
	defer txn.Rollback()
	resp, err := core.Range(storage.NewReader(txn), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true}, c, compacted)
	if err != nil {
		return 0, false
	}
	return resp.Count, true
}

// scanCache keeps the result of a scan that is too costly for every
// scrape: it runs again at most every scanEvery, and at most every
// scanDuty times its last run took (at most 1/20 of a core).
type scanCache struct {
	mu   sync.Mutex
	next time.Time
	v    int64
	ok   bool
}

const (
	scanEvery = 5 * time.Second
	scanDuty  = 20
)

func (c *scanCache) get(scan func() (int64, bool)) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	if start.Before(c.next) {
		return c.v, c.ok
	}
	v, ok := scan()
	if ok || !c.ok {
		c.v, c.ok = v, ok
	}
	c.next = start.Add(max(scanEvery, scanDuty*time.Since(start)))
	return c.v, c.ok
}

var (
	descDBSize = prometheus.NewDesc("etcd_mvcc_db_total_size_in_bytes",
		"Total size of the underlying database physically allocated in bytes.", nil, nil)
	descDBInUse = prometheus.NewDesc("etcd_mvcc_db_total_size_in_use_in_bytes",
		"Total size of the underlying database logically in use in bytes.", nil, nil)
	descQuota = prometheus.NewDesc("etcd_server_quota_backend_bytes",
		"Current backend storage quota size in bytes.", nil, nil)
)

// etcdSpace reports the space the data takes, the part of it in use and
// the quota, as Status does; only where Axon measures the space
// (Badger's data directory, or an engine's own Size).
type etcdSpace struct{ s *Server }

func (c *etcdSpace) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDBSize
	ch <- descDBInUse
	ch <- descQuota
}

func (c *etcdSpace) Collect(ch chan<- prometheus.Metric) {
	if sp := c.s.space; sp.q.Dir == "" && sp.size == nil {
		return
	}
	size, inUse, ok := c.s.dbSize()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(descDBSize, prometheus.GaugeValue, float64(size))
	if inUse >= 0 {
		ch <- prometheus.MustNewConstMetric(descDBInUse, prometheus.GaugeValue, float64(inUse))
	}
	if q := c.s.space.quota(); q > 0 {
		ch <- prometheus.MustNewConstMetric(descQuota, prometheus.GaugeValue, float64(q))
	}
}

// dbSize is the space the data takes and the part of it in use (-1: the
// engine cannot tell). In use never exceeds the size: the estimate counts
// bytes as written, the size as stored (compressed, in whole blocks).
func (s *Server) dbSize() (size, inUse int64, ok bool) {
	size, err := s.space.used()
	if err != nil {
		return 0, 0, false
	}
	inUse = -1
	if iu, ok := s.eng.(storage.InUser); ok {
		inUse = min(iu.InUse(), size)
	}
	return size, inUse, true
}

// ObserveHealth counts one answer of /health (etcd's health_success and
// health_failures).
func (s *Server) ObserveHealth(healthy bool) {
	if healthy {
		s.metrics.etcd.healthSuccess.Inc()
	} else {
		s.metrics.etcd.healthFailures.Inc()
	}
}

// ObserveCheck records one named check of /livez or /readyz (kind
// livez or readyz), as etcd's healthcheck and healthchecks_total do.
func (s *Server) ObserveCheck(kind, name string, passed bool) {
	status, v := "success", 1.0
	if !passed {
		status, v = "error", 0
	}
	s.metrics.etcd.healthCheck.WithLabelValues(kind, name).Set(v)
	s.metrics.etcd.healthChecks.WithLabelValues(kind, name, status).Inc()
}

// unary counts each call as countKV and countFailedProposal do, after
// the gRPC families' interceptor has counted it.
func (e *etcdMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		e.countKV(ctx, req, resp)
	} else {
		_, method := splitMethod(info.FullMethod)
		e.countFailedProposal(ctx, method, codeOf(err))
	}
	return resp, err
}

// countKV counts a client's KV call as etcd's mvcc counters do (and its
// lease grants and revokes as etcd's lessor does): each
// range, put and delete-range it ran (a txn's compares are ranges, its
// executed branch's operations count one by one), and a txn of more than
// one operation. Calls another instance forwarded are counted where the
// client sent them.
func (e *etcdMetrics) countKV(ctx context.Context, req, resp any) {
	if forwarded(ctx) {
		return
	}
	switch r := resp.(type) {
	case *pb.RangeResponse:
		e.rangeTotal.Inc()
	case *pb.PutResponse:
		e.putTotal.Inc()
	case *pb.DeleteRangeResponse:
		e.deleteTotal.Inc()
	case *pb.LeaseGrantResponse:
		e.leaseGranted.Inc()
		e.leaseTTL.Observe(float64(r.TTL))
	case *pb.LeaseRevokeResponse:
		e.leaseRevoked.Inc()
	case *pb.TxnResponse:
		var ops [3]int
		if t, ok := req.(*pb.TxnRequest); ok {
			ops[0] = len(t.Compare)
		}
		countOps(r.Responses, &ops)
		e.rangeTotal.Add(float64(ops[0]))
		e.putTotal.Add(float64(ops[1]))
		e.deleteTotal.Add(float64(ops[2]))
		if ops[0]+ops[1]+ops[2] > 1 {
			e.txnTotal.Inc()
		}
	}
}

// countOps adds the ranges, puts and deletes of a txn's executed branch.
func countOps(rs []*pb.ResponseOp, ops *[3]int) {
	for _, r := range rs {
		switch op := r.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			ops[0]++
		case *pb.ResponseOp_ResponsePut:
			ops[1]++
		case *pb.ResponseOp_ResponseDeleteRange:
			ops[2]++
		case *pb.ResponseOp_ResponseTxn:
			countOps(op.ResponseTxn.Responses, ops)
		}
	}
}

// writeMethods are the calls that propose a change (etcd's proposals).
var writeMethods = map[string]bool{
	"Put": true, "DeleteRange": true, "Txn": true, "Compact": true,
	"LeaseGrant": true, "LeaseRevoke": true,
}

// countFailedProposal counts a write that failed for want of the leader
// or the engine (etcd: a proposal raft refused or that timed out), not one
// refused for its content.
func (e *etcdMetrics) countFailedProposal(ctx context.Context, method string, code codes.Code) {
	if !writeMethods[method] || forwarded(ctx) {
		return
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Internal, codes.Unknown:
		e.proposalsFailed.Inc()
	}
}

// observeRun counts a write's engine transaction that took longer than
// etcd's apply warning.
func (e *etcdMetrics) observeRun(kind core.WorkKind, d time.Duration) {
	if d > slowApplyAfter && (kind == core.WorkRequest || kind == core.WorkBatch) {
		e.slowApply.Inc()
	}
}

// observeReadIndex counts a read index asked of the leader.
func (e *etcdMetrics) observeReadIndex(d time.Duration, err error) {
	if err != nil {
		e.readIndexFailed.Inc()
	}
	if d > slowReadIndexAfter {
		e.slowReadIndex.Inc()
	}
}
