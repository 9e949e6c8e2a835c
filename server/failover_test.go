package server_test

// Multi-instance fault tests: three Axon instances over one
// engine serve a Kubernetes-like load from clients that know every
// endpoint, while the test kills the leader, moves leadership or cuts a
// follower off the leader. Every client call goes into a history that the
// linearizability checkers judge against the engine's ground truth, and
// every watch stream is checked for etcd's guarantees.
//
// Knobs: AXON_FAILOVER_KILLS (leader kills in TestFailoverKillLeader,
// default 3), AXON_FAILOVER_TRANSFERS (MoveLeader calls, default 5),
// AXON_FAILOVER_PORCUPINE (porcupine's time budget, default 8s; 0 skips
// it), AXON_FAILOVER_HTML (write porcupine's visualisation there when it
// finds a violation).

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/faultload"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
	"github.com/axon-kv/axon/storage/tikv"
)

// newEngine returns the engine a fault test's instances share:
// client-go's in-process TiKV cluster (real 2PC, lock resolution and
// region routing), with the load's keys spread over several regions.
// Kills leave half-done commits whose locks stall the next requests past
// their deadlines; the mock survives that only because NewMock makes
// client-go see its store as live (else the engine wedges for good).
func newEngine(t testing.TB) storage.Engine {
	t.Helper()
	var sample [][]byte
	for _, k := range faultload.Keys {
		sample = append(sample, []byte(k))
	}
	eng, err := tikv.NewMock(tikv.MockOptions{Regions: 4, Layout: core.RegionSplits, Sample: sample})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

func TestFailoverKillLeader(t *testing.T) {
	killLeaders(t, startCluster(t, newEngine(t), 3), faultload.EnvInt(t, "AXON_FAILOVER_KILLS", 3))
}

// killLeaders kills the leader of c under load kills times, restarting
// each victim, and checks the history.
func killLeaders(t *testing.T, c *testCluster, kills int) {
	ld := faultload.Start(t, c)
	ld.AwaitWrites(ld.Now(), 150)
	for k := range kills {
		l := c.awaitLeader()
		victim := c.ins[l]
		at := ld.Now()
		victim.stop() // kill -9: the engine stays
		ld.Mark(at, "kill "+victim.name)
		nl := c.awaitLeader()
		t.Logf("kill %d: %s killed at %v, %s leads after %v", k+1, victim.name, time.Duration(at).Round(time.Millisecond),
			c.ins[nl].name, time.Duration(ld.Now()-at).Round(time.Millisecond))
		c.start(l) // on a new port
		ld.SetEndpoints(c.endpoints())
		ld.AwaitWrites(ld.Now(), 150)
	}
	res := ld.Finish(c.eng)
	res.LogWindows(t, "leader kill")
	t.Logf("%d kills: %d client errors (%s); %d watch relists", kills, res.Errors, faultload.DescribeErrors(res.Errs), res.Relists)
}

func TestFailoverMoveLeader(t *testing.T) {
	transfers := faultload.EnvInt(t, "AXON_FAILOVER_TRANSFERS", 5)
	c := startCluster(t, newEngine(t), 3)
	ld := faultload.Start(t, c)
	admin := c.client(c.endpoints()...)
	ld.AwaitWrites(ld.Now(), 150)
	for i := range transfers {
		l := c.awaitLeader()
		to := c.ins[(l+1+i%2)%3]
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		st, err := admin.Status(ctx, to.addr)
		if err != nil {
			cancel()
			t.Fatalf("status of %s: %v", to.name, err)
		}
		at := ld.Now()
		_, err = admin.MoveLeader(ctx, st.Header.MemberId)
		cancel()
		if err != nil {
			t.Fatalf("move leader to %s: %v", to.name, err)
		}
		ld.Mark(at, "move to "+to.name)
		if got := c.awaitLeader(); c.ins[got] != to {
			t.Fatalf("after moving to %s, %s leads", to.name, c.ins[got].name)
		}
		ld.AwaitWrites(ld.Now(), 150)
	}
	res := ld.Finish(c.eng)
	res.LogWindows(t, "leader transfer")
	// A graceful transfer is invisible to clients: no failed call and
	// no watch that had to be listed again.
	if res.Errors > 0 {
		t.Errorf("%d client-visible errors during graceful transfers: %s", res.Errors, faultload.DescribeErrors(res.Errs))
	}
	if res.Relists > 0 {
		t.Errorf("%d watches ended during graceful transfers and had to relist", res.Relists)
	}
}

func TestFailoverPartitionFollower(t *testing.T) {
	c := startCluster(t, newEngine(t), 3)
	ld := faultload.Start(t, c)
	ld.AwaitWrites(ld.Now(), 150)
	for i := range 2 {
		l := c.awaitLeader()
		f := c.ins[(l+1+i)%3]
		at := ld.Now()
		// Cut for 3s, longer than a follower waits for a leader
		// (failoverWait: 2.5s here), so both the waiting and the giving
		// up show.
		f.srv.DropPeerConnections(time.Minute)
		ld.Mark(at, "cut "+f.name)
		ld.During(3 * time.Second)
		f.srv.DropPeerConnections(0)
		ld.AwaitWrites(ld.Now(), 150)
		// The healed follower serves writes again.
		if err := ld.Put(c.client(f.addr), fmt.Sprintf("/healed/%d", i), f.name); err != nil {
			t.Fatalf("put through %s after healing: %v", f.name, err)
		}
		if got := c.awaitLeader(); got != l {
			t.Logf("leadership moved from %s to %s during the cut", c.ins[l].name, c.ins[got].name)
		}
	}
	// Flaps: a follower's connections to the leader drop again and
	// again, failing the calls it forwarded in flight (outcome unknown).
	l := c.awaitLeader()
	f := c.ins[(l+1)%3]
	ld.Mark(ld.Now(), "flaps of "+f.name)
	for range 40 {
		f.srv.DropPeerConnections(0)
		ld.During(25 * time.Millisecond)
	}
	ld.AwaitWrites(ld.Now(), 150)
	res := ld.Finish(c.eng)
	t.Logf("2 partitions and 40 flaps: %d client errors (%s); %d watch relists", res.Errors, faultload.DescribeErrors(res.Errs), res.Relists)
}

// TestFailoverWatchProgressOrder is the regression test for a bug the
// partition test found: a progress notification (RequestProgress) could
// reach a watcher before the events of the revision it announced, when it
// was answered between a commit report and the delivery of that commit's
// events. clientv3 resumes a broken stream after the progress revision,
// so those events would be lost. memkv: it needs many commits per second.
func TestFailoverWatchProgressOrder(t *testing.T) {
	c := startCluster(t, memkv.New(), 1)
	cli := c.client(c.endpoints()...)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wch := cli.Watch(ctx, "/p/", clientv3.WithPrefix())
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = cli.Put(ctx, fmt.Sprintf("/p/k%d", i), "v")
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_ = cli.RequestProgress(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	var progress, events, notes int64
	for wr := range wch {
		if wr.IsProgressNotify() {
			progress = max(progress, wr.Header.Revision)
			notes++
			continue
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision <= progress {
				t.Fatalf("event r%d delivered after progress notification r%d", ev.Kv.ModRevision, progress)
			}
			events++
		}
	}
	if events == 0 || notes == 0 {
		t.Fatalf("%d events and %d progress notifications: the test did not run", events, notes)
	}
	t.Logf("%d events, %d progress notifications, none ahead", events, notes)
}
