package core_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
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

// TestExportAnswersAsRange: what Export gives, read back as etcd reads
// its key bucket, answers every revision from the compact revision to
// the head as Range does; every (Rev, Sub) is distinct; and the export
// is the same before the compaction's sweep ran as after it.
func TestExportAnswersAsRange(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			s := newScene(t, core.Config{})
			rng := rand.New(rand.NewPCG(seed, 1))
			keys := []string{"a", "b", "c", "hot", "x\x00y"}
			id := core.RequestID(0)
			step := func() {
				id++
				k, k2 := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
				switch rng.IntN(5) {
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
