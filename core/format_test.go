package core_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// sceneWithRevisions is a scene whose store holds n revisions, each a put
// of one of a few keys, and whose node has committed them all.
func sceneWithRevisions(t *testing.T, n int) *scene {
	s := newScene(t, core.Config{})
	for i := range n {
		s.propose(core.RequestID(i+1), putOp(fmt.Sprintf("k%d", i%7), fmt.Sprintf("v%d", i)))
		s.settle()
	}
	return s
}

// readEvents reads the events of [from, C] from the store.
func (s *scene) readEvents(from int64, limit int) ([]core.Event, int64) {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer txn.Rollback()
	evs, last, err := core.ReadEvents(storage.NewReader(txn), from, s.node.Committed(), limit)
	if err != nil {
		s.t.Fatal(err)
	}
	return evs, last
}

// TestEventsReadInRevisionOrderAcrossShards reads more revisions than one
// round of the shard merge holds, whole and in pages.
func TestEventsReadInRevisionOrderAcrossShards(t *testing.T) {
	s := sceneWithRevisions(t, 2*128*core.RevisionShards+37)
	c := s.node.Committed()
	evs, last := s.readEvents(1, 0)
	if last != c || int64(len(evs)) != c {
		t.Fatalf("read %d events up to r%d; want %d up to r%d", len(evs), last, c, c)
	}
	for i, ev := range evs {
		if ev.Rev != int64(i+1) || string(ev.Kv.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("event %d is r%d %q", i, ev.Rev, ev.Kv.Value)
		}
	}
	from, pages := int64(1), 0
	for from <= c {
		page, last := s.readEvents(from, 1000)
		if len(page) == 0 || page[0].Rev != from || last != page[len(page)-1].Rev && last != c {
			t.Fatalf("page from r%d: %d events, last r%d", from, len(page), last)
		}
		from, pages = last+1, pages+1
	}
	if pages != int(c+999)/1000 {
		t.Fatalf("read %d revisions in %d pages of 1000", c, pages)
	}
}

// toLegacy rewrites the store as format 2 wrote it: revision records in
// one range, no format record.
func toLegacy(t *testing.T, eng *memkv.Engine) {
	t.Helper()
	ctx := t.Context()
	txn, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	var moves [][2][]byte
	err = storage.NewReader(txn).Scan(core.RevisionShardStart(0), core.RevisionShardStart(core.RevisionShards), false, 0, func(k, v []byte) bool {
		moves = append(moves, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range moves {
		rev, err := core.DecodeRevisionKey(m[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := txn.Delete(m[0]); err != nil {
			t.Fatal(err)
		}
		if err := txn.Set(core.LegacyRevisionKey(rev), m[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.Delete(core.MetaKey(core.MetaFormat)); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func readFormat(t *testing.T, eng storage.Engine) core.Format {
	t.Helper()
	txn, err := eng.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	f, err := core.ReadFormat(storage.NewReader(txn))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAnEmptyStoreHasNoFormatYet(t *testing.T) {
	f := readFormat(t, memkv.New())
	if f.Version != 0 {
		t.Fatalf("an empty store reads as format %d", f.Version)
	}
	if _, err := core.CheckFormat(f); err != nil {
		t.Fatalf("an empty store is refused: %v", err)
	}
}

func TestANewerFormatIsRefusedNamingBoth(t *testing.T) {
	f, err := core.DecodeFormat(core.AppendFormat(nil, core.Format{Version: core.FormatVersion + 1, By: "axon 9.9"}))
	if err != nil {
		t.Fatal(err)
	}
	up, err := core.CheckFormat(f)
	if up || !errors.Is(err, core.ErrFormat) {
		t.Fatalf("CheckFormat(format %d) = %v, %v; want a refusal that cannot upgrade", f.Version, up, err)
	}
	for _, want := range []string{fmt.Sprintf("format %d", core.FormatVersion+1), "axon 9.9", fmt.Sprintf("format %d", core.FormatVersion), "newer binary"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}

func TestAMalformedFormatRecordIsAnError(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {0x80}} {
		if _, err := core.DecodeFormat(b); !errors.Is(err, core.ErrBadRecord) {
			t.Errorf("DecodeFormat(%x) = %v, want ErrBadRecord", b, err)
		}
	}
}

// TestAFormat2StoreUpgradesInPlace: revision records move to their shards
// in bounded steps, the store then answers exactly as before, and a
// binary of format 2 can no longer recover from it.
func TestAFormat2StoreUpgradesInPlace(t *testing.T) {
	s := sceneWithRevisions(t, 300)
	want, _ := s.readEvents(1, 0)
	wantAll, err := s.rangeAt(rangeOp("\x00", "\x00").GetRequestRange())
	if err != nil {
		t.Fatal(err)
	}
	eng := s.eng
	toLegacy(t, eng)

	f := readFormat(t, eng)
	if f.Version != core.FormatUnrecorded {
		t.Fatalf("a store without a format record reads as format %d", f.Version)
	}
	if up, err := core.CheckFormat(f); !up || !errors.Is(err, core.ErrFormat) || !strings.Contains(err.Error(), "--upgrade-data") {
		t.Fatalf("CheckFormat(unrecorded) = %v, %v; want an upgradable refusal naming --upgrade-data", up, err)
	}

	steps := 0
	for done := false; !done; steps++ {
		txn, err := eng.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ws []core.Write
		ws, done, err = core.UpgradeStep(storage.NewReader(txn), "axon test", 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.Delete {
				err = txn.Delete(w.Key)
			} else {
				err = txn.Set(w.Key, w.Value)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if steps > 100 {
			t.Fatal("the upgrade does not finish")
		}
	}
	if steps < 300/64 {
		t.Fatalf("300 records moved in %d steps of at most 64", steps)
	}
	if f := readFormat(t, eng); f.Version != core.FormatVersion || f.By != "axon test" {
		t.Fatalf("after the upgrade the store says %+v", f)
	}
	got, _ := s.readEvents(1, 0)
	if len(got) != len(want) {
		t.Fatalf("after the upgrade %d events, before %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Rev != want[i].Rev || !bytes.Equal(got[i].Kv.Value, want[i].Kv.Value) {
			t.Fatalf("event %d: r%d %q after, r%d %q before", i, got[i].Rev, got[i].Kv.Value, want[i].Rev, want[i].Kv.Value)
		}
	}
	gotAll, err := s.rangeAt(rangeOp("\x00", "\x00").GetRequestRange())
	if err != nil || kvs(gotAll.Kvs) != kvs(wantAll.Kvs) {
		t.Fatalf("after the upgrade the keys are %v (%v), before %v", kvs(gotAll.Kvs), err, kvs(wantAll.Kvs))
	}
	txn, err := eng.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	st, err := core.Recover(storage.NewReader(txn))
	if err != nil || st.Committed != s.node.Committed() {
		t.Fatalf("after the upgrade Recover = r%d, %v; want r%d", st.Committed, err, s.node.Committed())
	}
	// A binary of format 2 recovers from the highest key of the old
	// revision range and decodes it as 13 bytes: the barrier is longer.
	var highest []byte
	err = storage.NewReader(txn).Scan(core.LegacyRevisionKey(0), core.RevisionShardStart(0)[:5], true, 1, func(k, _ []byte) bool {
		highest = bytes.Clone(k)
		return false
	})
	if err != nil || len(highest) == 13 {
		t.Fatalf("the old revision range ends in %x (%v): a format 2 binary would recover from it", highest, err)
	}
}
