package server_test

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPaginatedListAtARevision lists a range page by page at a fixed
// revision while later writes change and delete keys in it: every page
// must hold the next keys alive at that revision, with etcd's count of
// the keys from the page's start to the range end.
func TestPaginatedListAtARevision(t *testing.T) {
	cli := start(t, t.TempDir())
	ctx := t.Context()
	const n = 1000
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/l/%04d", j), fmt.Sprint("v", j)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Dead at the listed revision: every seventh key.
	for i := 0; i < n; i += 7 {
		if _, err := cli.Delete(ctx, fmt.Sprintf("/l/%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	head, err := cli.Get(ctx, "/l/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	rev := head.Header.Revision
	var want []string
	for i := 0; i < n; i++ {
		if i%7 != 0 {
			want = append(want, fmt.Sprintf("/l/%04d", i))
		}
	}
	if head.Count != int64(len(want)) {
		t.Fatalf("count %d, want %d", head.Count, len(want))
	}
	// After the listed revision: rewrite every fifth key, delete every
	// eleventh, recreate a few deleted ones.
	for i := 0; i < n; i++ {
		var err error
		switch {
		case i%11 == 0:
			_, err = cli.Delete(ctx, fmt.Sprintf("/l/%04d", i))
		case i%5 == 0 || i%49 == 0:
			_, err = cli.Put(ctx, fmt.Sprintf("/l/%04d", i), "later")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int64{1, 37, 100, 500} {
		key, got := "/l/", 0
		for pages := 0; ; pages++ {
			if pages > n {
				t.Fatalf("limit %d: no end", limit)
			}
			resp, err := cli.Get(ctx, key, clientv3.WithRange(clientv3.GetPrefixRangeEnd("/l/")), clientv3.WithLimit(limit), clientv3.WithRev(rev))
			if err != nil {
				t.Fatal(err)
			}
			if wantCount := int64(len(want) - got); resp.Count != wantCount {
				t.Fatalf("limit %d page %d: count %d, want %d", limit, pages, resp.Count, wantCount)
			}
			if wantLen := min(int(limit), len(want)-got); len(resp.Kvs) != wantLen {
				t.Fatalf("limit %d page %d: %d kvs, want %d", limit, pages, len(resp.Kvs), wantLen)
			}
			for _, kv := range resp.Kvs {
				if string(kv.Key) != want[got] || string(kv.Value) == "later" || kv.ModRevision > rev {
					t.Fatalf("limit %d: got %s=%s@%d, want %s as of %d", limit, kv.Key, kv.Value, kv.ModRevision, want[got], rev)
				}
				got++
			}
			if resp.More != (got < len(want)) {
				t.Fatalf("limit %d: more=%v after %d of %d", limit, resp.More, got, len(want))
			}
			if !resp.More {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		if got != len(want) {
			t.Fatalf("limit %d: listed %d, want %d", limit, got, len(want))
		}
	}
}
