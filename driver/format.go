package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// upgradeBatch bounds the records one upgrade transaction moves.
const upgradeBatch = 500

// OpenFormat checks the format of the store behind eng before anything is
// served from it: an empty store is given today's format (by names this
// binary), today's is served, a newer one is refused, and an older one is
// refused unless upgrade is set, in which case it is upgraded in place
// first. The error of a refusal wraps a *core.FormatError.
func OpenFormat(ctx context.Context, eng storage.Engine, by string, upgrade bool, log *slog.Logger) (core.Format, error) {
	for attempt := 0; ; attempt++ {
		f, err := openFormat(ctx, eng, by, upgrade, log)
		// Instances opening one new store at once: one records the
		// format, the others conflict and read it.
		if errors.Is(err, storage.ErrConflict) && attempt < 3 {
			continue
		}
		return f, err
	}
}

func openFormat(ctx context.Context, eng storage.Engine, by string, upgrade bool, log *slog.Logger) (core.Format, error) {
	var f core.Format
	// An empty store gets today's format in the transaction that found it
	// empty: a restore marking the store at the same time conflicts.
	err := update(ctx, eng, func(rd core.Reader) ([]core.Write, error) {
		var err error
		if f, err = core.ReadFormat(rd); err != nil || f.Version != 0 {
			return nil, err
		}
		f = core.Format{Version: core.FormatVersion, By: by}
		return []core.Write{core.FormatWrite(by)}, nil
	})
	if err != nil {
		return f, err
	}
	upgradable, err := core.CheckFormat(f)
	switch {
	case err == nil:
		return f, nil
	case !upgradable || !upgrade:
		return f, fmt.Errorf("open: %w", err)
	}
	log.Info("upgrading the data format", "from", f.Version, "to", core.FormatVersion)
	for moved := 0; ; {
		var done bool
		err := update(ctx, eng, func(rd core.Reader) ([]core.Write, error) {
			ws, fin, err := core.UpgradeStep(rd, by, upgradeBatch)
			done, moved = fin, moved+(len(ws)-1)/2
			return ws, err
		})
		if err != nil {
			return f, fmt.Errorf("upgrade from format %d: %w", f.Version, err)
		}
		if done {
			log.Info("upgraded the data format", "to", core.FormatVersion, "revision_records_moved", moved)
			return core.Format{Version: core.FormatVersion, By: by}, nil
		}
	}
}

// update runs fn in one transaction and commits the writes it returns
// (none: nothing to commit).
func update(ctx context.Context, eng storage.Engine, fn func(core.Reader) ([]core.Write, error)) error {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	ws, err := fn(storage.NewReader(txn))
	if err != nil || len(ws) == 0 {
		return err
	}
	if err := Buffer(txn, ws); err != nil {
		return err
	}
	return txn.Commit(ctx)
}

// Update runs fn in one engine transaction and commits the writes it
// returns (none: nothing is committed). The auth store changes this way.
func Update(ctx context.Context, eng storage.Engine, fn func(core.Reader) ([]core.Write, error)) error {
	return update(ctx, eng, fn)
}
