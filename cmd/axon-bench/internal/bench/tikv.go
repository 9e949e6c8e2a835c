package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/storage/tikv"
)

// The TiKV round-trip benchmark (`axon-bench --store tikv-mock`) runs one
// `axon serve --store tikv-mock` child: Axon over client-go's in-process
// TiKV cluster, each TiKV RPC and PD timestamp call delayed by a fixed
// time and counted by the server (storage/tikv Trace), the counts served
// at tikv.TraceMetricsPath on the metrics listener. The server runs as a
// child like every other system so that the generator's CPU and
// goroutines stay out of its process and the figures are the server's
// alone.
//
// Per workload and client count, the counts are scraped before and after
// the timed part and the difference divided by the requests sent (ops,
// conflicts, errors and cut-short ones; all send RPCs). Workloads:
//
//   - create: as in Run, on Kubernetes-shaped keys
//     (/registry/pods/ns/pod-NNNNNN-tag) spread over the sample the mock's
//     regions are cut by.
//   - update: a successful CAS, Txn If ModRevision(k)==rev Then Put Else
//     Get: each client owns its keys and knows each one's revision from
//     its last write, so no Get precedes it.
//   - failed-cas: the same Txn with a stale revision: the compare fails
//     and the Else Get answers (the apiserver's conflict).
//   - get: a linearizable Get of a preloaded key.
//
// A step is a period with at least one call of the server in flight:
// with one client, steps per op is the number of sequential round trips
// an op takes (shown at one client only). client-go commits secondary
// keys in the background after the primary's commit answered; those
// count as RPCs (CommitSecondary) but make no step. The busiest region's
// share is, over the write transactions (start_ts of Prewrite requests),
// the most any one region took part in.
//
// Background engine work of the server (leadership renewals) runs
// meanwhile and counts too; the server's leader lease is made long so
// that it renews rarely.

// FailedCAS is the TiKV benchmark's failed-compare workload.
const FailedCAS = "failed-cas"

// TiKVWorkloads are the TiKV benchmark's workloads, in run order.
var TiKVWorkloads = []string{Create, Update, FailedCAS, Get}

// TiKVOptions configure RunTiKV.
type TiKVOptions struct {
	RPCDelay time.Duration `json:"rpc_delay"`
	Regions  int           `json:"regions"`
	// Workloads to run, of TiKVWorkloads; nil means all.
	Workloads []string `json:"workloads"`
}

// TiKVReport is the outcome of RunTiKV.
type TiKVReport struct {
	RunInfo
	TiKV TiKVOptions `json:"tikv"`
	Rows []*TiKVRow  `json:"rows"`
}

// TiKVRow is one workload at one client count.
type TiKVRow struct {
	Name     string  `json:"name"`
	Workload string  `json:"workload"`
	Clients  int     `json:"clients"`
	Result   *Result `json:"result"`
	// Requests counts the requests the per-op figures are divided by.
	Requests int64 `json:"requests"`
	// RPCsPerOp by type (tikvrpc names, TSO, CommitSecondary).
	RPCsPerOp map[string]float64 `json:"rpcs_per_op"`
	// StepsPerOp is set at one client only.
	StepsPerOp     float64 `json:"steps_per_op,omitempty"`
	WriteTxnsPerOp float64 `json:"write_txns_per_op"`
	// BusiestShare is the share of write transactions the busiest region
	// took part in; BusiestSpace is the Axon key space tag of its keys.
	BusiestShare  float64 `json:"busiest_region_share"`
	BusiestRegion string  `json:"busiest_region,omitempty"`
	BusiestSpace  string  `json:"busiest_region_space,omitempty"`
}

