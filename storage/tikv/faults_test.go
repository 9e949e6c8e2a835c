package tikv

// TiKV's own faults, injected at the RPC layer: region errors
// and transport errors in the client that carries every RPC
// (MockOptions.WrapClient), a store that stops answering, and PD
// timestamps that fail (MockOptions.WrapPD). Each test checks the error
// classification of doc.go ("Errors") and what the data shows afterwards.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/errorpb"
	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	tikverr "github.com/tikv/client-go/v2/error"
	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/txnkv/transaction"
	"github.com/tikv/client-go/v2/util/async"
	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/clients/tso"
	"github.com/tikv/pd/client/pkg/caller"

	"github.com/axon-kv/axon/storage"
)

// fault handles one RPC instead of the mock cluster; send passes it on.
type fault func(ctx context.Context, req *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error)

// faultClient wraps the mock's client (MockOptions.WrapClient) and lets a
// test put a fault on every RPC.
type faultClient struct {
	kvstore.Client
	f    atomic.Pointer[fault]
	mu   sync.Mutex
	wake chan struct{} // closed when the fault changes
}

func (c *faultClient) wrap(inner kvstore.Client) kvstore.Client {
	c.Client = inner
	return c
}

// set installs f (nil: no fault) and wakes the RPCs that hang.
func (c *faultClient) set(f fault) {
	c.mu.Lock()
	if c.wake != nil {
		close(c.wake)
	}
	c.wake = make(chan struct{})
	c.mu.Unlock()
	if f == nil {
		c.f.Store(nil)
		return
	}
	c.f.Store(&f)
}

func (c *faultClient) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	send := func() (*tikvrpc.Response, error) { return c.Client.SendRequest(ctx, addr, req, timeout) }
	if f := c.f.Load(); f != nil {
		return (*f)(ctx, req, send)
	}
	return send()
}

func (c *faultClient) SendRequestAsync(ctx context.Context, addr string, req *tikvrpc.Request, cb async.Callback[*tikvrpc.Response]) {
	go func() { cb.Schedule(c.SendRequest(ctx, addr, req, 0)) }()
}

// onType applies f to the RPCs of type typ, the first n of them (n <= 0:
// all), and counts the times it did.
func onType(typ tikvrpc.CmdType, n int64, hits *atomic.Int64, f fault) fault {
	return func(ctx context.Context, req *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
		if req.Type != typ {
			return send()
		}
		if k := hits.Add(1); n > 0 && k > n {
			hits.Add(-1)
			return send()
		}
		return f(ctx, req, send)
	}
}

// answer returns a fault that answers with region error e, unsent.
func answer(e func(req *tikvrpc.Request) *errorpb.Error) fault {
	return func(_ context.Context, req *tikvrpc.Request, _ func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
		return tikvrpc.GenRegionErrorResp(req, e(req))
	}
}

// hang is a store that does not answer: the RPC is not delivered and
// waits for its context, or until the test changes the fault (the store
// recovers and drops its connections), so that RPCs left behind by
// callers that gave up do not outlive the test.
func (c *faultClient) hang(ctx context.Context) error {
	c.mu.Lock()
	wake := c.wake
	c.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
		return errLost
	}
}

// errLost stands for a connection that broke before the answer came.
var errLost = errors.New("injected: connection reset before the answer")

// regionErrors are the region errors client-go must retry by itself.
var regionErrors = []struct {
	name string
	err  func(req *tikvrpc.Request) *errorpb.Error
}{
	{"NotLeader", func(req *tikvrpc.Request) *errorpb.Error {
		// No leader known: an election is going on.
		return &errorpb.Error{Message: "injected", NotLeader: &errorpb.NotLeader{RegionId: req.RegionId}}
	}},
	{"EpochNotMatch", func(*tikvrpc.Request) *errorpb.Error {
		return &errorpb.Error{Message: "injected", EpochNotMatch: &errorpb.EpochNotMatch{}}
	}},
	{"ServerIsBusy", func(*tikvrpc.Request) *errorpb.Error {
		return &errorpb.Error{Message: "injected", ServerIsBusy: &errorpb.ServerIsBusy{Reason: "injected"}}
	}},
	{"RegionNotFound", func(req *tikvrpc.Request) *errorpb.Error {
		return &errorpb.Error{Message: "injected", RegionNotFound: &errorpb.RegionNotFound{RegionId: req.RegionId}}
	}},
}

// pdFaults wraps the mock's PD client (MockOptions.WrapPD): while down,
// every timestamp call fails.
type pdFaults struct {
	down  atomic.Bool
	calls atomic.Int64 // timestamp calls that failed
}

var errTSO = errors.New("injected: PD timestamp unavailable")

func (f *pdFaults) wrap(c pd.Client) pd.Client { return &faultPD{Client: c, f: f} }

