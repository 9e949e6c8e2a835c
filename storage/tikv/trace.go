package tikv

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/util/async"
	pd "github.com/tikv/pd/client"
	"github.com/tikv/pd/client/clients/tso"
	"github.com/tikv/pd/client/pkg/caller"
)

// RPC types Trace counts besides the tikvrpc.CmdType names.
const (
	// TSO is a PD timestamp call.
	TSO = "TSO"
	// CommitSecondary is a Commit of secondary keys only.
	CommitSecondary = "CommitSecondary"
)

// Trace counts the RPCs a mock cluster serves and delays each by a fixed
// time, to measure how many round trips Axon's operations take against a
// real cluster's network. Pass WrapClient and WrapPD in MockOptions.
//
// It counts by RPC type (tikvrpc.CmdType names, and TSO), the steps (the
// times the number of calls in flight rose from 0: with one client, the
// sequential round trips; background calls excluded), and for each write transaction (a start_ts
// seen in Prewrite requests) the regions it prewrote to, once each.
type Trace struct {
	delay time.Duration

	mu       sync.Mutex
	rpcs     map[string]int64
	inflight int
	steps    int64
	txns     int64
	regions  map[uint64]*TraceRegion
	// open holds the write transactions whose primary has not committed
	// nor rolled back, by start_ts; the rest are forgotten, so the map
	// stays small. (A prewrite retried after that would count twice; the
	// mock has no region errors to cause one.)
	open map[uint64]*openTxn
}

type openTxn struct {
	primary []byte
	regions map[uint64]bool // prewritten to
}

// TraceRegion is what a Trace knows of one region.
type TraceRegion struct {
	// Txns counts the write transactions that prewrote to the region.
	Txns int64
	// Space is the Axon key space tag (core's 'L', 'H', 'R', ...) of the
	// first key prewritten there, or '?' for a key of no Axon space.
	Space byte
}

// TraceCounts is a copy of a Trace's counters.
type TraceCounts struct {
	RPCs      map[string]int64
	Steps     int64
	WriteTxns int64
	Regions   map[uint64]TraceRegion
}

// NewTrace returns a Trace that adds delay to every RPC and timestamp
// call.
func NewTrace(delay time.Duration) *Trace {
	return &Trace{delay: delay, rpcs: map[string]int64{}, regions: map[uint64]*TraceRegion{}, open: map[uint64]*openTxn{}}
}

// Counts returns the counters so far.
func (t *Trace) Counts() TraceCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := TraceCounts{RPCs: maps.Clone(t.rpcs), Steps: t.steps, WriteTxns: t.txns, Regions: make(map[uint64]TraceRegion, len(t.regions))}
	for id, r := range t.regions {
		c.Regions[id] = *r
	}
	return c
}

// start counts a call of type typ going out; a background call (bg)
// counts no step.
func (t *Trace) start(typ string, bg bool) {
	t.mu.Lock()
	t.rpcs[typ]++
	if !bg {
		if t.inflight == 0 {
			t.steps++
		}
		t.inflight++
	}
	t.mu.Unlock()
}

func (t *Trace) end(bg bool) {
	if bg {
		return
	}
	t.mu.Lock()
	t.inflight--
	t.mu.Unlock()
}

// wait sleeps out the delay from since, or until ctx ends.
func (t *Trace) wait(ctx context.Context, since time.Time) {
	d := t.delay - time.Since(since)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// observe notes the write transactions req belongs to and returns its
// type. Commits of secondary keys are told apart: client-go sends them
// in the background after the primary's commit has answered, so they
// are no step of the operation.
func (t *Trace) observe(req *tikvrpc.Request) (typ string, bg bool) {
	typ = req.Type.String()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch req.Type {
	case tikvrpc.CmdPrewrite:
		p := req.Prewrite()
		region := req.Context.RegionId
		tx := t.open[p.StartVersion]
		if tx == nil {
			tx = &openTxn{primary: p.PrimaryLock, regions: map[uint64]bool{}}
			t.open[p.StartVersion] = tx
			t.txns++
		}
		if tx.regions[region] {
			break
		}
		tx.regions[region] = true
		r := t.regions[region]
		if r == nil {
			r = &TraceRegion{Space: '?'}
			if len(p.Mutations) > 0 && len(p.Mutations[0].Key) > 4 {
				r.Space = p.Mutations[0].Key[4]
			}
			t.regions[region] = r
		}
		r.Txns++
	case tikvrpc.CmdCommit:
		c := req.Commit()
		tx := t.open[c.StartVersion]
		if tx == nil || !slices.ContainsFunc(c.Keys, func(k []byte) bool { return bytes.Equal(k, tx.primary) }) {
			return CommitSecondary, true
		}
		delete(t.open, c.StartVersion)
	case tikvrpc.CmdBatchRollback:
		delete(t.open, req.BatchRollback().StartVersion)
	case tikvrpc.CmdCleanup:
		delete(t.open, req.Cleanup().StartVersion)
	}
	return typ, false
}

// WrapClient returns c counting and delaying its RPCs, for
// MockOptions.WrapClient.
func (t *Trace) WrapClient(c kvstore.Client) kvstore.Client { return &traceClient{Client: c, t: t} }

// WrapPD returns c counting and delaying its timestamp calls, for
// MockOptions.WrapPD.
func (t *Trace) WrapPD(c pd.Client) pd.Client { return &tracePD{Client: c, t: t} }

type traceClient struct {
	kvstore.Client
	t *Trace
}

func (c *traceClient) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	t0 := time.Now()
	typ, bg := c.t.observe(req)
	c.t.start(typ, bg)
	defer c.t.end(bg)
	resp, err := c.Client.SendRequest(ctx, addr, req, timeout)
	c.t.wait(ctx, t0)
	return resp, err
}

func (c *traceClient) SendRequestAsync(ctx context.Context, addr string, req *tikvrpc.Request, cb async.Callback[*tikvrpc.Response]) {
	go func() { cb.Schedule(c.SendRequest(ctx, addr, req, 0)) }()
}

type tracePD struct {
	pd.Client
	t *Trace
}

// WithCallerComponent keeps the wrapper: client-go's codec client calls
// it on what it wraps.
func (c *tracePD) WithCallerComponent(comp caller.Component) pd.Client {
	return &tracePD{Client: c.Client.WithCallerComponent(comp), t: c.t}
}

func (c *tracePD) GetTS(ctx context.Context) (int64, int64, error) {
	t0 := time.Now()
	c.t.start(TSO, false)
	defer c.t.end(false)
	p, l, err := c.Client.GetTS(ctx)
	c.t.wait(ctx, t0)
	return p, l, err
}

func (c *tracePD) GetTSAsync(ctx context.Context) tso.TSFuture {
	t0 := time.Now()
	c.t.start(TSO, false)
	return &traceFuture{TSFuture: c.Client.GetTSAsync(ctx), ctx: ctx, t0: t0, t: c.t}
}

// traceFuture ends its call at the first Wait, no sooner than the delay
// after it began.
type traceFuture struct {
	tso.TSFuture
	ctx  context.Context
	t0   time.Time
	t    *Trace
	once sync.Once
}

func (f *traceFuture) Wait() (int64, int64, error) {
	p, l, err := f.TSFuture.Wait()
	f.once.Do(func() {
		f.t.wait(f.ctx, f.t0)
		f.t.end(false)
	})
	return p, l, err
}
