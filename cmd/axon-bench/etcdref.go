package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

type etcdRefFlags struct {
	dataDir, listenClient, listenPeer, logFile string
	certFile, keyFile                          string
	quotaBytes                                 int64
}

// etcdRefCmd runs a real etcd (embedded, etcd's defaults, one member) as
// the reference axon-bench compares Axon with. It lives in this binary so
// the benchmark needs nothing but axon besides, and the benchmark runs it
// in a process of its own so its CPU and memory can be measured apart.
func etcdRefCmd() *cobra.Command {
	var f etcdRefFlags
	cmd := &cobra.Command{
		Use:   "etcd-reference",
		Short: "Run an embedded single-member etcd with its defaults (the reference axon-bench runs)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runEtcdRef(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "etcd-reference.data", "etcd's data directory")
	fl.StringVar(&f.listenClient, "listen-client-urls", "http://127.0.0.1:2379", "URL to serve clients on")
	fl.StringVar(&f.listenPeer, "listen-peer-urls", "http://127.0.0.1:2380", "URL of the (single) peer listener; keep it across restarts")
	fl.StringVar(&f.logFile, "log-file", "stderr", "where etcd's log goes")
	fl.StringVar(&f.certFile, "cert-file", "", "certificate of an https client URL")
	fl.StringVar(&f.keyFile, "key-file", "", "key of --cert-file")
	fl.Int64Var(&f.quotaBytes, "quota-backend-bytes", 0, "etcd's backend quota (0: etcd's default, 2 GiB; etcd recommends at most 8 GiB)")
	return cmd
}

func runEtcdRef(ctx context.Context, f etcdRefFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	client, err := url.Parse(f.listenClient)
	if err != nil {
		return fmt.Errorf("--listen-client-urls: %w", err)
	}
	peer, err := url.Parse(f.listenPeer)
	if err != nil {
		return fmt.Errorf("--listen-peer-urls: %w", err)
	}
	// etcd refuses a data dir readable by others.
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("make data dir: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = f.dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogOutputs = []string{f.logFile}
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: f.certFile, KeyFile: f.keyFile}
	cfg.QuotaBackendBytes = f.quotaBytes
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		log.Info("etcd ready", "client", client.Host, "data-dir", f.dataDir)
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		log.Info("shutting down")
		return nil
	}
}