type faultPD struct {
	pd.Client
	f *pdFaults
}

// WithCallerComponent keeps the wrapper: client-go's codec client calls
// it on what it wraps.
func (c *faultPD) WithCallerComponent(comp caller.Component) pd.Client {
	return &faultPD{Client: c.Client.WithCallerComponent(comp), f: c.f}
}

func (c *faultPD) GetTS(ctx context.Context) (int64, int64, error) {
	if c.f.down.Load() {
		c.f.calls.Add(1)
		return 0, 0, errTSO
	}
	return c.Client.GetTS(ctx)
}

func (c *faultPD) GetTSAsync(ctx context.Context) tso.TSFuture {
	if c.f.down.Load() {
		c.f.calls.Add(1)
		return failedTS{}
	}
	return c.Client.GetTSAsync(ctx)
}

type failedTS struct{}

func (failedTS) Wait() (int64, int64, error) { return 0, 0, errTSO }

// faultMock is a two-region mock ("m" splits) with both wrappers, and
// "a", "b", "y", "z" written as "old".
func faultMock(t *testing.T) (*Engine, *faultClient, *pdFaults) {
	t.Helper()
	fc, pf := &faultClient{}, &pdFaults{}
	fc.set(nil)
	e := newMock(t, MockOptions{SplitKeys: [][]byte{[]byte("m")}, WrapClient: fc.wrap, WrapPD: pf.wrap})
	t.Cleanup(func() { fc.set(nil) }) // before the engine closes
	// One transaction per region: no secondary commits run on in the
	// background, where a test's fault would catch them.
	load(t, e, bytesOf("a", "b", "y", "z"), bytesOf("old", "old", "old", "old"), 2)
	return e, fc, pf
}

