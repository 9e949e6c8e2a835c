package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/badger"
)

// TestConcurrentListsUnderATinyReadBudget lists a range of 2 MiB from
// eight clients at once through a budget of 1 MiB: every list completes
// whole and right, while writes go on, and the budget is all given back.
func TestConcurrentListsUnderATinyReadBudget(t *testing.T) {
	s, cli := serveWithReadBudget(t, 1<<20)
	ctx := t.Context()
	const n = 2000
	val := putBig(t, cli, n)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 8 {
		wg.Go(func() {
			for range 3 {
				resp, err := cli.Get(ctx, "/big/", clientv3.WithPrefix())
				if err != nil {
					errs <- err
					return
				}
				if len(resp.Kvs) != n || resp.Count != n {
					errs <- fmt.Errorf("list %d: %d kvs, count %d, want %d", c, len(resp.Kvs), resp.Count, n)
					return
				}
				for i, kv := range resp.Kvs {
					if string(kv.Key) != fmt.Sprintf("/big/%05d", i) || len(kv.Value) != len(val) {
						errs <- fmt.Errorf("list %d: kv %d is %q (%d bytes)", c, i, kv.Key, len(kv.Value))
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/w/%d", i), "x"); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.ReadMemoryInUse() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reads still hold %v bytes of the budget after they all ended", s.ReadMemoryInUse())
		}
	}
	rec := httptest.NewRecorder()
	s.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "axon_read_memory_limit_bytes 1.048576e+06") {
		t.Errorf("metrics lack the read budget's limit:\n%s", rec.Body.String())
	}
}

// serveWithReadBudget serves a Badger store in a temp dir with a read
// memory budget of limit bytes, until the test ends.
func serveWithReadBudget(t *testing.T, limit int64) (*server.Server, *clientv3.Client) {
	t.Helper()
	eng, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	s, cli, stop := serveEngine(t, eng, server.Config{ReadMemory: limit})
	t.Cleanup(stop)
	return s, cli
}

// putBig writes n keys /big/00000… of 1 KiB each, and returns the value.
func putBig(t *testing.T, cli *clientv3.Client, n int) string {
	t.Helper()
	val := strings.Repeat("v", 1024)
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < min(i+100, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/big/%05d", j), val))
		}
		if _, err := cli.Txn(t.Context()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return val
}

// gatedConn is a client's connection that, once gated is set, reads
// gateAfter more bytes and then stops reading until open is closed: a
// client that reads its answers slowly.
type gatedConn struct {
	net.Conn
	gated   atomic.Bool
	passed  atomic.Int64 // bytes read since gated was set
	open    chan struct{}
	blocked chan struct{} // closed when a read first waits at the gate
	once    sync.Once
}

// gateAfter is less than the 64 KiB window the slow client gives the
// server, and more than any frame but an answer's data.
const gateAfter = 32 << 10

func (c *gatedConn) Read(p []byte) (int, error) {
	if !c.gated.Load() {
		return c.Conn.Read(p)
	}
	left := gateAfter - c.passed.Load()
	if left <= 0 {
		c.once.Do(func() { close(c.blocked) })
		<-c.open
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p[:min(int64(len(p)), left)])
	c.passed.Add(int64(n))
	return n, err
}

// slowClient dials cli's server through a gatedConn, with small fixed
// windows: the server can send 64 KiB ahead of what the client reads, and
// queues the rest. open opens the gate (once; it is opened when the test
// ends, before the client closes).
func slowClient(t *testing.T, cli *clientv3.Client) (slow *clientv3.Client, gate *gatedConn, open func()) {
	t.Helper()
	gate = &gatedConn{open: make(chan struct{}), blocked: make(chan struct{})}
	open = sync.OnceFunc(func() { close(gate.open) })
	slow, err := clientv3.New(clientv3.Config{
		Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				gate.Conn = c
				return gate, err
			}),
			grpc.WithInitialWindowSize(64 << 10), grpc.WithInitialConnWindowSize(64 << 10),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	t.Cleanup(open) // before Close, which waits for the gated reader
	// The connection is up before any test gates it.
	if _, err := slow.Get(t.Context(), "health"); err != nil {
		t.Fatal(err)
	}
	return slow, gate, open
}

// TestASlowClientsQueuedAnswerHoldsTheBudget: an answer the handler has
// finished but the client has not read still holds its share of the read
// budget, so another large read waits; once the slow client reads, both
// complete and the budget is all given back. gRPC ends the call when the
// answer is queued on the connection; a budget given back then would let
// slow clients pile answers up in memory without bound.
func TestASlowClientsQueuedAnswerHoldsTheBudget(t *testing.T) {
	s, cli := serveWithReadBudget(t, 1<<20)
	ctx := t.Context()
	const n = 2000 // 2 MiB of values: twice the budget
	putBig(t, cli, n)
	slow, gate, opened := slowClient(t, cli)
	gate.gated.Store(true)
	slowDone := make(chan error, 1)
	go func() {
		resp, err := slow.Get(ctx, "/big/", clientv3.WithPrefix())
		if err == nil && len(resp.Kvs) != n {
			err = fmt.Errorf("%d kvs, want %d", len(resp.Kvs), n)
		}
		slowDone <- err
	}()
	select {
	case <-gate.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow client's list never reached its connection")
	}
	// The slow answer is encoded (its first 32 KiB arrived) and all but
	// 64 KiB of it queued: a second
	// list of 2 MiB must wait for it to be read.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := cli.Get(wctx, "/big/", clientv3.WithPrefix())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second list while a 2 MiB answer waits for a slow client (budget 1 MiB): %v; want it to wait", err)
	}
	if held := s.ReadMemoryInUse(); held < n*1024 {
		t.Errorf("the unread answer holds %v bytes of the budget, want at least its %d", held, n*1024)
	}
	opened()
	if err := <-slowDone; err != nil {
		t.Fatalf("the slow client's list: %v", err)
	}
	if resp, err := cli.Get(ctx, "/big/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != n {
		t.Fatalf("a list once the slow client has read: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.ReadMemoryInUse() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reads still hold %v bytes of the budget after they all ended", s.ReadMemoryInUse())
		}
	}
}
