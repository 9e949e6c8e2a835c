package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/internal/etcdsnap"
	"github.com/axon-kv/axon/server"
)

func snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Restore an etcd snapshot (`etcdctl snapshot save` of etcd or of Axon) into an empty store",
	}
	cmd.AddCommand(snapshotRestoreCmd())
	return cmd
}

func snapshotRestoreCmd() *cobra.Command {
	var (
		cfg      = embed.NewConfig()
		skipHash bool
	)
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Load an etcd snapshot into an empty Badger data dir (or TiKV cluster): every key, value, revision, lease and the compaction, as etcd had them",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			// An interrupt cancels the restore, which then empties the
			// store of what it wrote; a second one kills it (the store
			// stays marked as an interrupted restore, which serve refuses).
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			context.AfterFunc(ctx, stop)
			cfg.Logger = log
			eng, err := embed.OpenEngine(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			r, err := etcdsnap.Restore(ctx, args[0], eng, etcdsnap.RestoreOptions{SkipHashCheck: skipHash, By: server.BinaryVersion()})
			if cerr := eng.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s: revision %d, compacted at %d, %d versions, %d leases\n", args[0], r.Revision, r.Compacted, r.Versions, r.Leases)
			return nil
		},
	}
	registerEngine(cmd.Flags(), cfg)
	cmd.Flags().BoolVar(&skipHash, "skip-hash-check", false, "restore a file with no SHA-256 trailer (a db file copied from an etcd data directory) or a wrong one")
	return cmd
}
