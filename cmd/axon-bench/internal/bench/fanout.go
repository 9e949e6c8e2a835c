package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The watch fan-out (`axon-bench --store tikv-cluster --watch-fanout N`)
// runs instead of the cluster's workloads and measures what N watchers
// spread over the instances cost each of them, the leader above all. The
// watchers are pinned: watcher i's client is given instance i%3's
// endpoint alone, as a kube-apiserver pointed at one instance. Each
// watches the benchmark's prefix with prev_kv from the current revision,
// as kube-apiserver's watch cache does. Writers on every instance then
// put Ops events (creates, then updates of the same keys), and the
// benchmark waits until every watcher has received every event.
//
// Each instance's /metrics are scraped before and after: the events it
// sent, to client streams (etcd_debugging_mvcc_events_total, which on
// the leader counts the streams followers relay to it) and to the other
// instances' feeds (axon_watch_feed_events_sent_total, where a build
// has it), per committed event; and its CPU time per 1,000 events.

const (
	fanoutPrefix = "/bench/fanout/"
	// fanoutKeys is how many keys the writes cycle through: the first
	// write of each creates it, the later ones update it, so that most
	// events carry a previous value.
	fanoutKeys = 1000
	// fanoutClients bounds the watch clients per instance: a client's
	// watches share one stream, and a thousand clients would be the
	// load generator's whole machine.
	fanoutClients = 10
	// fanoutWriters is the writing clients per instance.
	fanoutWriters = 2
	// createdTimeout bounds the wait for every watch to be created.
	createdTimeout = 2 * time.Minute
)

// The instance metrics the fan-out reads.
const (
	metricEventsSent     = "etcd_debugging_mvcc_events_total"
	metricFeedEventsSent = "axon_watch_feed_events_sent_total"
	metricSlowCanceled   = "axon_watch_slow_canceled_total"
)

// FanoutRun is one run of the watch fan-out.
type FanoutRun struct {
	Watchers int `json:"watchers"`
	// Writes is the committed events: the writes acknowledged.
	Writes int64 `json:"writes"`
	// Leader is the instance that led when the writes began.
	Leader    string            `json:"leader"`
	Instances []*FanoutInstance `json:"instances"`
	// WriteSeconds runs from the first write sent to the last one
	// acknowledged, DeliverySeconds to the last event the last watcher
	// received.
	WriteSeconds    float64 `json:"write_seconds"`
	DeliverySeconds float64 `json:"delivery_seconds"`
	// Missing counts the events watchers never received.
	Missing int64 `json:"missing,omitempty"`
	// Rewatches counts the watches that ended early (FirstCut says
	// why, if the client was told) and were opened again after the last
	// revision their watcher had seen.
	Rewatches int64  `json:"rewatches,omitempty"`
	FirstCut  string `json:"first_cut,omitempty"`
}

// FanoutInstance is what one instance did in a fan-out run.
type FanoutInstance struct {
	Name   string `json:"name"`
	Leader bool   `json:"leader"`
	// Watchers is how many watchers were pinned to it.
	Watchers int `json:"watchers"`
	// Events and FeedEvents are the increases of metricEventsSent and
	// metricFeedEventsSent (0 where the build has none); EventsPerEvent
	// is their sum per write.
	Events         float64 `json:"events_sent"`
	FeedEvents     float64 `json:"feed_events_sent"`
	EventsPerEvent float64 `json:"events_per_event"`
	// SlowCanceled counts the watches it canceled for being slow.
	SlowCanceled float64 `json:"slow_canceled,omitempty"`
	CPUSec       float64 `json:"cpu_sec"`
	CPUSecPer1k  float64 `json:"cpu_sec_per_1k_events"`
}

// leader and followers split the run's instances by role.
func (f *FanoutRun) leader() *FanoutInstance {
	for _, in := range f.Instances {
		if in.Leader {
			return in
		}
	}
	return nil
}

func (f *FanoutRun) followers() []*FanoutInstance {
	var fs []*FanoutInstance
	for _, in := range f.Instances {
		if !in.Leader {
			fs = append(fs, in)
		}
	}
	return fs
}

