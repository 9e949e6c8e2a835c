package tikv

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// TraceMetricsPath is where `axon serve --store tikv-mock` serves its
// Trace's Collector on the metrics listener, in the Prometheus text
// format. The server writes these counts and axon-bench reads them back;
// both take the path and the names below from here.
const TraceMetricsPath = "/metrics/tikv"

// The metrics of a Trace's Collector.
const (
	// MetricRPCs counts RPCs by type (label "type": tikvrpc names, TSO
	// for PD timestamps, CommitSecondary for commits of secondary keys).
	MetricRPCs = "axon_tikv_rpcs_total"
	// MetricSteps counts the times the calls in flight rose from none
	// (background secondary commits left out).
	MetricSteps = "axon_tikv_steps_total"
	// MetricWriteTxns counts the transactions that sent a Prewrite.
	MetricWriteTxns = "axon_tikv_write_txns_total"
	// MetricRegionWriteTxns counts, of those, the ones that prewrote to
	// the region (labels "region", and "space": the Axon key space tag
	// of its first key).
	MetricRegionWriteTxns = "axon_tikv_region_write_txns_total"
)

var (
	descRPCs      = prometheus.NewDesc(MetricRPCs, "TiKV RPCs and PD timestamp calls sent, by type.", []string{"type"}, nil)
	descSteps     = prometheus.NewDesc(MetricSteps, "Times the TiKV and PD calls in flight rose from none.", nil, nil)
	descTxns      = prometheus.NewDesc(MetricWriteTxns, "Transactions that sent a Prewrite.", nil, nil)
	descRegionTxn = prometheus.NewDesc(MetricRegionWriteTxns, "Transactions that sent a Prewrite to the region.", []string{"region", "space"}, nil)
)

// Collector exports t's counters, read at each scrape.
func (t *Trace) Collector() prometheus.Collector { return traceCollector{t} }

type traceCollector struct{ t *Trace }

func (c traceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRPCs
	ch <- descSteps
	ch <- descTxns
	ch <- descRegionTxn
}

func (c traceCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.t.Counts()
	for typ, v := range n.RPCs {
		ch <- prometheus.MustNewConstMetric(descRPCs, prometheus.CounterValue, float64(v), typ)
	}
	ch <- prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(n.Steps))
	ch <- prometheus.MustNewConstMetric(descTxns, prometheus.CounterValue, float64(n.WriteTxns))
	for id, r := range n.Regions {
		ch <- prometheus.MustNewConstMetric(descRegionTxn, prometheus.CounterValue, float64(r.Txns), strconv.FormatUint(id, 10), string(r.Space))
	}
}
