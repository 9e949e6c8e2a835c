package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// worker is one client goroutine's private state.
type worker struct {
	src *rand.ChaCha8
	rng *rand.Rand
	buf []byte
	// deadline and errs are the run's time bound and error tally, set by
	// timed, for ops that retry inside (hotkey).
	deadline time.Time
	errs     *tally
}

func newWorker(id, valueSize int) *worker {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(id)+1)
	src := rand.NewChaCha8(seed)
	return &worker{src: src, rng: rand.New(src), buf: make([]byte, valueSize)}
}

// value returns fresh random bytes: incompressible, so neither engine
// gains from compression.
func (w *worker) value() string {
	_, _ = w.src.Read(w.buf)
	return string(w.buf)
}

// opFunc does op i; conflict means a compare failed (not an error).
type opFunc func(ctx context.Context, cli *clientv3.Client, w *worker, i int) (conflict bool, err error)

// errCutShort is what an op returns when the time bound stopped it before
// it finished: neither an op nor an error.
var errCutShort = errors.New("cut short by the time bound")

// tally counts errors and keeps the first one's text (read first once
// no more are added).
type tally struct {
	n     atomic.Int64
	once  sync.Once
	first string
}

func (t *tally) add(err error) {
	t.n.Add(1)
	t.once.Do(func() { t.first = err.Error() })
}

// timed runs fn from n workers until ops ops are done or maxTime passes
// and measures the server and this process meanwhile. Ops that fail count
// as errors and those that lose a compare as conflicts, neither as ops: a
// system that causes more conflicts gets no credit for them.
func (r *runner) timed(ctx context.Context, s *server, clis []*clientv3.Client, n, ops int, maxTime, opTimeout time.Duration, fn opFunc) (*Result, error) {
	return r.timedOn(ctx, []*server{s}, clis, n, ops, maxTime, opTimeout, fn)
}

