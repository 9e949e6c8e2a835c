package tikv

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTraceCollectorExportsCounts: what the Collector serves is what
// axon-bench parses, under the names declared here.
func TestTraceCollectorExportsCounts(t *testing.T) {
	tr := NewTrace(0)
	tr.start("Get", false)
	tr.start(TSO, false) // overlaps the Get: no new step
	tr.end(false)
	tr.end(false)
	tr.start(CommitSecondary, true) // background: no step
	want := `
# HELP axon_tikv_rpcs_total TiKV RPCs and PD timestamp calls sent, by type.
# TYPE axon_tikv_rpcs_total counter
axon_tikv_rpcs_total{type="CommitSecondary"} 1
axon_tikv_rpcs_total{type="Get"} 1
axon_tikv_rpcs_total{type="TSO"} 1
# HELP axon_tikv_steps_total Times the TiKV and PD calls in flight rose from none.
# TYPE axon_tikv_steps_total counter
axon_tikv_steps_total 1
# HELP axon_tikv_write_txns_total Transactions that sent a Prewrite.
# TYPE axon_tikv_write_txns_total counter
axon_tikv_write_txns_total 0
`
	if err := testutil.CollectAndCompare(tr.Collector(), strings.NewReader(want), MetricRPCs, MetricSteps, MetricWriteTxns); err != nil {
		t.Error(err)
	}
}
