package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// stormWindow is the span write p99 is taken over to see it recover.
const stormWindow = time.Second

// StormResult is one system's outcome of the reconnect storm.
type StormResult struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	fate
	Clients int `json:"clients"`
	// Ready is how many clients listed their namespace and had a watch
	// created by the bound; ReadySeconds how long the last one took.
	Ready        int     `json:"ready"`
	ReadySeconds float64 `json:"ready_seconds"`
	// Errors the storm's clients saw, by step ("list Unavailable").
	Errors      map[string]int64 `json:"errors,omitempty"`
	FirstError  string           `json:"first_error,omitempty"`
	ErrorsTotal int64            `json:"errors_total"`

	WriteP99BeforeMs float64 `json:"write_p99_before_ms"`
	// WorstWindowP99Ms is the highest write p99 of a one-second window
	// from the storm on; RecoverySeconds when the last window whose p99
	// was over 1.5 times the p99 before (or that had no write) ended.
	// Recovered is whether it then stayed back for 5 s before the end.
	WorstWindowP99Ms float64 `json:"worst_window_p99_ms"`
	RecoverySeconds  float64 `json:"recovery_seconds"`
	Recovered        bool    `json:"recovered"`
	// SettledP99Ms is write p99 over the last 10 s: where it settled with
	// every watcher attached.
	SettledP99Ms    float64          `json:"settled_p99_ms"`
	Writes          int64            `json:"writes"`
	WriteErrors     int64            `json:"write_errors"`
	WriteErrorCodes map[string]int64 `json:"write_error_codes,omitempty"`
	FirstWriteError string           `json:"first_write_error,omitempty"`

	// Watchers whose every expected event came (the acknowledged writes
	// to their namespace after their list's revision), and the events
	// expected and missing over all ready watchers.
	WatchersComplete int   `json:"watchers_complete"`
	EventsExpected   int64 `json:"events_expected"`
	EventsMissing    int64 `json:"events_missing"`
}

// errWatchClosed is a watch that ended before the server confirmed it.
var errWatchClosed = errors.New("watch closed before it was created")

// stormer is one of the storm's clients: its namespace, the revision its
// list read, and the revisions of the events its watch delivered.
type stormer struct {
	ns      string
	listRev int64       // set before ready
	ready   atomic.Bool // listed and watching
	mu      sync.Mutex
	got     map[int64]bool
	n       atomic.Int64
}