func bytesOf(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// writeAZ begins a transaction that writes "a" and "z" (two regions; "a"
// is the primary) as v.
func writeAZ(t *testing.T, e *Engine, v string) storage.Txn {
	t.Helper()
	tx := begin(t, e)
	for _, k := range []string{"a", "z"} {
		if err := tx.Set([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	return tx
}

// settle resolves every lock left behind (as a new leader does), so that
// reads show whether a transaction applied without waiting out its TTL.
func settle(t *testing.T, e *Engine) {
	t.Helper()
	tx := begin(t, e)
	ts := tx.StartTS()
	tx.Rollback()
	if err := e.ResolveLocks(context.Background(), ts, nil, nil); err != nil {
		t.Fatalf("ResolveLocks: %v", err)
	}
}

// expectAZ checks whether the write of v to "a" and "z" applied: both or
// neither.
func expectAZ(t *testing.T, e *Engine, v string, applied bool) {
	t.Helper()
	settle(t, e)
	for _, k := range []string{"a", "z"} {
		got, _ := latest(t, e, k)
		if (got == v) != applied {
			t.Errorf("%s = %q; the write of %q applied: %v, want %v", k, got, v, got == v, applied)
		}
	}
}

// isOnly checks that err is exactly one of the storage sentinels: want,
// or none if want is nil.
func isOnly(err, want error) bool {
	for _, s := range []error{storage.ErrNotFound, storage.ErrConflict, storage.ErrUncertain, storage.ErrUnavailable, storage.ErrClosed} {
		if errors.Is(err, s) != (s == want) {
			return false
		}
	}
	return err != nil
}

// quick bounds how long past its context's deadline an operation may
// take: never hang.
const quick = 2 * time.Second

func checkElapsed(t *testing.T, what string, began time.Time, deadline time.Duration) {
	t.Helper()
	if d := time.Since(began); d > deadline+quick {
		t.Errorf("%s took %v with a deadline of %v", what, d.Round(time.Millisecond), deadline)
	}
}

// TestErrorTable walks doc.go's error classification row by row: for
// each row a fault that makes client-go report that outcome, the storage
// error it must become, and what the data shows afterwards.
func TestErrorTable(t *testing.T) {
	ctxFor := func(t *testing.T, d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("key not found", func(t *testing.T) {
		e, _, _ := faultMock(t)
		tx := begin(t, e)
		defer tx.Rollback()
		if _, err := tx.Get([]byte("absent")); !isOnly(err, storage.ErrNotFound) {
			t.Fatalf("Get = %v; want ErrNotFound", err)
		}
	})

	// ErrConflict: definitely not applied.
	t.Run("write conflict: prewrite finds a newer write", func(t *testing.T) {
		e, _, _ := faultMock(t)
		loser := writeAZ(t, e, "loser")
		if err := writeAZ(t, e, "winner").Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		err := loser.Commit(context.Background())
		if !isOnly(err, storage.ErrConflict) || !tikverr.IsErrWriteConflict(err) {
			t.Fatalf("Commit = %v; want ErrConflict wrapping a write conflict", err)
		}
		expectAZ(t, e, "loser", false)
		expectAZ(t, e, "winner", true)
	})
	t.Run("write conflict: prewrite finds a newer lock", func(t *testing.T) {
		// The newer transaction is held between prewrite and commit:
		// its locks are on the keys when the older one prewrites.
		e, fc, _ := faultMock(t)
		older := writeAZ(t, e, "older")
		newer := writeAZ(t, e, "newer")
		prewritten, release := make(chan struct{}), make(chan struct{})
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdCommit, 1, &hits, func(_ context.Context, _ *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			close(prewritten)
			<-release
			return send()
		}))
		done := make(chan error, 1)
		go func() { done <- newer.Commit(context.Background()) }()
		<-prewritten
		fc.set(nil)
		err := older.Commit(context.Background())
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("the newer transaction's Commit: %v", err)
		}
		if !isOnly(err, storage.ErrConflict) {
			t.Fatalf("Commit = %v; want ErrConflict", err)
		}
		t.Logf("Commit: %v", err)
		expectAZ(t, e, "older", false)
		expectAZ(t, e, "newer", true)
	})
	t.Run("retryable: our locks were rolled back before the commit", func(t *testing.T) {
		// As when another client found them expired.
		e, fc, _ := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdCommit, 1, &hits, func(ctx context.Context, req *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			c := req.Commit()
			rb := tikvrpc.NewRequest(tikvrpc.CmdBatchRollback, &kvrpcpb.BatchRollbackRequest{StartVersion: c.StartVersion, Keys: c.Keys}, req.Context)
			if _, err := fc.Client.SendRequest(ctx, "store1", rb, 0); err != nil {
				return nil, err
			}
			return send()
		}))
		err := writeAZ(t, e, "new").Commit(context.Background())
		if !isOnly(err, storage.ErrConflict) {
			t.Fatalf("Commit = %v; want ErrConflict", err)
		}
		expectAZ(t, e, "new", false)
	})
	t.Run("an inserted key that exists", func(t *testing.T) {
		e, _, _ := faultMock(t)
		tx := begin(t, e)
		if err := tx.(storage.Inserter).Insert([]byte("a"), []byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Set([]byte("z"), []byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); !isOnly(err, storage.ErrConflict) {
			t.Fatalf("Commit = %v; want ErrConflict", err)
		}
		expectAZ(t, e, "new", false)
	})
	// Latch conflicts need client-go's local latches, which are off
	// (TxnLocalLatches disabled): none can happen; TestCommitErrorMapping
	// covers their mapping.

	// ErrUncertain: maybe applied.
	t.Run("one lost answer to the primary's Commit RPC is retried", func(t *testing.T) {
		// Not in the table: client-go sends the Commit RPC again (it is
		// idempotent), and the answer to that one decides.
		e, fc, _ := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdCommit, 1, &hits, func(_ context.Context, _ *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			if _, err := send(); err != nil {
				return nil, err
			}
			return nil, errLost
		}))
		if err := writeAZ(t, e, "new").Commit(context.Background()); err != nil {
			t.Fatalf("Commit = %v; want it retried", err)
		}
		expectAZ(t, e, "new", true)
	})
	t.Run("undetermined: the primary's Commit RPC applied, every answer lost", func(t *testing.T) {
		// The first Commit RPC applies, its answer is lost, and so are
		// client-go's retries (not delivered) until the deadline.
		e, fc, _ := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdCommit, 0, &hits, func(_ context.Context, _ *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			if hits.Load() == 1 {
				if _, err := send(); err != nil {
					return nil, err
				}
			}
			return nil, errLost
		}))
		const d = 500 * time.Millisecond
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(ctxFor(t, d))
		checkElapsed(t, "Commit", began, d)
		fc.set(nil)
		if !isOnly(err, storage.ErrUncertain) || !tikverr.IsErrorUndetermined(err) {
			t.Fatalf("Commit = %v; want ErrUncertain wrapping ErrResultUndetermined", err)
		}
		t.Logf("Commit after %d Commit RPCs: %v", hits.Load(), err)
		expectAZ(t, e, "new", true)
	})
	t.Run("undetermined: the primary's Commit RPCs lost before they arrive", func(t *testing.T) {
		// The same answer from client-go; this time nothing applied.
		e, fc, _ := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdCommit, 0, &hits, func(context.Context, *tikvrpc.Request, func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			return nil, errLost
		}))
		const d = 500 * time.Millisecond
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(ctxFor(t, d))
		checkElapsed(t, "Commit", began, d)
		fc.set(nil)
		if !isOnly(err, storage.ErrUncertain) || !tikverr.IsErrorUndetermined(err) {
			t.Fatalf("Commit = %v; want ErrUncertain wrapping ErrResultUndetermined", err)
		}
		expectAZ(t, e, "new", false)
	})
	t.Run("after a Commit RPC: applied, then no answer until the deadline", func(t *testing.T) {
		// The first Commit RPC applies but is answered with a region
		// error (as if the answer came from a stale leader); every retry
		// is refused the same way until the context ends.
		e, fc, _ := faultMock(t)
		var applied atomic.Bool
		var hits atomic.Int64
		busy := regionErrors[0].err
		fc.set(onType(tikvrpc.CmdCommit, 0, &hits, func(_ context.Context, req *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			if applied.CompareAndSwap(false, true) {
				if _, err := send(); err != nil {
					return nil, err
				}
			}
			return tikvrpc.GenRegionErrorResp(req, busy(req))
		}))
		const d = 500 * time.Millisecond
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(ctxFor(t, d))
		checkElapsed(t, "Commit", began, d)
		fc.set(nil)
		if !isOnly(err, storage.ErrUncertain) {
			t.Fatalf("Commit = %v; want ErrUncertain", err)
		}
		t.Logf("Commit after %d Commit RPCs: %v", hits.Load(), err)
		expectAZ(t, e, "new", true)
	})
	t.Run("after a Commit RPC: never delivered, deadline", func(t *testing.T) {
		e, fc, _ := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdCommit, 0, &hits, func(ctx context.Context, req *tikvrpc.Request, _ func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			return nil, fc.hang(ctx)
		}))
		const d = 300 * time.Millisecond
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(ctxFor(t, d))
		checkElapsed(t, "Commit", began, d)
		fc.set(nil)
		if !isOnly(err, storage.ErrUncertain) {
			t.Fatalf("Commit = %v; want ErrUncertain", err)
		}
		expectAZ(t, e, "new", false)
	})

	// ErrUnavailable: nothing applied, retry.
	t.Run("before a Commit RPC: timestamp fails at Begin", func(t *testing.T) {
		e, _, pf := faultMock(t)
		pf.down.Store(true)
		const d = 300 * time.Millisecond
		began := time.Now()
		_, err := e.Begin(ctxFor(t, d))
		checkElapsed(t, "Begin", began, d)
		pf.down.Store(false)
		if !isOnly(err, storage.ErrUnavailable) || pf.calls.Load() == 0 {
			t.Fatalf("Begin = %v after %d failed timestamp calls; want ErrUnavailable", err, pf.calls.Load())
		}
	})
	t.Run("before a Commit RPC: commit timestamp fails after prewrite", func(t *testing.T) {
		e, fc, pf := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdPrewrite, 0, &hits, func(_ context.Context, _ *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			resp, err := send()
			pf.down.Store(true) // PD goes away once the locks are written
			return resp, err
		}))
		const d = 400 * time.Millisecond
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(ctxFor(t, d))
		checkElapsed(t, "Commit", began, d)
		fc.set(nil)
		pf.down.Store(false)
		if !isOnly(err, storage.ErrUnavailable) || pf.calls.Load() == 0 {
			t.Fatalf("Commit = %v after %d failed timestamp calls; want ErrUnavailable", err, pf.calls.Load())
		}
		expectAZ(t, e, "new", false)
	})
	t.Run("before a Commit RPC: prewrite RPCs fail at the transport", func(t *testing.T) {
		e, fc, _ := faultMock(t)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdPrewrite, 0, &hits, func(context.Context, *tikvrpc.Request, func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			return nil, errLost
		}))
		const d = 500 * time.Millisecond
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(ctxFor(t, d))
		checkElapsed(t, "Commit", began, d)
		fc.set(nil)
		if !isOnly(err, storage.ErrUnavailable) {
			t.Fatalf("Commit = %v; want ErrUnavailable", err)
		}
		expectAZ(t, e, "new", false)
	})
	t.Run("before a Commit RPC: backoff exhausted", func(t *testing.T) {
		// No deadline: client-go gives up once its prewrite backoff
		// budget (lowered here from 40 s) is spent.
		e, fc, _ := faultMock(t)
		prev := transaction.PrewriteMaxBackoff.Load()
		transaction.PrewriteMaxBackoff.Store(300)
		defer transaction.PrewriteMaxBackoff.Store(prev)
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdPrewrite, 0, &hits, answer(regionErrors[3].err)))
		began := time.Now()
		err := writeAZ(t, e, "new").Commit(context.Background())
		checkElapsed(t, "Commit", began, 300*time.Millisecond)
		fc.set(nil)
		if !isOnly(err, storage.ErrUnavailable) || !errors.Is(err, tikverr.ErrRegionUnavailable) {
			t.Fatalf("Commit = %v; want ErrUnavailable from an exhausted backoff", err)
		}
		expectAZ(t, e, "new", false)
	})
	t.Run("before a Commit RPC: context canceled", func(t *testing.T) {
		e, fc, _ := faultMock(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var hits atomic.Int64
		fc.set(onType(tikvrpc.CmdPrewrite, 1, &hits, func(_ context.Context, _ *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			_, _ = send() // the locks are written; the caller gives up
			cancel()
			return nil, context.Canceled
		}))
		err := writeAZ(t, e, "new").Commit(ctx)
		if !isOnly(err, storage.ErrUnavailable) {
			t.Fatalf("Commit = %v; want ErrUnavailable", err)
		}
		expectAZ(t, e, "new", false)
	})
	t.Run("failed reads", func(t *testing.T) {
		e, fc, _ := faultMock(t)
		const d = 300 * time.Millisecond
		tx, err := e.Begin(ctxFor(t, d))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		fc.set(func(ctx context.Context, req *tikvrpc.Request, _ func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
			return nil, fc.hang(ctx)
		})
		defer fc.set(nil)
		began := time.Now()
		if _, err := tx.Get([]byte("a")); !isOnly(err, storage.ErrUnavailable) {
			t.Errorf("Get = %v; want ErrUnavailable", err)
		}
		if _, err := tx.(storage.BatchReader).ReadBatch([]storage.Read{{Key: []byte("a")}, {Key: []byte("z")}}); !isOnly(err, storage.ErrUnavailable) {
			t.Errorf("ReadBatch = %v; want ErrUnavailable", err)
		}
		if err := iterErr(tx, storage.IterOptions{}); !isOnly(err, storage.ErrUnavailable) {
			t.Errorf("Iter = %v; want ErrUnavailable", err)
		}
		checkElapsed(t, "the reads", began, d)
	})
	t.Run("failed Begin", func(t *testing.T) {
		e, _, pf := faultMock(t)
		pf.down.Store(true)
		defer pf.down.Store(false)
		if _, err := e.Begin(ctxFor(t, 200*time.Millisecond)); !isOnly(err, storage.ErrUnavailable) {
			t.Fatalf("Begin = %v; want ErrUnavailable", err)
		}
	})

	t.Run("entry too large", func(t *testing.T) {
		e, _, _ := faultMock(t)
		tx := begin(t, e)
		defer tx.Rollback()
		big := bytes.Repeat([]byte("x"), 8<<20) // client-go's entry limit is 6 MiB
		err := tx.Set([]byte("a"), big)
		if err == nil {
			err = tx.Commit(context.Background())
		}
		if err == nil || isOnly(err, nil) == false {
			t.Fatalf("an 8 MiB entry: %v; want a plain error", err)
		}
		t.Logf("an 8 MiB entry: %v", err)
		if v, _ := latest(t, e, "a"); v != "old" {
			t.Fatalf("a = %.10q after a refused entry", v)
		}
	})

	t.Run("engine or transaction closed", func(t *testing.T) {
		e, _, _ := faultMock(t)
		tx := writeAZ(t, e, "new")
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); !isOnly(err, storage.ErrClosed) {
			t.Errorf("second Commit = %v; want ErrClosed", err)
		}
		if _, err := tx.Get([]byte("a")); !isOnly(err, storage.ErrClosed) {
			t.Errorf("Get after Commit = %v; want ErrClosed", err)
		}
		open := begin(t, e)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := open.Get([]byte("a")); !isOnly(err, storage.ErrClosed) {
			t.Errorf("Get after the engine closed = %v; want ErrClosed", err)
		}
		if _, err := e.Begin(context.Background()); !isOnly(err, storage.ErrClosed) {
			t.Errorf("Begin after Close = %v; want ErrClosed", err)
		}
	})
}

