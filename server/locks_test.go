package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/tikv"
)

// commitTrap holds back the next Commit RPC once armed, as if its sender
// died between prewrite and commit: the transaction's locks stay behind.
type commitTrap struct {
	kvstore.Client
	armed  atomic.Bool
	sprung chan struct{}
}

func (c *commitTrap) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	if req.Type == tikvrpc.CmdCommit && c.armed.CompareAndSwap(true, false) {
		close(c.sprung)
		<-ctx.Done() // never sent
		return nil, ctx.Err()
	}
	return c.Client.SendRequest(ctx, addr, req, timeout)
}

// TestFailoverAfterALeaderDiedMidCommit: a leader killed between the
// prewrite and the commit of a write leaves locks on that write's keys,
// its revision record among them, with client-go's 3 s TTL. The successor
// settles them when it recovers, so its first write is acknowledged
// promptly instead of after the TTL (once 3.04 s of no writes).
func TestFailoverAfterALeaderDiedMidCommit(t *testing.T) {
	t.Run("with the tests' timings", func(t *testing.T) { failoverMidCommit(t, nil) })
	t.Run("with the default timings", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a takeover takes seconds")
		}
		failoverMidCommit(t, func(cfg *server.Config) {
			// axon serve's defaults.
			cfg.Lease, cfg.RenewEvery, cfg.MaxDrift, cfg.EngineDeadline = 3*time.Second, time.Second, 100*time.Millisecond, 2*time.Second
			cfg.TickInterval = 100 * time.Millisecond
		})
	})
}

func failoverMidCommit(t *testing.T, tweak func(*server.Config)) {
	trap := &commitTrap{sprung: make(chan struct{})}
	eng, err := tikv.NewMock(tikv.MockOptions{Regions: 4, Layout: core.RegionSplits, WrapClient: func(c kvstore.Client) kvstore.Client {
		trap.Client = c
		return trap
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	c := newCluster(t, eng, 3)
	c.tweak = tweak
	c.startAll()
	l := c.awaitLeader()
	victim := c.ins[l]
	var others []string
	for i, in := range c.ins {
		if i != l {
			others = append(others, in.addr)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lcli := c.client(victim.addr)
	if _, err := lcli.Put(ctx, "/registry/pods/ns/before", "v"); err != nil {
		t.Fatal(err)
	}

	trap.armed.Store(true)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		_, _ = lcli.Put(wctx, "/registry/pods/ns/dying", "v") // its commit never leaves
	}()
	select {
	case <-trap.sprung:
	case <-ctx.Done():
		t.Fatal("no commit to trap")
	}
	killed := time.Now()
	victim.stop()

	elected := time.Time{}
	for elected.IsZero() {
		for i, in := range c.ins {
			if i != l && in.up && in.srv.Leading() {
				elected = time.Now()
			}
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatal("no new leader 20 s after the kill")
		}
		time.Sleep(time.Millisecond)
	}
	cli := c.client(others...)
	var acked time.Time
	for i := 0; acked.IsZero(); i++ {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.Put(pctx, fmt.Sprintf("/registry/pods/ns/after-%d", i), "v")
		pcancel()
		if err == nil {
			acked = time.Now()
		} else if ctx.Err() != nil {
			t.Fatalf("no write acknowledged after the failover: %v", err)
		}
	}
	t.Logf("leader killed mid-commit: successor elected after %v, its first write acknowledged %v after that",
		elected.Sub(killed).Round(time.Millisecond), acked.Sub(elected).Round(time.Millisecond))
	// The dead transaction's locks would hold writes up for most of their
	// 3 s TTL; 1 s leaves room for a loaded machine.
	if d := acked.Sub(elected); d > time.Second {
		t.Errorf("first write %v after the election: the dead leader's locks held writes up", d)
	}
	if resp, err := cli.Get(ctx, "/registry/pods/ns/dying"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the write whose commit never left: %v, %v; want it rolled back", resp, err)
	}
}