// storm is a reconnect storm: StormClients namespaces of StormObjects
// objects and Writers clients creating in them; after Before, every storm
// client connects at once, lists its namespace and watches it from the
// list's revision, as informers do after an apiserver restart. It reports
// errors by code, how long write p99 took to come back within 1.5 times
// its value before, and whether every watcher got every event.
func (r *runner) storm(ctx context.Context) (*StormResult, error) {
	o := r.o.Scale
	res := &StormResult{MemoryLimitBytes: o.MemoryLimit, Clients: o.StormClients}
	s, mem, clis, done, err := r.startInCgroup(ctx, "storm", nil)
	if err != nil {
		return nil, err
	}
	defer done()
	ns := func(c int) string { return fmt.Sprintf("/bench/storm/ns%05d/", c) }
	r.log.Info("loading", "namespaces", o.StormClients, "objects-each", o.StormObjects)
	if _, err := r.load(ctx, clis, o.StormClients*o.StormObjects, o.ListObjectSize, func(i int) string {
		return fmt.Sprintf("%so%05d", ns(i/o.StormObjects), i%o.StormObjects)
	}); err != nil {
		return nil, err
	}

	deadline := time.Now().Add(o.Before + o.MaxTime + o.StormAfter)
	writes := r.startWrites(ctx, clis, o.Writers, func(g, i int) string {
		if o.StormUnwatched {
			return fmt.Sprintf("/bench/storm/unwatched/w%d-%d", g, i)
		}
		return fmt.Sprintf("%sw%d-%d", ns((i*o.Writers+g)%o.StormClients), g, i)
	}, deadline)
	select {
	case <-time.After(o.Before):
	case <-ctx.Done():
		writes.finish()
		return nil, ctx.Err()
	}
	r.log.Info("storm", "clients", o.StormClients, "writers", o.Writers)
	stormAt := time.Since(writes.start)
	sctx, stop := context.WithDeadline(ctx, time.Now().Add(o.MaxTime))
	defer stop()
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var (
		errs    codeTally
		ready   atomic.Int64
		allIn   = make(chan struct{})
		joins   sync.WaitGroup // the clients joining
		wg      sync.WaitGroup // their watches' readers
		mu      sync.Mutex
		storms  = make([]*stormer, o.StormClients)
		opened  []*clientv3.Client
		lastIn  time.Duration
		start   = make(chan struct{})
		stormT0 = time.Now()
	)
	for c := range o.StormClients {
		st := &stormer{ns: ns(c), got: map[int64]bool{}}
		storms[c] = st
		joins.Add(1)
		go func() {
			defer joins.Done()
			<-start
			cli := r.joinStorm(sctx, wctx, s, st, &errs, &wg)
			if cli == nil {
				return
			}
			mu.Lock()
			opened = append(opened, cli)
			lastIn = time.Since(stormT0)
			mu.Unlock()
			if ready.Add(1) == int64(o.StormClients) {
				close(allIn)
			}
		}()
	}
	close(start)
	select {
	case <-allIn:
	case <-sctx.Done():
	case <-s.exited:
	}
	stop()
	res.Ready = int(ready.Load())
	mu.Lock()
	res.ReadySeconds = lastIn.Seconds()
	mu.Unlock()
	r.log.Info("storm joined", "ready", res.Ready, "of", o.StormClients, "took", time.Duration(res.ReadySeconds*float64(time.Second)).Round(time.Millisecond))
	// Writes go on for StormAfter: the windows recovery is read from.
	select {
	case <-time.After(o.StormAfter):
	case <-s.exited:
	case <-ctx.Done():
	}
	acks := writes.finish()
	r.awaitEvents(storms, acks, s)
	stopWatches()
	joins.Wait()
	closeParallel(opened)
	wg.Wait()
	if res.fate, err = r.readFate(s, mem); err != nil {
		return nil, err
	}

	res.Errors, res.FirstError, res.ErrorsTotal = errs.byCode(), errs.first, errs.total()
	res.WriteErrors, res.WriteErrorCodes, res.FirstWriteError = writes.errs.total(), writes.errs.byCode(), writes.errs.first
	_, res.WriteP99BeforeMs = p50p99(latencies(acks, 0, stormAt))
	end := time.Duration(0)
	if len(acks) > 0 {
		end = acks[len(acks)-1].at
	}
	res.Writes = int64(len(latencies(acks, stormAt, end+1)))
	res.WorstWindowP99Ms, res.RecoverySeconds, res.Recovered = recovery(acks, stormAt, end, res.WriteP99BeforeMs)
	_, res.SettledP99Ms = p50p99(latencies(acks, max(stormAt, end-min(10*time.Second, r.o.Scale.StormAfter)), end+1))
	res.WatchersComplete, res.EventsExpected, res.EventsMissing = completeness(storms, acks)
	r.log.Info("storm done", "ready", res.Ready, "errors", res.ErrorsTotal, "recovery-s", round(res.RecoverySeconds),
		"complete", res.WatchersComplete, "missing", res.EventsMissing, "peak-rss", fmtBytes(res.PeakRSSBytes), "oom-kills", res.OOMKills)
	return res, nil
}

