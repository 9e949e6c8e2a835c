package tikv

import (
	"context"
	"fmt"

	kvstore "github.com/tikv/client-go/v2/tikv"
	"golang.org/x/sync/errgroup"

	"github.com/axon-kv/axon/storage"
)

var _ storage.LockResolver = (*Engine)(nil)

// resolveScanLimit bounds the locks one ScanLock RPC returns.
const resolveScanLimit = 1024

// resolveBackoff bounds, in milliseconds, the retries of one region's
// lock resolution.
const resolveBackoff = 20_000

// ResolveLocks settles the locks of transactions older than ts in
// [lower, upper) with client-go's range lock resolver, the one TiKV's GC
// uses: each lock's primary is checked at once (as if its TTL had run
// out), committed transactions are committed and the others rolled back.
// Regions are resolved in parallel, up to the scan concurrency.
func (e *Engine) ResolveLocks(ctx context.Context, ts uint64, lower, upper []byte) error {
	if err := e.acquire("resolve locks"); err != nil {
		return err
	}
	defer e.release()
	bounds, err := e.regionBounds(ctx, lower, upper)
	if err != nil {
		bounds = nil // one range: slower, not wrong
	}
	edges := append(append([][]byte{lower}, bounds...), upper)
	resolver := kvstore.NewRegionLockResolver("axon-takeover", e.c.store)
	backoff := func(ctx context.Context) *kvstore.Backoffer {
		return kvstore.NewBackofferWithVars(ctx, resolveBackoff, nil)
	}
	var g errgroup.Group
	g.SetLimit(max(e.c.scanConcurrency, 4))
	for i := range len(edges) - 1 {
		from, to := edges[i], edges[i+1]
		g.Go(func() error {
			if _, err := kvstore.ResolveLocksForRange(ctx, resolver, ts, from, to, backoff, resolveScanLimit); err != nil {
				return fmt.Errorf("tikv: resolve locks in [%q, %q): %w: %w", from, to, storage.ErrUnavailable, err)
			}
			return nil
		})
	}
	return g.Wait()
}
