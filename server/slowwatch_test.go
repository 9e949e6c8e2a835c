package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
)

// TestSlowWatcherIsCutOffOthersKeepUp: a client that stops reading its
// watch stream (a small flow-control window, so the server's sends block)
// while 200 events of 8 KiB go by is canceled as too slow once its stream
// holds WatchQueue responses; a watcher reading normally gets every event
// meanwhile. The slow client, reading again, gets the events queued
// before the cancellation, contiguous from where it started, then the
// cancellation with its reason; resuming after its last event it gets
// the rest, so nothing is lost.
func TestSlowWatcherIsCutOffOthersKeepUp(t *testing.T) {
	_, cli := startServer(t, server.Config{Core: core.Config{RingSize: 1024}, WatchQueue: 16})
	ctx := ctxT(t)
	start, err := cli.Put(ctx, "/s/start", "x")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1
	cc, err := grpc.NewClient(cli.Endpoints()[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	slow, err := pb.NewWatchClient(cc).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte("/s/"), RangeEnd: []byte("/s0"), StartRevision: from}}}
	if err := slow.Send(create); err != nil {
		t.Fatal(err)
	}
	if r, err := slow.Recv(); err != nil || !r.Created {
		t.Fatalf("slow watch: %v, %v", r, err)
	}
	fast := cli.Watch(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithRev(from))
	const n = 200
	value := strings.Repeat("v", 8<<10)
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("/s/%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	// The reading watcher gets everything while the other is not read.
	for got := 0; got < n; {
		select {
		case r := <-fast:
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			got += len(r.Events)
		case <-time.After(10 * time.Second):
			t.Fatalf("the reading watcher got %d of %d events: held up by the slow one", got, n)
		}
	}
	// The slow one reads again: events in order, then its cancellation.
	next := from
	for {
		r, err := slow.Recv()
		if err != nil {
			t.Fatalf("slow watcher after %d events: %v", next-from, err)
		}
		if r.Canceled {
			if !strings.Contains(r.CancelReason, "too slow") {
				t.Fatalf("canceled with %q, want a slow watcher's reason", r.CancelReason)
			}
			break
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("slow watcher: event at r%d, want r%d", ev.Kv.ModRevision, next)
			}
			next++
		}
	}
	if next-from >= n {
		t.Fatalf("the slow watcher got all %d events: it was never behind", n)
	}
	t.Logf("slow watcher cut off after %d of %d events", next-from, n)
	rest := cli.Watch(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithRev(next))
	for next < from+n {
		r := <-rest
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("resumed watcher: event at r%d, want r%d", ev.Kv.ModRevision, next)
			}
			next++
		}
	}
}
