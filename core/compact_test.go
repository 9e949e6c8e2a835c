package core_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// sweep runs a compaction sweep to its end in batches of limit.
func (s *scene) sweep(rev int64, limit int) (batches int) {
	s.t.Helper()
	sw := core.Sweep{Rev: rev}
	for !sw.Done {
		txn, err := s.eng.Begin(s.ctx)
		if err != nil {
			s.t.Fatal(err)
		}
		next, dels, err := core.SweepStep(storage.NewReader(txn), sw, limit)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, d := range dels {
			if err := txn.Delete(d.Key); err != nil {
				s.t.Fatal(err)
			}
		}
		if err := txn.Commit(s.ctx); err != nil {
			s.t.Fatal(err)
		}
		sw = next
		batches++
		if batches > 1000 {
			s.t.Fatal("sweep does not end")
		}
	}
	return batches
}

// countKeys counts engine keys with a prefix of key's space.
func (s *scene) countKeys(prefix []byte) int {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer txn.Rollback()
	n := 0
	err = storage.NewReader(txn).Scan(prefix, append(bytes.Clone(prefix[:4]), prefix[4]+1), false, 0, func(_, _ []byte) bool {
		n++
		return true
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func delOp(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

func TestSweepRemovesWhatCompactionMadeUnreachable(t *testing.T) {
	s := newScene(t, core.Config{})
	// r1..r4: a=1..4; r5: b=1; r6: delete b; r7: c=1; r8: a=5.
	id := core.RequestID(0)
	for _, op := range []*pb.RequestOp{putOp("a", "1"), putOp("a", "2"), putOp("a", "3"), putOp("a", "4"), putOp("b", "1"), delOp("b"), putOp("c", "1"), putOp("a", "5")} {
		id++
		s.propose(id, op)
		s.settle()
	}
	before8, _ := s.rangeAt(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 7})
	s.node.Compact(100, 7)
	s.settle()
	batches := s.sweep(7, 2)
	if batches < 3 {
		t.Fatalf("a sweep of this size in batches of 2 took %d batches", batches)
	}
	// History: a@4 (newest at or below 7), a@8, c@7; b's tombstone at 6 and
	// everything older is gone.
	hist := core.HistoryKey(nil, 0)[:5]
	if n := s.countKeys(hist); n != 3 {
		t.Fatalf("%d history records left, want 3", n)
	}
	// Revision records below 7 are gone; 7 and 8 stay.
	if n := s.countKeys(core.RevisionKey(0)[:5]); n != 2 {
		t.Fatalf("%d revision records left, want 2", n)
	}
	// b's latest tombstone is gone; a and c stay.
	if n := s.countKeys(core.LatestKey(nil)[:5]); n != 2 {
		t.Fatalf("%d latest records left, want 2", n)
	}
	after, err := s.rangeAt(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 7})
	if err != nil || kvs(after.Kvs) != kvs(before8.Kvs) {
		t.Fatalf("read at the compact revision changed: %v, %v (was %v)", after, err, before8)
	}
	if got, _ := s.rangeAt(&pb.RangeRequest{Key: []byte("a")}); kvs(got.Kvs) != "a=5@8/1/v5" {
		t.Fatalf("latest a: %s", kvs(got.Kvs))
	}
	// A watch from the compact revision still gets its events.
	txn, _ := s.eng.Begin(s.ctx)
	defer txn.Rollback()
	evs, _, err := core.ReadEvents(storage.NewReader(txn), 7, 8, 0)
	if err != nil || len(evs) != 2 {
		t.Fatalf("events from the compact revision: %v, %v", evs, err)
	}
	// A new write of b after the sweep starts over at version 1.
	s.propose(200, putOp("b", "2"))
	s.settle()
	if got, _ := s.rangeAt(&pb.RangeRequest{Key: []byte("b")}); len(got.Kvs) != 1 || got.Kvs[0].Version != 1 {
		t.Fatalf("b after the sweep: %v", got.Kvs)
	}
}

// TestCompactionKeepsTheVersionsReadsNeed: after a sweep to Rev, every
// read at Rev or later and every event from Rev on reads as before, for
// a key not written since, a key superseded after Rev, and a key deleted
// at Rev itself: a watch may start at the compact revision and must see
// that delete.
func TestCompactionKeepsTheVersionsReadsNeed(t *testing.T) {
	s := newScene(t, core.Config{})
	// r1 a=1, r2 b=1, r3 c=1, r4 a=2, r5 delete c, r6 b=2 (after the compaction at 5).
	id := core.RequestID(0)
	for _, op := range []*pb.RequestOp{putOp("a", "1"), putOp("b", "1"), putOp("c", "1"), putOp("a", "2"), delOp("c"), putOp("b", "2")} {
		id++
		s.propose(id, op)
		s.settle()
	}
	events := func() string {
		txn, _ := s.eng.Begin(s.ctx)
		defer txn.Rollback()
		evs, _, err := core.ReadEvents(storage.NewReader(txn), 5, 6, 0)
		if err != nil {
			t.Fatalf("events from the compact revision: %v", err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, core.DescribeEvent(ev))
		}
		return strings.Join(out, " ")
	}
	read := func(rev int64) string {
		got, err := s.rangeAt(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatalf("read at r%d: %v", rev, err)
		}
		return kvs(got.Kvs)
	}
	beforeEvents, before5, before6 := events(), read(5), read(6)
	s.node.Compact(100, 5)
	s.settle()
	s.sweep(5, 2)
	if got := events(); got != beforeEvents || !strings.Contains(got, "delete") {
		t.Errorf("events from r5 after the sweep: %q, before: %q", got, beforeEvents)
	}
	if got := read(5); got != before5 {
		t.Errorf("read at r5 after the sweep: %s, before: %s", got, before5)
	}
	if got := read(6); got != before6 {
		t.Errorf("read at r6 after the sweep: %s, before: %s", got, before6)
	}
}

func TestHashKVCoversHistoryUpToARevision(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.settle()
	s.propose(2, putOp("a", "2"))
	s.settle()
	hash := func(rev int64) uint32 {
		txn, _ := s.eng.Begin(s.ctx)
		defer txn.Rollback()
		h, err := core.HashKV(storage.NewReader(txn), rev)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h1, h2 := hash(1), hash(2)
	if h1 == h2 {
		t.Fatal("a new version did not change the hash")
	}
	s.propose(3, putOp("b", "1"))
	s.settle()
	if hash(2) != h2 {
		t.Fatal("a later write changed the hash at r2")
	}
}

// TestNodeSweepsAfterCompaction: a stored compaction starts a sweep in
// batches of Config.SweepBatch, each handed out once the last is
// reported; a failed batch runs again; a physical compaction's answer
// waits for the sweep's end; a newer compaction during a sweep sweeps
// again to it afterwards.
func TestNodeSweepsAfterCompaction(t *testing.T) {
	s := newScene(t, core.Config{SweepBatch: 2})
	for i, k := range []string{"a", "b", "c", "a", "b", "c", "a"} {
		s.propose(core.RequestID(i+1), putOp(k, "v"))
	}
	s.settle()
	s.out = nil
	history := s.countKeys(core.HistoryKey([]byte("a"), 0))
	s.node.Compact(20, 6)
	s.node.AwaitSweep(21, 6)
	s.expect("compact r6 req20")
	s.run(s.take(core.WorkCompact, 6))
	s.expect("sweep r6", "resp req20 at r7")
	s.node.Compact(22, 7)
	s.expect("compact r7 req22")
	s.run(s.take(core.WorkCompact, 7))
	s.expect("resp req22 at r7") // one batch at a time: r7 waits its turn

	w := s.take(core.WorkSweep, 0)
	s.node.Done(w, core.Result{Outcome: core.NotApplied})
	s.collect()
	s.expect("sweep r6 attempt=1")
	batches := 0
	for {
		w = s.take(core.WorkSweep, 0)
		s.run(w)
		s.collect()
		batches++
		if w.Sweep.Rev == 7 {
			break
		}
		if batches > 20 {
			t.Fatal("the sweep to r6 does not end")
		}
	}
	if batches < 3 {
		t.Fatalf("swept in %d batches of 2 records", batches)
	}
	if got := s.resp(21); got.Err != nil {
		t.Fatalf("physical compaction: %+v", got)
	}
	for w = s.take(core.WorkSweep, 0); ; w = s.take(core.WorkSweep, 0) {
		s.run(w)
		s.collect()
		if len(s.work) == 0 {
			break
		}
	}
	if after := s.countKeys(core.HistoryKey([]byte("a"), 0)); after != 3 {
		t.Fatalf("history records: %d before, %d after the sweep to r7, want one per key", history, after)
	}
	s.node.AwaitSweep(23, 7)
	s.collect()
	if got := s.resp(23); got.Err != nil {
		t.Fatalf("a wait for a finished sweep: %+v", got)
	}
}

// TestRequestProgressWaitsForSync: RequestProgress for a watch still
// catching up is answered only after the events it covers, in the same
// Ready; for no registered watch it asks nothing.
func TestRequestProgressWaitsForSync(t *testing.T) {
	s := newScene(t, core.Config{RingSize: 1})
	for i, k := range []string{"a", "b", "c"} {
		s.propose(core.RequestID(i+1), putOp(k, "v"))
	}
	s.settle()
	s.out = nil
	if s.node.RequestProgress(9) {
		t.Fatal("a progress request for no watch was taken")
	}
	if err := s.node.AddWatch(core.Watch{ID: 5, Key: []byte("a"), End: []byte("\x00"), StartRev: 1}); err != nil {
		t.Fatal(err)
	}
	if !s.node.RequestProgress(5) {
		t.Fatal("the progress request was refused")
	}
	s.expect("catchup watch5 r1..r3")
	s.run(s.take(core.WorkCatchUp, 0))
	s.expect(`watch5 r3 [PUT "a"] [PUT "b"] [PUT "c"]`, "watch5 requested progress r3")
	s.expect()
}

// TestCompactionsTakeEffectInTheOrderAsked: a compaction asked for while
// another is being stored waits for it and is then judged against it, so
// a lower one asked second fails (as in etcd) instead of being stored
// after the higher one has answered, and a higher one goes out after it.
func TestCompactionsTakeEffectInTheOrderAsked(t *testing.T) {
	s := newScene(t, core.Config{})
	for i := range 9 {
		s.propose(core.RequestID(i+1), putOp(fmt.Sprintf("k%d", i%3), "v"))
	}
	s.settle()
	s.out = nil
	s.node.Compact(20, 5)
	s.node.Compact(21, 4) // lower, while r5 is being stored
	s.node.Compact(22, 7) // higher, while r5 is being stored
	s.expect("compact r5 req20")
	s.run(s.take(core.WorkCompact, 5))
	s.expect("sweep r5", "compact r7 req22", "resp req20 at r9", `resp req21 err="mvcc: required revision has been compacted"`)
	s.run(s.take(core.WorkCompact, 7))
	s.expect("resp req22 at r9")
}
