package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/internal/tikvserver"
)

// The cluster benchmark (`axon-bench --store tikv-cluster`) runs Axon in
// production's shape beside etcd. Axon is ClusterInstances `axon serve
// --store tikv` processes sharing one `axon-bench tikv-server` endpoint
// (PD's and TiKV's gRPC over client-go's mock store, one region, its
// --rpc-delay before each answer), so that every request goes through
// client-go's network path: PD's TSO stream, the region cache,
// BatchCommands. etcd is one `axon-bench etcd-reference`. Both run the
// TiKV benchmark's workloads (create, update, failed-cas, get; see
// RunTiKV) at each client count; client i talks only to instance
// i%ClusterInstances, as kube-apiservers each pointed at one instance
// would. Systems alternate run by run as in Run, each run on fresh
// processes, and a row's figures are the median run's.
//
// The endpoint counts the requests it answers (tikvserver.Load), scraped
// before and after each row: calls per op by type, and at one client the
// busy periods per op, the sequential round trips. Whatever the instances
// do meanwhile in the background counts too; how much that is alone is
// measured for a few seconds before the workloads (ClusterReport.Idle).

// ClusterInstances is how many `axon serve` processes the cluster
// benchmark runs.
const ClusterInstances = 3

// idleTime is how long the endpoint's load is measured with the
// instances idle.
const idleTime = 3 * time.Second

// ClusterOptions configure RunCluster.
type ClusterOptions struct {
	// RPCDelay is the endpoint's --rpc-delay: waited before it answers
	// each PD and TiKV request.
	RPCDelay time.Duration `json:"rpc_delay"`
	// Workloads to run, of TiKVWorkloads; nil means all.
	Workloads []string `json:"workloads"`
	// WatchFanout, if positive, runs the watch fan-out with that many
	// watchers instead of the workloads (Axon only; see fanout.go).
	WatchFanout int `json:"watch_fanout,omitempty"`
}

// ClusterReport is the outcome of RunCluster: both systems' rows, with
// medians and ratios as Run reports them, and what the endpoint served.
type ClusterReport struct {
	Report
	Cluster ClusterOptions `json:"cluster"`
	// Endpoint holds, by row name, what the endpoint served during the
	// row in each Axon run, in run order (as the row's Runs["axon"]).
	Endpoint map[string][]*EndpointLoad `json:"endpoint"`
	// Idle holds, per Axon run, what the endpoint served while the
	// instances had no client.
	Idle []*IdleLoad `json:"idle"`
	// Fanout holds the watch fan-out's runs, in run order.
	Fanout []*FanoutRun `json:"fanout,omitempty"`
}

// EndpointLoad is what the endpoint served during one row of one run.
type EndpointLoad struct {
	// Leader is the instance that led when the row began ("" if none
	// said so).
	Leader string `json:"leader"`
	// Requests counts the requests the clients sent (ops, conflicts,
	// errors and cut-short ones), the per-op figures' divisor.
	Requests int64 `json:"requests"`
	// CallsPerOp are the endpoint's requests per op by type
	// (tikvserver.MetricRequests' types).
	CallsPerOp map[string]float64 `json:"calls_per_op"`
	// TimestampsPerOp counts the timestamps the TSO requests asked for.
	TimestampsPerOp float64 `json:"timestamps_per_op"`
	// StepsPerOp is the endpoint's busy periods per op, at one client
	// only.
	StepsPerOp float64 `json:"steps_per_op,omitempty"`
	// EndpointCPUSecPer1kOps is the endpoint process's CPU time.
	EndpointCPUSecPer1kOps float64 `json:"endpoint_cpu_sec_per_1k_ops"`
}

// IdleLoad is what the endpoint served while no client sent anything.
type IdleLoad struct {
	Seconds          float64            `json:"seconds"`
	CallsPerSec      map[string]float64 `json:"calls_per_sec"`
	BusyPerSec       float64            `json:"busy_periods_per_sec"`
	TimestampsPerSec float64            `json:"timestamps_per_sec"`
}

