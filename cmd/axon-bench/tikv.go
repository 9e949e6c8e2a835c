package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axon-kv/axon/cmd/axon-bench/internal/bench"
)

// tikvBenchFlags choose the TiKV round-trip benchmark.
type tikvBenchFlags struct {
	store    string
	rpcDelay time.Duration
	regions  int
}

func (f *tikvBenchFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.store, "store", "", "tikv-mock: instead of comparing with etcd, count the TiKV round trips of Axon's requests over an in-process mock TiKV (--tikv-rpc-delay, --tikv-regions)")
	fl.DurationVar(&f.rpcDelay, "tikv-rpc-delay", time.Millisecond, "with --store tikv-mock: delay added to every TiKV RPC and PD timestamp call")
	fl.IntVar(&f.regions, "tikv-regions", 16, "with --store tikv-mock: regions per key space (latest, history)")
}

// runTiKVBench runs `axon-bench --store tikv-mock`: create, update,
// failed-cas and get at 1 and 64 clients unless --workloads and
// --clients say otherwise. The mock runs in `axon serve --store
// tikv-mock`.
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
