package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axon-kv/axon/cmd/axon/internal/bench"
	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/tikv"
)

// The testing store --store tikv-mock: Axon over client-go's in-process
// TiKV cluster (storage/tikv NewMock), every TiKV RPC and PD timestamp
// call delayed by --tikv-rpc-delay, the latest and history spaces cut
// into --tikv-regions regions each. Its data lives in memory and dies
// with the process. `axon bench --store tikv-mock` runs it to count the
// round trips of each operation; the counts are served on the metrics
// listener at TiKVMockMetricsPath.

// TiKVMockMetricsPath serves the tikv-mock store's RPC counts in the
// Prometheus text format:
//
//	axon_tikv_rpcs_total{type}            RPCs by type (tikvrpc names; TSO
//	                                      for PD timestamps; CommitSecondary
//	                                      for commits of secondary keys)
//	axon_tikv_steps_total                 times the calls in flight rose
//	                                      from none (background secondary
//	                                      commits left out)
//	axon_tikv_write_txns_total            transactions that sent a Prewrite
//	axon_tikv_region_write_txns_total{region,space}
//	                                      of those, the ones that prewrote
//	                                      to the region (space: the Axon
//	                                      key space tag of its first key)
const TiKVMockMetricsPath = "/metrics/tikv"

type tikvMockFlags struct {
	rpcDelay time.Duration
	regions  int
}

// register adds the flags, hidden: the store is for benchmarks only.
func (f *tikvMockFlags) register(fl *pflag.FlagSet) {
	fl.DurationVar(&f.rpcDelay, "tikv-rpc-delay", 0, "with --store tikv-mock: delay added to every TiKV RPC and PD timestamp call")
	fl.IntVar(&f.regions, "tikv-regions", 1, "with --store tikv-mock: regions per key space (latest, history)")
	_ = fl.MarkHidden("tikv-rpc-delay")
	_ = fl.MarkHidden("tikv-regions")
}

// openTiKVMock opens the mock and serves its counts on mux. The mock is
// this process's alone, so it is exclusive.
func openTiKVMock(f tikvMockFlags, mux *http.ServeMux, log *slog.Logger) (storage.Engine, bool, error) {
	if f.rpcDelay < 0 || f.regions < 1 {
		return nil, false, fmt.Errorf("--tikv-rpc-delay %v, --tikv-regions %d: want a delay >= 0 and regions >= 1", f.rpcDelay, f.regions)
	}
	tr := tikv.NewTrace(f.rpcDelay)
	eng, err := tikv.NewMock(tikv.MockOptions{Regions: f.regions, Layout: core.RegionSplits, WrapClient: tr.WrapClient, WrapPD: tr.WrapPD})
	if err != nil {
		return nil, false, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(traceCollector{tr})
	mux.Handle(TiKVMockMetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Warn("serving from an in-process mock TiKV: data is lost at exit", "rpc-delay", f.rpcDelay, "regions", f.regions)
	return eng, true, nil
}

var (
	descRPCs      = prometheus.NewDesc("axon_tikv_rpcs_total", "TiKV RPCs and PD timestamp calls sent, by type.", []string{"type"}, nil)
	descSteps     = prometheus.NewDesc("axon_tikv_steps_total", "Times the TiKV and PD calls in flight rose from none.", nil, nil)
	descTxns      = prometheus.NewDesc("axon_tikv_write_txns_total", "Transactions that sent a Prewrite.", nil, nil)
	descRegionTxn = prometheus.NewDesc("axon_tikv_region_write_txns_total", "Transactions that sent a Prewrite to the region.", []string{"region", "space"}, nil)
)

// traceCollector reads the counters at each scrape.
type traceCollector struct{ tr *tikv.Trace }

func (c traceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRPCs
	ch <- descSteps
	ch <- descTxns
	ch <- descRegionTxn
}

func (c traceCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.tr.Counts()
	for typ, v := range n.RPCs {
		ch <- prometheus.MustNewConstMetric(descRPCs, prometheus.CounterValue, float64(v), typ)
	}
	ch <- prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(n.Steps))
	ch <- prometheus.MustNewConstMetric(descTxns, prometheus.CounterValue, float64(n.WriteTxns))
	for id, r := range n.Regions {
		ch <- prometheus.MustNewConstMetric(descRegionTxn, prometheus.CounterValue, float64(r.Txns), strconv.FormatUint(id, 10), string(r.Space))
	}
}

// tikvBenchFlags choose bench's TiKV round-trip benchmark.
type tikvBenchFlags struct {
	store string
	tikvMockFlags
}

func (f *tikvBenchFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.store, "store", "", "tikv-mock: instead of comparing with etcd, count the TiKV round trips of Axon's requests over an in-process mock TiKV (--tikv-rpc-delay, --tikv-regions)")
	fl.DurationVar(&f.rpcDelay, "tikv-rpc-delay", time.Millisecond, "with --store tikv-mock: delay added to every TiKV RPC and PD timestamp call")
	fl.IntVar(&f.regions, "tikv-regions", 16, "with --store tikv-mock: regions per key space (latest, history)")
}

// runTiKVBench runs `axon bench --store tikv-mock`: create, update,
// failed-cas and get at 1 and 64 clients unless --workloads and
// --clients say otherwise.
func runTiKVBench(ctx context.Context, cmd *cobra.Command, f benchFlags, o bench.Options) error {
	if f.tikv.store != "tikv-mock" {
		return fmt.Errorf("--store %q: want tikv-mock", f.tikv.store)
	}
	t := bench.TiKVOptions{RPCDelay: f.tikv.rpcDelay, Regions: f.tikv.regions}
	if cmd.Flags().Changed("workloads") {
		t.Workloads = o.Workloads
	}
	if !cmd.Flags().Changed("clients") {
		o.Clients = []int{1, 64}
	}
	rep, err := bench.RunTiKV(ctx, o, t)
	if rep != nil {
		err = writeReport(cmd, f.jsonPath, o.Log, rep, rep.Seconds, err)
	}
	return err
}
