package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRequestProgressMatchesEtcd: RequestProgress on a stream with a
// watch behind on nothing answers after the watch's events, at the
// revision of the last write, as etcd does; Axon answers through the
// node once the watch is synced (no polling), and both are compared.
func TestRequestProgressMatchesEtcd(t *testing.T) {
	run := func(cli *clientv3.Client) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start, err := cli.Put(ctx, "/p/start", "x")
		if err != nil {
			t.Fatal(err)
		}
		wch := cli.Watch(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1))
		var last int64
		for i := range 3 {
			r, err := cli.Put(ctx, fmt.Sprintf("/p/%d", i), "v")
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		}
		if err := cli.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		var seen []string
		events := 0
		for wr := range wch {
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			if wr.IsProgressNotify() {
				if events != 3 {
					t.Fatalf("progress after %d of 3 events", events)
				}
				if wr.Header.Revision != last {
					t.Fatalf("progress at r%d, last write r%d", wr.Header.Revision, last)
				}
				seen = append(seen, "progress at the last write")
				return strings.Join(seen, ", ")
			}
			events += len(wr.Events)
			seen = append(seen, fmt.Sprintf("%d events", len(wr.Events)))
		}
		t.Fatal("watch ended without a progress notification")
		return ""
	}
	want, got := run(startEtcd(t)), run(start(t, t.TempDir()))
	// Batching of events into responses may differ; the order may not.
	if !strings.HasSuffix(want, "progress at the last write") || !strings.HasSuffix(got, "progress at the last write") {
		t.Fatalf("etcd: %s\naxon: %s", want, got)
	}
}
