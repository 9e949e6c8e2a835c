package server_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/errorpb"
	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/util/async"
	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/clients/tso"
	"github.com/tikv/pd/client/pkg/caller"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/faultload"
	"github.com/axon-kv/axon/storage/tikv"
)

// TiKV's own faults under load: three instances over the mock
// cluster serve the failover tests' load while the RPCs to TiKV fail
// (region errors, splits, lost answers to Commit RPCs) or PD's
// timestamps do. The load's checks judge each run: linearizable
// history, every acknowledged write applied once, watches complete.

// Fault modes of tikvFaults.
const (
	faultNone int32 = iota
	faultRegionErrors
	faultSplits
	faultLostCommits
)

// tikvFaults wraps the client that carries every RPC to the mock cluster.
type tikvFaults struct {
	kvstore.Client
	mode atomic.Int32

	mu  sync.Mutex
	rng *rand.Rand
	// lost holds, per start ts, whether the transaction's Commit RPCs
	// lose their answers (decided at its first Commit RPC).
	lost map[uint64]bool
	// cut holds the keys split at: each once, since the mock would cut
	// a region at its own start key again, leaving an empty region.
	cut map[string]bool

	injected atomic.Int64 // RPCs failed
	splits   atomic.Int64 // regions split
}

var errLostAnswer = errors.New("injected: connection reset before the answer")

func (f *tikvFaults) wrap(c kvstore.Client) kvstore.Client {
	f.Client = c
	return f
}

func (f *tikvFaults) intn(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

func (f *tikvFaults) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	send := func() (*tikvrpc.Response, error) { return f.Client.SendRequest(ctx, addr, req, timeout) }
	switch f.mode.Load() {
	case faultRegionErrors:
		switch req.Type {
		case tikvrpc.CmdGet, tikvrpc.CmdBatchGet, tikvrpc.CmdScan, tikvrpc.CmdPrewrite, tikvrpc.CmdCommit,
			tikvrpc.CmdCheckTxnStatus, tikvrpc.CmdResolveLock, tikvrpc.CmdBatchRollback:
		default:
			return send()
		}
		if f.intn(4) != 0 {
			return send()
		}
		f.injected.Add(1)
		var e *errorpb.Error
		switch n := f.intn(20); {
		case n < 6:
			e = &errorpb.Error{Message: "injected", NotLeader: &errorpb.NotLeader{RegionId: req.RegionId}}
		case n < 12:
			e = &errorpb.Error{Message: "injected", EpochNotMatch: &errorpb.EpochNotMatch{}}
		case n < 19:
			e = &errorpb.Error{Message: "injected", RegionNotFound: &errorpb.RegionNotFound{RegionId: req.RegionId}}
		default:
			// Rarer: client-go backs off 1-2 s on it.
			e = &errorpb.Error{Message: "injected", ServerIsBusy: &errorpb.ServerIsBusy{Reason: "injected"}}
		}
		return tikvrpc.GenRegionErrorResp(req, e)
	case faultSplits:
		// Split the request's region just past its key, then send the
		// request with its now stale epoch, as when a split lands
		// between client-go's lookup and the RPC.
		var key []byte
		switch req.Type {
		case tikvrpc.CmdGet:
			key = req.Get().Key
		case tikvrpc.CmdPrewrite:
			if ms := req.Prewrite().Mutations; len(ms) > 0 {
				key = ms[0].Key
			}
		case tikvrpc.CmdCommit:
			if ks := req.Commit().Keys; len(ks) > 0 {
				key = ks[0]
			}
		}
		at := append(key[:len(key):len(key)], 0)
		f.mu.Lock()
		doSplit := key != nil && !f.cut[string(at)] && f.rng.IntN(3) == 0
		if doSplit {
			f.cut[string(at)] = true
		}
		f.mu.Unlock()
		if doSplit {
			split := tikvrpc.NewRequest(tikvrpc.CmdSplitRegion, &kvrpcpb.SplitRegionRequest{SplitKeys: [][]byte{at}}, req.Context)
			if resp, err := f.Client.SendRequest(ctx, addr, split, timeout); err == nil {
				if r, ok := resp.Resp.(*kvrpcpb.SplitRegionResponse); ok && r.RegionError == nil && len(r.Regions) > 1 {
					f.splits.Add(1)
				}
			}
		}
		return send()
	case faultLostCommits:
		if req.Type != tikvrpc.CmdCommit {
			return send()
		}
		ts := req.Commit().StartVersion
		f.mu.Lock()
		lost, seen := f.lost[ts]
		first := !seen
		if first {
			// A third of the transactions lose the answer to their
			// primary's first Commit RPC; half of those lose every
			// retry's too, until the caller gives up.
			switch f.rng.IntN(6) {
			case 0:
				lost = false // once only: client-go's retry succeeds
				f.lost[ts] = false
			case 1:
				lost = true
				f.lost[ts] = true
			default:
				f.lost[ts] = false
				f.mu.Unlock()
				return send()
			}
		}
		f.mu.Unlock()
		if first {
			f.injected.Add(1)
			if _, err := send(); err != nil {
				return nil, err
			}
			return nil, errLostAnswer
		}
		if lost {
			return nil, errLostAnswer
		}
		return send()
	}
	return send()
}