// RunCluster runs the cluster benchmark. It uses o's Binary, EtcdBinary
// (the endpoint and etcd run from it), Systems, Runs, Clients, Conns (per
// system; Axon's are split evenly among the instances, rounded up), Ops,
// MaxTime, ValueSize, Keys, OpTimeout, LoadClients, LoadBatch, WorkDir,
// Keep, AxonFlags (added to every instance's flags) and Log. With
// c.WatchFanout it runs the watch fan-out instead, with Ops writes. On
// error the report holds the rows (or fan-out runs) measured so far.
func RunCluster(ctx context.Context, o Options, c ClusterOptions) (*ClusterReport, error) {
	o.Workloads = nil
	if err := o.validate(); err != nil {
		return nil, err
	}
	if c.Workloads == nil {
		c.Workloads = TiKVWorkloads
	}
	for _, w := range c.Workloads {
		if !slices.Contains(TiKVWorkloads, w) {
			return nil, fmt.Errorf("unknown tikv workload %q (want some of %v)", w, TiKVWorkloads)
		}
	}
	if c.RPCDelay < 0 {
		return nil, fmt.Errorf("tikv rpc delay %v: want >= 0", c.RPCDelay)
	}
	if c.WatchFanout < 0 {
		return nil, fmt.Errorf("watch fan-out %d: want >= 0", c.WatchFanout)
	}
	if c.WatchFanout > 0 && slices.Contains(o.Systems, "etcd") {
		return nil, errors.New("the watch fan-out runs on axon only (--systems axon)")
	}
	if o.TLS {
		return nil, errors.New("the cluster benchmark serves plaintext only")
	}
	if o.EtcdBinary == "" {
		return nil, errors.New("no axon-bench binary given for tikv-server")
	}
	rep := &ClusterReport{Report: Report{Systems: o.Systems}, Cluster: c, Endpoint: map[string][]*EndpointLoad{}}
	log := rep.begin(o)
	done := func(err error) (*ClusterReport, error) {
		rep.end()
		rep.finish()
		return rep, err
	}
	work, cleanup, err := workDir(o, "axon-bench-cluster-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if rep.Fsync, err = measureFsync(work, 200); err != nil {
		return nil, err
	}
	log.Info("bench tikv-cluster", "work-dir", work, "fsync-p50", fmtMs(rep.Fsync.P50Ms), "fsync-p99", fmtMs(rep.Fsync.P99Ms),
		"rpc-delay", c.RPCDelay, "instances", ClusterInstances, "systems", o.Systems, "runs", o.Runs,
		"workloads", c.Workloads, "watch-fanout", c.WatchFanout, "clients", o.Clients, "ops", o.Ops, "max-time", o.MaxTime)
	for run := range max(o.Runs, 1) {
		for _, name := range o.Systems {
			r := &runner{o: o, sys: systems[name], log: log.With("system", name, "run", run+1), rep: &rep.Report,
				dir: filepath.Join(work, fmt.Sprintf("%s-%d", name, run+1)), loaded: map[int]*server{}}
			switch {
			case c.WatchFanout > 0:
				err = r.fanout(ctx, rep, c)
			case name == "axon":
				err = r.cluster(ctx, rep, c)
			default:
				err = r.reference(ctx, c.Workloads)
			}
			if cerr := r.cleanup(); err == nil {
				err = cerr
			}
			if err != nil {
				return done(fmt.Errorf("%s, run %d: %w", name, run+1, err))
			}
		}
	}
	return done(nil)
}

// reference runs the workloads on one server of r's system.
func (r *runner) reference(ctx context.Context, workloads []string) error {
	s, clis, err := r.launch(ctx, "main")
	if err != nil {
		return err
	}
	defer closeAll(clis)
	return r.eachTiKVRow(ctx, clis, workloads, func(w string, c int, fn opFunc) error {
		row := r.rep.row(fmt.Sprintf("%s c=%d", w, c), w, c, 0, "request")
		r.log.Info("running " + row.Name)
		res, err := r.timed(ctx, s, clis[:min(len(clis), c)], c, r.o.Ops, r.o.MaxTime, r.o.OpTimeout, fn)
		if err != nil {
			return fmt.Errorf("%s: %w", row.Name, err)
		}
		r.record(row, res)
		return nil
	})
}

// endpointSystem is `axon-bench tikv-server`; its flags beyond the
// addresses are the server's extra.
var endpointSystem = system{name: "tikv-server", binary: func(o *Options) string { return o.EtcdBinary }, args: func(s *server) []string {
	return append([]string{"tikv-server", "--listen", s.client, "--metrics-listen", s.metrics}, s.extra...)
}}

// cluster is the endpoint and the instances on it.
type cluster struct {
	endpoint  *server
	instances []*server
}

