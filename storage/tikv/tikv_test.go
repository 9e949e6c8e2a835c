package tikv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pingcap/kvproto/pkg/errorpb"
	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	tikverr "github.com/tikv/client-go/v2/error"
	"github.com/tikv/client-go/v2/tikvrpc"

	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/storagetest"
)

// conformanceSplits cut storagetest's keys so that its scans, conflicts
// and multi-key commits cross region borders: the bounds keys ("\x00",
// "a", "ab", "b", "\xff"...), the 600 "scanNNNN" keys, the counters,
// "k0".."k6" and "other*", "it1".."it4", and "a".."h".
var conformanceSplits = []string{
	"\x00\x00", "a\x00", "b", "counter1", "counter2", "d", "it3", "k3", "other",
	"scan0150", "scan0300", "scan0450", "\xff\x00",
}

func splitKeys(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, s := range keys {
		out[i] = []byte(s)
	}
	return out
}

func TestConformance(t *testing.T) {
	splits := splitKeys(conformanceSplits)
	var mu sync.Mutex
	recs := map[string]*recorder{} // by subtest
	storagetest.Run(t, func(t *testing.T) storage.Engine {
		rec := newRecorder()
		mu.Lock()
		recs[strings.TrimPrefix(t.Name(), "TestConformance/")] = rec
		mu.Unlock()
		e := newMock(t, MockOptions{SplitKeys: splits, WrapClient: rec.wrap})
		if n := regionCount(e); n != len(splits)+1 {
			t.Fatalf("mock has %d regions; want %d", n, len(splits)+1)
		}
		return e
	})
	// Prove that the suite ran across region borders.
	for _, c := range []struct {
		test                  string
		scanned, prewrote, in int // at least
	}{
		{"Iter/Bounds", len(splits) + 1, 3, 3},
		{"Iter/LongScanKeepsSnapshot", 4, 4, 4},
		{"ReadYourWrites/Iter", 3, 3, 3},
		{"Concurrent/Counters", 0, 1, 3}, // one counter per region
		{"Conflict/WriteWrite", 0, 2, 2},
		{"Conflict/Lock", 0, 2, 2},
	} {
		rec := recs[c.test]
		if rec == nil {
			t.Errorf("%s: no engine recorded", c.test)
			continue
		}
		t.Logf("%s: scans reached %d of %d regions; commits reached %d, the widest %d", c.test,
			rec.scannedRegions(), len(splits)+1, rec.prewroteRegions(), rec.widestPrewrite())
		if got := rec.scannedRegions(); got < c.scanned {
			t.Errorf("%s: scans reached %d regions; want at least %d", c.test, got, c.scanned)
		}
		if got := rec.widestPrewrite(); got < c.prewrote {
			t.Errorf("%s: widest commit prewrote in %d regions; want at least %d", c.test, got, c.prewrote)
		}
		if got := rec.prewroteRegions(); got < c.in {
			t.Errorf("%s: commits prewrote in %d regions; want at least %d", c.test, got, c.in)
		}
	}
}

func TestConformanceSingleRegion(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine { return newMock(t, MockOptions{}) })
}

// TestConformanceSequential turns parallel scans off over many regions.
func TestConformanceSequential(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Engine {
		return newMock(t, MockOptions{SplitKeys: splitKeys(conformanceSplits), ScanConcurrency: 1})
	})
}

func TestOpenRefuses(t *testing.T) {
	if _, err := Open(context.Background(), nil, Options{}); err == nil {
		t.Error("Open without endpoints succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, []string{"127.0.0.1:1"}, Options{}); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Open with a canceled context = %v; want ErrUnavailable", err)
	}
}

