package core_test

import (
	"context"
	"testing"

	"pgregory.net/rapid"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// TestRecoverFindsTheLastRevision: whatever revisions have records — gaps
// where commits failed, records below the compact revision swept by it —
// Recover's commit point is the highest revision with a record, or the
// compact revision if that is higher.
func TestRecoverFindsTheLastRevision(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		eng := memkv.New()
		tx, err := eng.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		top := rapid.Int64Range(0, 5000).Draw(t, "top")
		compacted := rapid.Int64Range(0, top).Draw(t, "compacted")
		gap := rapid.Float64Range(0, 0.9).Draw(t, "gap")
		rng := rapid.Uint64().Draw(t, "rng")
		want := compacted
		for rev := int64(1); rev <= top; rev++ {
			rng = rng*6364136223846793005 + 1442695040888963407
			if rev < compacted || float64(rng>>11)/(1<<53) < gap {
				continue // swept, or a revision a failed commit skipped
			}
			if err := tx.Set(core.RevisionKey(rev), []byte{1}); err != nil {
				t.Fatal(err)
			}
			want = max(want, rev)
		}
		if compacted > 0 {
			ws, err := core.CompactWrites(storage.NewReader(tx), compacted)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				if err := tx.Set(w.Key, w.Value); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		rd, err := eng.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Rollback()
		st, err := core.Recover(storage.NewReader(rd))
		if err != nil {
			t.Fatal(err)
		}
		if want = max(want, 1); st.Committed != want {
			t.Fatalf("recovered commit point r%d, want r%d (compacted %d, top %d)", st.Committed, want, compacted, top)
		}
	})
}
