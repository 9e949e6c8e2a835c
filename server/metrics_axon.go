package server

import (
	rtmetrics "runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// axonMetrics are Axon's own families, for what etcd has no name for.
type axonMetrics struct {
	// groupTxns is how many transactions one engine sync carried
	// (Badger's group commit).
	groupTxns prometheus.Histogram
	// batchRequests is how many requests on overlapping keys one engine
	// transaction ran (core.WorkBatch).
	batchRequests prometheus.Histogram
	// work counts engine transactions by kind (fences, sweeps, ...),
	// indexed by core.WorkKind.
	work [core.WorkBatch + 1]prometheus.Counter
	// sweptRecords counts the records compaction sweeps deleted.
	sweptRecords prometheus.Counter
	// slowWatchers counts watches canceled for falling too far behind.
	slowWatchers prometheus.Counter
	// feedEventsSent counts the events this leader sent to the other
	// instances' watch hubs (driver/feed.go).
	feedEventsSent prometheus.Counter
}

func newAxonMetrics(s *Server, reg *prometheus.Registry) *axonMetrics {
	a := &axonMetrics{
		groupTxns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "axon_engine_group_transactions",
			Help:    "Transactions written by one engine sync (Badger's group commit: one write and one fsync for all).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		batchRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "axon_batch_requests",
			Help:    "Requests on overlapping keys run in one engine transaction, in revision order, after waiting in their latches.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 7), // 1 .. 64, the most one batch takes
		}),
		sweptRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "axon_compaction_swept_records_total",
			Help: "Engine records (superseded versions, tombstones, revision records) deleted by compaction sweeps.",
		}),
		slowWatchers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "axon_watch_slow_canceled_total",
			Help: "Watches canceled because their stream held too many unsent responses (the client resumes from its revision).",
		}),
		feedEventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "axon_watch_feed_events_sent_total",
			Help: "Events this instance sent, as leader, to the other instances' watch feeds (each event once per instance, whatever its watchers).",
		}),
	}
	work := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "axon_engine_work_total",
		Help: "Engine transactions that write, by kind: request, batch, fence (settles an uncertain revision), compact, sweep, election, alarm.",
	}, []string{"kind"})
	for k := core.WorkRequest; k <= core.WorkBatch; k++ {
		if k != core.WorkCatchUp && k != core.WorkRecover { // reads, not run through driver.Run
			a.work[k] = work.WithLabelValues(k.String())
		}
	}
	reg.MustRegister(a.groupTxns, a.batchRequests, work, a.sweptRecords, a.slowWatchers, a.feedEventsSent, &axonNode{s: s})
	if c, ok := s.eng.(storage.MetricsSource); ok {
		reg.MustRegister(c.Collectors()...)
	}
	return a
}

// observeRun records one work item's engine transaction.
func (a *axonMetrics) observeRun(w *core.Work, eff *core.Effects, out core.Outcome) {
	if int(w.Kind) < len(a.work) && a.work[w.Kind] != nil {
		a.work[w.Kind].Inc()
	}
	switch w.Kind {
	case core.WorkBatch:
		a.batchRequests.Observe(float64(len(w.Batch)))
	case core.WorkSweep:
		if out == core.Committed && eff != nil {
			a.sweptRecords.Add(float64(len(eff.Writes)))
		}
	}
}