// RunTiKV runs the TiKV round-trip benchmark. It uses o's Binary,
// Clients, Conns, Ops, MaxTime, ValueSize, Keys, OpTimeout, LoadClients,
// LoadBatch, WorkDir, Keep, AxonFlags, CPUProfileDir and Log. On error
// the report holds the rows measured so far.
func RunTiKV(ctx context.Context, o Options, t TiKVOptions) (*TiKVReport, error) {
	o.Systems = []string{"axon"}
	o.Workloads = nil
	if err := o.validate(); err != nil {
		return nil, err
	}
	if t.Workloads == nil {
		t.Workloads = TiKVWorkloads
	}
	for _, w := range t.Workloads {
		if !slices.Contains(TiKVWorkloads, w) {
			return nil, fmt.Errorf("unknown tikv workload %q (want some of %v)", w, TiKVWorkloads)
		}
	}
	if t.RPCDelay < 0 || t.Regions < 1 {
		return nil, fmt.Errorf("tikv rpc delay %v, regions %d: want a delay >= 0 and regions >= 1", t.RPCDelay, t.Regions)
	}
	rep := &TiKVReport{TiKV: t}
	log := rep.begin(o)
	done := func(err error) (*TiKVReport, error) {
		rep.end()
		return rep, err
	}
	work, cleanup, err := workDir(o, "axon-bench-tikv-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	// A long lease: renewals are engine transactions that would count.
	o.AxonFlags = append(slices.Clone(o.AxonFlags), "--store", "tikv-mock",
		"--tikv-rpc-delay", t.RPCDelay.String(), "--tikv-regions", strconv.Itoa(t.Regions), "--leader-lease", "60s")
	r := &runner{o: o, sys: systems["axon"], log: log.With("system", "axon-tikv-mock"), rep: &Report{},
		dir: filepath.Join(work, "axon-tikv-mock"), loaded: map[int]*server{}}
	log.Info("bench tikv", "work-dir", work, "rpc-delay", t.RPCDelay, "regions", t.Regions, "workloads", t.Workloads,
		"clients", o.Clients, "ops", o.Ops, "max-time", o.MaxTime)
	err = r.tikv(ctx, rep, t)
	if cerr := r.cleanup(); err == nil {
		err = cerr
	}
	return done(err)
}

func (r *runner) tikv(ctx context.Context, rep *TiKVReport, t TiKVOptions) error {
	s, clis, err := r.launch(ctx, "main")
	if err != nil {
		return err
	}
	defer closeAll(clis)
	return r.eachTiKVRow(ctx, clis, t.Workloads, func(w string, c int, fn opFunc) error {
		row := &TiKVRow{Name: fmt.Sprintf("%s c=%d", w, c), Workload: w, Clients: c}
		if err := r.tikvRow(ctx, s, clis[:min(len(clis), c)], row, fn); err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, row)
		return nil
	})
}