// joinStorm connects, lists st's namespace and opens a watch from the
// list's revision, again after a backoff until it works or sctx ends; the
// watch's events go to st until wctx ends. It returns the client, or nil.
func (r *runner) joinStorm(sctx, wctx context.Context, s *server, st *stormer, errs *codeTally, wg *sync.WaitGroup) *clientv3.Client {
	var cli *clientv3.Client
	fail := func(step string, err error) {
		if !s.running() {
			step = serverGone + ", " + step
		}
		errs.addAt(step, err)
		// Clients back off with jitter, as client-go's reflector does.
		select {
		case <-time.After(time.Duration(50+rand.IntN(200)) * time.Millisecond):
		case <-sctx.Done():
		}
	}
	for sctx.Err() == nil && s.running() {
		if cli == nil {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				fail("dial", err)
				continue
			}
			cli = c
		}
		lctx, cancel := context.WithTimeout(sctx, r.o.OpTimeout)
		resp, err := cli.Get(lctx, st.ns, clientv3.WithPrefix())
		cancel()
		if err != nil {
			fail("list", err)
			continue
		}
		ch := cli.Watch(wctx, st.ns, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithCreatedNotify())
		first, ok := <-ch
		switch {
		case !ok:
			fail("watch", errWatchClosed)
			continue
		case first.Err() != nil:
			fail("watch", first.Err())
			continue
		}
		st.listRev = resp.Header.Revision
		st.ready.Store(true)
		st.take(first)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wr := range ch {
				if err := wr.Err(); err != nil && wctx.Err() == nil && s.running() {
					errs.addAt("watch", err)
				}
				st.take(wr)
			}
		}()
		return cli
	}
	if cli != nil {
		cli.Close()
	}
	return nil
}

func (st *stormer) take(wr clientv3.WatchResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, ev := range wr.Events {
		if ev.Type == clientv3.EventTypePut && !st.got[ev.Kv.ModRevision] {
			st.got[ev.Kv.ModRevision] = true
			st.n.Add(1)
		}
	}
}

// expected groups the acknowledged writes' revisions by namespace.
func expected(acks []ack) map[string][]int64 {
	by := map[string][]int64{}
	for _, a := range acks {
		i := strings.LastIndexByte(a.key, '/')
		by[a.key[:i+1]] = append(by[a.key[:i+1]], a.rev)
	}
	return by
}

// awaitEvents waits, up to deliveryGrace, until every ready watcher has
// as many events as writes were acknowledged in its namespace after its
// list.
func (r *runner) awaitEvents(storms []*stormer, acks []ack, s *server) {
	by := expected(acks)
	deadline := time.Now().Add(deliveryGrace)
	for time.Now().Before(deadline) && s.running() {
		short := 0
		for _, st := range storms {
			if st.ready.Load() && st.n.Load() < int64(countAfter(by[st.ns], st.listRev)) {
				short++
			}
		}
		if short == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s.running() {
		r.log.Warn("watchers short of events at the grace's end")
	}
}

func countAfter(revs []int64, after int64) int {
	n := 0
	for _, v := range revs {
		if v > after {
			n++
		}
	}
	return n
}

// completeness counts the watchers that got every event expected of
// them; a client that never became ready is not complete.
func completeness(storms []*stormer, acks []ack) (complete int, want, missing int64) {
	by := expected(acks)
	for _, st := range storms {
		if !st.ready.Load() {
			continue
		}
		st.mu.Lock()
		miss := int64(0)
		for _, v := range by[st.ns] {
			if v > st.listRev {
				want++
				if !st.got[v] {
					miss++
				}
			}
		}
		st.mu.Unlock()
		missing += miss
		if miss == 0 {
			complete++
		}
	}
	return complete, want, missing
}

// recovered is how long write p99 must have stayed back for it to count
// as recovered: one good window on a shared machine is luck.
const recovered = 5 * time.Second

// recovery splits [from, to) into stormWindow windows by send time and
// returns the worst window's write p99 and when, counted from from, the
// last window ended whose p99 exceeded 1.5 times base or that had no
// write acknowledged at all (every writer stalled); back is whether p99
// then stayed within for the last `recovered` before to.
func recovery(acks []ack, from, to time.Duration, base float64) (worstMs, seconds float64, back bool) {
	lastBad := from
	for w := from; w < to; w += stormWindow {
		end := min(w+stormWindow, to)
		ds := latencies(acks, w, end)
		_, p99 := p50p99(ds)
		worstMs = max(worstMs, p99)
		if len(ds) == 0 || p99 > 1.5*base {
			lastBad = end
		}
	}
	return worstMs, (lastBad - from).Seconds(), to-lastBad >= recovered
}

// closeParallel closes many clients at once: one by one, thousands take
// long.
func closeParallel(clis []*clientv3.Client) {
	var wg sync.WaitGroup
	for c := range slices.Chunk(clis, 100) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			closeAll(c)
		}()
	}
	wg.Wait()
}