// cluster runs the workloads on a fresh cluster and stops it.
func (r *runner) cluster(ctx context.Context, rep *ClusterReport, c ClusterOptions) error {
	cl, err := r.startCluster(ctx, c.RPCDelay)
	if err != nil {
		return err
	}
	clis, err := cl.dial((r.o.Conns + ClusterInstances - 1) / ClusterInstances)
	if err != nil {
		return err
	}
	idle, err := r.idle(ctx, cl)
	if err != nil {
		closeAll(clis)
		return err
	}
	rep.Idle = append(rep.Idle, idle)
	err = r.eachTiKVRow(ctx, clis, c.Workloads, func(w string, n int, fn opFunc) error {
		row := r.rep.row(fmt.Sprintf("%s c=%d", w, n), w, n, 0, "request")
		load, err := r.clusterRow(ctx, cl, clis, row, fn)
		if err != nil {
			return fmt.Errorf("%s: %w", row.Name, err)
		}
		rep.Endpoint[row.Name] = append(rep.Endpoint[row.Name], load)
		return nil
	})
	closeAll(clis)
	if err != nil {
		return err
	}
	return r.stopCluster(cl)
}

// startCluster starts the endpoint, then the instances on it, and waits
// until each answers a linearizable Get.
func (r *runner) startCluster(ctx context.Context, delay time.Duration) (*cluster, error) {
	cl := &cluster{}
	ep, err := newServer(r.o.EtcdBinary, endpointSystem, filepath.Join(r.dir, "tikv-server"), false, nil)
	if err != nil {
		return nil, err
	}
	ep.extra = []string{"--rpc-delay", delay.String()}
	cl.endpoint = ep
	for i := range ClusterInstances {
		name := fmt.Sprintf("axon-%d", i)
		s, err := newServer(r.o.Binary, systems["axon"], filepath.Join(r.dir, name), false, nil)
		if err != nil {
			return nil, err
		}
		// The user's flags last, so that they win.
		s.extra = append([]string{"--store", "tikv", "--pd-endpoints", ep.client, "--name", name}, r.o.AxonFlags...)
		cl.instances = append(cl.instances, s)
	}
	// cleanup stops them in this order: the instances leave through the
	// endpoint.
	r.servers = append(r.servers, cl.instances...)
	r.servers = append(r.servers, ep)
	t0 := time.Now()
	if err := ep.start(); err != nil {
		return nil, err
	}
	if err := waitEndpoint(ctx, ep); err != nil {
		return nil, err
	}
	r.log.Info("endpoint ready", "pid", ep.pid(), "pd-endpoints", ep.client, "rpc-delay", delay, "took", time.Since(t0).Round(time.Millisecond))
	for _, s := range cl.instances {
		if err := s.start(); err != nil {
			return nil, err
		}
	}
	for _, s := range cl.instances {
		if err := s.waitReady(ctx, readyTimeout); err != nil {
			return nil, err
		}
		r.log.Info("instance ready", "pid", s.pid(), "client", s.client, "took", time.Since(t0).Round(time.Millisecond))
	}
	return cl, nil
}

// waitEndpoint returns once the endpoint's metrics answer: it listens for
// PD and TiKV before it serves them.
func waitEndpoint(ctx context.Context, ep *server) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := scrapeEndpoint(ctx, ep.metrics)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tikv-server not ready after %v: %w", readyTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ep.exited:
			return fmt.Errorf("tikv-server exited while starting (%v); log %s:\n%s", ep.err, ep.logPath, ep.logTail())
		case <-tick.C:
		}
	}
}

// stopCluster stops the instances together, then the endpoint.
func (r *runner) stopCluster(cl *cluster) error {
	errs := make([]error, len(cl.instances)+1)
	var wg sync.WaitGroup
	for i, s := range cl.instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.drop(s)
		}()
	}
	wg.Wait()
	errs[len(cl.instances)] = r.drop(cl.endpoint)
	return errors.Join(errs...)
}

// dial returns perInstance clients of each instance, interleaved: client
// j talks to instance j%ClusterInstances, and so does worker w of timed,
// which takes clis[w%len(clis)].
func (cl *cluster) dial(perInstance int) ([]*clientv3.Client, error) {
	var clis []*clientv3.Client
	for range perInstance {
		for _, s := range cl.instances {
			c, err := s.dial()
			if err != nil {
				closeAll(clis)
				return nil, err
			}
			clis = append(clis, c)
		}
	}
	return clis, nil
}

