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
	store       string
	rpcDelay    time.Duration
	regions     int
	watchFanout int
}

func (f *tikvBenchFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.store, "store", "", "tikv-mock: instead of comparing with etcd, count the TiKV round trips of Axon's requests over an in-process mock TiKV (--tikv-rpc-delay, --tikv-regions); "+
		"tikv-cluster: compare with etcd Axon as production runs it, three axon serve --store tikv processes over one axon-bench tikv-server endpoint, and count the calls to the endpoint per request (--tikv-rpc-delay)")
	fl.DurationVar(&f.rpcDelay, "tikv-rpc-delay", 0, "with --store tikv-mock: delay added to every TiKV RPC and PD timestamp call (default 1ms); "+
		"with tikv-cluster: the endpoint's --rpc-delay, waited before it answers each PD and TiKV request (default 0)")
	fl.IntVar(&f.regions, "tikv-regions", 16, "with --store tikv-mock: regions per key space (latest, history)")
	fl.IntVar(&f.watchFanout, "watch-fanout", 0, "with --store tikv-cluster: instead of the workloads, open this many prefix watches with prev_kv, watcher i pinned to instance i%3, "+
		"write --ops events (default 5000, within --max-time, default 2m) through every instance and report the events each instance sends and its CPU per committed event (axon only)")
}

// runTiKVBench runs `axon-bench --store tikv-mock` or `--store
// tikv-cluster`: create, update, failed-cas and get unless --workloads
// says otherwise, at 1 and 64 clients (tikv-mock) or 64 (tikv-cluster)
// unless --clients does.
func runTiKVBench(ctx context.Context, cmd *cobra.Command, f benchFlags, o bench.Options) error {
	fl := cmd.Flags()
	var workloads []string
	if fl.Changed("workloads") {
		workloads = o.Workloads
	}
	switch f.tikv.store {
	case "tikv-mock":
		t := bench.TiKVOptions{RPCDelay: f.tikv.rpcDelay, Regions: f.tikv.regions, Workloads: workloads}
		if !fl.Changed("tikv-rpc-delay") {
			t.RPCDelay = time.Millisecond
		}
		if !fl.Changed("clients") {
			o.Clients = []int{1, 64}
		}
		rep, err := bench.RunTiKV(ctx, o, t)
		if rep != nil {
			err = writeReport(cmd, f.jsonPath, o.Log, rep, rep.Seconds, err)
		}
		return err
	case "tikv-cluster":
		if fl.Changed("tikv-regions") {
			return fmt.Errorf("--tikv-regions is for --store tikv-mock; the tikv-cluster endpoint serves one region")
		}
		c := bench.ClusterOptions{RPCDelay: f.tikv.rpcDelay, Workloads: workloads, WatchFanout: f.tikv.watchFanout}
		if !fl.Changed("clients") && !f.quick {
			o.Clients = []int{64}
		}
		if c.WatchFanout != 0 {
			if workloads != nil {
				return fmt.Errorf("--watch-fanout runs instead of the workloads: drop --workloads")
			}
			if !fl.Changed("systems") {
				o.Systems = []string{"axon"}
			}
			if !fl.Changed("ops") && !f.quick {
				o.Ops = 5000
			}
			if !fl.Changed("max-time") && !f.quick {
				o.MaxTime = 2 * time.Minute
			}
		}
		rep, err := bench.RunCluster(ctx, o, c)
		if rep != nil {
			err = writeReport(cmd, f.jsonPath, o.Log, rep, rep.Seconds, err)
		}
		return err
	}
	return fmt.Errorf("--store %q: want tikv-mock or tikv-cluster", f.tikv.store)
}
