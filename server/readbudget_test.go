package server_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/badger"
)

// TestConcurrentListsUnderATinyReadBudget lists a range of 2 MiB from
// eight clients at once through a budget of 1 MiB: every list completes
// whole and right, while writes go on, and the budget is all given back.
func TestConcurrentListsUnderATinyReadBudget(t *testing.T) {
	eng, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, cli, stop := serveEngine(t, eng, server.Config{ReadMemory: 1 << 20})
	defer stop()
	ctx := t.Context()
	const n = 2000
	val := strings.Repeat("v", 1024)
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/big/%05d", j), val))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 8 {
		wg.Go(func() {
			for range 3 {
				resp, err := cli.Get(ctx, "/big/", clientv3.WithPrefix())
				if err != nil {
					errs <- err
					return
				}
				if len(resp.Kvs) != n || resp.Count != n {
					errs <- fmt.Errorf("list %d: %d kvs, count %d, want %d", c, len(resp.Kvs), resp.Count, n)
					return
				}
				for i, kv := range resp.Kvs {
					if string(kv.Key) != fmt.Sprintf("/big/%05d", i) || len(kv.Value) != len(val) {
						errs <- fmt.Errorf("list %d: kv %d is %q (%d bytes)", c, i, kv.Key, len(kv.Value))
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/w/%d", i), "x"); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.ReadMemoryInUse() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reads still hold %v bytes of the budget after they all ended", s.ReadMemoryInUse())
		}
	}
	rec := httptest.NewRecorder()
	s.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "axon_read_memory_limit_bytes 1.048576e+06") {
		t.Errorf("metrics lack the read budget's limit:\n%s", rec.Body.String())
	}
}
