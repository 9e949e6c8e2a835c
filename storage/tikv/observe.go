package tikv

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tikv/client-go/v2/metrics"

	"github.com/axon-kv/axon/storage"
)

var (
	_ storage.CommitObserver = (*Engine)(nil)
	_ storage.MetricsSource  = (*Engine)(nil)
)

// ObserveCommits reports each Commit: the two-phase commit's prewrite,
// commit timestamp and commit RPCs.
func (e *Engine) ObserveCommits(f func(time.Duration)) { e.observers.commits.Add(f) }

func (e *Engine) observeCommit(start time.Time) {
	if fs := e.observers.commits.Load(); fs != nil {
		d := time.Since(start)
		for _, f := range fs {
			f(d)
		}
	}
}

// Collectors are client-go's own metrics of the RPCs it sends, under
// its names (TiDB's dashboards read them): RPCs by type and store with
// their latency (tikv_client_go_request_seconds), region errors by type
// (tikv_client_go_region_err_total), RPC errors, backoffs and
// transaction commands. client-go keeps them process-wide, so they
// count every engine of the process.
func (e *Engine) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		metrics.TiKVSendReqHistogram, metrics.TiKVRegionErrorCounter, metrics.TiKVRPCErrorCounter,
		metrics.TiKVBackoffHistogram, metrics.TiKVTxnCmdHistogram,
	}
}
