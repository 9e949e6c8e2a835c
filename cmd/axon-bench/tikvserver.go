package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/pingcap/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"

	"github.com/axon-kv/axon/internal/tikvserver"
)

type tikvServerFlags struct {
	listen          string
	rpcDelay        time.Duration
	regionErrorRate float64
	regionErrors    string
	splitEvery      time.Duration
	restartEvery    time.Duration
	restartPause    time.Duration
	seed            uint64
	mockLog         bool
	metricsListen   string
}

// tikvServerCmd runs a TiKV-speaking endpoint over client-go's mock
// store, so that `axon serve --store tikv` can run in processes of its
// own over client-go's whole network path on a machine without TiKV.
func tikvServerCmd() *cobra.Command {
	var f tikvServerFlags
	cmd := &cobra.Command{
		Use:   "tikv-server",
		Short: "Serve PD's and TiKV's gRPC APIs over an in-memory mock store (tests and demos only)",
		Long: `Serve PD's and TiKV's gRPC APIs on one address, over client-go's in-memory
mock store (mocktikv), for tests and demos: the data is kept in memory only
and is lost when the process exits. It is not a storage engine.

Point Axon at it with  axon serve --store tikv --pd-endpoints <--listen>.
PD reports the store at the same address, so client-go sends its TiKV calls
there too. A new process is a new, empty cluster (its cluster ID is drawn at
start): Axons that used an earlier one exit when they reach it (client-go
stops on a PD of another cluster) and must be started again. To restart the
endpoint and keep the data, send it SIGHUP.

A call it does not implement answers Unimplemented and is logged as
"unimplemented call" with its method name.

Faults, as a real cluster has them:
  --rpc-delay          wait before answering each PD and TiKV call (each
                       request in a BatchCommands or TSO stream)
  --region-error-rate  answer that fraction of TiKV requests with a region
                       error of --region-errors instead of running them;
                       client-go retries them (ServerIsBusy after a 1-2 s
                       backoff)
  --split-every        split a region holding two keys or more at its
                       middle key that often
  --restart-every, SIGHUP
                       restart: drop every connection and call in flight,
                       keep the address closed for --restart-pause, listen
                       again on it; the data is kept

--metrics-listen serves, at /metrics in the Prometheus text format, the
requests answered by type (each unary call, BatchCommands entry and Tso or
QueryRegion stream request is one round trip), the timestamps handed out
and the busy periods (times the requests in flight rose from none), as
axon-bench --store tikv-cluster reads them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTiKVServer(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:2379", "host:port to serve PD and TiKV on, which PD also hands to clients to dial (port 0: a free port, logged as pd-endpoints)")
	fl.DurationVar(&f.rpcDelay, "rpc-delay", 0, "delay before each PD and TiKV call is answered")
	fl.Float64Var(&f.regionErrorRate, "region-error-rate", 0, "fraction (0 to 1) of TiKV requests answered with a region error")
	fl.StringVar(&f.regionErrors, "region-errors", "NotLeader,EpochNotMatch,ServerIsBusy", "region errors to inject, comma-separated")
	fl.DurationVar(&f.splitEvery, "split-every", 0, "split a region this often (0: never)")
	fl.DurationVar(&f.restartEvery, "restart-every", 0, "restart the endpoint this often, keeping the data (0: only on SIGHUP)")
	fl.DurationVar(&f.restartPause, "restart-pause", tikvserver.DefaultRestartPause, "how long a restart keeps the address closed")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the injected errors and splits (0: random)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "host:port to serve the request counts on, at /metrics (empty: none)")
	fl.BoolVar(&f.mockLog, "mock-log", false, "show the mock store's own log (it reports expected outcomes, such as a failed insert, as errors)")
	return cmd
}

func runTiKVServer(ctx context.Context, f tikvServerFlags) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if !f.mockLog {
		log.SetLevel(zapcore.FatalLevel)
	}
	kinds, err := tikvserver.ParseRegionErrors(f.regionErrors)
	if err != nil {
		return fmt.Errorf("--region-errors: %w", err)
	}
	if f.restartEvery < 0 || f.restartPause < 0 {
		return fmt.Errorf("--restart-every %v, --restart-pause %v: want durations >= 0", f.restartEvery, f.restartPause)
	}
	s, err := tikvserver.Start(f.listen, tikvserver.Options{
		RPCDelay:        f.rpcDelay,
		RegionErrorRate: f.regionErrorRate,
		RegionErrors:    kinds,
		SplitEvery:      f.splitEvery,
		Seed:            f.seed,
		Log:             logger,
	})
	if err != nil {
		return err
	}
	defer func() {
		logCalls(logger, s)
		if err := s.Close(); err != nil {
			logger.Error("tikv-server: close", "err", err)
		}
	}()
	if f.metricsListen != "" {
		stop, err := serveMetrics(f.metricsListen, s, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	logger.Warn("tikv-server: serving PD and TiKV from memory, for tests and demos: the data is lost at exit",
		"pd-endpoints", s.Addr(), "rpc-delay", f.rpcDelay, "region-error-rate", f.regionErrorRate,
		"region-errors", f.regionErrors, "split-every", f.splitEvery, "restart-every", f.restartEvery)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var every <-chan time.Time
	if f.restartEvery > 0 {
		t := time.NewTicker(f.restartEvery)
		defer t.Stop()
		every = t.C
	}
	for {
		select {
		case <-ctx.Done():
			logger.Info("tikv-server: shutting down")
			return nil
		case <-hup:
		case <-every:
		}
		if err := s.Restart(f.restartPause); err != nil {
			return err
		}
	}
}

// serveMetrics serves s's load counts at tikvserver.MetricsPath on addr
// until stop. It listens before returning, so that a client that sees
// the metrics answer knows the endpoint serves.
func serveMetrics(addr string, s *tikvserver.Server, logger *slog.Logger) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mux := http.NewServeMux()
	mux.Handle(tikvserver.MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("tikv-server: metrics", "err", err)
		}
	}()
	logger.Info("tikv-server: serving request counts", "url", "http://"+lis.Addr().String()+tikvserver.MetricsPath)
	return func() { _ = hs.Close() }, nil
}

// logCalls logs how often each method was called, so a run shows what
// client-go used.
func logCalls(logger *slog.Logger, s *tikvserver.Server) {
	calls := s.Calls()
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	attrs := make([]any, 0, 2*len(names))
	for _, n := range names {
		attrs = append(attrs, n, calls[n])
	}
	logger.Info("tikv-server: calls served", attrs...)
	if inj := s.InjectedErrors(); len(inj) > 0 {
		logger.Info("tikv-server: region errors injected", "count", inj)
	}
}