func (f *tikvFaults) SendRequestAsync(ctx context.Context, addr string, req *tikvrpc.Request, cb async.Callback[*tikvrpc.Response]) {
	go func() { cb.Schedule(f.SendRequest(ctx, addr, req, 0)) }()
}

// pdFaults wraps the mock's PD client: while down, timestamps fail.
type pdFaults struct {
	pd.Client
	down  *atomic.Bool
	calls *atomic.Int64
}

var errTSODown = errors.New("injected: PD timestamp unavailable")

func (p *pdFaults) WithCallerComponent(comp caller.Component) pd.Client {
	return &pdFaults{Client: p.Client.WithCallerComponent(comp), down: p.down, calls: p.calls}
}

func (p *pdFaults) GetTS(ctx context.Context) (int64, int64, error) {
	if p.down.Load() {
		p.calls.Add(1)
		return 0, 0, errTSODown
	}
	return p.Client.GetTS(ctx)
}

func (p *pdFaults) GetTSAsync(ctx context.Context) tso.TSFuture {
	if p.down.Load() {
		p.calls.Add(1)
		return failedTSO{}
	}
	return p.Client.GetTSAsync(ctx)
}

type failedTSO struct{}

func (failedTSO) Wait() (int64, int64, error) { return 0, 0, errTSODown }

// TestTiKVFaultsUnderLoad runs the load through each of TiKV's faults in
// turn, each on a cluster of its own.
func TestTiKVFaultsUnderLoad(t *testing.T) {
	type env struct {
		f      *tikvFaults
		pdDown *atomic.Bool
		pdFail *atomic.Int64
		ld     *faultload.Load
	}
	tests := []struct {
		name   string
		inject func(t *testing.T, e env) int64 // returns the faults injected
	}{
		{"region errors on random RPCs", func(t *testing.T, e env) int64 {
			e.f.mode.Store(faultRegionErrors)
			e.ld.During(2 * time.Second)
			e.f.mode.Store(faultNone)
			return e.f.injected.Load()
		}},
		{"region splits", func(t *testing.T, e env) int64 {
			e.f.mode.Store(faultSplits)
			start := time.Now()
			for deadline := start.Add(10 * time.Second); (e.f.splits.Load() < 20 || time.Since(start) < time.Second) && time.Now().Before(deadline); {
				e.ld.During(10 * time.Millisecond)
			}
			e.f.mode.Store(faultNone)
			return e.f.splits.Load()
		}},
		{"lost answers to Commit RPCs", func(t *testing.T, e env) int64 {
			e.f.mode.Store(faultLostCommits)
			e.ld.During(2 * time.Second)
			e.f.mode.Store(faultNone)
			return e.f.injected.Load()
		}},
		{"PD timestamps fail for 1 s", func(t *testing.T, e env) int64 {
			e.pdDown.Store(true)
			e.ld.During(time.Second)
			e.pdDown.Store(false)
			return e.pdFail.Load()
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &tikvFaults{rng: rand.New(rand.NewPCG(uint64(i), 24)), lost: map[uint64]bool{}, cut: map[string]bool{}}
			pdDown, pdFail := &atomic.Bool{}, &atomic.Int64{}
			var sample [][]byte
			for _, k := range faultload.Keys {
				sample = append(sample, []byte(k))
			}
			eng, err := tikv.NewMock(tikv.MockOptions{Regions: 4, Layout: core.RegionSplits, Sample: sample, WrapClient: f.wrap,
				WrapPD: func(c pd.Client) pd.Client { return &pdFaults{Client: c, down: pdDown, calls: pdFail} }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Close() })
			t.Cleanup(func() { f.mode.Store(faultNone); pdDown.Store(false) })
			c := startCluster(t, eng, 3)
			ld := faultload.Start(t, c)
			ld.AwaitWrites(ld.Now(), 100)
			at := ld.Now()
			n := tc.inject(t, env{f: f, pdDown: pdDown, pdFail: pdFail, ld: ld})
			ld.Mark(at, tc.name)
			if n == 0 {
				t.Fatal("no fault was injected")
			}
			ld.AwaitWrites(ld.Now(), 100)
			res := ld.Finish(c.eng)
			res.LogWindows(t, tc.name)
			t.Logf("%s: %d injected; %d client errors (%s); %d watch relists", tc.name, n, res.Errors, faultload.DescribeErrors(res.Errs), res.Relists)
		})
	}
}