func TestValueEncoding(t *testing.T) {
	for _, v := range []string{"", "\xff", "\xff\xff", "x", "\x00", "\x01record", "a\xff"} {
		enc := encodeValue([]byte(v))
		if len(enc) == 0 {
			t.Errorf("encodeValue(%q) is empty", v)
		}
		if got := decodeValue(nil, enc); string(got) != v {
			t.Errorf("decodeValue(encodeValue(%q)) = %q", v, got)
		}
		if v != "" && v[0] != 0xFF && !bytes.Equal(enc, []byte(v)) {
			t.Errorf("encodeValue(%q) = %q; want it unchanged", v, enc)
		}
	}
}

func TestCommitErrorMapping(t *testing.T) {
	conflict := tikverr.NewErrWriteConflictWithArgs(1, 2, 3, []byte("k"), kvrpcpb.WriteConflict_Optimistic)
	tests := []struct {
		name       string
		err        error
		commitSent bool
		want       error // nil: none of the three
	}{
		{"undetermined", fmt.Errorf("wrapped: %w", tikverr.ErrResultUndetermined), true, storage.ErrUncertain},
		{"undetermined before commit", fmt.Errorf("wrapped: %w", tikverr.ErrResultUndetermined), false, storage.ErrUncertain},
		{"write conflict", fmt.Errorf("wrapped: %w", conflict), false, storage.ErrConflict},
		{"latch conflict", &tikverr.ErrWriteConflictInLatch{StartTS: 1}, false, storage.ErrConflict},
		{"retryable", &tikverr.ErrRetryable{Retryable: "txn lock not found"}, true, storage.ErrConflict},
		{"canceled before commit", fmt.Errorf("wrapped: %w", context.Canceled), false, storage.ErrUnavailable},
		{"canceled during commit", fmt.Errorf("wrapped: %w", context.Canceled), true, storage.ErrUncertain},
		{"deadline during commit", context.DeadlineExceeded, true, storage.ErrUncertain},
		{"region unavailable at prewrite", tikverr.ErrRegionUnavailable, false, storage.ErrUnavailable},
		{"unknown error after commit sent", errors.New("boom"), true, storage.ErrUncertain},
		{"txn too large", &tikverr.ErrTxnTooLarge{Size: 1}, false, nil},
	}
	sentinels := []error{storage.ErrConflict, storage.ErrUncertain, storage.ErrUnavailable}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := commitErr(tc.err, tc.commitSent)
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap the cause %v", got, tc.err)
			}
			for _, s := range sentinels {
				if errors.Is(got, s) != (s == tc.want) {
					t.Errorf("commitErr = %v; errors.Is(%v) = %v", got, s, !(s == tc.want))
				}
			}
		})
	}
}

func putOne(t *testing.T, e storage.Engine, k, v string) {
	t.Helper()
	load(t, e, [][]byte{[]byte(k)}, [][]byte{[]byte(v)}, 1)
}

