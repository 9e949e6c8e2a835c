package tikv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pingcap/log"
	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"go.uber.org/zap/zapcore"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

func TestMain(m *testing.M) {
	// client-go and its mock cluster log at INFO, and the mock logs a
	// harmless ERROR for every reverse scan of an empty range.
	if os.Getenv("AXON_TIKV_LOG") == "" {
		log.SetLevel(zapcore.FatalLevel)
	}
	os.Exit(m.Run())
}

// hook may answer a request instead of the mock cluster (handled true).
// send sends a request, this one or another, on to the same store.
type hook func(req *tikvrpc.Request, send func(*tikvrpc.Request) (*tikvrpc.Response, error)) (resp *tikvrpc.Response, err error, handled bool)

// recorder wraps the mock cluster's client: it notes which regions the
// requests went to and lets a test answer requests itself.
type recorder struct {
	kvstore.Client

	mu        sync.Mutex
	scans     map[uint64]int            // region → Scan requests
	prewrites map[uint64]map[uint64]int // start ts → region → Prewrite requests
	hook      hook
}

func newRecorder() *recorder {
	return &recorder{scans: map[uint64]int{}, prewrites: map[uint64]map[uint64]int{}}
}

func (r *recorder) wrap(c kvstore.Client) kvstore.Client {
	r.Client = c
	return r
}

func (r *recorder) setHook(h hook) {
	r.mu.Lock()
	r.hook = h
	r.mu.Unlock()
}

func (r *recorder) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	region := req.Context.GetRegionId()
	r.mu.Lock()
	switch req.Type {
	case tikvrpc.CmdScan:
		r.scans[region]++
	case tikvrpc.CmdPrewrite:
		ts := req.Prewrite().GetStartVersion()
		if r.prewrites[ts] == nil {
			r.prewrites[ts] = map[uint64]int{}
		}
		r.prewrites[ts][region]++
	}
	h := r.hook
	r.mu.Unlock()
	send := func(req *tikvrpc.Request) (*tikvrpc.Response, error) {
		return r.Client.SendRequest(ctx, addr, req, timeout)
	}
	if h != nil {
		if resp, err, ok := h(req, send); ok {
			return resp, err
		}
	}
	return send(req)
}

// scannedRegions is the number of regions that served a Scan.
func (r *recorder) scannedRegions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.scans)
}

// widestPrewrite is the most regions one transaction prewrote in.
func (r *recorder) widestPrewrite() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, regions := range r.prewrites {
		n = max(n, len(regions))
	}
	return n
}

// prewroteRegions is the number of regions that served a Prewrite.
func (r *recorder) prewroteRegions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := map[uint64]bool{}
	for _, regions := range r.prewrites {
		for id := range regions {
			all[id] = true
		}
	}
	return len(all)
}

// regionCount is the number of regions of e's mock cluster.
func regionCount(e *Engine) int { return len(e.c.mock.cluster.GetAllRegions()) }

// newMock opens a mock cut into regions as Axon lays its keys out,
// unless opts says otherwise.
func newMock(t testing.TB, opts MockOptions) *Engine {
	t.Helper()
	if opts.Layout == nil {
		opts.Layout = core.RegionSplits
	}
	e, err := NewMock(opts)
	if err != nil {
		t.Fatalf("NewMock: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func begin(t testing.TB, e storage.Engine) storage.Txn {
	t.Helper()
	tx, err := e.Begin(context.Background())
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

// load commits the pairs in transactions of at most batch keys.
func load(t testing.TB, e storage.Engine, keys, values [][]byte, batch int) {
	t.Helper()
	for i := 0; i < len(keys); i += batch {
		tx := begin(t, e)
		for j := i; j < min(i+batch, len(keys)); j++ {
			if err := tx.Set(keys[j], values[j]); err != nil {
				t.Fatalf("Set: %v", err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
}

type row struct{ k, v string }

func (p row) String() string { return fmt.Sprintf("%q=%q", p.k, p.v) }

// collect reads a whole iteration.
func collect(t testing.TB, tx storage.Txn, opts storage.IterOptions) []row {
	t.Helper()
	it, err := tx.Iter(opts)
	if err != nil {
		t.Fatalf("Iter: %v", err)
	}
	defer it.Close()
	var out []row
	for it.Next() {
		out = append(out, row{string(it.Key()), string(it.Value())})
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Iter(%+v): %v", opts, err)
	}
	return out
}

// inRange filters and orders a sorted model for opts.
func inRange(model []row, opts storage.IterOptions) []row {
	var out []row
	for _, p := range model {
		k := []byte(p.k)
		if bytes.Compare(k, opts.Lower) >= 0 && (opts.Upper == nil || bytes.Compare(k, opts.Upper) < 0) {
			out = append(out, p)
		}
	}
	if opts.Reverse {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

func diff(got, want []row) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("row %d: got %v, want %v", i, got[i], want[i])
		}
	}
	return ""
}
