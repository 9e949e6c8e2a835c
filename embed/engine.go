package embed

import (
	"context"
	"fmt"
	"time"

	"github.com/axon-kv/axon/storage"
	badgerkv "github.com/axon-kv/axon/storage/badger"
	"github.com/axon-kv/axon/storage/tikv"
)

// OpenEngine opens the engine cfg's Store names, as Start does, for
// tools that use an engine without serving it (snapshot restore). A
// positive MemoryBudget sizes Badger; unlike Start's, 0 is not worked out
// from the machine, and leaves Badger its own sizes.
func OpenEngine(ctx context.Context, cfg *Config) (storage.Engine, error) {
	eng, _, err := openEngine(ctx, cfg, max(cfg.MemoryBudget, 0))
	return eng, err
}

// openEngine opens the engine cfg's Store names, Badger sized for budget
// (0: none); exclusive says no other instance can share it.
func openEngine(ctx context.Context, cfg *Config, budget int64) (storage.Engine, bool, error) {
	compression, err := cfg.checkEngine()
	if err != nil {
		return nil, false, err
	}
	switch cfg.Store {
	case "badger":
		eng, err := badgerkv.Open(cfg.DataDir, badgerkv.Options{Logger: cfg.logger(), MemoryBudget: budget, Compression: compression, ValueThreshold: cfg.BadgerValueThreshold})
		if err != nil {
			return nil, false, fmt.Errorf("open %s: %w", cfg.DataDir, err)
		}
		return eng, true, nil
	default: // tikv, as checkEngine says
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		eng, err := tikv.Open(octx, cfg.PDEndpoints, tikv.Options{CAPath: cfg.PDCAFile, CertPath: cfg.PDCertFile, KeyPath: cfg.PDKeyFile})
		if err != nil {
			return nil, false, err
		}
		return eng, false, nil
	}
}