// watchCounts are an instance's watch counters at one moment.
type watchCounts struct{ events, feed, slow float64 }

// parseWatchCounts reads an instance's metrics into c; a counter the
// build lacks stays 0.
func parseWatchCounts(r io.Reader, c *watchCounts) error {
	return parseProm(r, func(name string, _ map[string]string, v float64) {
		switch name {
		case metricEventsSent:
			c.events = v
		case metricFeedEventsSent:
			c.feed = v
		case metricSlowCanceled:
			c.slow = v
		}
	})
}

func scrapeWatchCounts(ctx context.Context, s *server) (watchCounts, error) {
	var c watchCounts
	if err := scrape(ctx, "http://"+s.metrics+"/metrics", func(r io.Reader) error { return parseWatchCounts(r, &c) }); err != nil {
		return c, fmt.Errorf("scrape %s's watch counts: %w", s.client, err)
	}
	return c, nil
}

// fanout runs the watch fan-out on a fresh cluster and stops it.
func (r *runner) fanout(ctx context.Context, rep *ClusterReport, c ClusterOptions) error {
	cl, err := r.startCluster(ctx, c.RPCDelay)
	if err != nil {
		return err
	}
	run, err := r.fanoutRun(ctx, cl, c.WatchFanout)
	if run != nil {
		rep.Fanout = append(rep.Fanout, run)
	}
	if err != nil {
		return err
	}
	return r.stopCluster(cl)
}

