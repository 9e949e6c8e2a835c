package tikv

import (
	"bytes"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/axon-kv/axon/storage"
)

var _ storage.BatchReader = (*txn)(nil)

// ReadBatch runs the point reads in one BatchGet (one RPC per region, the
// regions in parallel) and each last-key read as one reverse Scan RPC,
// all at once: a request's reads take one round trip instead of one
// each. Each read uses a snapshot object of its own at the transaction's
// timestamp (client-go's are not shared between goroutines). Once the
// transaction has buffered writes, the reads go one by one through the
// buffer, as Get and Iter do.
func (t *txn) ReadBatch(reads []storage.Read) ([]storage.ReadResult, error) {
	if t.gen > 0 || t.closed {
		return storage.ReadEach(t, reads)
	}
	// A leader's transaction reads at the newest timestamp seen while its
	// own is on its way (start.go); others at their start timestamp.
	ts := t.readTS
	if t.tx != nil || ts == 0 {
		if err := t.begin("read batch"); err != nil {
			return nil, err
		}
		ts = t.tx.StartTS()
	} else if err := t.e.acquire("read batch"); err != nil {
		return nil, err
	}
	defer t.e.release()
	var (
		out    = make([]storage.ReadResult, len(reads))
		points [][]byte
		g      errgroup.Group
	)
	for i, r := range reads {
		if !r.Last {
			points = append(points, r.Key)
			continue
		}
		g.Go(func() error {
			snap := t.e.scanSnapshot(t.ctx, ts)
			snap.SetScanBatchSize(2) // a Scanner needs at least 2
			it, err := openScan(snap, r.Key, r.Upper, true)
			if err != nil {
				return fmt.Errorf("tikv: last in [%q, %q): %w", r.Key, r.Upper, readErr(err))
			}
			defer it.Close()
			if it.Valid() && bytes.Compare(it.Key(), r.Key) >= 0 {
				out[i] = storage.ReadResult{Key: bytes.Clone(it.Key()), Value: decodeValue(nil, it.Value()), Found: true}
			}
			return nil
		})
	}
	if len(points) > 0 {
		got, err := t.e.c.store.GetSnapshot(ts).BatchGet(t.ctx, points)
		if err != nil {
			_ = g.Wait()
			return nil, fmt.Errorf("tikv: batch get of %d keys: %w", len(points), readErr(err))
		}
		for i, r := range reads {
			if v, ok := got[string(r.Key)]; ok && !r.Last {
				out[i] = storage.ReadResult{Key: r.Key, Value: decodeValue(make([]byte, 0, len(v.Value)), v.Value), Found: true}
			}
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