// leader names the instance that says it leads, asking each through
// clis[i] (instance i's), or "".
func (cl *cluster) leader(ctx context.Context, clis []*clientv3.Client) string {
	for i, s := range cl.instances {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := clis[i].Status(sctx, s.client)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return fmt.Sprintf("axon-%d", i)
		}
	}
	return ""
}

// idle measures what the endpoint serves while the instances have no
// client request.
func (r *runner) idle(ctx context.Context, cl *cluster) (*IdleLoad, error) {
	before, err := scrapeEndpoint(ctx, cl.endpoint.metrics)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	select {
	case <-time.After(idleTime):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	after, err := scrapeEndpoint(ctx, cl.endpoint.metrics)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	d := after.minus(before)
	idle := &IdleLoad{Seconds: secs, CallsPerSec: map[string]float64{}, BusyPerSec: d.busy / secs, TimestampsPerSec: d.timestamps / secs}
	for typ, v := range d.requests {
		if v > 0 {
			idle.CallsPerSec[typ] = v / secs
		}
	}
	r.log.Info("idle", "calls/s", round(sumValues(idle.CallsPerSec)), "busy-periods/s", round(idle.BusyPerSec))
	return idle, nil
}

// clusterRow times fn from clients spread over the instances and returns
// the difference of the endpoint's counts across it.
func (r *runner) clusterRow(ctx context.Context, cl *cluster, clis []*clientv3.Client, row *Row, fn opFunc) (*EndpointLoad, error) {
	load := &EndpointLoad{Leader: cl.leader(ctx, clis), CallsPerOp: map[string]float64{}}
	r.log.Info("running "+row.Name, "leader", load.Leader)
	before, err := scrapeEndpoint(ctx, cl.endpoint.metrics)
	if err != nil {
		return nil, err
	}
	cpu0, err := procCPU(cl.endpoint.pid())
	if err != nil {
		return nil, err
	}
	res, err := r.timedOn(ctx, cl.instances, clis[:min(len(clis), row.Clients)], row.Clients, r.o.Ops, r.o.MaxTime, r.o.OpTimeout, fn)
	if err != nil {
		return nil, err
	}
	if err := r.alive(cl.endpoint); err != nil {
		return nil, err
	}
	cpu1, err := procCPU(cl.endpoint.pid())
	if err != nil {
		return nil, err
	}
	after, err := scrapeEndpoint(ctx, cl.endpoint.metrics)
	if err != nil {
		return nil, err
	}
	r.record(row, res)
	load.Requests = res.Ops + res.Conflicts + res.Errors + res.CutShort
	n := float64(load.Requests)
	d := after.minus(before)
	for typ, v := range d.requests {
		if v > 0 {
			load.CallsPerOp[typ] = div(v, n)
		}
	}
	load.TimestampsPerOp = div(d.timestamps, n)
	if row.Clients == 1 {
		load.StepsPerOp = div(d.busy, n)
	}
	load.EndpointCPUSecPer1kOps = div((cpu1-cpu0)*1000, float64(res.Ops))
	r.log.Info(row.Name+" endpoint", "calls/op", round(sumValues(load.CallsPerOp)), "TSO/op", round(load.CallsPerOp[tikvserver.TSO]),
		"timestamps/op", round(load.TimestampsPerOp), "steps/op", round(load.StepsPerOp))
	return load, nil
}

// endpointCounts are the endpoint's counts at one moment.
type endpointCounts struct {
	requests         map[string]float64
	timestamps, busy float64
}

func (a endpointCounts) minus(b endpointCounts) endpointCounts {
	d := endpointCounts{requests: map[string]float64{}, timestamps: a.timestamps - b.timestamps, busy: a.busy - b.busy}
	for k, v := range a.requests {
		d.requests[k] = v - b.requests[k]
	}
	return d
}

// scrapeEndpoint reads the counts of the endpoint whose metrics listener
// is at addr.
func scrapeEndpoint(ctx context.Context, addr string) (endpointCounts, error) {
	c := endpointCounts{requests: map[string]float64{}}
	err := scrape(ctx, "http://"+addr+tikvserver.MetricsPath, func(r io.Reader) error { return parseEndpointCounts(r, &c) })
	if err != nil {
		return c, fmt.Errorf("scrape the endpoint's counts: %w", err)
	}
	return c, nil
}

// parseEndpointCounts reads the endpoint's metrics into c.
func parseEndpointCounts(r io.Reader, c *endpointCounts) error {
	return parseProm(r, func(name string, l map[string]string, v float64) {
		switch name {
		case tikvserver.MetricRequests:
			c.requests[l["type"]] = v
		case tikvserver.MetricTimestamps:
			c.timestamps = v
		case tikvserver.MetricBusyPeriods:
			c.busy = v
		}
	})
}

// medianLoad is the endpoint's load in the run whose Axon figures the
// row shows.
func (rep *ClusterReport) medianLoad(r *Row) *EndpointLoad {
	loads := rep.Endpoint[r.Name]
	i := slices.Index(r.Runs["axon"], r.Results["axon"])
	if i < 0 || i >= len(loads) {
		return nil
	}
	return loads[i]
}

// isOther says whether a request type goes to the table's "other"
// column: every call but timestamps and TiKV's transactional requests,
// which the endpoint names Service/Method.
func isOther(typ string) bool { return strings.Contains(typ, "/") }

// WriteTable writes the report as one table, a row per workload and
// client count: each system's figures, the ratios, and the calls to the
// endpoint per op.
func (rep *ClusterReport) WriteTable(w io.Writer) error {
	if rep.Cluster.WatchFanout > 0 {
		return rep.writeFanout(w)
	}
	runs := 0
	for _, r := range rep.Rows {
		for _, rs := range r.Runs {
			runs = max(runs, len(rs))
		}
	}
	fmt.Fprintf(w, "axon: %d axon serve --store tikv processes on one axon-bench tikv-server --rpc-delay %v, client i on axon-(i%%%d); "+
		"etcd: one etcd-reference (4 KiB write + fdatasync p50 %s, p99 %s here). %d run(s) per system, alternating; figures are the median run's (by ops/s)",
		ClusterInstances, rep.Cluster.RPCDelay, ClusterInstances, fmtMs(rep.Fsync.P50Ms), fmtMs(rep.Fsync.P99Ms), runs)
	if runs > 1 {
		fmt.Fprint(w, ", each ratio the median of the runs' ratios [lowest-highest]")
	}
	fmt.Fprintln(w)
	var counts []map[string]float64
	for _, r := range rep.Rows {
		if l := rep.medianLoad(r); l != nil {
			counts = append(counts, l.CallsPerOp)
		}
	}
	types := rpcTypes(counts, isOther)
	other := len(rpcTypes(counts, nil)) > len(types)
	var names []string
	for _, r := range rep.Rows {
		names = append(names, r.Name)
	}
	tw, pad, line := newTable(w, names)
	axon, etcd := slices.Contains(rep.Systems, "axon"), slices.Contains(rep.Systems, "etcd")
	h1, h2 := []string{pad("")}, []string{pad("workload")}
	if axon {
		h1 = append(h1, "axon", "", "", "", "")
		h2 = append(h2, "ops/s", "p50", "p99", "srvCPU/1k", "epCPU/1k")
	}
	if etcd {
		h1 = append(h1, "etcd", "", "", "")
		h2 = append(h2, "ops/s", "p50", "p99", "srvCPU/1k")
	}
	if axon && etcd {
		h1 = append(h1, "axon/etcd", "", "")
		h2 = append(h2, "ops/s", "p50", "p99")
	}
	if axon {
		h1 = append(h1, "", "endpoint")
		h2 = append(h2, "leader", "steps/op", "calls/op", "timestamps")
		h2 = append(h2, types...)
		if other {
			h2 = append(h2, "other")
		}
	}
	line(h1)
	line(h2)
	for _, r := range rep.Rows {
		cells := []string{pad(r.Name)}
		figures := func(sys string) {
			res := r.Results[sys]
			if res == nil {
				cells = append(cells, "-", "-", "-", "-")
				return
			}
			cells = append(cells, fmtRate(res.OpsPerSec), fmtLat(res.P50Ms, res.LatencySamples), fmtLat(res.P99Ms, res.LatencySamples),
				fmtSec(res.ServerCPUSecPer1kOps))
		}
		l := rep.medianLoad(r)
		if axon {
			figures("axon")
			ep := "-"
			if l != nil {
				ep = fmtSec(l.EndpointCPUSecPer1kOps)
			}
			cells = append(cells, ep)
		}
		if etcd {
			figures("etcd")
		}
		if axon && etcd {
			if q := r.Ratio; q != nil {
				cell := func(f func(Ratio) float64) string {
					if r.Spread == nil || f(*q) == 0 {
						return fmtRatio(f(*q))
					}
					return fmt.Sprintf("%s [%.2f-%.2f]", fmtRatio(f(*q)), f(r.Spread[0]), f(r.Spread[1]))
				}
				cells = append(cells, cell(func(q Ratio) float64 { return q.OpsPerSec }), cell(func(q Ratio) float64 { return q.P50 }),
					cell(func(q Ratio) float64 { return q.P99 }))
			} else {
				cells = append(cells, "-", "-", "-")
			}
		}
		if axon {
			if l == nil {
				cells = append(cells, slices.Repeat([]string{"-"}, 4+len(types))...)
				if other {
					cells = append(cells, "-")
				}
			} else {
				cells = append(cells, cmp.Or(l.Leader, "?"), fmtPerOp(l.StepsPerOp), fmtPerOp(sumValues(l.CallsPerOp)), fmtPerOp(l.TimestampsPerOp))
				var rest float64
				for typ, v := range l.CallsPerOp {
					if isOther(typ) {
						rest += v
					}
				}
				for _, typ := range types {
					cells = append(cells, fmtPerOp(l.CallsPerOp[typ]))
				}
				if other {
					cells = append(cells, fmtPerOp(rest))
				}
			}
		}
		line(cells)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, `
Axon ran in production's shape, on this machine: the endpoint, axon-bench tikv-server (PD's and TiKV's
gRPC over client-go's mock store, in memory, one region; it waits --rpc-delay before answering each
request), and %[1]d processes of axon serve --store tikv --pd-endpoints <endpoint>, with their default
flags; client i talks only to axon-(i%%%[1]d) (an instance that does not lead forwards writes to the one
that does; leader: the one leading when the row began). etcd: one axon-bench etcd-reference (etcd
embedded, its defaults, fsync on). One op: create = Txn If ModRevision==0 Then Put Else Get on a new
key; update = the same Txn at the revision of the client's last write to its own key; failed-cas = the
same Txn at a stale revision, the compare fails; get = linearizable Get. srvCPU/1k: CPU seconds per
1,000 ops of the server (Axon: its %[1]d processes together); epCPU/1k: of the endpoint.
Calls to the endpoint per op: the requests the endpoint answered during the row over the requests the
clients sent. A call is one request it answered: a unary gRPC call, one entry of a BatchCommands stream,
or one request on PD's Tso or QueryRegion stream (opening a stream is none). TSO: timestamp requests;
timestamps: the timestamps they asked for (the PD client batches concurrent callers into one request).
Get, Prewrite, ...: TiKV's transactional requests by type, unary or in BatchCommands. other: every other
call (PD's region and store lookups, client-go's health, safe-ts and batch keep-alive calls, etcd member
lists). steps/op (1 client only): periods with at least one call in flight at the endpoint, from its
arrival to its answer, per op: the sequential round trips. Parallel calls make one step only where
they overlap at the endpoint; with no delay a call is in flight there for microseconds, so steps/op is
then an upper bound. Everything the %[1]d instances do in the background (leadership renewals, presence
records, client-go's timestamp, region and safe-ts refreshes) is counted too.
Idle, the instances made %[2]s.
`, ClusterInstances, rep.describeIdle())
	for _, r := range rep.Rows {
		for _, s := range rep.Systems {
			for i, res := range r.Runs[s] {
				name := r.Name + " " + s
				if len(r.Runs[s]) > 1 {
					name += fmt.Sprintf(" run %d", i+1)
				}
				for _, n := range res.notes(name) {
					fmt.Fprintln(w, "note:", n)
				}
			}
		}
	}
	return nil
}

// describeIdle says what the endpoint served per second with the
// instances idle, in each run.
func (rep *ClusterReport) describeIdle() string {
	if len(rep.Idle) == 0 {
		return "(not measured)"
	}
	var calls, busy []string
	for _, l := range rep.Idle {
		calls = append(calls, strconv.FormatFloat(round(sumValues(l.CallsPerSec)), 'f', -1, 64))
		busy = append(busy, strconv.FormatFloat(round(l.BusyPerSec), 'f', -1, 64))
	}
	runs := ""
	if len(rep.Idle) > 1 {
		runs = " (by run)"
	}
	return fmt.Sprintf("%s calls/s in %s busy periods/s%s over %v", strings.Join(calls, ", "), strings.Join(busy, ", "), runs, idleTime)
}
