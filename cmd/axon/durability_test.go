package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axon-kv/axon/internal/proctest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func freeAddr(t *testing.T) string { return proctest.FreeAddr(t) }

// buildAxon builds the axon binary into a temporary directory.
func buildAxon(t *testing.T) string { return proctest.Build(t, "github.com/axon-kv/axon/cmd/axon") }

// startServe runs `axon serve` as a child process on dir, with flags
// added, and returns it with a client once the server answers.
func startServe(t *testing.T, bin, dir string, flags ...string) (*exec.Cmd, *clientv3.Client) {
	t.Helper()
	return startServeWith(t, func(args ...string) *exec.Cmd { return exec.Command(bin, args...) }, dir, flags...)
}

// startServeWith is startServe with the command made by command from the
// serve arguments; its stderr goes to the test's unless command set it.
func startServeWith(t *testing.T, command func(args ...string) *exec.Cmd, dir string, flags ...string) (*exec.Cmd, *clientv3.Client) {
	t.Helper()
	addr := freeAddr(t)
	cmd := command(append([]string{"serve", "--data-dir", dir,
		"--listen-client-urls", "http://" + addr, "--listen-metrics-urls", "http://" + freeAddr(t)}, flags...)...)
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "probe")
		cancel()
		if err == nil {
			return cmd, cli
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not answer: %v", err)
		}
	}
}

// TestKillDashNineLosesNoAcknowledgedWrite kills the server with SIGKILL
// in the middle of a write load, restarts it on the same data dir, and
// checks that every acknowledged write is there, revisions go on upward,
// and a watcher resuming from its last revision misses nothing.
func TestKillDashNineLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildAxon(t)
	dir := t.TempDir()
	cmd, cli := startServe(t, bin, dir)

	// A watcher records what it sees until the kill.
	wctx, wcancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		seenRev int64
		acked   = map[string]int64{} // key → revision of its acknowledged put
	)
	wch := cli.Watch(wctx, "/load/", clientv3.WithPrefix())
	go func() {
		for wr := range wch {
			mu.Lock()
			for _, ev := range wr.Events {
				seenRev = max(seenRev, ev.Kv.ModRevision)
			}
			mu.Unlock()
		}
	}()

	// Four writers, bounded in count; the kill lands in the middle.
	var (
		wg      sync.WaitGroup
		loaded  = make(chan struct{})
		loadOne sync.Once
	)
	killed := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				key := fmt.Sprintf("/load/w%d/%03d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				r, err := cli.Put(ctx, key, "v")
				cancel()
				if err != nil {
					select {
					case <-killed:
						return
					default:
						continue
					}
				}
				mu.Lock()
				acked[key] = r.Header.Revision
				if len(acked) >= 300 {
					loadOne.Do(func() { close(loaded) })
				}
				mu.Unlock()
			}
		}()
	}
	<-loaded
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(killed)
	_ = cmd.Wait()
	wg.Wait()
	wcancel()
	cli.Close()

	mu.Lock()
	var maxAcked int64
	for _, rev := range acked {
		maxAcked = max(maxAcked, rev)
	}
	resume := seenRev + 1
	mu.Unlock()
	t.Logf("%d writes acknowledged before SIGKILL, highest r%d; watcher saw up to r%d", len(acked), maxAcked, resume-1)

	cmd2, cli2 := startServe(t, bin, dir)
	defer func() {
		cli2.Close()
		_ = cmd2.Process.Signal(syscall.SIGTERM)
		_ = cmd2.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := cli2.Get(ctx, "/load/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]int64{}
	for _, kv := range got.Kvs {
		present[string(kv.Key)] = kv.ModRevision
	}
	for key, rev := range acked {
		if present[key] != rev {
			t.Errorf("acknowledged %s at r%d, after restart: r%d", key, rev, present[key])
		}
	}
	if got.Header.Revision < maxAcked {
		t.Fatalf("revision went back: r%d after restart, r%d acknowledged", got.Header.Revision, maxAcked)
	}
	p, err := cli2.Put(ctx, "/load/after", "x")
	if err != nil || p.Header.Revision <= got.Header.Revision {
		t.Fatalf("put after restart: %v, r%d", err, p.Header.Revision)
	}
	// The watcher resumes where it stopped and gets every later event.
	want := map[int64]bool{}
	for _, kv := range got.Kvs {
		if kv.ModRevision >= resume {
			want[kv.ModRevision] = true
		}
	}
	want[p.Header.Revision] = true
	wctx2, wcancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel2()
	for wr := range cli2.Watch(wctx2, "/load/", clientv3.WithPrefix(), clientv3.WithRev(resume)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("resumed watch from r%d: %v", resume, err)
		}
		for _, ev := range wr.Events {
			delete(want, ev.Kv.ModRevision)
		}
		if len(want) == 0 {
			return
		}
	}
	t.Fatalf("resumed watch from r%d missed revisions %v", resume, want)
}
