package badger

import (
	"context"
	"testing"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// BenchmarkRecoverAfterCompaction times core.Recover (a restart's reads)
// over a store whose revision records were swept by a compaction: 200k
// revisions written, then a compaction at the newest recorded and all
// other records deleted, as a physical compaction at the head leaves
// them. Badger keeps the deletions as
// records of their own until its compactions drop them.
//
//	go test ./storage/badger -run '^$' -bench RecoverAfterCompaction
func BenchmarkRecoverAfterCompaction(b *testing.B) {
	const revs = 200_000
	e, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	write := func(from int64, del bool) {
		tx, err := e.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if from == 1 && !del {
			ws, err := core.CompactWrites(storage.NewReader(tx), revs)
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range ws {
				if err := tx.Set(w.Key, w.Value); err != nil {
					b.Fatal(err)
				}
			}
		}
		for rev := from; rev < from+1000 && rev <= revs; rev++ {
			if del && rev < revs {
				err = tx.Delete(core.RevisionKey(rev))
			} else if !del {
				err = tx.Set(core.RevisionKey(rev), []byte{1})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, del := range []bool{false, true} {
		for rev := int64(1); rev <= revs; rev += 1000 {
			write(rev, del)
		}
	}
	for b.Loop() {
		tx, err := e.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		st, err := core.Recover(storage.NewReader(tx))
		tx.Rollback()
		if err != nil {
			b.Fatal(err)
		}
		if st.Committed != revs {
			b.Fatalf("recovered revision %d, want %d", st.Committed, revs)
		}
	}
}
