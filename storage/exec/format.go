package exec

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
	f, err := readFormat(ctx, eng)
	if err != nil {
		return f, err
	}
	upgradable, err := core.CheckFormat(f)
	switch {
	case f.Version == 0:
		return core.Format{Version: core.FormatVersion, By: by}, write(ctx, eng, []core.Write{core.FormatWrite(by)})
	case err == nil:
		return f, nil
	case !upgradable || !upgrade:
		return f, fmt.Errorf("open: %w", err)
	}
	log.Info("upgrading the data format", "from", f.Version, "to", core.FormatVersion)
	moved := 0
	for {
		ws, done, err := upgradeStep(ctx, eng, by)
		if err != nil {
			return f, fmt.Errorf("upgrade from format %d: %w", f.Version, err)
		}
		moved += (len(ws) - 1) / 2
		if done {
			log.Info("upgraded the data format", "to", core.FormatVersion, "revision_records_moved", moved)
			return core.Format{Version: core.FormatVersion, By: by}, nil
		}
	}
}

func readFormat(ctx context.Context, eng storage.Engine) (core.Format, error) {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return core.Format{}, err
	}
	defer txn.Rollback()
	return core.ReadFormat(storage.NewReader(txn))
}

func upgradeStep(ctx context.Context, eng storage.Engine, by string) ([]core.Write, bool, error) {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer txn.Rollback()
	ws, done, err := core.UpgradeStep(storage.NewReader(txn), by, upgradeBatch)
	if err != nil {
		return nil, false, err
	}
	if err := Buffer(txn, ws); err != nil {
		return nil, false, err
	}
	return ws, done, txn.Commit(ctx)
}

// write commits ws in one transaction.
func write(ctx context.Context, eng storage.Engine, ws []core.Write) error {
	txn, err := eng.Begin(ctx)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	if err := Buffer(txn, ws); err != nil {
		return err
	}
	return txn.Commit(ctx)
}
