package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
)

// formatTimeout bounds the format check (and an upgrade) at open.
const formatTimeout = 10 * time.Minute

// checkFormat checks, before anything is served, that the store's data
// format is this binary's, recording it in a new store and upgrading an
// older one if cfg asks.
func checkFormat(eng storage.Engine, cfg Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), formatTimeout)
	defer cancel()
	f, err := driver.OpenFormat(ctx, eng, BinaryVersion(), cfg.UpgradeData, cfg.Logger)
	if err != nil {
		return fmt.Errorf("server: data format: %w", err)
	}
	cfg.Logger.Debug("data format", "version", f.Version, "written_by", f.By)
	return nil
}

// BinaryVersion names this binary in the records it writes: Axon, the
// etcd API version it serves and, when built from a checkout, the commit.
func BinaryVersion() string {
	v := "axon (etcd API " + Version + ")"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
	}
	return v
}
