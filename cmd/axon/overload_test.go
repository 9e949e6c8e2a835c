package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// memory reads a process's resident set size and its peak (VmRSS and
// VmHWM), in bytes.
func memory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	st, err := p.NewStatus()
	if err != nil {
		t.Fatalf("read the status of %d: %v", pid, err)
	}
	return int64(st.VmRSS), int64(st.VmHWM)
}

// resetPeak starts a new peak RSS measurement for pid (clear_refs 5).
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// serveBinary builds axon and serves a new data dir with flags added,
// killed at cleanup; ctx bounds the test at five minutes.
func serveBinary(t *testing.T, flags ...string) (*exec.Cmd, *clientv3.Client, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cmd, cli := startServe(t, buildAxon(t), t.TempDir(), flags...)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return cmd, cli, ctx
}

// dial opens n more clients to the server cli talks to.
func dial(t *testing.T, cli *clientv3.Client, n int) []*clientv3.Client {
	t.Helper()
	clis := make([]*clientv3.Client, n)
	for i := range clis {
		c, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		clis[i] = c
		t.Cleanup(func() { c.Close() })
	}
	return clis
}

// Memory bounds the overload tests hold the server to (peak RSS), with
// default settings. The list's is the largest because 100k writes alone
// leave the server at about 900 MiB (Badger's memtables and table
// builders, and the garbage Go's GC lets accumulate at GOGC=100; with
// GOMEMLIMIT=384MiB the same writes peak at about 470 MiB).
const (
	overloadRSSBound = 512 << 20
	floodRSSBound    = 768 << 20
	listRSSBound     = 1536 << 20
)

