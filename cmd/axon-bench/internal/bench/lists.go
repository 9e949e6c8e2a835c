package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// ListsResult is one system's outcome of the expensive-reads scenario.
type ListsResult struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	fate
	PreloadSeconds float64 `json:"preload_seconds"`
	// Seconds is the expensive part: from the first list to the last
	// list's end, the server's death or the time bound.
	Seconds float64 `json:"seconds"`

	ListsWanted     int              `json:"lists_wanted"`
	ListsDone       int              `json:"lists_done"`
	ListsFailed     int64            `json:"lists_failed"`
	ListsUnfinished int              `json:"lists_unfinished"` // cut by the time bound
	ListsNotRun     int              `json:"lists_not_run"`    // not begun: the server was gone
	ListErrors      map[string]int64 `json:"list_errors,omitempty"`
	// ListsRefused counts refusals with a retryable code, each retried as
	// a reflector does; the list's latency runs from its first try.
	ListsRefused   int64            `json:"lists_refused"`
	ListRefusals   map[string]int64 `json:"list_refusals,omitempty"`
	FirstListError string           `json:"first_list_error,omitempty"`
	ListP50Ms      float64          `json:"list_p50_ms"`
	ListP99Ms      float64          `json:"list_p99_ms"`

	// Writes acknowledged during the lists, and their latency; before
	// the lists, the same writers' p99 alone.
	Writes           int64            `json:"writes"`
	WriteP50Ms       float64          `json:"write_p50_ms"`
	WriteP99Ms       float64          `json:"write_p99_ms"`
	WriteP99BeforeMs float64          `json:"write_p99_before_ms"`
	WriteErrors      int64            `json:"write_errors"`
	WriteErrorCodes  map[string]int64 `json:"write_error_codes,omitempty"`
	FirstWriteError  string           `json:"first_write_error,omitempty"`
	ServerCPUSec     float64          `json:"server_cpu_sec"`
}