// iterErr reads a whole iteration and returns its error.
func iterErr(tx storage.Txn, opts storage.IterOptions) error {
	it, err := tx.Iter(opts)
	if err != nil {
		return err
	}
	defer it.Close()
	for it.Next() {
	}
	return it.Err()
}

// faultOps are the operations whose RPCs TestRegionErrors fails: each
// runs with ctx (reads under Begin's context) and, when it succeeds,
// checks what it read or wrote.
var faultOps = []struct {
	name string
	typ  tikvrpc.CmdType
	// write: a Commit, which must apply when it succeeds and, when it
	// fails, fail with want and not apply.
	write bool
	want  error
	run   func(t *testing.T, ctx context.Context, e *Engine) error
}{
	{"Get", tikvrpc.CmdGet, false, storage.ErrUnavailable, func(t *testing.T, ctx context.Context, e *Engine) error {
		tx, err := e.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		v, err := tx.Get([]byte("y"))
		if err == nil && string(v) != "old" {
			t.Errorf("Get = %q", v)
		}
		return err
	}},
	{"Scan", tikvrpc.CmdScan, false, storage.ErrUnavailable, func(t *testing.T, ctx context.Context, e *Engine) error {
		tx, err := e.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		it, err := tx.Iter(storage.IterOptions{Limit: 10})
		if err != nil {
			return err
		}
		defer it.Close()
		var keys []string
		for it.Next() {
			keys = append(keys, string(it.Key()))
		}
		if it.Err() == nil && strings.Join(keys, ",") != "a,b,y,z" {
			t.Errorf("Iter = %v", keys)
		}
		return it.Err()
	}},
	{"BatchGet", tikvrpc.CmdBatchGet, false, storage.ErrUnavailable, func(t *testing.T, ctx context.Context, e *Engine) error {
		tx, err := e.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		res, err := tx.(storage.BatchReader).ReadBatch([]storage.Read{{Key: []byte("a")}, {Key: []byte("z")}, {Key: []byte("c")}})
		if err == nil && (!res[0].Found || !res[1].Found || res[2].Found || string(res[1].Value) != "old") {
			t.Errorf("ReadBatch = %+v", res)
		}
		return err
	}},
	{"Prewrite", tikvrpc.CmdPrewrite, true, storage.ErrUnavailable, func(t *testing.T, ctx context.Context, e *Engine) error {
		return writeAZ(t, e, "new").Commit(ctx)
	}},
	{"Commit", tikvrpc.CmdCommit, true, storage.ErrUncertain, func(t *testing.T, ctx context.Context, e *Engine) error {
		return writeAZ(t, e, "new").Commit(ctx)
	}},
}