// latest reads k in a fresh transaction ("" and false if absent).
func latest(t *testing.T, e storage.Engine, k string) (string, bool) {
	t.Helper()
	tx := begin(t, e)
	defer tx.Rollback()
	v, err := tx.Get([]byte(k))
	if errors.Is(err, storage.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	return string(v), true
}

// TestCommitFaults injects failures into the RPCs of a commit of two keys
// in two regions and checks what Commit reports and what got applied.
func TestCommitFaults(t *testing.T) {
	regionErr := func(req *tikvrpc.Request, e *errorpb.Error) *tikvrpc.Response {
		switch req.Type {
		case tikvrpc.CmdCommit:
			return &tikvrpc.Response{Resp: &kvrpcpb.CommitResponse{RegionError: e}}
		case tikvrpc.CmdPrewrite:
			return &tikvrpc.Response{Resp: &kvrpcpb.PrewriteResponse{RegionError: e}}
		}
		panic("unexpected request")
	}
	tests := []struct {
		name    string
		on      tikvrpc.CmdType
		inject  func(cancel context.CancelFunc, req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error)
		want    error
		applied bool
	}{
		{
			name: "context canceled at prewrite, nothing sent",
			on:   tikvrpc.CmdPrewrite,
			inject: func(cancel context.CancelFunc, _ *tikvrpc.Request, _ func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
				cancel()
				return nil, context.Canceled
			},
			want: storage.ErrUnavailable,
		},
		{
			name: "commit applied, context canceled before the answer",
			on:   tikvrpc.CmdCommit,
			inject: func(cancel context.CancelFunc, req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
				if _, err := send(req); err != nil {
					return nil, err
				}
				cancel()
				return nil, context.Canceled
			},
			want:    storage.ErrUncertain,
			applied: true,
		},
		{
			name: "commit applied, answer undetermined",
			on:   tikvrpc.CmdCommit,
			inject: func(_ context.CancelFunc, req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
				if _, err := send(req); err != nil {
					return nil, err
				}
				return regionErr(req, &errorpb.Error{UndeterminedResult: &errorpb.UndeterminedResult{Message: "injected"}}), nil
			},
			want:    storage.ErrUncertain,
			applied: true,
		},
		{
			// As when another client found the locks expired and rolled
			// the transaction back: the Commit RPC is sent but refused.
			name: "locks rolled back by another client before the commit",
			on:   tikvrpc.CmdCommit,
			inject: func(_ context.CancelFunc, req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error) {
				c := req.Commit()
				rb := tikvrpc.NewRequest(tikvrpc.CmdBatchRollback, &kvrpcpb.BatchRollbackRequest{StartVersion: c.StartVersion, Keys: c.Keys}, req.Context)
				if _, err := send(rb); err != nil {
					return nil, err
				}
				return send(req)
			},
			want: storage.ErrConflict,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			e := newMock(t, MockOptions{SplitKeys: [][]byte{[]byte("m")}, WrapClient: rec.wrap})
			putOne(t, e, "a", "old")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tx := begin(t, e)
			for _, k := range []string{"a", "z"} { // two regions
				if err := tx.Set([]byte(k), []byte("new")); err != nil {
					t.Fatal(err)
				}
			}
			var once sync.Once
			rec.setHook(func(req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error, bool) {
				if req.Type != tc.on {
					return nil, nil, false
				}
				var resp *tikvrpc.Response
				var err error
				handled := false
				once.Do(func() {
					handled = true
					resp, err = tc.inject(cancel, req, send)
				})
				return resp, err, handled
			})
			err := tx.Commit(ctx)
			rec.setHook(nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Commit = %v; want %v", err, tc.want)
			}
			t.Logf("Commit: %v", err)
			for _, k := range []string{"a", "z"} {
				v, _ := latest(t, e, k)
				if applied := v == "new"; applied != tc.applied {
					t.Errorf("%s = %q; applied %v, want %v", k, v, applied, tc.applied)
				}
			}
		})
	}
}

func TestCommitCanceledBeforehand(t *testing.T) {
	e := newMock(t, MockOptions{})
	tx := begin(t, e)
	if err := tx.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tx.Commit(ctx); !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit = %v; want ErrUnavailable wrapping context.Canceled", err)
	}
	if _, ok := latest(t, e, "k"); ok {
		t.Fatal("a commit refused beforehand was applied")
	}
	if _, err := e.Begin(ctx); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Begin with a canceled context = %v; want ErrUnavailable", err)
	}
}