// lists is the Kubernetes relist storm: ListObjects objects in one prefix,
// then Listers clients each reading the whole prefix in one Range (no
// limit) ListRounds times while Writers clients create keys elsewhere,
// the server in a memory cgroup of MemoryLimit. A server the kernel
// kills is an outcome, not an error of the benchmark.
func (r *runner) lists(ctx context.Context) (*ListsResult, error) {
	o := r.o.Scale
	res := &ListsResult{MemoryLimitBytes: o.MemoryLimit, ListsWanted: o.Listers * o.ListRounds}
	s, mem, clis, done, err := r.startInCgroup(ctx, "lists", nil)
	if err != nil {
		return nil, err
	}
	defer done()
	prefix := "/bench/lists/objects/"
	r.log.Info("loading", "objects", o.ListObjects, "bytes", o.ListObjectSize)
	t0 := time.Now()
	if _, err := r.load(ctx, clis, o.ListObjects, o.ListObjectSize, keyFunc(prefix)); err != nil {
		if !s.died() {
			return nil, err
		}
		r.log.Warn("server died during the preload", "err", err)
		res.fate, err = r.readFate(s, mem)
		return res, err
	}
	res.PreloadSeconds = time.Since(t0).Seconds()
	// Listers dial their own connections, as apiservers do: a list must
	// not queue behind another's response on one HTTP/2 connection.
	lclis, err := dialN(s, o.Listers)
	if err != nil {
		return nil, err
	}
	defer closeAll(lclis)

	r.log.Info("running lists", "listers", o.Listers, "rounds", o.ListRounds, "writers", o.Writers, "max-time", o.MaxTime)
	deadline := time.Now().Add(o.Before + o.MaxTime)
	writes := r.startWrites(ctx, clis, o.Writers, func(g, i int) string { return fmt.Sprintf("/bench/lists/writes/%d/%08d", g, i) }, deadline)
	select {
	case <-time.After(o.Before):
	case <-s.exited:
	case <-ctx.Done():
	}
	listStart := time.Since(writes.start)
	cpu0, _ := procCPU(s.pid()) // 0 if the server is gone already
	pctx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	var (
		lat       = make([][]time.Duration, o.Listers)
		errs      codeTally
		failed    atomic.Int64
		cut       atomic.Int64
		notRun    atomic.Int64
		refused   codeTally
		wg        sync.WaitGroup
		listsDone = make(chan struct{})
	)
	for l := range o.Listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range o.ListRounds {
				if !s.running() {
					notRun.Add(1)
					continue
				}
				if pctx.Err() != nil {
					cut.Add(1)
					continue
				}
				t0 := time.Now()
				n, err := r.retryList(pctx, s, lclis[l], prefix, &refused)
				switch {
				case err != nil && !s.running():
					failed.Add(1)
					errs.addKey(serverGone, err) // its code is the cancel's
				case err != nil && pctx.Err() != nil:
					cut.Add(1) // the time bound, not the server
				case err != nil:
					failed.Add(1)
					errs.add(err)
				case n != o.ListObjects:
					failed.Add(1)
					errs.add(fmt.Errorf("listed %d objects, want %d", n, o.ListObjects))
				default:
					lat[l] = append(lat[l], time.Since(t0))
				}
			}
		}()
	}
	go func() { wg.Wait(); close(listsDone) }()
	t1 := time.Now()
	select {
	case <-listsDone:
	case <-s.exited:
		// The client retries a list in flight until its deadline; it has
		// failed. The rest do not begin.
		r.log.Warn("server exited during the lists", "err", s.err)
		stop()
		<-listsDone
	case <-pctx.Done():
		<-listsDone
	}
	res.Seconds = time.Since(t1).Seconds()
	acks := writes.finish()
	if res.fate, err = r.readFate(s, mem); err != nil {
		return nil, err
	}
	res.ServerCPUSec = mem.cpuSec() - cpu0
	all := slices.Concat(lat...)
	res.ListsDone, res.ListsFailed, res.ListsUnfinished, res.ListsNotRun = len(all), failed.Load(), int(cut.Load()), int(notRun.Load())
	res.ListErrors, res.FirstListError = errs.byCode(), errs.first
	res.ListsRefused, res.ListRefusals = refused.total(), refused.byCode()
	res.ListP50Ms, res.ListP99Ms = p50p99(all)
	during := latencies(acks, listStart, time.Duration(1<<62))
	res.Writes = int64(len(during))
	res.WriteP50Ms, res.WriteP99Ms = p50p99(during)
	_, res.WriteP99BeforeMs = p50p99(latencies(acks, 0, listStart))
	res.WriteErrors, res.WriteErrorCodes, res.FirstWriteError = writes.errs.total(), writes.errs.byCode(), writes.errs.first
	r.log.Info("lists done", "lists", res.ListsDone, "failed", res.ListsFailed, "unfinished", res.ListsUnfinished, "not-run", res.ListsNotRun,
		"list-p50", fmtMs(res.ListP50Ms), "write-p99", fmtMs(res.WriteP99Ms), "write-errors", res.WriteErrors,
		"peak-rss", fmtBytes(res.PeakRSSBytes), "oom-kills", res.OOMKills, "exited", res.Exited)
	return res, nil
}

// retryList is countList again after a backoff while the server refuses
// with a code clients retry (ResourceExhausted, Unavailable), as a
// reflector relists: a server may shed an expensive list it cannot afford
// yet, but the list must complete.
func (r *runner) retryList(ctx context.Context, s *server, cli *clientv3.Client, prefix string, refused *codeTally) (int, error) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		n, err := countList(ctx, cli, prefix)
		if c := grpcCode(err); err == nil || (c != codes.ResourceExhausted && c != codes.Unavailable) || !s.running() {
			return n, err
		}
		refused.add(err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// countList reads every key under prefix in one Range, no limit, as a
// watch cache's relist does, and returns how many came back.
func countList(ctx context.Context, cli *clientv3.Client, prefix string) (int, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	return len(resp.Kvs), nil
}
