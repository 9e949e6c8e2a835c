package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/tikv"
)

// The testing store --store tikv-mock: Axon over client-go's in-process
// TiKV cluster (storage/tikv NewMock), every TiKV RPC and PD timestamp
// call delayed by --tikv-rpc-delay, the latest and history spaces cut
// into --tikv-regions regions each. Its data lives in memory and dies
// with the process. `axon-bench --store tikv-mock` runs it to count the
// round trips of each operation; the counts are served on the metrics
// listener at tikv.TraceMetricsPath.

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
	reg.MustRegister(tr.Collector())
	mux.Handle(tikv.TraceMetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Warn("serving from an in-process mock TiKV: data is lost at exit", "rpc-delay", f.rpcDelay, "regions", f.regions)
	return eng, true, nil
}
