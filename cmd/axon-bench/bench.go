package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/axon-kv/axon/cmd/axon-bench/internal/bench"
)

type benchFlags struct {
	quick     bool
	scale     string
	memoryMiB int64
	// keysMemoryMiB is --keys-memory-limit-mib.
	keysMemoryMiB int64
	jsonPath      string
	axonBin       string
	tikv          tikvBenchFlags
}

// newBenchCmd returns the command and what its flags fill in.
func newBenchCmd() (*cobra.Command, *benchFlags, *bench.Options) {
	var (
		f benchFlags
		o = bench.Default()
	)
	cmd := &cobra.Command{
		Use:   "axon-bench",
		Short: "Compare Axon with a real etcd 3.7 on Kubernetes-shaped workloads, one after the other on this machine",
		Long: `axon-bench starts Axon (axon serve, from the axon binary beside axon-bench,
else on PATH, or --axon-binary) and then a real etcd (axon-bench
etcd-reference: etcd embedded, its defaults, fsync on), each in its own
process on 127.0.0.1 and a fresh data dir, drives both with the same
clientv3 workloads and prints one table with the ratios Axon/etcd.
Progress goes to stderr. --quick is a smoke run of seconds; --scale 1m adds
peak RSS and restart time with one million keys.

--scale lists runs instead the scale scenarios, each system in a memory
cgroup of --memory-limit-mib (needs root; 0: no cgroup): lists is 16
unpaginated LISTs of 100,000 objects of 1 KiB while 64 clients create;
storm is 5,000 clients connecting at once, each listing and watching its
namespace, while 64 clients create in the namespaces; churn is 30 minutes of
create/update/delete over 100,000 objects with a compaction every 5 minutes,
then a defragmentation under the same writes; keys loads 0.1, 1, 3 and 10
million keys of 1 KiB (etcd up to its 8 GiB quota) and measures gets,
namespace lists, compaction, restart, memory and disk at each.
With --quick each scenario takes well under a minute per system.

--store tikv-cluster compares etcd with Axon in production's shape: an
endpoint (axon-bench tikv-server: PD's and TiKV's gRPC over client-go's
mock store, in memory, one region, --tikv-rpc-delay before each answer)
and three axon serve --store tikv processes on it, all on this machine.
Both systems run create, update (a CAS at the client's last revision),
failed-cas and get at --clients (default 64), client i talking only to
instance i%3; the systems alternate for --runs runs. Besides ops/s and
latency it reports the calls to the endpoint per request by type (a call:
a unary gRPC call, a BatchCommands entry, or a request on PD's Tso or
QueryRegion stream), and with one client the sequential round trips; the
instances' background work (leadership renewals, presence records,
client-go's refreshes) counts too. A judged run:
  axon-bench --store tikv-cluster --clients 1,64 --tikv-rpc-delay 0
  axon-bench --store tikv-cluster --clients 1,64 --tikv-rpc-delay 500us

--watch-fanout N with --store tikv-cluster runs instead of the workloads,
on Axon only: N prefix watches with prev_kv, watcher i pinned to instance
i%3, see --ops writes (default 5000) made through every instance; it
reports the events each instance sent per committed event (its
etcd_debugging_mvcc_events_total plus axon_watch_feed_events_sent_total)
and its CPU per 1,000 events, the leader's apart, and the time until
every watcher had every event. E.g.:
  axon-bench --store tikv-cluster --watch-fanout 1000 --runs 2`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE:         func(cmd *cobra.Command, _ []string) error { return runBench(cmd, f, o) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Systems, "systems", o.Systems, "systems to run, in order: axon, etcd")
	fl.IntVar(&o.Runs, "runs", o.Runs, "runs per system, alternating axon and etcd; figures are the median run's, ratios the median of the runs' ratios with their spread")
	fl.StringSliceVar(&o.Workloads, "workloads", o.Workloads, fmt.Sprintf("workloads to run, of %v (--scale 1m adds memory)", bench.AllWorkloads))
	fl.IntSliceVar(&o.Clients, "clients", o.Clients, "concurrent clients of create, update, delete and get")
	fl.IntVar(&o.Conns, "conns", o.Conns, "gRPC connections the clients share")
	fl.IntVar(&o.Ops, "ops", o.Ops, "ops per workload and client count (upper bound)")
	fl.DurationVar(&o.MaxTime, "max-time", o.MaxTime, "time per workload and client count (upper bound)")
	fl.IntVar(&o.ValueSize, "value-size", o.ValueSize, "value bytes of create, update, delete, get, watch, memory and restart")
	fl.IntVar(&o.Keys, "keys", o.Keys, "preloaded keys that update and get pick from")
	fl.DurationVar(&o.OpTimeout, "op-timeout", o.OpTimeout, "deadline of one request")
	fl.IntSliceVar(&o.ListSizes, "list-sizes", o.ListSizes, "objects per list workload")
	fl.IntVar(&o.ListObjectSize, "list-object-size", o.ListObjectSize, "bytes per listed object")
	fl.IntVar(&o.ListPage, "list-page", o.ListPage, "limit per list page")
	fl.IntVar(&o.ListReps, "list-reps", o.ListReps, "full lists per size (upper bound)")
	fl.IntSliceVar(&o.Watchers, "watchers", o.Watchers, "watcher counts of the watch workload")
	fl.IntVar(&o.WatchRate, "watch-rate", o.WatchRate, "creates per second while watchers watch")
	fl.IntVar(&o.WatchEvents, "watch-events", o.WatchEvents, "creates per watcher count (upper bound)")
	fl.IntSliceVar(&o.HotClients, "hot-clients", o.HotClients, "client counts of the hotkey workload, a row each")
	fl.IntVar(&o.HotOps, "hot-ops", o.HotOps, "successful increments per hotkey row (upper bound)")
	fl.DurationVar(&o.HotTime, "hot-time", o.HotTime, "time per hotkey row (upper bound)")
	fl.DurationVar(&o.HotTimeout, "hot-timeout", o.HotTimeout, "deadline of one Get or Txn of hotkey")
	fl.IntVar(&o.MemoryKeys, "memory-keys", o.MemoryKeys, "keys loaded before reading peak RSS")
	fl.IntSliceVar(&o.RestartKeys, "restart-keys", o.RestartKeys, "keys stored before timing restarts")
	fl.IntVar(&o.RestartReps, "restart-reps", o.RestartReps, "restarts per key count")
	fl.IntVar(&o.LoadClients, "load-clients", o.LoadClients, "concurrent clients of preloads")
	fl.IntVar(&o.LoadBatch, "load-batch", o.LoadBatch, "puts per preload txn")
	fl.StringVar(&o.WorkDir, "work-dir", "", "where data dirs and server logs go (default: a temp dir, removed unless --keep)")
	fl.BoolVar(&o.Keep, "keep", false, "keep data dirs and server logs")
	fl.StringVar(&o.CPUProfileDir, "cpuprofile", "", "write a CPU profile of the Axon server per write workload to this dir")
	fl.StringArrayVar(&o.AxonFlags, "axon-flag", nil, "a flag to add to every axon serve, e.g. --axon-flag=--memory-budget-bytes=268435456 (repeatable)")
	fl.BoolVar(&o.TLS, "tls", false, "serve both systems' clients over TLS (a self-signed certificate made for the run)")
	fl.BoolVar(&f.quick, "quick", false, "a smoke configuration of seconds (flags given explicitly still apply)")
	fl.StringVar(&f.scale, "scale", "", fmt.Sprintf("1m: add memory (peak RSS) and restart with one million keys; or scale scenarios instead of the workloads, of %v", bench.AllScales))
	sc := &o.Scale
	fl.Int64Var(&f.memoryMiB, "memory-limit-mib", sc.MemoryLimit>>20, "scale scenarios: memory cgroup limit of each server in MiB (0: no cgroup)")
	fl.DurationVar(&sc.Before, "scale-before", sc.Before, "scale scenarios: writes alone before the expensive part (the baseline write p99)")
	fl.DurationVar(&sc.MaxTime, "scale-time", sc.MaxTime, "scale scenarios: time bound of the expensive part per system")
	fl.IntVar(&sc.Writers, "scale-writers", sc.Writers, "scale scenarios: concurrent writers")
	fl.IntVar(&sc.MaxWrites, "scale-max-writes", sc.MaxWrites, "scale scenarios: writes per system (upper bound)")
	fl.IntVar(&sc.ListObjects, "lists-objects", sc.ListObjects, "lists: objects in the listed prefix")
	fl.IntVar(&sc.ListObjectSize, "lists-object-size", sc.ListObjectSize, "lists: bytes per object and per write")
	fl.IntVar(&sc.Listers, "listers", sc.Listers, "lists: concurrent unpaginated lists")
	fl.IntVar(&sc.ListRounds, "list-rounds", sc.ListRounds, "lists: lists per lister")
	fl.IntVar(&sc.StormClients, "storm-clients", sc.StormClients, "storm: clients that connect at once")
	fl.IntVar(&sc.StormObjects, "storm-objects", sc.StormObjects, "storm: objects in each client's namespace")
	fl.DurationVar(&sc.StormAfter, "storm-after", sc.StormAfter, "storm: writes after every client is in, for write p99 to recover")
	fl.BoolVar(&sc.StormUnwatched, "storm-unwatched", false, "storm: the writers create outside the watched namespaces (a control: what write p99 does after the storm when its watchers get no event)")
	fl.IntVar(&sc.ChurnObjects, "churn-objects", sc.ChurnObjects, "churn: objects churned")
	fl.DurationVar(&sc.ChurnTime, "churn-time", sc.ChurnTime, "churn: how long, before the defragmentation")
	fl.DurationVar(&sc.ChurnWindow, "churn-window", sc.ChurnWindow, "churn: compaction interval, and the window of the figures")
	fl.BoolVar(&sc.ChurnWatch, "churn-watch", false, "churn: also run a kube-apiserver-like watcher: one watch with prev_kv over the whole churned prefix, reading every event")
	fl.IntSliceVar(&sc.KeysCounts, "keys-counts", sc.KeysCounts, "keys: key counts measured at, ascending")
	fl.Int64Var(&sc.Quota, "quota-bytes", sc.Quota, "churn: both systems' backend quota; keys: etcd's, Axon running without one (etcd's recommended maximum; the default of both is 2 GiB)")
	fl.IntVar(&sc.KeysNamespace, "keys-namespace", sc.KeysNamespace, "keys: objects per namespace, the list measured")
	fl.IntVar(&sc.KeysGets, "keys-gets", sc.KeysGets, "keys: point gets per key count (upper bound, with --max-time)")
	fl.Int64Var(&f.keysMemoryMiB, "keys-memory-limit-mib", sc.KeysMemoryLimit>>20, "keys: memory cgroup limit of the server in MiB (0: no cgroup; the goal is judged at 4096)")
	fl.IntVar(&sc.KeysLists, "keys-lists", sc.KeysLists, "keys: namespace lists per key count (upper bound, with --max-time)")
	fl.StringVar(&f.axonBin, "axon-binary", "", "the axon binary whose `axon serve` is measured (default: axon beside this binary, else on PATH), e.g. for A/B runs of two builds")
	fl.StringVar(&f.jsonPath, "json", "", "also write the results as JSON to this file (- for stdout)")
	f.tikv.register(fl)
	return cmd, &f, &o
}

// quickFlags copies Quick's value of each flag the user did not set.
var quickFlags = map[string]func(dst, src *bench.Options){
	"runs":         func(d, s *bench.Options) { d.Runs = s.Runs },
	"workloads":    func(d, s *bench.Options) { d.Workloads = s.Workloads },
	"clients":      func(d, s *bench.Options) { d.Clients = s.Clients },
	"ops":          func(d, s *bench.Options) { d.Ops = s.Ops },
	"max-time":     func(d, s *bench.Options) { d.MaxTime = s.MaxTime },
	"keys":         func(d, s *bench.Options) { d.Keys = s.Keys },
	"list-sizes":   func(d, s *bench.Options) { d.ListSizes = s.ListSizes },
	"list-page":    func(d, s *bench.Options) { d.ListPage = s.ListPage },
	"list-reps":    func(d, s *bench.Options) { d.ListReps = s.ListReps },
	"watchers":     func(d, s *bench.Options) { d.Watchers = s.Watchers },
	"watch-rate":   func(d, s *bench.Options) { d.WatchRate = s.WatchRate },
	"watch-events": func(d, s *bench.Options) { d.WatchEvents = s.WatchEvents },
	"hot-clients":  func(d, s *bench.Options) { d.HotClients = s.HotClients },
	"hot-ops":      func(d, s *bench.Options) { d.HotOps = s.HotOps },
	"hot-time":     func(d, s *bench.Options) { d.HotTime = s.HotTime },
	"memory-keys":  func(d, s *bench.Options) { d.MemoryKeys = s.MemoryKeys },
	"restart-keys": func(d, s *bench.Options) { d.RestartKeys = s.RestartKeys },
	"restart-reps": func(d, s *bench.Options) { d.RestartReps = s.RestartReps },
	"load-clients": func(d, s *bench.Options) { d.LoadClients = s.LoadClients },

	"memory-limit-mib": func(d, s *bench.Options) { d.Scale.MemoryLimit = s.Scale.MemoryLimit },
	"scale-before":     func(d, s *bench.Options) { d.Scale.Before = s.Scale.Before },
	"scale-time":       func(d, s *bench.Options) { d.Scale.MaxTime = s.Scale.MaxTime },
	"scale-writers":    func(d, s *bench.Options) { d.Scale.Writers = s.Scale.Writers },
	"scale-max-writes": func(d, s *bench.Options) { d.Scale.MaxWrites = s.Scale.MaxWrites },
	"lists-objects":    func(d, s *bench.Options) { d.Scale.ListObjects = s.Scale.ListObjects },
	"listers":          func(d, s *bench.Options) { d.Scale.Listers = s.Scale.Listers },
	"list-rounds":      func(d, s *bench.Options) { d.Scale.ListRounds = s.Scale.ListRounds },
	"storm-clients":    func(d, s *bench.Options) { d.Scale.StormClients = s.Scale.StormClients },
	"storm-after":      func(d, s *bench.Options) { d.Scale.StormAfter = s.Scale.StormAfter },
	"churn-objects":    func(d, s *bench.Options) { d.Scale.ChurnObjects = s.Scale.ChurnObjects },
	"churn-time":       func(d, s *bench.Options) { d.Scale.ChurnTime = s.Scale.ChurnTime },
	"churn-window":     func(d, s *bench.Options) { d.Scale.ChurnWindow = s.Scale.ChurnWindow },
	"keys-counts":      func(d, s *bench.Options) { d.Scale.KeysCounts = s.Scale.KeysCounts },
	"keys-namespace":   func(d, s *bench.Options) { d.Scale.KeysNamespace = s.Scale.KeysNamespace },
	"keys-gets":        func(d, s *bench.Options) { d.Scale.KeysGets = s.Scale.KeysGets },
	"keys-lists":       func(d, s *bench.Options) { d.Scale.KeysLists = s.Scale.KeysLists },
}

// benchOptions applies --quick (Quick's value of each flag not given),
// --memory-limit-mib and --scale to o.
func benchOptions(fl *pflag.FlagSet, f benchFlags, o bench.Options) (bench.Options, error) {
	if f.quick {
		q := bench.Quick()
		for name, set := range quickFlags {
			if !fl.Changed(name) {
				set(&o, &q)
			}
		}
	}
	if fl.Changed("memory-limit-mib") {
		o.Scale.MemoryLimit = f.memoryMiB << 20
	}
	o.Scale.KeysMemoryLimit = f.keysMemoryMiB << 20
	for s := range strings.SplitSeq(f.scale, ",") {
		switch {
		case s == "":
		case s == "1m":
			o.Scale1M()
		case slices.Contains(bench.AllScales, s):
			o.Scale.Scenarios = append(o.Scale.Scenarios, s)
		default:
			return o, fmt.Errorf("--scale %q: want 1m or some of %v", s, bench.AllScales)
		}
	}
	return o, nil
}

func runBench(cmd *cobra.Command, f benchFlags, o bench.Options) error {
	o, err := benchOptions(cmd.Flags(), f, o)
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("watch-fanout") && f.tikv.store != "tikv-cluster" {
		return fmt.Errorf("--watch-fanout is for --store tikv-cluster")
	}
	// This binary runs the reference etcd (etcd-reference).
	if o.EtcdBinary, err = os.Executable(); err != nil {
		return fmt.Errorf("find the axon-bench binary: %w", err)
	}
	o.Binary = f.axonBin
	if o.Binary == "" && (f.tikv.store != "" || slices.Contains(o.Systems, "axon")) {
		if o.Binary, err = findAxon(o.EtcdBinary); err != nil {
			return err
		}
	}
	o.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if f.tikv.store != "" {
		return runTiKVBench(ctx, cmd, f, o)
	}
	if len(o.Scale.Scenarios) > 0 {
		rep, err := bench.RunScale(ctx, o)
		if rep != nil {
			err = writeReport(cmd, f.jsonPath, o.Log, rep, rep.Seconds, err)
		}
		return err
	}
	rep, err := bench.Run(ctx, o)
	if rep != nil {
		err = writeReport(cmd, f.jsonPath, o.Log, rep, rep.Seconds, err)
	}
	return err
}

// writeReport prints a run's table, writes its JSON if asked and logs
// how long it took; it returns the run's error, else the first of its
// own.
func writeReport(cmd *cobra.Command, jsonPath string, log *slog.Logger, rep interface{ WriteTable(io.Writer) error }, seconds float64, err error) error {
	if terr := rep.WriteTable(cmd.OutOrStdout()); terr != nil && err == nil {
		err = terr
	}
	if jerr := writeJSON(cmd, jsonPath, rep); jerr != nil && err == nil {
		err = jerr
	}
	log.Info("bench done", "took", time.Duration(seconds*float64(time.Second)).Round(time.Second))
	return err
}

func writeJSON(cmd *cobra.Command, path string, rep any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = cmd.OutOrStdout().Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// findAxon returns the axon binary beside self (make build puts both in
// bin/), else the one on PATH.
func findAxon(self string) (string, error) {
	if p, err := exec.LookPath(filepath.Join(filepath.Dir(self), "axon")); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("axon"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no axon binary beside %s nor on PATH: build it (make build) or name it with --axon-binary", self)
}