// TestOverloadIsRefusedNotQueued: 2,000 concurrent clients over 100
// connections write, read and increment one hot counter by CAS against
// small --max-inflight-requests and --max-pending-writes bounds. Refused
// requests get etcd's "too many requests" and were not applied; every
// acknowledged write is there; no CAS increment is lost; nothing times
// out; Status answers throughout; the server's peak RSS stays under
// overloadRSSBound.
func TestOverloadIsRefusedNotQueued(t *testing.T) {
	cmd, cli, ctx := serveBinary(t, "--max-inflight-requests", "64", "--max-pending-writes", "128", "--max-concurrent-streams", "64")
	if _, err := cli.Put(ctx, "/hot", "0"); err != nil {
		t.Fatal(err)
	}
	clis := dial(t, cli, 100)
	var (
		mu                            sync.Mutex
		acked, refused                = map[string]bool{}, map[string]bool{}
		increments, refusals, timeout int
		wrong                         error
	)
	record := func(err error) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			return true
		case errors.Is(err, rpctypes.ErrTooManyRequests):
			refusals++
		case errors.Is(err, context.DeadlineExceeded):
			timeout++
		default:
			wrong = err
		}
		return false
	}
	value := strings.Repeat("v", 1024)
	stop := make(chan struct{})
	statusDone := make(chan error, 1)
	go func() { // an operator looking at the overloaded instance
		defer close(statusDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cli.Status(sctx, cli.Endpoints()[0])
			scancel()
			if err != nil {
				statusDone <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range 2000 {
		c := clis[i%len(clis)]
		wg.Go(func() {
			for j := range 5 {
				key := fmt.Sprintf("/o/%04d/%d", i, j)
				octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := c.Put(octx, key, value)
				if record(err) {
					mu.Lock()
					acked[key] = true
					mu.Unlock()
				} else if errors.Is(err, rpctypes.ErrTooManyRequests) {
					mu.Lock()
					refused[key] = true
					mu.Unlock()
				}
				if r, err := c.Get(octx, "/hot"); record(err) {
					n, _ := strconv.Atoi(string(r.Kvs[0].Value))
					tr, err := c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision("/hot"), "=", r.Kvs[0].ModRevision)).
						Then(clientv3.OpPut("/hot", strconv.Itoa(n+1))).Commit()
					if record(err) && tr.Succeeded {
						mu.Lock()
						increments++
						mu.Unlock()
					}
				}
				ocancel()
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-statusDone; err != nil {
		t.Fatalf("status under overload: %v", err)
	}
	_, peak := memory(t, cmd.Process.Pid)
	t.Logf("2,000 clients: %d puts acknowledged, %d refused, %d CAS increments, %d refusals in all, %d timeouts; peak RSS %d MiB",
		len(acked), len(refused), increments, refusals, timeout, peak>>20)
	if wrong != nil {
		t.Fatalf("an error other than etcd's too many requests: %v", wrong)
	}
	if timeout > 0 {
		t.Fatalf("%d requests timed out: overload must be refused, not queued", timeout)
	}
	if refusals == 0 {
		t.Fatal("nothing was refused: the bounds were not reached")
	}
	for key := range acked {
		if r, err := cli.Get(ctx, key); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("acknowledged %s: %v, %v", key, r, err)
		}
	}
	for key := range refused {
		if r, err := cli.Get(ctx, key); err != nil || len(r.Kvs) != 0 {
			t.Fatalf("refused %s was applied: %v, %v", key, r, err)
		}
	}
	if r, err := cli.Get(ctx, "/hot"); err != nil || string(r.Kvs[0].Value) != strconv.Itoa(increments) {
		t.Fatalf("hot counter %v after %d acknowledged increments: %v", r, increments, err)
	}
	if peak > overloadRSSBound {
		t.Fatalf("peak RSS %d MiB, bound %d MiB", peak>>20, overloadRSSBound>>20)
	}
}

// TestWatchFloodStaysBounded: 10,000 watchers on one connection and
// 10,000 more across 1,000 connections, then a write to every watched
// key: every watcher gets its event, and the server's peak RSS stays
// under floodRSSBound.
func TestWatchFloodStaysBounded(t *testing.T) {
	cmd, cli, ctx := serveBinary(t)
	_, before := memory(t, cmd.Process.Pid)
	one := dial(t, cli, 1)[0]
	many := dial(t, cli, 1000)
	type watcher struct {
		key string
		ch  clientv3.WatchChan
	}
	var ws []watcher
	for i := range 10000 {
		key := fmt.Sprintf("/flood/one/%05d", i)
		ws = append(ws, watcher{key, one.Watch(ctx, key, clientv3.WithCreatedNotify())})
	}
	for i := range 10000 {
		key := fmt.Sprintf("/flood/many/%05d", i)
		ws = append(ws, watcher{key, many[i%len(many)].Watch(ctx, key, clientv3.WithCreatedNotify())})
	}
	for _, w := range ws {
		if r := <-w.ch; !r.Created {
			t.Fatalf("watch on %s: %v", w.key, r.Err())
		}
	}
	_, created := memory(t, cmd.Process.Pid)
	for i := 0; i < len(ws); i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for _, w := range ws[i:min(i+100, len(ws))] {
			ops = append(ops, clientv3.OpPut(w.key, w.key))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		r := <-w.ch
		if err := r.Err(); err != nil || len(r.Events) != 1 || string(r.Events[0].Kv.Value) != w.key {
			t.Fatalf("watcher on %s got %v, %v", w.key, r.Events, err)
		}
	}
	_, peak := memory(t, cmd.Process.Pid)
	t.Logf("20,000 watchers (10,000 on one connection, 10,000 on 1,000): peak RSS %d MiB at start, %d MiB with the watchers created, %d MiB after every one got its event",
		before>>20, created>>20, peak>>20)
	if peak > floodRSSBound {
		t.Fatalf("peak RSS %d MiB, bound %d MiB", peak>>20, floodRSSBound>>20)
	}
}

// TestListOf100kStaysBounded lists 100,000 objects of 1 KiB (about the
// size of Kubernetes objects) in one range, as the apiserver's first
// list of a big resource does: all come back, and the server's peak RSS
// during the list stays under listRSSBound.
func TestListOf100kStaysBounded(t *testing.T) {
	cmd, cli, ctx := serveBinary(t)
	value := strings.Repeat("o", 1024)
	const n = 100000
	for i := 0; i < n; i += 128 {
		ops := make([]clientv3.Op, 0, 128)
		for j := i; j < min(i+128, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/pods/ns/%06d", j), value))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	rss, _ := memory(t, cmd.Process.Pid)
	resetPeak(t, cmd.Process.Pid)
	r, err := cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	_, peak := memory(t, cmd.Process.Pid)
	if len(r.Kvs) != n || r.Count != n || string(r.Kvs[n-1].Key) != fmt.Sprintf("/registry/pods/ns/%06d", n-1) {
		t.Fatalf("listed %d of %d (count %d)", len(r.Kvs), n, r.Count)
	}
	t.Logf("a list of %d objects of 1 KiB (%d MiB of values): RSS %d MiB before, peak %d MiB during", n, n>>10, rss>>20, peak>>20)
	if peak > listRSSBound {
		t.Fatalf("peak RSS %d MiB, bound %d MiB", peak>>20, listRSSBound>>20)
	}
}
