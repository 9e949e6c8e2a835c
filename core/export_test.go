package core_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// export runs core.Export against a fresh snapshot at the node's C.
func (s *scene) export(compacted int64) []core.Version {
	s.t.Helper()
	txn, err := s.eng.Begin(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer txn.Rollback()
	var out []core.Version
	if err := core.Export(storage.NewReader(txn), compacted, s.node.Committed(), 3, func(v core.Version) error {
		out = append(out, v)
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// replay is what etcd would answer from exported versions: the keys
// alive at rev, ascending.
func replay(vs []core.Version, rev int64) []*mvccpb.KeyValue {
	newest := map[string]core.Version{}
	for _, v := range vs {
		if v.Rev > rev {
			continue
		}
		k := string(v.KV.Key)
		if old, ok := newest[k]; !ok || old.Rev < v.Rev {
			newest[k] = v
		}
	}
	var out []*mvccpb.KeyValue
	for _, v := range newest {
		if !v.Tombstone {
			out = append(out, v.KV)
		}
	}
	slices.SortFunc(out, func(a, b *mvccpb.KeyValue) int { return slices.Compare(a.Key, b.Key) })
	return out
}

// randomScene runs a seed's puts, deletes, multi-key txns and a hot key's
// updates, with a lease on some puts, and returns the scene and a compact
// revision 70 requests in; the engine is not swept.
func randomScene(t *testing.T, seed uint64) (*scene, int64) {
	s := newScene(t, core.Config{})
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := []string{"a", "b", "c", "hot", "x\x00y"}
	id := core.RequestID(1)
	s.node.Grant(id, 100, 60)
	s.settle()
	step := func() {
		id++
		k, k2 := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
		switch rng.IntN(6) {
		case 0:
			s.propose(id, delOp(k))
		case 1:
			txn := &pb.TxnRequest{Success: []*pb.RequestOp{putOp(k, fmt.Sprint(id))}}
			if k2 != k {
				txn.Success = append(txn.Success, delOp(k2))
			}
			s.propose(id, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txn}})
		case 2:
			s.propose(id, putOp("hot", fmt.Sprint(id)))
		case 3:
			s.propose(id, putOpLease(k, fmt.Sprint(id), 100))
		default:
			s.propose(id, putOp(k, fmt.Sprint(id)))
		}
		s.settle()
	}
	for range 40 {
		step()
	}
	compacted := s.node.Committed() - int64(rng.IntN(10))
	for range 30 {
		step()
	}
	return s, compacted
}

// everyRevision reads every key at each revision of [from, to].
func everyRevision(t *testing.T, eng storage.Engine, from, to, compacted int64) []string {
	t.Helper()
	txn, err := eng.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	var out []string
	for rev := from; rev <= to; rev++ {
		resp, err := core.Range(storage.NewReader(txn), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev}, to, compacted)
		if err != nil {
			t.Fatalf("range at r%d: %v", rev, err)
		}
		out = append(out, fmt.Sprintf("r%d: %s", rev, kvsLeases(resp.Kvs)))
	}
	return out
}

// kvsLeases is kvs with each key's lease.
func kvsLeases(list []*mvccpb.KeyValue) string {
	var b strings.Builder
	for _, kv := range list {
		fmt.Fprintf(&b, "%s lease%d ", kvs([]*mvccpb.KeyValue{kv}), kv.Lease)
	}
	return b.String()
}

// TestExportAnswersAsRange: what Export gives, read back as etcd reads
// its key bucket, answers every revision from the compact revision to
// the head as Range does; every (Rev, Sub) is distinct; and the export
// is the same before the compaction's sweep ran as after it.
func TestExportAnswersAsRange(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			s, compacted := randomScene(t, seed)
			before := s.export(compacted)
			s.sweep(compacted, 4)
			after := s.export(compacted)
			if len(before) != len(after) {
				t.Fatalf("%d versions exported before the sweep, %d after", len(before), len(after))
			}
			seen := map[[2]int64]bool{}
			for i := range after {
				if core.DescribeVersion(before[i]) != core.DescribeVersion(after[i]) {
					t.Fatalf("version %d: %s before the sweep, %s after", i, core.DescribeVersion(before[i]), core.DescribeVersion(after[i]))
				}
				at := [2]int64{after[i].Rev, after[i].Sub}
				if seen[at] || after[i].Rev < 1 || after[i].Rev > s.node.Committed() {
					t.Fatalf("%s: revision taken twice or out of [1, %d]", core.DescribeVersion(after[i]), s.node.Committed())
				}
				seen[at] = true
			}
			for rev := compacted; rev <= s.node.Committed(); rev++ {
				want, err := s.rangeAt(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
				if err != nil {
					t.Fatal(err)
				}
				if got := replay(after, rev); kvs(got) != kvs(want.Kvs) {
					t.Fatalf("at r%d (compacted r%d): export gives %s, range %s", rev, compacted, kvs(got), kvs(want.Kvs))
				}
			}
		})
	}
}

