package tikv

import (
	"bytes"
	"context"
	"slices"
	"sync"

	kvstore "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/tikvrpc/interceptor"
	"github.com/tikv/client-go/v2/txnkv/txnsnapshot"
)

// regionLookupBackoff bounds (in ms) the wait for region metadata before
// a scan gives up its parallelism.
const regionLookupBackoff = 2000

// A scan worker hands over its pairs in chunks of at most chunkPairs
// pairs or about chunkBytes bytes, and runs up to chunksAhead chunks
// ahead of the consumer: enough to keep several RPCs in flight per
// worker, while bounding the memory of a scan to about
// ScanConcurrency*chunksAhead*chunkBytes plus one batch per worker.
const (
	chunkPairs  = 256
	chunkBytes  = 256 << 10
	chunksAhead = 16
)

// regionBounds returns the start keys of the regions that begin strictly
// inside [lower, upper), in order; none means the range is in one region.
func (e *Engine) regionBounds(ctx context.Context, lower, upper []byte) ([][]byte, error) {
	bo := kvstore.NewBackofferWithVars(ctx, regionLookupBackoff, nil)
	locs, err := e.c.store.GetRegionCache().LocateKeyRange(bo, lower, upper)
	if err != nil {
		return nil, err
	}
	var bounds [][]byte
	for _, l := range locs {
		k := l.StartKey
		if bytes.Compare(k, lower) <= 0 || upper != nil && bytes.Compare(k, upper) >= 0 {
			continue
		}
		if n := len(bounds); n > 0 && bytes.Compare(k, bounds[n-1]) <= 0 {
			continue // the cache changed under us; keep the bounds increasing
		}
		bounds = append(bounds, bytes.Clone(k))
	}
	return bounds, nil
}

// scanSnapshot returns a snapshot at ts for Scanners whose RPCs end with
// ctx. client-go's Scanner sends its RPCs under a context of its own
// (context.Background), not the caller's: without this a store that
// stops answering held a scan for each RPC's timeout (60 s), again at
// every retry, whatever the transaction's deadline. At ctx's end the
// interceptor returns context.Canceled, which client-go does not retry,
// and leaves the RPC to end by itself.
func (e *Engine) scanSnapshot(ctx context.Context, ts uint64) *txnsnapshot.KVSnapshot {
	snap := e.c.store.GetSnapshot(ts)
	if ctx.Done() != nil {
		snap.SetRPCInterceptor(interceptor.NewRPCInterceptor("axon-scan-context", func(next interceptor.RPCInterceptorFunc) interceptor.RPCInterceptorFunc {
			return func(target string, req *tikvrpc.Request) (*tikvrpc.Response, error) {
				if ctx.Err() != nil {
					return nil, context.Canceled
				}
				type answer struct {
					resp *tikvrpc.Response
					err  error
				}
				ch := make(chan answer, 1)
				go func() {
					resp, err := next(target, req)
					ch <- answer{resp, err}
				}()
				select {
				case a := <-ch:
					return a.resp, a.err
				case <-ctx.Done():
					return nil, context.Canceled
				}
			}
		}))
	}
	return snap
}

type pair struct{ k, v []byte }

// chunk is what a worker hands over: pairs in scan order, or the error
// that ended its range.
type chunk struct {
	pairs []pair
	err   error
}

// parallelSource reads [lower, upper) split at region borders. A
// dispatcher starts one worker per range, in scan order, at most
// ScanConcurrency ahead of the consumer; each worker scans its range with
// its own Scanner at the transaction's start timestamp, so together they
// read one snapshot. The consumer drains the ranges in order, so the
// output is ordered whatever the workers' timing. The worker of the range
// being drained always makes progress, so a full queue never deadlocks.
// Ranges are bounds, not regions: if a region splits or merges meanwhile,
// a worker's Scanner locates the new regions itself.
type parallelSource struct {
	ranges chan chan chunk // per range, in scan order
	cur    chan chunk
	pairs  []pair
	err    error
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

func (e *Engine) newParallelSource(ctx context.Context, ts uint64, lower, upper []byte, bounds [][]byte, reverse bool) *parallelSource {
	type keyRange struct{ lower, upper []byte }
	ranges := make([]keyRange, 0, len(bounds)+1)
	prev := lower
	for _, b := range bounds {
		ranges = append(ranges, keyRange{prev, b})
		prev = b
	}
	ranges = append(ranges, keyRange{prev, upper})
	if reverse {
		slices.Reverse(ranges)
	}
	conc := e.c.scanConcurrency
	p := &parallelSource{
		ranges: make(chan chan chunk, conc-1),
		stop:   make(chan struct{}),
	}
	// Callers hold the engine, so Close cannot be waiting on e.workers yet.
	e.workers.Add(1)
	p.wg.Add(1)
	go func() {
		defer e.workers.Done()
		defer p.wg.Done()
		defer close(p.ranges)
		for _, r := range ranges {
			ch := make(chan chunk, chunksAhead)
			select {
			case p.ranges <- ch:
			case <-p.stop:
				return
			case <-e.closing:
				return
			}
			e.workers.Add(1)
			p.wg.Add(1)
			go func() {
				defer e.workers.Done()
				defer p.wg.Done()
				defer close(ch)
				e.scanRange(ctx, ts, r.lower, r.upper, reverse, ch, p.stop)
			}()
		}
	}()
	return p
}

// scanRange sends the pairs of [lower, upper) to ch in chunks until done,
// an error, or stop. Its RPCs end with ctx.
func (e *Engine) scanRange(ctx context.Context, ts uint64, lower, upper []byte, reverse bool, ch chan<- chunk, stop <-chan struct{}) {
	send := func(c chunk) bool {
		select {
		case ch <- c:
			return true
		case <-stop:
		case <-e.closing:
		}
		return false
	}
	snap := e.scanSnapshot(ctx, ts)
	snap.SetScanBatchSize(defaultBatch)
	it, err := openScan(snap, lower, upper, reverse)
	if err != nil {
		send(chunk{err: err})
		return
	}
	defer it.Close()
	buf, size := make([]pair, 0, chunkPairs), 0
	for it.Valid() {
		// Scanner pairs come fresh from each response and are not reused.
		k, v := it.Key(), it.Value()
		buf, size = append(buf, pair{k, v}), size+len(k)+len(v)
		if len(buf) == chunkPairs || size >= chunkBytes {
			if !send(chunk{pairs: buf}) {
				return
			}
			buf, size = make([]pair, 0, chunkPairs), 0
		}
		if err := it.Next(); err != nil {
			send(chunk{pairs: buf, err: err})
			return
		}
	}
	if len(buf) > 0 {
		send(chunk{pairs: buf})
	}
}

func (p *parallelSource) next() ([]byte, []byte, bool, error) {
	for len(p.pairs) == 0 {
		if p.err != nil {
			return nil, nil, false, p.err
		}
		if p.cur == nil {
			ch, ok := <-p.ranges
			if !ok {
				return nil, nil, false, nil
			}
			p.cur = ch
		}
		c, ok := <-p.cur
		if !ok {
			p.cur = nil
			continue
		}
		// An error comes after the pairs read before it.
		p.pairs, p.err = c.pairs, c.err
	}
	kv := p.pairs[0]
	p.pairs = p.pairs[1:]
	return kv.k, kv.v, true, nil
}

// close stops the workers and waits for them: after it, none runs.
func (p *parallelSource) close() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}