// TestRegionErrors answers Get, Scan, BatchGet, Prewrite and Commit RPCs
// with each region error client-go retries by itself. Once, the
// operation must succeed; on every attempt, it must end within its
// context's deadline in the documented error, and a failed write must
// not have applied (the Commit RPCs are refused unsent).
func TestRegionErrors(t *testing.T) {
	for _, re := range regionErrors {
		for _, op := range faultOps {
			t.Run(re.name+"/"+op.name+"/once", func(t *testing.T) {
				t.Parallel()
				e, fc, _ := faultMock(t)
				var hits atomic.Int64
				fc.set(onType(op.typ, 1, &hits, answer(re.err)))
				began := time.Now()
				err := op.run(t, context.Background(), e)
				fc.set(nil)
				if err != nil {
					t.Fatalf("%s with one %s: %v", op.name, re.name, err)
				}
				if hits.Load() != 1 {
					t.Fatalf("%d %s RPCs failed; the fault missed", hits.Load(), op.name)
				}
				if op.write {
					expectAZ(t, e, "new", true)
				}
				t.Logf("took %v", time.Since(began).Round(time.Millisecond))
			})
			t.Run(re.name+"/"+op.name+"/always", func(t *testing.T) {
				t.Parallel()
				e, fc, _ := faultMock(t)
				var hits atomic.Int64
				fc.set(onType(op.typ, 0, &hits, answer(re.err)))
				const d = 500 * time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				began := time.Now()
				err := op.run(t, ctx, e)
				checkElapsed(t, op.name, began, d)
				fc.set(nil)
				if !isOnly(err, op.want) {
					t.Fatalf("%s with %s on every attempt = %v; want %v", op.name, re.name, err, op.want)
				}
				if hits.Load() == 0 {
					t.Fatalf("no %s RPC failed", op.name)
				}
				if op.write {
					expectAZ(t, e, "new", false)
				}
			})
		}
	}
}

