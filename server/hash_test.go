package server_test

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/storage/memkv"
)

// TestMaintenanceHashAgreesAcrossInstances: Hash (python-etcd3's and
// etcdctl's consistency check) answers on every instance, the same at
// one revision, and moves with a write.
func TestMaintenanceHashAgreesAcrossInstances(t *testing.T) {
	c := startCluster(t, memkv.New(), 3)
	ctx := ctxT(t)
	w := c.client(c.endpoints()...)
	if _, err := w.Put(ctx, "/registry/a", "1"); err != nil {
		t.Fatal(err)
	}
	hashes := func() (map[uint32]bool, int64) {
		t.Helper()
		seen, rev := map[uint32]bool{}, int64(0)
		for _, in := range c.ins {
			resp, err := pb.NewMaintenanceClient(c.client(in.addr).ActiveConnection()).Hash(ctx, &pb.HashRequest{})
			if err != nil {
				t.Fatalf("Hash on %s: %v", in.name, err)
			}
			seen[resp.Hash] = true
			rev = max(rev, resp.Header.Revision)
		}
		return seen, rev
	}
	before, rev := hashes()
	if len(before) != 1 || rev < 2 {
		t.Fatalf("instances disagree (%v) or answer at r%d", before, rev)
	}
	if _, err := w.Put(ctx, "/registry/a", "2"); err != nil {
		t.Fatal(err)
	}
	after, _ := hashes()
	if len(after) != 1 {
		t.Fatalf("instances disagree after a write: %v", after)
	}
	for h := range after {
		if before[h] {
			t.Fatalf("the hash %x did not move with a write", h)
		}
	}
}
