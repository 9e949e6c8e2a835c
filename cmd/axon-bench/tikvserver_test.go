package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axon-kv/axon/internal/proctest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// tikvServerProc is `axon-bench tikv-server` running as a child process.
type tikvServerProc struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	log  strings.Builder
	done chan struct{} // closed when its output ends
}

func (p *tikvServerProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

var pdEndpointRE = regexp.MustCompile(`pd-endpoints=(\S+)`)

// startTiKVServer runs `axon-bench tikv-server` on a port of the OS's
// with flags added, and returns once it logs its address.
func startTiKVServer(t *testing.T, bin string, flags ...string) *tikvServerProc {
	t.Helper()
	p := &tikvServerProc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"tikv-server", "--listen", "127.0.0.1:0"}, flags...)...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("tikv-server's output:\n%s", p.output())
		}
	})
	addr := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := pdEndpointRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p.addr = <-addr:
		return p
	case <-time.After(20 * time.Second):
		t.Fatalf("tikv-server logged no address:\n%s", p.output())
		return nil
	}
}

func loopbackAddr(t *testing.T) string { return proctest.FreeAddr(t) }

// TestTiKVServerUnderAxon runs the endpoint and `axon serve --store tikv`
// as separate processes, the endpoint delaying every call, failing some
// with region errors and splitting regions: creates and compare-and-swap
// updates succeed, a prev_kv watch sees each once, and after SIGHUP
// restarts the endpoint, writes go on. What client-go asked for that the
// endpoint does not implement is logged, and only the known call is.
func TestTiKVServerUnderAxon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs axon and axon-bench")
	}
	bench := buildBench(t)
	ts := startTiKVServer(t, bench, "--rpc-delay", "200us", "--region-error-rate", "0.05",
		"--region-errors", "NotLeader,EpochNotMatch", "--split-every", "100ms", "--restart-pause", "300ms", "--seed", "7")

	client := loopbackAddr(t)
	axon := exec.Command(filepath.Join(filepath.Dir(bench), "axon"), "serve", "--store", "tikv",
		"--pd-endpoints", ts.addr, "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+client,
		"--listen-metrics-urls", "http://"+loopbackAddr(t), "--memory-budget-bytes", "-1", "--log-level", "warn")
	var axonOut strings.Builder
	var axonMu sync.Mutex
	axon.Stderr = writerFunc(func(p []byte) (int, error) {
		axonMu.Lock()
		defer axonMu.Unlock()
		return axonOut.Write(p)
	})
	if err := axon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = axon.Process.Kill()
		_ = axon.Wait()
		if t.Failed() {
			axonMu.Lock()
			t.Logf("axon's output:\n%s", axonOut.String())
			axonMu.Unlock()
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var head *clientv3.GetResponse
	for head == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		head, err = cli.Get(pctx, "probe")
		pcancel()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("axon did not answer: %v", err)
		}
	}
	wch := cli.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(head.Header.Revision+1))

	// Creates, then a compare-and-swap update of each.
	const n = 40
	var want []string
	for i := range n {
		key := fmt.Sprintf("/registry/configmaps/ns/cm-%02d", i)
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, "v1")).Commit()
		if err != nil || !r.Succeeded {
			t.Fatalf("create %s: %v, %v", key, r, err)
		}
		want = append(want, fmt.Sprintf("PUT %s=v1 prev=", key))
		r, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.Header.Revision)).Then(clientv3.OpPut(key, "v2")).Commit()
		if err != nil || !r.Succeeded {
			t.Fatalf("update %s: %v, %v", key, r, err)
		}
		want = append(want, fmt.Sprintf("PUT %s=v2 prev=v1", key))
	}

	// SIGHUP restarts the endpoint; writes go on once client-go
	// reconnects. A write that failed may still have landed.
	if err := ts.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	acked := 0
	for i := 0; acked < 5; i++ {
		if ctx.Err() != nil {
			t.Fatalf("writes did not go on after the restart")
		}
		key := fmt.Sprintf("/registry/configmaps/ns/after-%02d", i)
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := cli.Put(pctx, key, "v")
		pcancel()
		if err == nil {
			acked++
			want = append(want, fmt.Sprintf("PUT %s=v prev=", key))
		}
	}

	// Every acknowledged write is seen once, in order, with its previous
	// value. A put that failed after the restart may have landed too.
	acknowledged := map[string]bool{}
	for _, w := range want {
		acknowledged[w] = true
	}
	var seen []string
	var last int64
	timeout := time.After(20 * time.Second)
	for len(seen) < len(want) {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision <= last {
					t.Fatalf("watch went back from %d to %d", last, ev.Kv.ModRevision)
				}
				last = ev.Kv.ModRevision
				prev := ""
				if ev.PrevKv != nil {
					prev = string(ev.PrevKv.Value)
				}
				e := fmt.Sprintf("%s %s=%s prev=%s", ev.Type, ev.Kv.Key, ev.Kv.Value, prev)
				if acknowledged[e] || !strings.Contains(e, "/after-") {
					seen = append(seen, e)
				}
			}
		case <-timeout:
			t.Fatalf("watch saw %d of %d events: %v", len(seen), len(want), seen)
		}
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("event %d: %s; want %s", i, seen[i], want[i])
		}
	}

	// The endpoint logs what it served when it stops.
	if err := ts.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-ts.done
	out := ts.output()
	for _, want := range []string{"serving again", "split region", "calls served", "BatchCommands/Prewrite=", "/pdpb.PD/Tso=", "region errors injected"} {
		if !strings.Contains(out, want) {
			t.Errorf("tikv-server's log has no %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "unimplemented call") && !strings.Contains(line, "method=/resource_manager.ResourceManager/AcquireTokenBuckets ") {
			t.Errorf("unexpected unimplemented call: %s", line)
		}
	}
	t.Logf("tikv-server's summary:\n%s", lastLines(out, 3))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