// TestStoreStopsAnswering: the store takes every RPC and answers none
// until its context ends, for a while, then recovers. Operations in the
// outage fail by their deadlines as documented; afterwards all works.
func TestStoreStopsAnswering(t *testing.T) {
	e, fc, _ := faultMock(t)
	var down, cutAtCommit atomic.Bool
	fc.set(func(ctx context.Context, req *tikvrpc.Request, send func() (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
		if down.Load() {
			return nil, fc.hang(ctx)
		}
		if req.Type == tikvrpc.CmdCommit && cutAtCommit.CompareAndSwap(true, false) {
			// The store stops right after applying this Commit RPC:
			// its answer never comes.
			resp, err := send()
			down.Store(true)
			if err != nil {
				return resp, err
			}
			return nil, fc.hang(ctx)
		}
		return send()
	})
	const d = 300 * time.Millisecond
	withDeadline := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		began := time.Now()
		err := f(ctx)
		checkElapsed(t, "an operation in the outage", began, d)
		return err
	}
	getY := func(ctx context.Context) error {
		tx, err := e.Begin(ctx) // PD answers: Begin works
		if err != nil {
			return err
		}
		defer tx.Rollback()
		_, err = tx.Get([]byte("y"))
		return err
	}

	// The store stops as it applies the Commit RPC of a's and z's write.
	outage := time.Now()
	cutAtCommit.Store(true)
	if err := withDeadline(writeAZ(t, e, "caught").Commit); !isOnly(err, storage.ErrUncertain) {
		t.Errorf("Commit whose Commit RPC got no answer = %v; want ErrUncertain", err)
	}
	if !down.Load() {
		t.Fatal("the store did not stop at the Commit RPC")
	}
	if err := withDeadline(getY); !isOnly(err, storage.ErrUnavailable) {
		t.Errorf("Get in the outage = %v; want ErrUnavailable", err)
	}
	err := withDeadline(func(ctx context.Context) error {
		tx, err := e.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		return iterErr(tx, storage.IterOptions{})
	})
	if !isOnly(err, storage.ErrUnavailable) {
		t.Errorf("Iter in the outage = %v; want ErrUnavailable", err)
	}
	tx := begin(t, e)
	if err := tx.Set([]byte("b"), []byte("lost")); err != nil {
		t.Fatal(err)
	}
	if err := withDeadline(tx.Commit); !isOnly(err, storage.ErrUnavailable) {
		t.Errorf("Commit in the outage = %v; want ErrUnavailable (no Commit RPC can have been sent)", err)
	}
	// The outage lasts 1.5 s in all.
	for time.Since(outage) < 1500*time.Millisecond {
		if err := withDeadline(getY); !isOnly(err, storage.ErrUnavailable) {
			t.Fatalf("Get in the outage = %v; want ErrUnavailable", err)
		}
	}
	down.Store(false)
	fc.set(nil)

	// Everything works again; the uncertain commit did apply.
	expectAZ(t, e, "caught", true)
	if v, _ := latest(t, e, "b"); v != "old" {
		t.Errorf("b = %q; the commit that failed in the outage applied", v)
	}
	putOne(t, e, "b", "after")
	if v, _ := latest(t, e, "b"); v != "after" {
		t.Errorf("b = %q after the outage", v)
	}
	tx = begin(t, e)
	defer tx.Rollback()
	if got := collect(t, tx, storage.IterOptions{}); diff(got, []row{{"a", "caught"}, {"b", "after"}, {"y", "old"}, {"z", "caught"}}) != "" {
		t.Errorf("scan after the outage: %v", got)
	}
}