// TestImportRebuildsExport: importing what Export gave, in etcd's order
// (by revision), into an empty engine gives a store that answers every
// revision since the compaction as the original does, recovers to the
// same head, compact revision and leases, and takes the next write at
// the next revision.
func TestImportRebuildsExport(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			s, compacted := randomScene(t, seed)
			s.sweep(compacted, 4)
			vs := s.export(compacted)
			slices.SortFunc(vs, func(a, b core.Version) int {
				return cmp.Or(cmp.Compare(a.Rev, b.Rev), cmp.Compare(a.Sub, b.Sub))
			})
			eng := memkv.New()
			txn, err := eng.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if empty, err := core.IsEmpty(storage.NewReader(txn)); err != nil || !empty {
				t.Fatalf("a new engine is empty: %v %v", empty, err)
			}
			im := core.NewImporter(compacted)
			var ws []core.Write
			for _, v := range vs {
				w, err := im.Add(v)
				if err != nil {
					t.Fatal(err)
				}
				ws = append(ws, w...)
			}
			orig, err := driver.Recover(context.Background(), s.eng)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, im.Finish(orig.Leases)...)
			for _, w := range ws {
				if err := txn.Set(w.Key, w.Value); err != nil {
					t.Fatal(err)
				}
			}
			if err := txn.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			st, err := driver.Recover(context.Background(), eng)
			if err != nil {
				t.Fatal(err)
			}
			if st.Committed != orig.Committed || st.Compacted != compacted || fmt.Sprint(st.Leases) != fmt.Sprint(orig.Leases) {
				t.Fatalf("imported store recovers to %+v, the original to %+v (compacted r%d)", st, orig, compacted)
			}
			got, want := everyRevision(t, eng, compacted, st.Committed, compacted), everyRevision(t, s.eng, compacted, st.Committed, compacted)
			if d := slices.Compare(got, want); d != 0 {
				t.Fatalf("imported store:\n%s\noriginal:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			n := core.NewNode(core.Config{}, st)
			n.Propose(1, putOp("after", "import"))
			dealt := int64(0)
			for _, w := range n.Ready().Work {
				if w.Kind == core.WorkRequest {
					dealt = w.Rev
				}
			}
			if dealt != st.Committed+1 {
				t.Fatalf("the first write after the import is dealt r%d, want r%d", dealt, st.Committed+1)
			}
		})
	}
}

// TestImportRefusesDisorder: versions out of revision order, or that
// contradict themselves, are refused with ErrBadRecord.
func TestImportRefusesDisorder(t *testing.T) {
	put := func(rev, sub int64, key string, create, version int64) core.Version {
		return core.Version{Rev: rev, Sub: sub, KV: &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: rev, CreateRevision: create, Version: version}}
	}
	for _, tc := range []struct {
		name string
		vs   []core.Version
	}{
		{"revision going back", []core.Version{put(5, 0, "a", 5, 1), put(4, 0, "b", 4, 1)}},
		{"sub going back", []core.Version{put(5, 1, "a", 5, 1), put(5, 0, "b", 5, 1)}},
		{"the same revision twice", []core.Version{put(5, 0, "a", 5, 1), put(5, 0, "b", 5, 1)}},
		{"mod revision elsewhere", []core.Version{{Rev: 3, KV: &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 2, CreateRevision: 2, Version: 1}}}},
		{"created later", []core.Version{put(3, 0, "a", 4, 1)}},
		{"version 0", []core.Version{put(3, 0, "a", 3, 0)}},
		{"no key", []core.Version{{Rev: 3, KV: &mvccpb.KeyValue{}}}},
		{"revision 0", []core.Version{put(0, 0, "a", 0, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := core.NewImporter(0)
			var err error
			for _, v := range tc.vs {
				if _, err = im.Add(v); err != nil {
					break
				}
			}
			if !errors.Is(err, core.ErrBadRecord) {
				t.Fatalf("import: %v, want ErrBadRecord", err)
			}
		})
	}
}
