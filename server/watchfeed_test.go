package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axon-kv/axon/storage/memkv"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// pinnedWatcher is a prev_kv prefix watch of one instance, through a
// client that knows that instance alone and counts the Watch streams it
// opens: more than one means its stream broke and clientv3 resumed it.
type pinnedWatcher struct {
	at      int // the instance
	streams atomic.Int64
	wch     clientv3.WatchChan
	events  []*clientv3.Event
}

func watchPinned(t *testing.T, c *testCluster, i int, ctx context.Context, prefix string, from int64) *pinnedWatcher {
	t.Helper()
	pw := &pinnedWatcher{at: i}
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == "/etcdserverpb.Watch/Watch" {
			pw.streams.Add(1)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.ins[i].addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	pw.wch = cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from))
	return pw
}

// TestWatchesOutliveTheLeader: a watch served by an instance that lives
// goes on across the leader's death, twice: one stream, no cancel, no
// error, every event once and in order with its prev_kv, as on an etcd
// follower. Each key is created and then updated by a guarded txn, so a
// write retried after a failover applies once.
func TestWatchesOutliveTheLeader(t *testing.T) {
	c := startCluster(t, newEngine(t), 3)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	writer := c.client(c.endpoints()...)
	start, err := writer.Put(ctx, "/wf-start", "")
	if err != nil {
		t.Fatal(err)
	}
	var watchers []*pinnedWatcher
	for i := range c.ins {
		watchers = append(watchers, watchPinned(t, c, i, ctx, "/wf/", start.Header.Revision+1))
	}
	const keys = 40
	killed := map[int]bool{}
	write := func(phase int) {
		for k := range keys {
			key := fmt.Sprintf("/wf/k%02d", k)
			for attempt := 0; ; attempt++ {
				var err error
				if phase == 0 {
					_, err = writer.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
						Then(clientv3.OpPut(key, "v0")).Commit()
				} else {
					_, err = writer.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", fmt.Sprintf("v%d", phase-1))).
						Then(clientv3.OpPut(key, fmt.Sprintf("v%d", phase))).Commit()
				}
				if err == nil {
					break
				}
				if attempt > 100 || ctx.Err() != nil {
					t.Fatalf("phase %d, %s: %v", phase, key, err)
				}
				time.Sleep(50 * time.Millisecond) // a failover is under way
			}
		}
	}
	const phases = 3
	for phase := range phases {
		if phase > 0 {
			l := c.awaitLeader()
			c.ins[l].stop()
			killed[l] = true
			t.Logf("phase %d: killed the leader %s", phase, c.ins[l].name)
			if phase == 1 {
				c.start(l) // back on a new port, for the next kill to leave two
			}
			writer.SetEndpoints(c.endpoints()...)
		}
		write(phase)
	}
	// Each key's events, in order: its create (no prev_kv), then its
	// updates, each with the value before it.
	for _, pw := range watchers {
		if killed[pw.at] {
			continue
		}
		need := keys * phases
		var last int64
		for len(pw.events) < need {
			var wr clientv3.WatchResponse
			select {
			case wr = <-pw.wch:
			case <-ctx.Done():
				t.Fatalf("%s's watcher: %d of %d events before the deadline", c.ins[pw.at].name, len(pw.events), need)
			}
			if err := wr.Err(); err != nil || wr.Canceled {
				t.Fatalf("%s's watcher ended: canceled=%v err=%v", c.ins[pw.at].name, wr.Canceled, err)
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision <= last {
					t.Fatalf("%s's watcher: r%d after r%d", c.ins[pw.at].name, ev.Kv.ModRevision, last)
				}
				last = ev.Kv.ModRevision
				pw.events = append(pw.events, ev)
			}
		}
		seen := map[string]int{}
		for _, ev := range pw.events {
			key := string(ev.Kv.Key)
			phase := seen[key]
			seen[key]++
			if ev.Type != mvccpb.PUT || string(ev.Kv.Value) != fmt.Sprintf("v%d", phase) {
				t.Fatalf("%s's watcher: event %d of %s is %s %q, want put v%d", c.ins[pw.at].name, phase, key, ev.Type, ev.Kv.Value, phase)
			}
			switch {
			case phase == 0 && ev.PrevKv != nil:
				t.Fatalf("%s's watcher: the create of %s has a prev_kv", c.ins[pw.at].name, key)
			case phase > 0 && (ev.PrevKv == nil || string(ev.PrevKv.Value) != fmt.Sprintf("v%d", phase-1)):
				t.Fatalf("%s's watcher: update %d of %s has prev_kv %v", c.ins[pw.at].name, phase, key, ev.PrevKv)
			}
		}
		if n := pw.streams.Load(); n != 1 {
			t.Errorf("%s's watcher opened %d streams: its stream broke across the leader's death", c.ins[pw.at].name, n)
		}
		t.Logf("%s's watcher: %d events on one stream across %d leader deaths", c.ins[pw.at].name, len(pw.events), phases-1)
	}
}

// TestWatchesRelayedToALeaderWithoutFeeds: in a rolling upgrade a leader
// of an older binary answers the Follow stream Unimplemented; a follower
// then relays its clients' watch streams to it, as before, and they get
// their events.
func TestWatchesRelayedToALeaderWithoutFeeds(t *testing.T) {
	c := newCluster(t, memkv.New(), 3)
	c.startAll()
	for _, in := range c.ins {
		in.srv.RefuseFollow()
	}
	// A new leader, refusing from its first feed on.
	l := c.awaitLeader()
	c.ins[l].stop()
	c.start(l)
	c.ins[l].srv.RefuseFollow()
	l = c.awaitLeader()
	f := (l + 1) % 3
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(c.ins[f].addr)
	wch := cli.Watch(ctx, "/old/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	writer := c.client(c.endpoints()...)
	for i := range 5 {
		if _, err := writer.Put(ctx, fmt.Sprintf("/old/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for got < 5 {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			got += len(wr.Events)
		case <-ctx.Done():
			t.Fatalf("%d of 5 events through %s, whose leader serves no feed", got, c.ins[f].name)
		}
	}
}
