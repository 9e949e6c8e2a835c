package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// TestStatusInUse is `etcdctl endpoint status` on a store with deleted
// data: IN USE is below DB SIZE; a compaction lowers IN USE (the deleted
// values are gone from what a defragmentation keeps), and a
// defragmentation then lowers DB SIZE, both below where they were.
// The metrics say the same as Status.
func TestStatusInUse(t *testing.T) {
	dir := t.TempDir()
	eng, err := badgerkv.Open(dir, badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, cli, _ := serveEngine(t, eng, server.Config{Core: core.Config{RingSize: 64}, MemberID: 9,
		Quota: server.Quota{Dir: dir, MinFree: -1}})
	ctx := ctxT(t)
	endpoint := cli.Endpoints()[0]

	value := strings.Repeat("x", 64<<10)
	for i := range 300 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/big/%d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "/big/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/small", "v"); err != nil {
		t.Fatal(err)
	}
	status := func(what string) (size, inUse int64) {
		t.Helper()
		st, err := cli.Status(ctx, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-18s DB SIZE %9d  IN USE %9d", what, st.DbSize, st.DbSizeInUse)
		if st.DbSizeInUse > st.DbSize || st.DbSizeInUse <= 0 {
			t.Errorf("%s: in use %d outside (0, db size %d]", what, st.DbSizeInUse, st.DbSize)
		}
		return st.DbSize, st.DbSizeInUse
	}
	size0, inUse0 := status("deleted")
	if inUse0 >= size0 {
		t.Errorf("with deleted data IN USE %d is not below DB SIZE %d", inUse0, size0)
	}
	if inUse0 < 300*int64(len(value)) {
		t.Errorf("IN USE %d before compaction is below the history it holds (%d bytes of values)", inUse0, 300*len(value))
	}

	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// The estimate is a scan repeated every few seconds at most.
	var size1, inUse1 int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		size1, inUse1 = status("compacted")
		if inUse1 < inUse0/2 || time.Now().After(deadline) {
			break
		}
	}
	if inUse1 >= inUse0/2 {
		t.Errorf("compaction left IN USE at %d (from %d): the deleted values should be out of it", inUse1, inUse0)
	}

	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
	size2, inUse2 := status("defragmented")
	if size2 >= size0 || size2 >= size1 {
		t.Errorf("defragmentation left DB SIZE at %d (from %d, %d after compaction)", size2, size0, size1)
	}
	if inUse2 >= inUse0 {
		t.Errorf("IN USE %d after compaction and defragmentation, not below %d", inUse2, inUse0)
	}

	m := scrape(t, srv)
	msize, _ := sum(m, "etcd_mvcc_db_total_size_in_bytes")
	minUse, _ := sum(m, "etcd_mvcc_db_total_size_in_use_in_bytes")
	if minUse > msize || minUse >= float64(inUse0) {
		t.Errorf("metrics: size %v, in use %v; want in use <= size and below %d", msize, minUse, inUse0)
	}
}