// fanoutRun opens n pinned watchers, writes Ops events through every
// instance and waits until each watcher has had each one; the run it
// returns holds the figures even when events went missing.
func (r *runner) fanoutRun(ctx context.Context, cl *cluster, n int) (*FanoutRun, error) {
	// clis[i] is instance i's for i < ClusterInstances, as leader wants.
	clis, err := cl.dial(fanoutWriters)
	if err != nil {
		return nil, err
	}
	defer closeAll(clis)
	wclis, err := cl.dial(min(fanoutClients, (n+ClusterInstances-1)/ClusterInstances))
	if err != nil {
		return nil, err
	}
	defer closeAll(wclis)

	base := time.Now()
	since := func() int64 { return int64(time.Since(base)) }
	var (
		got       = make([]int64, n) // events watcher j received
		lastAt    = make([]int64, n) // when it received its last one
		delivered atomic.Int64
		rewatches atomic.Int64
		cuts      tally // why watches ended early
		wg        sync.WaitGroup
		created   = make(chan struct{}, n)
		uncreated = make(chan error, n)
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for j := range n {
		// wclis interleaves the instances, so watcher j is on j%3.
		cli := wclis[j%len(wclis)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// rev is the revision the watcher has seen up to: the
			// watch's start, then its last event's.
			var rev int64
			for wctx.Err() == nil {
				if rev > 0 {
					// Cut off (a slow watcher, say): resume after the
					// last revision seen, as kube-apiserver's watch
					// cache does, and not in a busy loop.
					rewatches.Add(1)
					select {
					case <-time.After(10 * time.Millisecond):
					case <-wctx.Done():
						return
					}
				}
				from := int64(0) // the current revision
				if rev > 0 {
					from = rev + 1
				}
				ch := cli.Watch(wctx, fanoutPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV(),
					clientv3.WithRev(from), clientv3.WithCreatedNotify())
				for wr := range ch {
					if wr.Created {
						if rev == 0 {
							rev = wr.Header.Revision
							created <- struct{}{}
						}
						continue
					}
					if err := wr.Err(); err != nil {
						if wctx.Err() == nil {
							cuts.add(fmt.Errorf("watcher %d: %w", j, err))
						}
						continue
					}
					fresh := int64(0)
					for _, ev := range wr.Events {
						if ev.Kv.ModRevision > rev { // not again after a resume
							rev = ev.Kv.ModRevision
							fresh++
						}
					}
					if fresh > 0 {
						got[j] += fresh
						lastAt[j] = since()
						delivered.Add(fresh)
					}
				}
				if rev == 0 {
					uncreated <- fmt.Errorf("watcher %d: its watch ended before it was created", j)
					return
				}
			}
		}()
	}
	// stop ends the watchers; their counts are safe to read after it.
	stop := stopWatchers(cancel, &wg, "watch fan-out")
	defer func() { _ = stop() }()
	timeout := time.After(createdTimeout)
	for range n {
		select {
		case <-created:
		case err := <-uncreated:
			return nil, err
		case <-timeout:
			return nil, fmt.Errorf("watch fan-out: watchers not created within %v", createdTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	run := &FanoutRun{Watchers: n, Leader: cl.leader(ctx, clis)}
	before := make([]watchCounts, len(cl.instances))
	cpu0 := make([]float64, len(cl.instances))
	for i, s := range cl.instances {
		if before[i], err = scrapeWatchCounts(ctx, s); err != nil {
			return nil, err
		}
		if cpu0[i], err = procCPU(s.pid()); err != nil {
			return nil, err
		}
	}
	r.log.Info("watch fan-out", "watchers", n, "watch-clients", len(wclis), "writes", r.o.Ops, "writers", len(clis), "leader", run.Leader)

	// The writers take the next write until Ops are sent or MaxTime is
	// up; a failed write makes the run an error, since it may or may not
	// have committed an event.
	var (
		next, acked atomic.Int64
		werrs       tally
		ww          sync.WaitGroup
	)
	start := since()
	deadline := time.Now().Add(r.o.MaxTime)
	for w, cli := range clis {
		ww.Add(1)
		go func() {
			defer ww.Done()
			wk := newWorker(w, r.o.ValueSize)
			for {
				i := next.Add(1) - 1
				if i >= int64(r.o.Ops) || time.Now().After(deadline) || ctx.Err() != nil {
					return
				}
				octx, c := context.WithTimeout(ctx, r.o.OpTimeout)
				_, err := cli.Put(octx, fmt.Sprintf("%s%08d", fanoutPrefix, i%fanoutKeys), wk.value())
				c()
				if err != nil {
					werrs.add(fmt.Errorf("writer %d: %w", w, err))
					continue
				}
				acked.Add(1)
			}
		}()
	}
	ww.Wait()
	run.Writes = acked.Load()
	run.WriteSeconds = time.Duration(since() - start).Seconds()
	if werrs.n.Load() > 0 {
		return nil, fmt.Errorf("watch fan-out: %d writes failed (first: %s)", werrs.n.Load(), werrs.first)
	}

	// Wait until every watcher has every event, or none arrives for
	// deliveryGrace.
	target := int64(n) * run.Writes
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	seen, quiet := delivered.Load(), time.Now()
	for seen < target && time.Since(quiet) < deliveryGrace {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if d := delivered.Load(); d != seen {
			seen, quiet = d, time.Now()
		}
	}

	after := make([]watchCounts, len(cl.instances))
	for i, s := range cl.instances {
		if err := r.alive(s); err != nil {
			return nil, err
		}
		cpu1, err := procCPU(s.pid())
		if err != nil {
			return nil, err
		}
		if after[i], err = scrapeWatchCounts(ctx, s); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("axon-%d", i)
		in := &FanoutInstance{Name: name, Leader: name == run.Leader, Watchers: n / ClusterInstances,
			Events: after[i].events - before[i].events, FeedEvents: after[i].feed - before[i].feed,
			SlowCanceled: after[i].slow - before[i].slow, CPUSec: cpu1 - cpu0[i]}
		if i < n%ClusterInstances {
			in.Watchers++
		}
		in.EventsPerEvent = div(in.Events+in.FeedEvents, float64(run.Writes))
		in.CPUSecPer1k = div(in.CPUSec*1000, float64(run.Writes))
		run.Instances = append(run.Instances, in)
	}
	if err := stop(); err != nil {
		return run, err
	}
	run.Rewatches, run.FirstCut = rewatches.Load(), cuts.first
	var last int64
	for j := range n {
		run.Missing += max(run.Writes-got[j], 0)
		last = max(last, lastAt[j])
	}
	run.DeliverySeconds = time.Duration(last - start).Seconds()
	args := []any{"writes", run.Writes, "write-s", round(run.WriteSeconds), "delivery-s", round(run.DeliverySeconds), "rewatches", run.Rewatches}
	for _, in := range run.Instances {
		args = append(args, in.Name+"-events/event", round(in.EventsPerEvent), in.Name+"-cpu-s/1k", round(in.CPUSecPer1k))
	}
	r.log.Info("watch fan-out done", args...)
	switch {
	case run.Missing > 0:
		err = fmt.Errorf("watch fan-out: %d of %d events not delivered (none for %v)", run.Missing, target, deliveryGrace)
	case run.Writes == 0:
		err = fmt.Errorf("watch fan-out: no write acknowledged")
	}
	return run, err
}

// writeFanout writes the fan-out runs as a table.
func (rep *ClusterReport) writeFanout(w io.Writer) error {
	fmt.Fprintf(w, "watch fan-out: %d axon serve --store tikv processes on one axon-bench tikv-server --rpc-delay %v; "+
		"%d watchers, watcher i pinned to axon-(i%%%d); writes from %d clients on each instance\n",
		ClusterInstances, rep.Cluster.RPCDelay, rep.Cluster.WatchFanout, ClusterInstances, fanoutWriters)
	var names []string
	for i := range rep.Fanout {
		names = append(names, fmt.Sprintf("run %d", i+1))
	}
	tw, pad, line := newTable(w, names)
	line([]string{pad(""), "", "", "", "events sent/event", "", "CPU s/1k events", "", "", "", "", ""})
	line([]string{pad("run"), "watchers", "writes", "leader", "leader", "followers", "leader", "followers", "writes/s", "delivery", "rewatches", "missing"})
	for i, f := range rep.Fanout {
		cells := []string{pad(names[i]), fmt.Sprint(f.Watchers), fmt.Sprint(f.Writes), cmp.Or(f.Leader, "?")}
		var evs, cpus []string
		for _, in := range f.followers() {
			evs = append(evs, fmt.Sprintf("%.2f", in.EventsPerEvent))
			cpus = append(cpus, fmtSec(in.CPUSecPer1k))
		}
		if l := f.leader(); l != nil {
			cells = append(cells, fmt.Sprintf("%.2f", l.EventsPerEvent))
			cells = append(cells, strings.Join(evs, " "), fmtSec(l.CPUSecPer1k), strings.Join(cpus, " "))
		} else {
			cells = append(cells, "-", strings.Join(evs, " "), "-", strings.Join(cpus, " "))
		}
		cells = append(cells, fmtRate(div(float64(f.Writes), f.WriteSeconds)), fmtSec(f.DeliverySeconds), fmt.Sprint(f.Rewatches), fmt.Sprint(f.Missing))
		line(cells)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, `
Each watcher: a prefix watch of %[1]s with prev_kv from the current revision, as kube-apiserver's;
up to %[2]d clients per instance, their watches sharing each client's stream. Writes: puts cycling over
%[3]d keys (creates, then updates), as fast as they are acknowledged. events sent/event: the instance's
increase of %[4]s (events sent on client streams; the leader's count those
followers relay to it) plus %[5]s (events sent to other instances' feeds; 0
where the build has none), over the writes. CPU s/1k events: the instance's CPU seconds over the run per
1,000 writes. delivery: from the first write to the last event the last watcher received. rewatches:
watches that ended early (a slow watcher is cut off) and were opened again after the last revision
their watcher had seen, as kube-apiserver does. leader: the instance leading when the writes began;
followers in instance order.
`, fanoutPrefix, fanoutClients, fanoutKeys, metricEventsSent, metricFeedEventsSent)
	for i, f := range rep.Fanout {
		if f.FirstCut != "" {
			fmt.Fprintf(w, "note: run %d: first watch cut off: %s\n", i+1, f.FirstCut)
		}
		for _, in := range f.Instances {
			if in.SlowCanceled > 0 {
				fmt.Fprintf(w, "note: run %d: %s canceled %.0f slow watches\n", i+1, in.Name, in.SlowCanceled)
			}
		}
	}
	return nil
}