// timedOn is timed with the server figures summed over several processes
// (a cluster's instances), every one of which must outlive the run.
func (r *runner) timedOn(ctx context.Context, procs []*server, clis []*clientv3.Client, n, ops int, maxTime, opTimeout time.Duration, fn opFunc) (*Result, error) {
	pids := make([]int, len(procs))
	for i, s := range procs {
		pids[i] = s.pid()
	}
	u, err := startUsage(pids...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(maxTime)
	var (
		next      atomic.Int64
		errs      tally
		conflicts atomic.Int64
		cut       atomic.Int64
		lat       = make([][]time.Duration, n)
		wg        sync.WaitGroup
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := newWorker(w, r.o.ValueSize)
			wk.deadline, wk.errs = deadline, &errs
			cli := clis[w%len(clis)]
			lat[w] = make([]time.Duration, 0, min(ops/n+1, 1<<16))
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= ops || time.Now().After(deadline) {
					return
				}
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				conflict, err := fn(octx, cli, wk, i)
				d := time.Since(t0)
				cancel()
				if errors.Is(err, errCutShort) {
					cut.Add(1)
					continue
				}
				if err != nil {
					errs.add(err)
					continue
				}
				if conflict {
					conflicts.Add(1)
					continue
				}
				lat[w] = append(lat[w], d)
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	res := &Result{Ops: int64(len(all)), Errors: errs.n.Load(), Conflicts: conflicts.Load(), CutShort: cut.Load(), FirstError: errs.first}
	if err := u.finish(res); err != nil {
		return nil, err
	}
	res.setLatency(all)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, s := range procs {
		if err := r.alive(s); err != nil {
			return res, err
		}
	}
	return res, nil
}

// load puts n keys with values of size bytes, LoadBatch to a txn, from
// LoadClients goroutines, and returns each key's ModRevision.
func (r *runner) load(ctx context.Context, clis []*clientv3.Client, n, size int, key func(int) string) ([]int64, error) {
	revs := make([]int64, n)
	b := r.o.LoadBatch
	batches := (n + b - 1) / b
	tenth := max(batches/10, 1)
	t0 := time.Now()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		loadErr error
	)
	for g := range min(r.o.LoadClients, batches) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := newWorker(1<<20+g, size)
			cli := clis[g%len(clis)]
			ops := make([]clientv3.Op, 0, b)
			for {
				j := int(next.Add(1) - 1)
				if j >= batches {
					return
				}
				lo, hi := j*b, min(n, (j+1)*b)
				ops = ops[:0]
				for i := lo; i < hi; i++ {
					ops = append(ops, clientv3.OpPut(key(i), wk.value()))
				}
				octx, cancel := context.WithTimeout(ctx, 3*r.o.OpTimeout)
				resp, err := cli.Txn(octx).Then(ops...).Commit()
				cancel()
				if err != nil {
					errOnce.Do(func() { loadErr = fmt.Errorf("load %s: batch %d: %w", key(lo), j, err) })
					next.Store(int64(batches)) // the others stop too
					return
				}
				for i := lo; i < hi; i++ {
					revs[i] = resp.Header.Revision
				}
				if batches >= 100 && (j+1)%tenth == 0 {
					r.log.Info("loading", "keys", n, "done", fmt.Sprintf("%d%%", (j+1)*100/batches), "elapsed", time.Since(t0).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	return revs, loadErr
}

func keyFunc(prefix string) func(int) string {
	return func(i int) string { return fmt.Sprintf("%s%08d", prefix, i) }
}

// ops runs one request workload at c clients.
func (r *runner) ops(ctx context.Context, s *server, clis []*clientv3.Client, w string, c int) error {
	row := r.rep.row(fmt.Sprintf("%s c=%d", w, c), w, c, 0, "request")
	key := keyFunc(fmt.Sprintf("/bench/%s/c%d/", w, c))
	var fn opFunc
	switch w {
	case Create:
		fn = func(ctx context.Context, cli *clientv3.Client, wk *worker, i int) (bool, error) {
			k := key(i)
			return cas(ctx, cli, k, 0, clientv3.OpPut(k, wk.value()))
		}
	case Update:
		if _, err := r.load(ctx, clis, r.o.Keys, r.o.ValueSize, key); err != nil {
			return err
		}
		fn = func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
			k := key(wk.rng.IntN(r.o.Keys))
			g, err := cli.Get(ctx, k)
			if err != nil {
				return false, err
			}
			if len(g.Kvs) == 0 {
				return false, fmt.Errorf("update: %s is missing", k)
			}
			return cas(ctx, cli, k, g.Kvs[0].ModRevision, clientv3.OpPut(k, wk.value()))
		}
	case Delete:
		revs, err := r.load(ctx, clis, r.o.Ops, r.o.ValueSize, key)
		if err != nil {
			return err
		}
		fn = func(ctx context.Context, cli *clientv3.Client, _ *worker, i int) (bool, error) {
			k := key(i)
			return cas(ctx, cli, k, revs[i], clientv3.OpDelete(k))
		}
	case Get:
		if _, err := r.load(ctx, clis, r.o.Keys, r.o.ValueSize, key); err != nil {
			return err
		}
		fn = func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
			k := key(wk.rng.IntN(r.o.Keys))
			g, err := cli.Get(ctx, k)
			if err != nil {
				return false, err
			}
			if len(g.Kvs) == 0 {
				return false, fmt.Errorf("get: %s is missing", k)
			}
			return false, nil
		}
	default:
		return fmt.Errorf("not a request workload: %s", w)
	}
	r.log.Info("running " + row.Name)
	wait := func() {}
	if w != Get {
		wait = r.profile(s, row.Name, r.o.MaxTime)
	}
	res, err := r.timed(ctx, s, clis, c, r.o.Ops, r.o.MaxTime, r.o.OpTimeout, fn)
	wait()
	if err != nil {
		return fmt.Errorf("%s: %w", row.Name, err)
	}
	r.record(row, res)
	return nil
}

// listAll reads every key under prefix in pages of page keys, the first
// page linearizable and the rest at its revision, and returns the count.
func listAll(ctx context.Context, cli *clientv3.Client, prefix string, page int) (int, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from, rev, n := prefix, int64(0), 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(page))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, from, opts...)
		if err != nil {
			return n, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		n += len(resp.Kvs)
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (r *runner) list(ctx context.Context, s *server, clis []*clientv3.Client, size int) error {
	row := r.rep.row("list n="+count(size), List, 0, size, "full list")
	prefix := fmt.Sprintf("/bench/list/%d/", size)
	r.log.Info("loading for "+row.Name, "objects", size, "bytes", r.o.ListObjectSize)
	if _, err := r.load(ctx, clis, size, r.o.ListObjectSize, keyFunc(prefix)); err != nil {
		return err
	}
	r.log.Info("running " + row.Name)
	pages := size/r.o.ListPage + 1
	res, err := r.timed(ctx, s, clis[:1], 1, r.o.ListReps, r.o.MaxTime, time.Duration(pages)*r.o.OpTimeout,
		func(ctx context.Context, cli *clientv3.Client, _ *worker, _ int) (bool, error) {
			n, err := listAll(ctx, cli, prefix, r.o.ListPage)
			if err == nil && n != size {
				err = fmt.Errorf("listed %d objects, want %d", n, size)
			}
			return false, err
		})
	if err != nil {
		return fmt.Errorf("%s: %w", row.Name, err)
	}
	r.record(row, res)
	return nil
}

// memory loads MemoryKeys keys into a fresh server and reads its peak RSS.
// The stopped server is kept for restart.
func (r *runner) memory(ctx context.Context) error {
	n := r.o.MemoryKeys
	row := r.rep.row("memory n="+count(n), Memory, 0, n, "key loaded")
	s, clis, err := r.launch(ctx, "memory-"+count(n))
	if err != nil {
		return err
	}
	defer func() { closeAll(clis) }()
	r.log.Info("running "+row.Name, "clients", r.o.LoadClients, "batch", r.o.LoadBatch)
	u, err := startUsage(s.pid())
	if err != nil {
		return err
	}
	if _, err := r.load(ctx, clis, n, r.o.ValueSize, keyFunc("/bench/memory/")); err != nil {
		return fmt.Errorf("%s: %w", row.Name, err)
	}
	res := &Result{Ops: int64(n)}
	if err := u.finish(res); err != nil {
		return err
	}
	r.record(row, res)
	closeAll(clis)
	clis = nil
	if err := s.stop(); err != nil {
		return err
	}
	r.loaded[n] = s
	return nil
}

// restart stores n keys (or reuses memory's server) and times restarts.
func (r *runner) restart(ctx context.Context, n int) error {
	row := r.rep.row("restart n="+count(n), Restart, 0, n, "restart")
	s := r.loaded[n]
	if s == nil {
		var (
			clis []*clientv3.Client
			err  error
		)
		if s, clis, err = r.launch(ctx, "restart-"+count(n)); err != nil {
			return err
		}
		r.log.Info("loading for "+row.Name, "keys", n)
		_, err = r.load(ctx, clis, n, r.o.ValueSize, keyFunc("/bench/restart/"))
		closeAll(clis)
		if err != nil {
			return fmt.Errorf("%s: %w", row.Name, err)
		}
	}
	delete(r.loaded, n)
	r.log.Info("running " + row.Name)
	res := &Result{}
	var took []time.Duration
	for range r.o.RestartReps {
		if err := s.stop(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := s.start(); err != nil {
			return err
		}
		if err := s.waitReady(ctx, readyTimeout); err != nil {
			return fmt.Errorf("%s: %w", row.Name, err)
		}
		d := time.Since(t0)
		took = append(took, d)
		cpu, err := procCPU(s.pid())
		if err != nil {
			return err
		}
		rss, err := procPeakRSS(s.pid())
		if err != nil {
			return err
		}
		res.Ops++
		res.Seconds += d.Seconds()
		res.ServerCPUSec += cpu
		res.ServerPeakRSSBytes = max(res.ServerPeakRSSBytes, rss)
		r.log.Info("restarted", "keys", n, "took", d.Round(time.Millisecond), "server-cpu-s", cpu)
	}
	res.OpsPerSec = div(float64(res.Ops), res.Seconds)
	res.ServerCPUSecPer1kOps = div(res.ServerCPUSec*1000, float64(res.Ops))
	res.OpsPerServerCPUSec = div(float64(res.Ops), res.ServerCPUSec)
	res.setLatency(took)
	r.record(row, res)
	return r.drop(s)
}

// cas is the apiserver's write: op if k's ModRevision is rev (0: k does
// not exist), else read k. conflict reports a lost compare.
func cas(ctx context.Context, cli *clientv3.Client, k string, rev int64, op clientv3.Op) (conflict bool, err error) {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(op).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return false, err
	}
	return !resp.Succeeded, nil
}
