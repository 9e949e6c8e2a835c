package tikvserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/axon-kv/axon/internal/proctest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func freeAddr(t testing.TB) string { return proctest.FreeAddr(t) }

func buildAxon(t testing.TB) string { return proctest.Build(t, "github.com/axon-kv/axon/cmd/axon") }

// serveAxon runs `axon serve --store tikv` on pd as a child process and
// returns a client once it answers. The process is stopped when the test
// ends; its output is logged if the test failed.
func serveAxon(t *testing.T, bin, pd string) *clientv3.Client {
	t.Helper()
	client := freeAddr(t)
	cmd := exec.Command(bin, "serve", "--store", "tikv", "--pd-endpoints", pd,
		"--data-dir", t.TempDir(), "--listen-client-urls", "http://"+client,
		"--listen-metrics-urls", "http://"+freeAddr(t), "--memory-budget-bytes", "-1")
	var out proctest.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() || os.Getenv("AXON_TIKV_LOG") != "" {
			t.Logf("axon serve's output:\n%s", out.String())
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "probe")
		cancel()
		if err == nil {
			return cli
		}
		if time.Now().After(deadline) {
			t.Fatalf("axon serve did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// event is a watch event as the test expects it.
type event struct {
	typ         mvccpb.Event_EventType
	key, value  string
	prev        string // "" for none
	modRevision int64
}

func (e event) String() string {
	return fmt.Sprintf("%s %s=%q prev=%q @%d", e.typ, e.key, e.value, e.prev, e.modRevision)
}

func toEvent(ev *clientv3.Event) event {
	out := event{typ: ev.Type, key: string(ev.Kv.Key), value: string(ev.Kv.Value), modRevision: ev.Kv.ModRevision}
	if ev.PrevKv != nil {
		out.prev = string(ev.PrevKv.Value)
	}
	return out
}

// nextEvents reads n events from wch, failing the test after a while.
func nextEvents(t *testing.T, wch clientv3.WatchChan, pending *[]event, n int) []event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for len(*pending) < n {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("watch ended after %v", *pending)
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, ev := range wr.Events {
				*pending = append(*pending, toEvent(ev))
			}
		case <-timeout:
			t.Fatalf("watch: %d events after 20s, want %d: %v", len(*pending), n, *pending)
		}
	}
	got := (*pending)[:n]
	*pending = (*pending)[n:]
	return got
}

// TestAxonServeOverTheEndpoint runs the axon binary with --store tikv on
// the endpoint — the client-go code production runs, over the network —
// and drives it with etcd's client: a put, a get, a compare-and-swap that
// succeeds and one that fails, a delete, and a prev_kv watch that sees
// them. Then the endpoint restarts under the running Axon, and writes go
// on once client-go has reconnected, the watch still seeing each.
func TestAxonServeOverTheEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the axon binary")
	}
	bin := buildAxon(t)
	s := start(t, Options{})
	cli := serveAxon(t, bin, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	head, err := cli.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	wch := cli.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(head.Header.Revision+1))
	var pending []event

	const key = "/registry/pods/ns/a"
	put, err := cli.Put(ctx, key, "v1")
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	rev1 := put.Header.Revision
	got, err := cli.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" || got.Kvs[0].ModRevision != rev1 {
		t.Fatalf("get = %v, %v; want v1 at %d", got, err, rev1)
	}
	cas := func(value string) *clientv3.TxnResponse {
		t.Helper()
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev1)).
			Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			t.Fatalf("txn: %v", err)
		}
		return r
	}
	if r := cas("v2"); !r.Succeeded {
		t.Fatalf("CAS at the current revision failed: %v", r)
	}
	if r := cas("v3"); r.Succeeded {
		t.Fatalf("CAS at a stale revision succeeded: %v", r)
	} else if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "v2" {
		t.Fatalf("failed CAS read %v; want v2", kvs)
	}
	del, err := cli.Delete(ctx, key)
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete = %v, %v; want 1 deleted", del, err)
	}
	want := []string{
		fmt.Sprintf(`PUT %s="v1" prev="" @%d`, key, rev1),
		fmt.Sprintf(`PUT %s="v2" prev="v1" @%d`, key, rev1+1),
		fmt.Sprintf(`DELETE %s="" prev="v2" @%d`, key, rev1+2),
	}
	for i, ev := range nextEvents(t, wch, &pending, len(want)) {
		if ev.String() != want[i] {
			t.Errorf("event %d: %s; want %s", i, ev, want[i])
		}
	}

	// Restart the endpoint under the running Axon, and write through it.
	restarted := make(chan error, 1)
	go func() { restarted <- s.Restart(500 * time.Millisecond) }()
	time.Sleep(100 * time.Millisecond)
	acked := map[string]int64{} // key → revision of its acknowledged put
	began := time.Now()
	var firstAck time.Duration
	for i := 0; len(acked) < 5; i++ {
		if ctx.Err() != nil {
			t.Fatalf("writes did not go on after the restart: %d acknowledged", len(acked))
		}
		k := fmt.Sprintf("/registry/pods/ns/after-%02d", i)
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := cli.Put(pctx, k, "v")
		pcancel()
		if err != nil {
			t.Logf("put %s: %v", k, err)
			continue
		}
		if len(acked) == 0 {
			firstAck = time.Since(began)
		}
		acked[k] = r.Header.Revision
	}
	if err := <-restarted; err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("first write acknowledged %v after the endpoint went down (for 500ms)", firstAck.Round(time.Millisecond))
	for k, rev := range acked {
		r, err := cli.Get(ctx, k)
		if err != nil || len(r.Kvs) != 1 || r.Kvs[0].ModRevision != rev {
			t.Errorf("get %s = %v, %v; want it at %d", k, r, err, rev)
		}
	}
	// The watch goes on: it sees every acknowledged put, in revision
	// order (and any unacknowledged one that landed).
	var last int64
	for seen := map[string]bool{}; len(seen) < len(acked); {
		ev := nextEvents(t, wch, &pending, 1)[0]
		if ev.modRevision <= last {
			t.Fatalf("watch went back from %d to %s", last, ev)
		}
		last = ev.modRevision
		if rev, ok := acked[ev.key]; ok {
			if rev != ev.modRevision || ev.typ != mvccpb.PUT {
				t.Errorf("watch saw %s; acknowledged at %d", ev, rev)
			}
			seen[ev.key] = true
		}
	}
	t.Logf("endpoint served:%s", describeCalls(s))
	checkImplemented(t, s)
}
