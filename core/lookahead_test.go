package core_test

import (
	"bytes"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
)

// TestLookaheadPredictsTheVersionsACompareReads: the apiserver's create
// and update read the latest record only (their failure branch's get
// reads the value only on a conflict), so does a put; a put with
// prev_kv reads the newest version too, by a scan.
func TestLookaheadPredictsTheVersionsACompareReads(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("k", "v1"))
	s.settle()
	has := func(la core.Lookahead, key []byte) bool {
		return slices.ContainsFunc(la.Gets, func(g []byte) bool { return bytes.Equal(g, key) })
	}
	for i, tc := range []struct {
		name  string
		op    *pb.RequestOp
		want  [][]byte
		scans int
	}{
		{"a create", casOp("new", 0, "x"), [][]byte{core.LatestKey([]byte("new"))}, 0},
		{"an update", casOp("k", 1, "x"), [][]byte{core.LatestKey([]byte("k"))}, 0},
		{"a put", putOp("k", "y"), [][]byte{core.LatestKey([]byte("k"))}, 0},
		{"a put with prev_kv", &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("z"), PrevKv: true}}},
			[][]byte{core.LatestKey([]byte("k"))}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.t = t
			id := core.RequestID(10 + i)
			s.propose(id, tc.op)
			s.collect()
			w := s.takeReq(id)
			la := core.WorkLookahead(w)
			if len(la.Lasts) != tc.scans || len(la.Gets) != len(tc.want) {
				t.Errorf("predicted %q and %d scans; want %q and %d", la.Gets, len(la.Lasts), tc.want, tc.scans)
			}
			for _, k := range tc.want {
				if !has(la, k) {
					t.Errorf("no read of %q predicted in %q", k, la.Gets)
				}
			}
			s.run(w)
			s.settle()
		})
	}
}