// TestPDTimestampsFail: PD's timestamp calls fail for 2 s. Begin and
// Commit fail with ErrUnavailable by their deadlines; nothing applies;
// a Begin that waits longer than the outage succeeds; all works after.
func TestPDTimestampsFail(t *testing.T) {
	e, _, pf := faultMock(t)
	const outage = 2 * time.Second
	const d = 300 * time.Millisecond
	pending := writeAZ(t, e, "new") // began before the outage
	pf.down.Store(true)
	start := time.Now()
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		time.Sleep(outage) // the fault's duration, not a wait for state
		pf.down.Store(false)
	}()

	// A patient Begin rides the outage out on client-go's retries.
	patient := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), outage+10*time.Second)
		defer cancel()
		tx, err := e.Begin(ctx)
		if err == nil {
			tx.Rollback()
		}
		patient <- err
	}()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	began := time.Now()
	_, err := e.Begin(ctx)
	cancel()
	checkElapsed(t, "Begin", began, d)
	if !isOnly(err, storage.ErrUnavailable) {
		t.Errorf("Begin in the outage = %v; want ErrUnavailable", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), d)
	began = time.Now()
	err = pending.Commit(ctx)
	cancel()
	checkElapsed(t, "Commit", began, d)
	if !isOnly(err, storage.ErrUnavailable) {
		t.Errorf("Commit in the outage = %v; want ErrUnavailable", err)
	}
	if time.Since(start) >= outage {
		t.Fatalf("the checks outlasted the outage (%v): the machine is too slow for this test", time.Since(start))
	}
	<-recovered
	if err := <-patient; err != nil {
		t.Errorf("a Begin waiting through the outage: %v", err)
	}
	t.Logf("%d timestamp calls failed", pf.calls.Load())
	expectAZ(t, e, "new", false)
	if err := writeAZ(t, e, "after").Commit(context.Background()); err != nil {
		t.Fatalf("Commit after the outage: %v", err)
	}
	expectAZ(t, e, "after", true)
}