var (
	descUncertain = prometheus.NewDesc("axon_uncertain_revisions",
		"Revisions whose engine commit had an unknown outcome, waiting for their fence to settle them (they hold the commit point back).", nil, nil)
	descLatchWaiting = prometheus.NewDesc("axon_latch_waiting_requests",
		"Write requests waiting, undealt, for an earlier request on an overlapping key to finish.", nil, nil)
	descRingEvents = prometheus.NewDesc("axon_watch_ring_events",
		"Events held in the leader's ring of recent events (watchers near the head are served from it).", nil, nil)
	descRingBytes = prometheus.NewDesc("axon_watch_ring_bytes",
		"Bytes the ring's events hold (keys, values, previous values), bounded by --watch-cache-bytes.", nil, nil)
	descRingEvicted = prometheus.NewDesc("axon_watch_ring_evicted_total",
		"Events the ring dropped for room since this instance last became leader (watchers behind them read the engine).", nil, nil)
	descSweepTarget = prometheus.NewDesc("axon_compaction_sweep_target_revision",
		"The compact revision the compaction sweep works towards.", nil, nil)
	descSweepDone = prometheus.NewDesc("axon_compaction_sweep_done_revision",
		"The compact revision whose sweep finished: nothing it made unreachable is left in the engine.", nil, nil)
	descBudget = prometheus.NewDesc("axon_memory_budget_bytes",
		"The memory budget (--memory-budget-bytes, GOMEMLIMIT or 3/4 of the cgroup's limit); 0: none.", nil, nil)
	descKeyCacheHits = prometheus.NewDesc("axon_key_cache_hits_total",
		"Writes' reads of a key's latest record the leader's key cache answered, sparing an engine read (since this instance started).", nil, nil)
	descKeyCacheMisses = prometheus.NewDesc("axon_key_cache_misses_total",
		"Writes' reads of a key's latest record the key cache could not answer: they read the engine.", nil, nil)
	descKeyCacheEvicted = prometheus.NewDesc("axon_key_cache_evicted_total",
		"Keys the key cache dropped for room (--key-cache-bytes).", nil, nil)
	descKeyCacheEntries = prometheus.NewDesc("axon_key_cache_entries",
		"Keys whose latest record the leader's key cache holds.", nil, nil)
	descKeyCacheBytes = prometheus.NewDesc("axon_key_cache_bytes",
		"Bytes the key cache counts against --key-cache-bytes.", nil, nil)
	descMemUsed = prometheus.NewDesc("axon_memory_used_bytes",
		"Memory the Go runtime holds from the OS, less what it released: what the budget (Go's soft limit) bounds.", nil, nil)
)

// axonNode reports Axon's gauges, read under the server's lock at scrape
// time (core.Stats), so serving requests costs nothing for them.
type axonNode struct{ s *Server }

func (c *axonNode) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUncertain, descLatchWaiting, descRingEvents, descRingBytes, descRingEvicted,
		descSweepTarget, descSweepDone, descBudget, descMemUsed,
		descKeyCacheHits, descKeyCacheMisses, descKeyCacheEvicted, descKeyCacheEntries, descKeyCacheBytes} {
		ch <- d
	}
}

func (c *axonNode) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	if s := c.s.drv.Status(); s.Leading {
		st := s.Stats
		gauge(descUncertain, float64(st.Uncertain))
		gauge(descLatchWaiting, float64(st.LatchWaiting))
		gauge(descRingEvents, float64(st.RingEvents))
		gauge(descRingBytes, float64(st.RingBytes))
		ch <- prometheus.MustNewConstMetric(descRingEvicted, prometheus.CounterValue, float64(st.RingEvicted))
		gauge(descSweepTarget, float64(st.SweepTo))
		gauge(descSweepDone, float64(st.SweepDone))
	}
	kc := c.s.drv.KeyCacheStats()
	ch <- prometheus.MustNewConstMetric(descKeyCacheHits, prometheus.CounterValue, float64(kc.Hits))
	ch <- prometheus.MustNewConstMetric(descKeyCacheMisses, prometheus.CounterValue, float64(kc.Misses))
	ch <- prometheus.MustNewConstMetric(descKeyCacheEvicted, prometheus.CounterValue, float64(kc.Evicted))
	gauge(descKeyCacheEntries, float64(kc.Entries))
	gauge(descKeyCacheBytes, float64(kc.Bytes))
	gauge(descBudget, float64(max(c.s.cfg.MemoryBudget, 0)))
	gauge(descMemUsed, float64(goMemoryUsed()))
}

// goMemoryUsed is what Go's soft memory limit counts.
func goMemoryUsed() uint64 {
	sample := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(sample)
	return sample[0].Value.Uint64() - sample[1].Value.Uint64()
}