// eachTiKVRow loads the keys failed-cas and get read, then calls row with
// the op of each of workloads (of TiKVWorkloads, in their order) at each
// client count, after the op's own preload.
func (r *runner) eachTiKVRow(ctx context.Context, clis []*clientv3.Client, workloads []string, row func(w string, c int, fn opFunc) error) error {
	// The keys failed-cas and get read, loaded once: neither changes them.
	var (
		readKey  = podKeys("read")
		readRevs []int64
		err      error
	)
	if slices.Contains(workloads, FailedCAS) || slices.Contains(workloads, Get) {
		r.log.Info("loading", "keys", r.o.Keys)
		if readRevs, err = r.load(ctx, clis, r.o.Keys, r.o.ValueSize, readKey); err != nil {
			return err
		}
	}
	for _, w := range TiKVWorkloads {
		if !slices.Contains(workloads, w) {
			continue
		}
		for _, c := range r.o.Clients {
			fn, err := r.tikvOp(ctx, clis, w, c, readKey, readRevs)
			if err != nil {
				return fmt.Errorf("%s c=%d: %w", w, c, err)
			}
			if err := row(w, c, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// tikvOp returns the op of workload w at c clients, after its preload.
func (r *runner) tikvOp(ctx context.Context, clis []*clientv3.Client, w string, c int, readKey func(int) string, readRevs []int64) (opFunc, error) {
	switch w {
	case Create:
		key := podKeys(fmt.Sprintf("create-c%d", c))
		return func(ctx context.Context, cli *clientv3.Client, wk *worker, i int) (bool, error) {
			k := key(i)
			return cas(ctx, cli, k, 0, clientv3.OpPut(k, wk.value()))
		}, nil
	case Update:
		// Each client owns per keys, the slot-th run of them, and
		// updates them in turn at the revision of its last write.
		per := max(r.o.Keys/c, 1)
		key := podKeys(fmt.Sprintf("update-c%d", c))
		r.log.Info("loading", "keys", per*c)
		revs, err := r.load(ctx, clis, per*c, r.o.ValueSize, key)
		if err != nil {
			return nil, err
		}
		var (
			slots sync.Map // *worker → *owner
			next  atomic.Int64
		)
		type owner struct{ first, n int }
		return func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
			v, ok := slots.Load(wk)
			if !ok {
				v, _ = slots.LoadOrStore(wk, &owner{first: int(next.Add(1)-1) % c * per})
			}
			ow := v.(*owner)
			j := ow.first + ow.n%per
			ow.n++
			k := key(j)
			resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", revs[j])).
				Then(clientv3.OpPut(k, wk.value())).Else(clientv3.OpGet(k)).Commit()
			if err != nil {
				return false, err
			}
			if !resp.Succeeded {
				// Only its owner writes k: this is not contention.
				if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
					revs[j] = kvs[0].ModRevision
				}
				return true, nil
			}
			revs[j] = resp.Header.Revision
			return false, nil
		}, nil
	case FailedCAS:
		return func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
			j := wk.rng.IntN(len(readRevs))
			k := readKey(j)
			lost, err := cas(ctx, cli, k, readRevs[j]-1, clientv3.OpPut(k, wk.value()))
			if err == nil && !lost {
				err = fmt.Errorf("failed-cas: the compare on %s at a stale revision succeeded", k)
			}
			return false, err
		}, nil
	case Get:
		return func(ctx context.Context, cli *clientv3.Client, wk *worker, _ int) (bool, error) {
			k := readKey(wk.rng.IntN(len(readRevs)))
			g, err := cli.Get(ctx, k)
			if err == nil && len(g.Kvs) == 0 {
				err = fmt.Errorf("get: %s is missing", k)
			}
			return false, err
		}, nil
	}
	return nil, fmt.Errorf("not a tikv workload: %s", w)
}

// podKeys names keys like the pods of the mock's default region sample,
// /registry/pods/ns/pod-NNNNNN-tag, the numbers strided so that
// consecutive keys fall in different regions.
func podKeys(tag string) func(int) string {
	const sample, stride = 100_000, 7919 // stride is prime to sample
	return func(i int) string {
		return fmt.Sprintf("/registry/pods/ns/pod-%06d-%s-%d", i*stride%sample, tag, i/sample)
	}
}

// tikvRow times fn and fills row with the figures and the difference of
// the server's counts across it.
func (r *runner) tikvRow(ctx context.Context, s *server, clis []*clientv3.Client, row *TiKVRow, fn opFunc) error {
	r.log.Info("running " + row.Name)
	before, err := scrapeTiKV(ctx, s.metrics)
	if err != nil {
		return err
	}
	wait := r.profile(s, "tikv-"+row.Name, r.o.MaxTime)
	res, err := r.timed(ctx, s, clis, row.Clients, r.o.Ops, r.o.MaxTime, r.o.OpTimeout, fn)
	wait()
	if err != nil {
		return fmt.Errorf("%s: %w", row.Name, err)
	}
	after, err := scrapeTiKV(ctx, s.metrics)
	if err != nil {
		return err
	}
	row.Result = res
	row.Requests = res.Ops + res.Conflicts + res.Errors + res.CutShort
	d := after.minus(before)
	n := float64(row.Requests)
	row.RPCsPerOp = map[string]float64{}
	for typ, v := range d.rpcs {
		if v > 0 {
			row.RPCsPerOp[typ] = div(v, n)
		}
	}
	if row.Clients == 1 {
		row.StepsPerOp = div(d.steps, n)
	}
	row.WriteTxnsPerOp = div(d.txns, n)
	for id, reg := range d.regions {
		if share := div(reg.txns, d.txns); share > row.BusiestShare || share == row.BusiestShare && id < row.BusiestRegion {
			row.BusiestShare, row.BusiestRegion, row.BusiestSpace = share, id, reg.space
		}
	}
	args := []any{"ops", res.Ops, "ops/s", round(res.OpsPerSec), "p50", fmtMs(res.P50Ms), "p99", fmtMs(res.P99Ms),
		"rpcs/op", round(sumValues(row.RPCsPerOp)), "steps/op", round(row.StepsPerOp), "write-txns/op", round(row.WriteTxnsPerOp),
		"busiest-region-share", round(row.BusiestShare), "busiest-space", row.BusiestSpace}
	if res.Conflicts+res.Errors > 0 {
		args = append(args, "conflicts", res.Conflicts, "errors", res.Errors, "first-error", res.FirstError)
	}
	r.log.Info(row.Name, args...)
	return nil
}

// tikvCounts are the server's counts at one moment.
type tikvCounts struct {
	rpcs    map[string]float64
	steps   float64
	txns    float64
	regions map[string]regionCount // by region ID
}

type regionCount struct {
	txns  float64
	space string
}

func (a tikvCounts) minus(b tikvCounts) tikvCounts {
	d := tikvCounts{rpcs: map[string]float64{}, steps: a.steps - b.steps, txns: a.txns - b.txns, regions: map[string]regionCount{}}
	for k, v := range a.rpcs {
		d.rpcs[k] = v - b.rpcs[k]
	}
	for k, v := range a.regions {
		d.regions[k] = regionCount{txns: v.txns - b.regions[k].txns, space: v.space}
	}
	return d
}

var promLabel = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrapeTiKV reads the counts from the metrics listener at addr.
func scrapeTiKV(ctx context.Context, addr string) (tikvCounts, error) {
	c := tikvCounts{rpcs: map[string]float64{}, regions: map[string]regionCount{}}
	err := scrape(ctx, "http://"+addr+tikv.TraceMetricsPath, func(r io.Reader) error { return parseTiKVCounts(r, &c) })
	if err != nil {
		return c, fmt.Errorf("scrape tikv counts: %w (is the server's store tikv-mock?)", err)
	}
	return c, nil
}

// scrape GETs url and hands the body to parse.
func scrape(ctx context.Context, url string, parse func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parse(resp.Body)
}

// parseTiKVCounts reads the Prometheus text lines of the tikv-mock
// counters into c.
func parseTiKVCounts(r io.Reader, c *tikvCounts) error {
	return parseProm(r, func(name string, l map[string]string, v float64) {
		switch name {
		case tikv.MetricRPCs:
			c.rpcs[l["type"]] = v
		case tikv.MetricSteps:
			c.steps = v
		case tikv.MetricWriteTxns:
			c.txns = v
		case tikv.MetricRegionWriteTxns:
			c.regions[l["region"]] = regionCount{txns: v, space: l["space"]}
		}
	})
}

// parseProm calls sample with each sample of the Prometheus text format
// r holds: its metric name, labels and value.
func parseProm(r io.Reader, sample func(name string, labels map[string]string, v float64)) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return fmt.Errorf("metrics: malformed line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return fmt.Errorf("metrics: %q: %w", line, err)
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		l := map[string]string{}
		for _, m := range promLabel.FindAllStringSubmatch(labels, -1) {
			l[m[1]] = m[2]
		}
		sample(name, l, v)
	}
	return sc.Err()
}