// TestSplitUnderLoad splits regions again and again while writers commit
// read-modify-write transactions on a counter and while a long
// region-parallel scan runs: no acknowledged write is lost, none applies
// twice, and the scan returns every key once, in order.
func TestSplitUnderLoad(t *testing.T) {
	const n = 4000
	dataKey := func(i int) []byte { return fmt.Appendf(nil, "d/%05d", i) }
	e := newMock(t, MockOptions{SplitKeys: bytesOf("d/01000", "d/02000", "d/03000", "w/"), ScanConcurrency: 2})
	keys, values := make([][]byte, n), make([][]byte, n)
	for i := range n {
		keys[i], values[i] = dataKey(i), smallValue(i)
	}
	load(t, e, keys, values, 1000)
	putOne(t, e, "w/ctr", "0")

	var splits atomic.Int64
	split := func(k []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.c.store.SplitRegions(ctx, [][]byte{k}, false, nil); err != nil {
			t.Errorf("split at %q: %v", k, err)
			return
		}
		splits.Add(1)
	}

	// Writers: each transaction increments w/ctr and logs the value it
	// wrote under a key of its own.
	const writers = 4
	type outcome struct {
		key, value string
		err        error
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tx := begin(t, e)
				v, err := tx.Get([]byte("w/ctr"))
				if err != nil {
					tx.Rollback()
					t.Errorf("writer %d: Get: %v", w, err)
					return
				}
				c, _ := strconv.Atoi(string(v))
				next := strconv.Itoa(c + 1)
				key := fmt.Sprintf("w/log/%d/%05d", w, i)
				_ = tx.Set([]byte("w/ctr"), []byte(next))
				_ = tx.Set([]byte(key), []byte(next))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = tx.Commit(ctx)
				cancel()
				mu.Lock()
				outcomes = append(outcomes, outcome{key, next, err})
				mu.Unlock()
			}
		})
	}
	// A splitter cuts the writers' range at random log keys.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			split(fmt.Appendf(nil, "w/log/%d/%05d", rng.IntN(writers), rng.IntN(200)))
		}
	})

	// The scan: region-parallel over the data, each region of which is
	// split while the scan is under way, ahead of it and behind it.
	tx := begin(t, e)
	it, err := tx.Iter(storage.IterOptions{Lower: []byte("d/"), Upper: []byte("d0")})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	i := 0
	for ; it.Next(); i++ {
		if i == 0 && !usesParallel(it) {
			t.Error("the scan is not region-parallel")
		}
		if want := dataKey(i); !bytes.Equal(it.Key(), want) || !bytes.Equal(it.Value(), values[i]) {
			t.Fatalf("scan row %d: %q=%q; want %q=%q", i, it.Key(), it.Value(), want, values[i])
		}
		if i%100 == 50 {
			split(dataKey(rng.IntN(n)))
			split(dataKey(min(i+1+rng.IntN(300), n-1)))
		}
	}
	if err := it.Err(); err != nil {
		t.Fatalf("scan after %d rows: %v", i, err)
	}
	it.Close()
	tx.Rollback()
	if i != n {
		t.Fatalf("scan returned %d rows; want %d", i, n)
	}
	// Let the writers run through some more splits.
	for deadline := time.Now().Add(5 * time.Second); splits.Load() < 150 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	// Judge the writes: the counter counts exactly the applied ones, the
	// logged values are 1..counter once each, and every acknowledged
	// write is there.
	final := begin(t, e)
	defer final.Rollback()
	logged := map[string]string{}
	for _, r := range collect(t, final, storage.IterOptions{Lower: []byte("w/log/"), Upper: []byte("w/log0")}) {
		logged[r.k] = r.v
	}
	ctrV, _ := latest(t, e, "w/ctr")
	ctr, _ := strconv.Atoi(ctrV)
	seen := map[string]string{}
	for k, v := range logged {
		if prev, ok := seen[v]; ok {
			t.Errorf("value %s applied twice: %s and %s", v, prev, k)
		}
		seen[v] = k
		if c, _ := strconv.Atoi(v); c < 1 || c > ctr {
			t.Errorf("%s = %s, outside 1..%d", k, v, ctr)
		}
	}
	if len(logged) != ctr {
		t.Errorf("counter at %d, %d writes logged", ctr, len(logged))
	}
	var acked, conflicts, other int
	for _, o := range outcomes {
		v, ok := logged[o.key]
		switch {
		case o.err == nil:
			acked++
			if !ok || v != o.value {
				t.Errorf("lost write: %s=%s acknowledged, engine has %q", o.key, o.value, v)
			}
		case errors.Is(o.err, storage.ErrConflict):
			conflicts++
			if ok {
				t.Errorf("%s applied after a conflict: %v", o.key, o.err)
			}
		default:
			// Splits are region errors client-go retries: no commit
			// should fail otherwise.
			other++
			t.Errorf("%s: %v", o.key, o.err)
		}
	}
	t.Logf("%d splits (%d regions); scan of %d rows; %d writes acknowledged, %d conflicts, %d other errors",
		splits.Load(), regionCount(e), n, acked, conflicts, other)
	if acked == 0 {
		t.Error("no write was acknowledged")
	}
}