func TestConflictMessage(t *testing.T) {
	e := newMock(t, MockOptions{})
	a, b := begin(t, e), begin(t, e)
	for _, tx := range []storage.Txn{a, b} {
		if err := tx.Set([]byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := b.Commit(context.Background())
	if !errors.Is(err, storage.ErrConflict) || !tikverr.IsErrWriteConflict(err) {
		t.Fatalf("Commit = %v; want ErrConflict wrapping client-go's write conflict", err)
	}
}

// TestReadUnavailable makes the mock answer reads with "server is busy"
// until the reader's context ends.
func TestReadUnavailable(t *testing.T) {
	rec := newRecorder()
	e := newMock(t, MockOptions{WrapClient: rec.wrap})
	putOne(t, e, "k", "v")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tx, err := e.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rec.setHook(func(req *tikvrpc.Request, _ func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error, bool) {
		if req.Type != tikvrpc.CmdGet {
			return nil, nil, false
		}
		cancel()
		busy := &errorpb.Error{ServerIsBusy: &errorpb.ServerIsBusy{Reason: "injected"}}
		return &tikvrpc.Response{Resp: &kvrpcpb.GetResponse{RegionError: busy}}, nil, true
	})
	if _, err := tx.Get([]byte("k")); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Get = %v; want ErrUnavailable", err)
	}
}

func TestShareAndClose(t *testing.T) {
	e, err := NewMock(MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.Share()
	if err != nil {
		t.Fatal(err)
	}
	putOne(t, e, "k", "v")
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.Begin(context.Background()); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Begin on a closed handle = %v; want ErrClosed", err)
	}
	if _, err := e.Share(); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Share of a closed handle = %v; want ErrClosed", err)
	}
	// The other handle still works.
	if v, ok := latest(t, f, "k"); !ok || v != "v" {
		t.Fatalf("shared handle reads %q, %v", v, ok)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close of the last handle: %v", err)
	}
	if !f.c.store.IsClose() {
		t.Fatal("the client outlived its last handle")
	}
}

// TestLockMutation checks that a locked, unwritten key travels as an
// Op_Lock mutation (checked at prewrite, value untouched) and that it is
// invisible to reads.
func TestLockMutation(t *testing.T) {
	rec := newRecorder()
	e := newMock(t, MockOptions{WrapClient: rec.wrap})
	putOne(t, e, "held", "v")
	var mu sync.Mutex
	ops := map[string]kvrpcpb.Op{}
	rec.setHook(func(req *tikvrpc.Request, _ func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error, bool) {
		if req.Type == tikvrpc.CmdPrewrite {
			mu.Lock()
			for _, m := range req.Prewrite().GetMutations() {
				ops[string(m.GetKey())] = m.GetOp()
			}
			mu.Unlock()
		}
		return nil, nil, false
	})
	tx := begin(t, e)
	if err := tx.Lock([]byte("held"), []byte("absent")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Set([]byte("written"), []byte("w")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, tx, storage.IterOptions{}); diff(got, []row{{"held", "v"}, {"written", "w"}}) != "" {
		t.Errorf("scan inside the locker = %v", got)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]kvrpcpb.Op{"held": kvrpcpb.Op_Lock, "absent": kvrpcpb.Op_Lock, "written": kvrpcpb.Op_Put}
	for k, op := range want {
		if got, ok := ops[k]; !ok || got != op {
			t.Errorf("mutation of %q = %v; want %v (all: %v)", k, ops[k], op, ops)
		}
	}
	if v, ok := latest(t, e, "held"); !ok || v != "v" {
		t.Errorf("locked key reads %q, %v after commit", v, ok)
	}
	if _, ok := latest(t, e, "absent"); ok {
		t.Error("locking an absent key created it")
	}
}

// TestSendFailureDoesNotWedge fails one RPC at the transport (as a lost
// connection would) and checks that the engine keeps serving: client-go
// then probes the store's health, which the mock store cannot answer.
func TestSendFailureDoesNotWedge(t *testing.T) {
	rec := newRecorder()
	e := newMock(t, MockOptions{WrapClient: rec.wrap})
	putOne(t, e, "k", "v")
	var once sync.Once
	rec.setHook(func(req *tikvrpc.Request, _ func(*tikvrpc.Request) (*tikvrpc.Response, error)) (*tikvrpc.Response, error, bool) {
		failed := false
		if req.Type == tikvrpc.CmdGet {
			once.Do(func() { failed = true })
		}
		if failed {
			return nil, errors.New("injected: connection reset"), true
		}
		return nil, nil, false
	})
	for i := range 3 {
		if v, ok := latest(t, e, "k"); !ok || v != "v" {
			t.Fatalf("read %d: %q, %v", i, v, ok)
		}
		putOne(t, e, fmt.Sprintf("k%d", i), "w")
	}
}
