package server_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
)

// TestFloodIsAnsweredTooManyRequests: past the bound on pending writes a
// write is refused at once with etcd's "too many requests" (which clients
// retry), not queued without bound; the rest complete.
func TestFloodIsAnsweredTooManyRequests(t *testing.T) {
	_, cli := startServer(t, server.Config{Core: core.Config{RingSize: 64, MaxPending: 4}})
	ctx := ctxT(t)
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		ok, refused   int
		unexpectedErr error
	)
	for i := range 64 {
		wg.Go(func() {
			_, err := cli.Put(ctx, "/hot", fmt.Sprint(i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, rpctypes.ErrTooManyRequests):
				refused++
			default:
				unexpectedErr = err
			}
		})
	}
	wg.Wait()
	if unexpectedErr != nil {
		t.Fatal(unexpectedErr)
	}
	t.Logf("%d written, %d refused", ok, refused)
	if ok == 0 || refused == 0 {
		t.Fatalf("%d written, %d refused: want both", ok, refused)
	}
	r, err := cli.Get(ctx, "/hot")
	if err != nil || r.Kvs[0].Version != int64(ok) {
		t.Fatalf("version %v after %d acknowledged puts: %v", r.Kvs, ok, err)
	}
}