func sumValues(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// rpcOrder is the column order of the RPC types a table shows; others
// follow by name.
var rpcOrder = []string{"TSO", "Get", "BatchGet", "Scan", "Prewrite", "Commit", "CommitSecondary"}

// rpcTypes lists the call types that have a count in any of counts,
// less those skip names (nil: none), in rpcOrder, the others after them
// by name.
func rpcTypes(counts []map[string]float64, skip func(string) bool) []string {
	var types []string
	for _, c := range counts {
		for typ := range c {
			if (skip == nil || !skip(typ)) && !slices.Contains(types, typ) {
				types = append(types, typ)
			}
		}
	}
	slices.SortFunc(types, func(a, b string) int {
		ia, ib := slices.Index(rpcOrder, a), slices.Index(rpcOrder, b)
		if ia < 0 {
			ia = len(rpcOrder)
		}
		if ib < 0 {
			ib = len(rpcOrder)
		}
		return cmp.Or(cmp.Compare(ia, ib), cmp.Compare(a, b))
	})
	return types
}

// WriteTable writes the report as one table, a row per workload and
// client count.
func (rep *TiKVReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "axon over mock TiKV: %v added to every TiKV RPC and PD timestamp call, %d regions per key space\n",
		rep.TiKV.RPCDelay, rep.TiKV.Regions)
	var counts []map[string]float64
	for _, r := range rep.Rows {
		counts = append(counts, r.RPCsPerOp)
	}
	types := rpcTypes(counts, nil)
	var names []string
	for _, r := range rep.Rows {
		names = append(names, r.Name)
	}
	tw, pad, line := newTable(w, names)
	h := append([]string{pad("workload"), "ops/s", "p50", "p99", "steps/op", "calls/op"}, types...)
	line(append(h, "wtxn/op", "busiest region"))
	for _, r := range rep.Rows {
		res := r.Result
		cells := []string{pad(r.Name), fmtRate(res.OpsPerSec), fmtLat(res.P50Ms, res.LatencySamples), fmtLat(res.P99Ms, res.LatencySamples),
			fmtPerOp(r.StepsPerOp), fmtPerOp(sumValues(r.RPCsPerOp))}
		for _, typ := range types {
			cells = append(cells, fmtPerOp(r.RPCsPerOp[typ]))
		}
		busiest := "-"
		if r.WriteTxnsPerOp >= 0.1 { // else only background transactions
			busiest = fmt.Sprintf("%.0f%% (%s)", 100*r.BusiestShare, r.BusiestSpace)
		}
		line(append(cells, fmtPerOp(r.WriteTxnsPerOp), busiest))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, `
One op: a request (create = Txn If ModRevision==0 Then Put Else Get on a new key; update = the same
Txn at the revision of the client's last write to its own key; failed-cas = the same Txn at a stale
revision, the compare fails; get = linearizable Get). Per-op figures divide the server's counts by the
requests sent. steps/op (1 client only): periods with a TiKV RPC or PD timestamp call of the server in
flight, i.e. sequential round trips. calls/op: all RPCs and timestamp calls; TSO = PD timestamps;
CommitSecondary = commits of secondary keys, sent in the background after the primary's commit (no
step). wtxn/op: write transactions (with a Prewrite). busiest region: the share of write transactions
the busiest region took part in, and its key space (L latest, H history, R or S revision records, M
meta); shown where wtxn/op >= 0.1. The server's background work (leadership and member renewals,
client-go's timestamp and safe-ts refreshes) counts too: the <0.01 figures.`)
	for _, r := range rep.Rows {
		for _, n := range r.Result.notes(r.Name) {
			fmt.Fprintln(w, "note:", n)
		}
	}
	return nil
}

func fmtPerOp(f float64) string {
	switch {
	case f == 0:
		return "-"
	case f < 0.005:
		return "<0.01"
	}
	if math.Abs(f) >= 100 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.2f", f)
}
