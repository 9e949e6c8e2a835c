package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/internal/fsutil"
)

// diskWrites is what process pid has sent to the disk.
func diskWrites(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := fsutil.Written(pid)
	if err != nil {
		t.Skip(err)
	}
	return n
}

// TestDiskBytesPerCreate: 60,000 creates of 512 B from 64 clients make the
// server send a few KiB per create to the disk. Badger msyncs its whole
// log mapping per commit; before the engine advised the mapping
// MADV_RANDOM, ext4's large folios made that about 45 KB per create on
// this kind of machine (etcd: 1.9 KB).
func TestDiskBytesPerCreate(t *testing.T) {
	cmd, cli, ctx := serveBinary(t)
	clis := dial(t, cli, 8)
	const creates, clients = 60000, 64
	before := diskWrites(t, cmd.Process.Pid)
	done := createKeys(t, ctx, clis, "/registry/configmaps/disk/", creates, clients)
	perCreate := (diskWrites(t, cmd.Process.Pid) - before) / done
	t.Logf("%d creates: %d B sent to the disk per create", done, perCreate)
	if perCreate > 8<<10 {
		t.Errorf("%d B sent to the disk per create of 512 B", perCreate)
	}
}

// createKeys creates n keys of 512 B under prefix with Kubernetes' create
// (a Txn on CreateRevision 0) from the given number of clients spread over
// clis, and returns how many it created; any failure fails the test.
func createKeys(t *testing.T, ctx context.Context, clis []*clientv3.Client, prefix string, n, clients int) int64 {
	t.Helper()
	value := strings.Repeat("v", 512)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			kv := clis[c%len(clis)]
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				key := fmt.Sprintf("%s%06d", prefix, i)
				r, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Commit()
				if err != nil || !r.Succeeded {
					errs <- fmt.Errorf("create %s: %v (succeeded %v)", key, err, r != nil && r.Succeeded)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return done.Load()
}
