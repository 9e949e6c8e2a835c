package tikv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pingcap/failpoint"
	"github.com/tikv/client-go/v2/testutils"
	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	tikvutil "github.com/tikv/client-go/v2/util"
	"github.com/tikv/client-go/v2/util/async"
	pd "github.com/tikv/pd/client"
)

// MockOptions configure NewMock.
type MockOptions struct {
	// SplitKeys are engine keys at which regions begin (besides the
	// first). When set, Regions, Sample and Layout are ignored.
	SplitKeys [][]byte
	// Regions, if 2 or more, splits the mock into about that many
	// regions per keyspace at the quantiles of Sample, where Layout
	// says. 0 or 1 means a single region.
	Regions int
	// Sample holds raw (etcd) keys whose distribution the region borders
	// follow: the quantiles are every len(Sample)/Regions-th sample key
	// in order, so a scan over keys distributed like the sample spreads
	// evenly. Nil means the DefaultSampleCount keys made with
	// DefaultSampleFormat.
	Sample [][]byte
	// Layout turns the quantiles (raw keys, fewer than Regions) into the
	// engine keys regions begin at: it is the caller's key layout, which
	// storage does not know (Axon's is core.RegionSplits). Required when
	// Regions is 2 or more.
	Layout func(quantiles [][]byte, regions int) [][]byte
	// ScanConcurrency is as in Options.
	ScanConcurrency int
	// WrapClient, if set, wraps the client that carries every RPC to the
	// mock cluster; tests use it to watch or fail requests.
	WrapClient func(kvstore.Client) kvstore.Client
	// WrapPD, if set, wraps the mock's PD client (timestamps, region
	// lookups); Trace.WrapPD is one.
	WrapPD func(pd.Client) pd.Client
}

// The sample used when MockOptions.Sample is nil: the keys
// fmt.Sprintf(DefaultSampleFormat, i) for i < DefaultSampleCount, like the
// pods of one Kubernetes namespace.
const (
	DefaultSampleFormat = "/registry/pods/ns/pod-%06d"
	DefaultSampleCount  = 100_000
)

// mockParts are the pieces of an in-process cluster that tests reach.
type mockParts struct {
	cluster *testutils.MockCluster
}

// NewMock returns an Engine over client-go's in-process TiKV cluster
// (mocktikv: MVCC in memory, the real client-side 2PC, lock resolution
// and region routing), split into regions as opts say. It is for tests;
// its timestamps come from the local clock.
func NewMock(opts MockOptions) (*Engine, error) {
	splits, err := mockSplitKeys(opts)
	if err != nil {
		return nil, err
	}
	if err := mockLiveness(); err != nil {
		return nil, err
	}
	cli, cluster, pdc, err := testutils.NewMockTiKV("", nil)
	if err != nil {
		return nil, fmt.Errorf("tikv: mock: %w", err)
	}
	testutils.BootstrapWithMultiRegions(cluster, splits...)
	if opts.WrapPD != nil {
		// Under client-go's codec client, which it requires on top.
		pdc = opts.WrapPD(pdc)
	}
	store, err := kvstore.NewTestTiKVStore(&guardedClient{Client: cli}, pdc, opts.WrapClient, nil, 0)
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("tikv: mock: %w", err)
	}
	return newEngine(&backend{
		store:           store,
		scanConcurrency: concurrency(opts.ScanConcurrency),
		mock:            &mockParts{cluster: cluster},
	}), nil
}

// mockLiveness makes client-go report every store as live, once per
// process. The mock store's address ("store1") serves no status API, so
// after any failed send client-go's health check never succeeds and
// every later request gets a pseudo region error: the engine is wedged
// for good, which no real TiKV does. client-go's own failpoint is the
// switch; it is process-wide, and enabling failpoints is not
// synchronized with clients already running, so this happens before the
// first mock's client exists (a real Engine opened earlier in the same
// process would be affected too; only tests create mocks).
var mockLiveness = sync.OnceValue(func() error {
	tikvutil.EnableFailpoints()
	if err := failpoint.Enable("tikvclient/injectLiveness", `return("reachable")`); err != nil {
		return fmt.Errorf("tikv: mock: %w", err)
	}
	return nil
})

// guardedClient keeps requests away from a closed mock cluster. client-go
// resolves some locks in goroutines it does not wait for at Close; against
// a real cluster they merely fail, but the mock's closed MVCC store
// panics. Close waits for the requests in flight; later ones fail.
type guardedClient struct {
	kvstore.Client
	mu     sync.RWMutex
	closed bool
}

var errMockClosed = errors.New("tikv: mock cluster closed")

func (g *guardedClient) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return nil, errMockClosed
	}
	return g.Client.SendRequest(ctx, addr, req, timeout)
}

func (g *guardedClient) SendRequestAsync(ctx context.Context, addr string, req *tikvrpc.Request, cb async.Callback[*tikvrpc.Response]) {
	go func() { cb.Schedule(g.SendRequest(ctx, addr, req, 0)) }()
}

func (g *guardedClient) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.Client.Close()
}

// mockSplitKeys returns the sorted, distinct, non-empty split keys opts
// ask for.
func mockSplitKeys(opts MockOptions) ([][]byte, error) {
	split := opts.SplitKeys
	if len(split) == 0 && opts.Regions > 1 {
		if opts.Layout == nil {
			return nil, fmt.Errorf("tikv: mock: %d regions without a key layout", opts.Regions)
		}
		split = opts.Layout(sampleQuantiles(opts.Sample, opts.Regions), opts.Regions)
	}
	keys := make([][]byte, 0, len(split))
	for _, k := range split {
		if len(k) == 0 {
			return nil, fmt.Errorf("tikv: mock: empty split key")
		}
		keys = append(keys, bytes.Clone(k))
	}
	slices.SortFunc(keys, bytes.Compare)
	return slices.CompactFunc(keys, bytes.Equal), nil
}

// sampleQuantiles returns the raw keys that cut sample into n parts of
// equal size (fewer if the sample has too few distinct keys).
func sampleQuantiles(sample [][]byte, n int) [][]byte {
	var qs [][]byte
	if sample == nil {
		for i := 1; i < n; i++ {
			qs = append(qs, fmt.Appendf(nil, DefaultSampleFormat, i*DefaultSampleCount/n))
		}
		return qs
	}
	sorted := slices.Clone(sample)
	slices.SortFunc(sorted, bytes.Compare)
	sorted = slices.CompactFunc(sorted, bytes.Equal)
	if len(sorted) == 0 {
		return nil
	}
	for i := 1; i < n; i++ {
		q := sorted[i*len(sorted)/n]
		if len(qs) == 0 || !bytes.Equal(q, qs[len(qs)-1]) {
			qs = append(qs, q)
		}
	}
	return qs
}
