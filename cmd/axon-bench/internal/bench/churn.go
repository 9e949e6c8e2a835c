package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ChurnWindow is one compaction interval of the churn.
type ChurnWindow struct {
	EndSeconds float64 `json:"end_seconds"`
	Ops        int64   `json:"ops"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	// MaxMs is the longest write: what a defragmentation's longest is
	// judged against on a machine whose own stalls are not nothing.
	MaxMs float64 `json:"max_ms"`
	// Slowest are the window's longest writes, longest first, with when
	// each was sent: to line them up with the server's compactions, its
	// engine's stalls and the window's own compaction.
	Slowest []SlowWrite `json:"slowest,omitempty"`
	// CPUPer1k is the server's CPU seconds per 1,000 writes in the
	// window: what separates a server that grows slower (more CPU per
	// write) from a machine that gives it less CPU (fewer writes alike).
	CPUPer1k float64 `json:"cpu_s_per_1k"`
	// DiskBytes is the data dir's allocated size at the window's end,
	// after its compaction; CompactMs how long that compaction took.
	DiskBytes int64   `json:"disk_bytes"`
	CompactMs float64 `json:"compact_ms"`
	// WatchEvents are the events the watcher (ChurnWatch) received in the
	// window.
	WatchEvents int64 `json:"watch_events,omitempty"`
}

// SlowWrite is one long write of a churn window.
type SlowWrite struct {
	AtSeconds float64 `json:"at_s"` // sent, from the churn's start
	Ms        float64 `json:"ms"`
}

// slowest returns the n longest of the writes sent in [from, to),
// longest first.
func slowest(acks []ack, from, to time.Duration, n int) []SlowWrite {
	var in []ack
	for _, a := range acks {
		if a.at >= from && a.at < to {
			in = append(in, a)
		}
	}
	slices.SortFunc(in, func(a, b ack) int { return cmp.Compare(b.took, a.took) })
	out := make([]SlowWrite, 0, min(n, len(in)))
	for _, a := range in[:min(n, len(in))] {
		out = append(out, SlowWrite{AtSeconds: a.at.Seconds(), Ms: ms(a.took)})
	}
	return out
}

// ChurnResult is one system's outcome of the long churn and the
// defragmentation after it.
type ChurnResult struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	fate
	Windows     []ChurnWindow    `json:"windows"`
	Ops         int64            `json:"ops"`
	Errors      int64            `json:"errors"`
	ErrorCodes  map[string]int64 `json:"error_codes,omitempty"`
	FirstError  string           `json:"first_error,omitempty"`
	LastOverFst float64          `json:"last_over_first_p99"` // the last window's p99 over the first's

	DefragSeconds float64 `json:"defrag_seconds"`
	DefragError   string  `json:"defrag_error,omitempty"`
	// Writes sent while the defragmentation ran: their p99 and errors,
	// and the longest any write overlapping it took.
	DefragOps        int64            `json:"defrag_ops"`
	DefragP99Ms      float64          `json:"defrag_p99_ms"`
	DefragErrors     int64            `json:"defrag_errors"`
	DefragErrorCodes map[string]int64 `json:"defrag_error_codes,omitempty"`
	LongestStallMs   float64          `json:"longest_stall_ms"`
	DiskBytesAfter   int64            `json:"disk_bytes_after_defrag"`
	// Watch is the kube-apiserver-like watcher's outcome, with ChurnWatch.
	Watch *ChurnWatch `json:"watch,omitempty"`
}

// churnKeys is one churner's share of the key space: which keys exist at
// which ModRevision, so that it writes as the apiserver does, by CAS on
// the revision it knows.
type churnKeys struct {
	rev        map[int]int64 // 0: absent
	live, dead []int         // candidates; stale entries are dropped when drawn
}

// draw picks a random key that exists (want true) or not; -1 if none.
func (c *churnKeys) draw(w *worker, want bool) int {
	list := &c.dead
	if want {
		list = &c.live
	}
	for len(*list) > 0 {
		i := w.rng.IntN(len(*list))
		k := (*list)[i]
		if (c.rev[k] != 0) == want {
			return k
		}
		(*list)[i] = (*list)[len(*list)-1]
		*list = (*list)[:len(*list)-1]
	}
	return -1
}

func (c *churnKeys) set(k int, rev int64) {
	switch {
	case rev != 0 && c.rev[k] == 0:
		c.live = append(c.live, k)
	case rev == 0 && c.rev[k] != 0:
		c.dead = append(c.dead, k)
	}
	c.rev[k] = rev
}

// churn is Kubernetes-shaped churn: ChurnObjects objects, then Writers
// clients updating (60 %), deleting (20 %) and creating (20 %) them for
// ChurnTime with a compaction every ChurnWindow to the revision of the
// one before (as kube-apiserver compacts), then a defragmentation while
// the writes go on. With ChurnWatch a watcher reads every event of the
// churn with prev_kv, as kube-apiserver does, and checks them.
func (r *runner) churn(ctx context.Context) (*ChurnResult, error) {
	o := r.o.Scale
	res := &ChurnResult{MemoryLimitBytes: o.MemoryLimit}
	s, mem, clis, done, err := r.startInCgroup(ctx, "churn", func(s *server) { s.quota = o.Quota })
	if err != nil {
		return nil, err
	}
	defer done()
	const prefix = "/bench/churn/"
	key := keyFunc(prefix)
	r.log.Info("loading", "objects", o.ChurnObjects)
	revs, err := r.load(ctx, clis, o.ChurnObjects, o.ListObjectSize, key)
	if err != nil {
		return nil, err
	}

	// Writer g owns the keys k%Writers == g of twice the objects: half
	// exist at first, half are there to be created.
	shares := make([]*churnKeys, o.Writers)
	for g := range shares {
		shares[g] = &churnKeys{rev: map[int]int64{}}
	}
	for k := range 2 * o.ChurnObjects {
		var rev int64
		if k < len(revs) {
			rev = revs[k]
		}
		shares[k%o.Writers].set(k, rev)
	}
	start := time.Now()
	var (
		acks                = make([][]ack, o.Writers)
		errs, defragErrs    codeTally
		unsure              atomic.Int64 // failed writes that may have been done
		cw                  *churnWatcher
		defragging          atomic.Bool
		halt                atomic.Bool
		sent                atomic.Int64
		wg                  sync.WaitGroup
		wctx, cancel        = context.WithDeadline(ctx, start.Add(o.ChurnTime+readyTimeout))
		compactRev, lastRev int64
	)
	defer cancel()
	if lastRev, err = currentRev(ctx, clis[0]); err != nil {
		return nil, err
	}
	if o.ChurnWatch {
		if cw, err = r.startChurnWatch(ctx, s, prefix, lastRev); err != nil {
			return nil, err
		}
		defer cw.stop()
	}
	for g := range o.Writers {
		wg.Go(func() {
			wk := newWorker(3<<20+g, o.ListObjectSize)
			cli := clis[g%len(clis)]
			for wctx.Err() == nil && !halt.Load() && sent.Add(1) <= int64(o.MaxWrites) {
				d := defragging.Load()
				t0 := time.Now()
				err := r.churnOp(wctx, cli, wk, shares[g], key, cw)
				took := time.Since(t0)
				if err != nil && !errors.Is(err, errNoKey) && !errors.Is(err, errCompareLost) {
					unsure.Add(1)
				}
				switch {
				case errors.Is(err, errNoKey):
					continue // not an op: the next draws again
				case err != nil && (wctx.Err() != nil || !s.running()):
					return
				case err != nil && d:
					defragErrs.add(err)
				case err != nil:
					errs.add(err)
					time.Sleep(10 * time.Millisecond) // a refusing server (NOSPACE) answers at once
				default:
					acks[g] = append(acks[g], ack{at: t0.Sub(start), took: took})
				}
			}
		})
	}
	stopWrites := func() []ack {
		halt.Store(true)
		wg.Wait()
		all := slices.Concat(acks...)
		slices.SortFunc(all, func(a, b ack) int { return int(a.at - b.at) })
		return all
	}

	r.log.Info("churning", "writers", o.Writers, "for", o.ChurnTime, "compaction-every", o.ChurnWindow, "watcher", o.ChurnWatch)
	var compactTook []time.Duration
	var cpuAt []float64  // the server's CPU seconds at each window's end
	var eventsAt []int64 // the watcher's events at each window's end
	cpu0, _ := procCPU(s.pid())
	for w := o.ChurnWindow; w <= o.ChurnTime && s.running(); w += o.ChurnWindow {
		select {
		case <-time.After(time.Until(start.Add(w))):
		case <-s.exited:
			continue
		case <-ctx.Done():
			stopWrites()
			return nil, ctx.Err()
		}
		cpu, _ := procCPU(s.pid())
		cpuAt = append(cpuAt, cpu)
		if cw != nil {
			eventsAt = append(eventsAt, cw.events.Load())
		}
		compactRev, lastRev = lastRev, 0
		t0 := time.Now()
		cctx, ccancel := context.WithTimeout(ctx, readyTimeout)
		_, err := clis[0].Compact(cctx, compactRev)
		ccancel()
		compactTook = append(compactTook, time.Since(t0))
		if err != nil {
			errs.addAt("compact", err)
		}
		if lastRev, err = currentRev(ctx, clis[0]); err != nil {
			errs.addAt("get revision", err)
		}
		res.Windows = append(res.Windows, ChurnWindow{EndSeconds: w.Seconds(), DiskBytes: dirBytes(s.dir), CompactMs: ms(compactTook[len(compactTook)-1])})
		r.log.Info("window", "end", w, "compacted-to", compactRev, "disk", fmtBytes(res.Windows[len(res.Windows)-1].DiskBytes))
	}

	r.log.Info("defragmenting")
	defragAt := time.Since(start)
	defragging.Store(true)
	dctx, dcancel := context.WithTimeout(ctx, readyTimeout)
	_, derr := clis[0].Defragment(dctx, s.client)
	dcancel()
	defragEnd := time.Since(start)
	defragging.Store(false)
	if derr != nil {
		res.DefragError = derr.Error()
	}
	// A little more churn, so that writes stuck behind the defragmentation
	// finish and show.
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	all := stopWrites()
	if cw != nil {
		// Every write has been answered: the watcher is to reach the
		// server's revision now.
		to, err := currentRev(ctx, clis[0])
		if err != nil {
			to = 0 // the server is gone: its fate says so
		}
		res.Watch = cw.finish(to, int64(len(all)), unsure.Load())
		r.log.Info("watcher done", "events", res.Watch.Events, "acked-writes", res.Watch.AckedWrites, "prev-checked", res.Watch.PrevChecked,
			"prev-wrong", res.Watch.PrevWrong, "prev-missing", res.Watch.PrevMissing, "lag", res.Watch.LagRevisions, "error", res.Watch.Error)
	}
	res.DiskBytesAfter = dirBytes(s.dir)
	if res.fate, err = r.readFate(s, mem); err != nil {
		return nil, err
	}

	from := time.Duration(0)
	for i := range res.Windows {
		to := time.Duration(res.Windows[i].EndSeconds * float64(time.Second))
		ds := latencies(all, from, to)
		res.Windows[i].Ops = int64(len(ds))
		res.Windows[i].P50Ms, res.Windows[i].P99Ms = p50p99(ds)
		if len(ds) > 0 {
			res.Windows[i].MaxMs = ms(slices.Max(ds))
			res.Windows[i].Slowest = slowest(all, from, to, 5)
			prev := cpu0
			if i > 0 {
				prev = cpuAt[i-1]
			}
			res.Windows[i].CPUPer1k = (cpuAt[i] - prev) / float64(len(ds)) * 1000
		}
		if i < len(eventsAt) {
			res.Windows[i].WatchEvents = eventsAt[i]
			if i > 0 {
				res.Windows[i].WatchEvents -= eventsAt[i-1]
			}
		}
		from = to
	}
	if n := len(res.Windows); n > 0 {
		res.LastOverFst = div(res.Windows[n-1].P99Ms, res.Windows[0].P99Ms)
	}
	res.Ops = int64(len(latencies(all, 0, defragAt)))
	res.Errors, res.ErrorCodes, res.FirstError = errs.total(), errs.byCode(), errs.first
	res.DefragSeconds = (defragEnd - defragAt).Seconds()
	during := latencies(all, defragAt, defragEnd)
	res.DefragOps = int64(len(during))
	_, res.DefragP99Ms = p50p99(during)
	res.DefragErrors, res.DefragErrorCodes = defragErrs.total(), defragErrs.byCode()
	for _, a := range all {
		if a.at < defragEnd && a.at+a.took > defragAt {
			res.LongestStallMs = max(res.LongestStallMs, ms(a.took))
		}
	}
	r.log.Info("churn done", "windows", len(res.Windows), "last/first-p99", round(res.LastOverFst), "defrag", round(res.DefragSeconds),
		"defrag-p99", fmtMs(res.DefragP99Ms), "longest-stall", fmtMs(res.LongestStallMs), "defrag-errors", res.DefragErrors)
	return res, nil
}

// errNoKey is an op drawn with no key of its kind (no object left to
// update or delete): not a write, and not timed.
var errNoKey = errors.New("no key for this op")

// errCompareLost is a CAS that lost its compare: an error, but surely
// not a write.
var errCompareLost = errors.New("compare lost")

// churnOp does one write of w's share: update, delete or create by CAS on
// the revision w knows. After a lost compare or an error of unknown
// outcome it reads the key again. A put done is sampled for cw, if any.
func (r *runner) churnOp(ctx context.Context, cli *clientv3.Client, wk *worker, keys *churnKeys, key func(int) string, cw *churnWatcher) error {
	var (
		k  int
		op clientv3.Op
		v  string
	)
	switch p := wk.rng.IntN(10); {
	case p < 6:
		if k = keys.draw(wk, true); k >= 0 {
			v = wk.value()
			op = clientv3.OpPut(key(k), v)
		}
	case p < 8:
		if k = keys.draw(wk, true); k >= 0 {
			op = clientv3.OpDelete(key(k))
		}
	default:
		if k = keys.draw(wk, false); k >= 0 {
			v = wk.value()
			op = clientv3.OpPut(key(k), v)
		}
	}
	if k < 0 {
		return errNoKey
	}
	octx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	defer cancel()
	resp, err := cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key(k)), "=", keys.rev[k])).Then(op).Else(clientv3.OpGet(key(k))).Commit()
	switch {
	case err != nil:
		if g, gerr := cli.Get(octx, key(k)); gerr == nil {
			keys.set(k, modRev(g))
		}
		return err
	case !resp.Succeeded:
		keys.set(k, modRev((*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())))
		return fmt.Errorf("%s: %w", key(k), errCompareLost)
	case op.IsDelete():
		keys.set(k, 0)
	default:
		keys.set(k, resp.Header.Revision)
		cw.sample(key(k), resp.Header.Revision, v)
	}
	return nil
}

func modRev(g *clientv3.GetResponse) int64 {
	if g == nil || len(g.Kvs) == 0 {
		return 0
	}
	return g.Kvs[0].ModRevision
}

func currentRev(ctx context.Context, cli *clientv3.Client) (int64, error) {
	g, err := cli.Get(ctx, "/bench/churn/rev")
	if err != nil {
		return 0, err
	}
	return g.Header.Revision, nil
}

// dirBytes is what the files under dir take on the disk (allocated
// blocks, so that sparse and preallocated files count as they are).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}
