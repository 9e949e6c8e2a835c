package tikv

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tikv/client-go/v2/oracle"
	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/txnkv/transaction"
)

// A leader's transaction (storage.WithLeaderSnapshot) begins at once: its
// start timestamp is fetched from PD in the background, and ReadBatch
// reads, until the transaction writes, at the newest timestamp the
// backend has seen (a start timestamp it fetched, or a commit timestamp
// of a commit that returned): every write the leader's request must see
// committed through this backend before the request went out, at or below
// it. A create, an update or a failed compare so spends one round trip
// less; a read-only one never waits for its start timestamp at all.
// Conflicts are checked from the start timestamp on, as ever: between
// the two only a write the timing model excludes (a deposed leader's
// past its deadline) could land unseen.

// maxSnapshotAge bounds how old the seen timestamp may be, by its
// physical part: an idle leader reads at a fresh one rather than at one
// TiKV's GC may have passed.
const maxSnapshotAge = 2 * time.Second

// seenTS is the newest timestamp a backend has fetched or committed at.
type seenTS struct{ ts atomic.Uint64 }

func (s *seenTS) saw(ts uint64) {
	for {
		old := s.ts.Load()
		if ts <= old || s.ts.CompareAndSwap(old, ts) {
			return
		}
	}
}

// snapshot returns the timestamp a leader's reads may use, or 0.
func (s *seenTS) snapshot() uint64 {
	ts := s.ts.Load()
	if ts == 0 || time.Since(oracle.GetTimeFromTS(ts)) > maxSnapshotAge {
		return 0
	}
	return ts
}

// pendingStart is a start timestamp on its way from PD.
type pendingStart struct {
	done chan struct{}
	ts   uint64
	err  error
}

// fetchStart asks PD for a start timestamp in the background.
func (e *Engine) fetchStart(ctx context.Context) *pendingStart {
	p := &pendingStart{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		// Holding the engine keeps Close from shutting the client under
		// the fetch.
		if p.err = e.acquire("begin"); p.err != nil {
			return
		}
		defer e.release()
		bo := kvstore.NewBackofferWithVars(ctx, transaction.TsoMaxBackoff, nil)
		p.ts, p.err = e.c.store.GetTimestampWithRetry(bo, oracle.GlobalTxnScope)
	}()
	return p
}
