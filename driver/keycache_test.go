package driver_test

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
)

func withKeyCache(cfg *driver.Config) { cfg.KeyCacheBytes = 1 << 20 }

// putPrev puts key=value with prev_kv through the leader, runs its work
// and returns the previous version the answer carries (0: none).
func putPrev(t *testing.T, d *driver.Driver, ex *queueExec, key, value string) int64 {
	t.Helper()
	var got *core.Response
	op := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value), PrevKv: true}}}
	if d.Write(op, func(r core.Response) { got = &r }) == 0 {
		t.Fatal("a leader refused a proposal")
	}
	ex.drain(t, d, nil)
	if got == nil || got.Err != nil {
		t.Fatalf("put %s: %+v", key, got)
	}
	prev := got.Response.GetResponsePut().GetPrevKv()
	if prev == nil {
		return 0
	}
	return prev.Version
}

// TestKeyCacheAnswersWritesOfKeysWrittenBefore: the second write of a
// key evaluates against the record the first left, from the cache, with
// the same outcome as from the engine.
func TestKeyCacheAnswersWritesOfKeysWrittenBefore(t *testing.T) {
	d, _, ex, _ := newLeaderWith(t, withKeyCache)
	for i, want := range []int64{0, 1, 2} {
		if got := putPrev(t, d, ex, "/k", "v"); got != want {
			t.Fatalf("put %d: previous version %d, want %d", i, got, want)
		}
	}
	st := d.KeyCacheStats()
	if st.Misses != 1 || st.Hits != 2 || st.Entries != 1 {
		t.Fatalf("stats %+v: want the first write to miss, the two after to hit, one entry", st)
	}
}

// TestUncertainCommitVoidsCachedKeys: a write whose commit is uncertain
// (here it landed) takes its keys out of the cache, so the next write
// reads the engine and sees it.
func TestUncertainCommitVoidsCachedKeys(t *testing.T) {
	d, _, ex, _ := newLeaderWith(t, withKeyCache)
	putPrev(t, d, ex, "/k", "a")
	ex.uncertainPuts = 1
	var got *core.Response
	propose(t, d, "/k", &got)
	ex.drain(t, d, nil) // the fence finds it applied
	if got == nil || got.Err != nil {
		t.Fatalf("uncertain put that landed: %+v", got)
	}
	if st := d.KeyCacheStats(); st.Voids != 1 || st.Entries != 0 {
		t.Fatalf("stats after the uncertain commit %+v: want its key voided", st)
	}
	if v := putPrev(t, d, ex, "/k", "c"); v != 2 {
		t.Fatalf("previous version after a landed uncertain write: %d, want 2", v)
	}
}

// TestUncertainCommitKeptWithTheKnob: with the planted bug the cache
// keeps the record from before a landed uncertain write, and the next
// write answers a version one behind: what the simulator must catch.
func TestUncertainCommitKeptWithTheKnob(t *testing.T) {
	d, _, ex, _ := newLeaderWith(t, func(cfg *driver.Config) {
		withKeyCache(cfg)
		cfg.Testing.KeepKeysOnUncertain = true
	})
	putPrev(t, d, ex, "/k", "a")
	ex.uncertainPuts = 1
	var got *core.Response
	propose(t, d, "/k", &got)
	ex.drain(t, d, nil)
	if v := putPrev(t, d, ex, "/k", "c"); v != 1 {
		t.Fatalf("previous version with the planted bug: %d, want the stale 1", v)
	}
}

// TestRoleChangeEmptiesTheKeyCache: a leader that loses the lead forgets
// every key: another leader may write them before it leads again.
func TestRoleChangeEmptiesTheKeyCache(t *testing.T) {
	d, clock, ex, m := newLeaderWith(t, withKeyCache)
	putPrev(t, d, ex, "/k", "a")
	if st := d.KeyCacheStats(); st.Entries != 1 {
		t.Fatalf("stats %+v: want one entry", st)
	}
	clock.advance(m.Config().Lease + m.Config().MaxDrift + time.Second)
	if d.Step(nil, nil) {
		t.Fatalf("still leading: %s", core.DescribeMember(m))
	}
	if st := d.KeyCacheStats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("stats after losing the lead %+v: want empty", st)
	}
}
