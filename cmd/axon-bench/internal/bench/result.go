package bench

import (
	"cmp"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/axon-kv/axon/internal/fsutil"
)

// Result is one system's measurement of one row.
type Result struct {
	Ops        int64  `json:"ops"`
	Conflicts  int64  `json:"conflicts"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// CutShort counts ops the time bound stopped before they finished;
	// their latencies are in no percentile.
	CutShort int64 `json:"cut_short,omitempty"`

	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// LatencySamples is how many latencies p50 and p99 come from.
	LatencySamples int64 `json:"latency_samples"`

	ServerCPUSec         float64 `json:"server_cpu_sec"`
	ServerCPUSecPer1kOps float64 `json:"server_cpu_sec_per_1k_ops"`
	OpsPerServerCPUSec   float64 `json:"ops_per_server_cpu_sec"`
	ClientCPUSec         float64 `json:"client_cpu_sec"`
	ClientCPUSecPer1kOps float64 `json:"client_cpu_sec_per_1k_ops"`
	ServerPeakRSSBytes   int64   `json:"server_peak_rss_bytes"`
	// ServerRSSBytes is the server's resident set at the end of the row.
	ServerRSSBytes int64 `json:"server_rss_bytes"`
	// ServerWriteBytesPerOp is what the server sent to the disk per op
	// (write_bytes of /proc/<pid>/io: page-cache pages it dirtied, again
	// each time one is dirtied after being written back).
	ServerWriteBytesPerOp float64 `json:"server_write_bytes_per_op"`
	// Watch only: the creates/s the writer reached, and delivery latency
	// counted from sending the write rather than from its ack.
	WriteRate     float64 `json:"write_rate,omitempty"`
	FromSendP50Ms float64 `json:"from_send_p50_ms,omitempty"`
	FromSendP99Ms float64 `json:"from_send_p99_ms,omitempty"`
	// Hotkey only: Get+Txn rounds per increment, and what the check of
	// the counter after the row found wrong (a lost update), if anything.
	AttemptsPerOp float64 `json:"attempts_per_op,omitempty"`
	Violation     string  `json:"violation,omitempty"`
}

// Row is one workload (at one client count or size) across systems.
type Row struct {
	Name     string `json:"name"`
	Workload string `json:"workload"`
	Clients  int    `json:"clients,omitempty"`
	Size     int    `json:"size,omitempty"` // objects listed, watchers, or keys stored
	// Unit is what one op is in this row.
	Unit string `json:"unit"`
	// Runs holds every run's result per system, in run order; Results
	// the run with the median ops/s.
	Runs    map[string][]*Result `json:"runs"`
	Results map[string]*Result   `json:"results"`
	// Ratio is Axon's figure over etcd's, when both ran: the median of
	// the runs' ratios (run i of Axon over run i of etcd); 0 where
	// undefined. Spread is the lowest and highest of them.
	Ratio  *Ratio    `json:"ratio_axon_etcd,omitempty"`
	Spread *[2]Ratio `json:"ratio_spread,omitempty"`
}

// Ratio holds Axon/etcd ratios of a row.
type Ratio struct {
	OpsPerSec          float64 `json:"ops_per_sec"`
	P50                float64 `json:"p50"`
	P99                float64 `json:"p99"`
	OpsPerServerCPUSec float64 `json:"ops_per_server_cpu_sec"`
	ServerPeakRSS      float64 `json:"server_peak_rss"`
}

// RunInfo is what every report says of its run: when, for how long, on
// what, with which options.
type RunInfo struct {
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	Options   Options   `json:"options"`
}

// begin starts the report of a run with options o, and returns its
// logger (o.Log, or one that drops everything).
func (r *RunInfo) begin(o Options) *slog.Logger {
	*r = RunInfo{Started: time.Now(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Options: o}
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// end records how long the run took.
func (r *RunInfo) end() { r.Seconds = time.Since(r.Started).Seconds() }

// Report is the outcome of a run.
type Report struct {
	RunInfo
	Systems []string `json:"systems"`
	Rows    []*Row   `json:"rows"`
	// Fsync is the work dir's disk measured before the run: 4 KiB
	// written and fdatasync'ed, as a WAL commit does.
	Fsync FsyncLatency `json:"fsync"`
}

// FsyncLatency is the latency of one small synchronous write.
type FsyncLatency struct {
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

func (rep *Report) row(name, workload string, clients, size int, unit string) *Row {
	for _, r := range rep.Rows {
		if r.Name == name {
			return r
		}
	}
	r := &Row{Name: name, Workload: workload, Clients: clients, Size: size, Unit: unit, Runs: map[string][]*Result{}, Results: map[string]*Result{}}
	rep.Rows = append(rep.Rows, r)
	return r
}

// finish drops rows a failed or interrupted run left empty, picks each
// system's median run and computes the ratios and their spread.
func (rep *Report) finish() {
	rep.Rows = slices.DeleteFunc(rep.Rows, func(r *Row) bool { return len(r.Runs) == 0 })
	for _, r := range rep.Rows {
		for s, runs := range r.Runs {
			r.Results[s] = medianRun(runs)
		}
		as, es := r.Runs["axon"], r.Runs["etcd"]
		n := min(len(as), len(es))
		if n == 0 {
			continue
		}
		per := make([]Ratio, n)
		for i := range n {
			per[i] = ratio(as[i], es[i])
		}
		field := func(f func(Ratio) float64) (med, lo, hi float64) {
			vs := make([]float64, n)
			for i, q := range per {
				vs[i] = f(q)
			}
			slices.Sort(vs)
			return vs[(n-1)/2], vs[0], vs[n-1]
		}
		var med, lo, hi Ratio
		med.OpsPerSec, lo.OpsPerSec, hi.OpsPerSec = field(func(q Ratio) float64 { return q.OpsPerSec })
		med.P50, lo.P50, hi.P50 = field(func(q Ratio) float64 { return q.P50 })
		med.P99, lo.P99, hi.P99 = field(func(q Ratio) float64 { return q.P99 })
		med.OpsPerServerCPUSec, lo.OpsPerServerCPUSec, hi.OpsPerServerCPUSec = field(func(q Ratio) float64 { return q.OpsPerServerCPUSec })
		med.ServerPeakRSS, lo.ServerPeakRSS, hi.ServerPeakRSS = field(func(q Ratio) float64 { return q.ServerPeakRSS })
		r.Ratio = &med
		if n > 1 {
			r.Spread = &[2]Ratio{lo, hi}
		}
	}
}

// ratio is a's figures over e's.
func ratio(a, e *Result) Ratio {
	return Ratio{
		OpsPerSec:          div(a.OpsPerSec, e.OpsPerSec),
		P50:                div(a.P50Ms, e.P50Ms),
		P99:                div(a.P99Ms, e.P99Ms),
		OpsPerServerCPUSec: div(a.OpsPerServerCPUSec, e.OpsPerServerCPUSec),
		ServerPeakRSS:      div(float64(a.ServerPeakRSSBytes), float64(e.ServerPeakRSSBytes)),
	}
}

// medianRun is the run with the median ops/s (the lower middle one of an
// even count).
func medianRun(runs []*Result) *Result {
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b *Result) int { return cmp.Compare(a.OpsPerSec, b.OpsPerSec) })
	return sorted[(len(sorted)-1)/2]
}

func div(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

// usage is the CPU both sides used from a start point. The server side
// is one process or several (the instances of a cluster), summed.
type usage struct {
	at           time.Time
	server, self float64
	written      int64
	pids         []int
}

func startUsage(pids ...int) (usage, error) {
	u := usage{at: time.Now(), self: selfCPU(), pids: pids}
	for _, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return usage{}, err
		}
		w, err := fsutil.Written(pid)
		if err != nil {
			return usage{}, err
		}
		u.server += c
		u.written += w
	}
	return u, nil
}

// finish fills r's rates and CPU figures from u to now; r.Ops must be set.
// Of several processes, the peak RSS is the sum of each one's peak.
func (u usage) finish(r *Result) error {
	elapsed := time.Since(u.at)
	self := selfCPU()
	var (
		c            float64
		w            int64
		peak, resNow int64
	)
	for _, pid := range u.pids {
		cpu, err := procCPU(pid)
		if err != nil {
			return err
		}
		hwm, err := procPeakRSS(pid)
		if err != nil {
			return err
		}
		rss, err := procRSS(pid)
		if err != nil {
			return err
		}
		written, err := fsutil.Written(pid)
		if err != nil {
			return err
		}
		c, peak, resNow, w = c+cpu, peak+hwm, resNow+rss, w+written
	}
	r.ServerRSSBytes = resNow
	r.ServerWriteBytesPerOp = div(float64(w-u.written), float64(r.Ops))
	r.Seconds = elapsed.Seconds()
	r.OpsPerSec = div(float64(r.Ops), r.Seconds)
	r.ServerCPUSec = c - u.server
	r.ClientCPUSec = self - u.self
	r.ServerCPUSecPer1kOps = div(r.ServerCPUSec*1000, float64(r.Ops))
	r.ClientCPUSecPer1kOps = div(r.ClientCPUSec*1000, float64(r.Ops))
	r.OpsPerServerCPUSec = div(float64(r.Ops), r.ServerCPUSec)
	r.ServerPeakRSSBytes = peak
	return nil
}

// setLatency stores the p50 and p99 of samples.
func (r *Result) setLatency(samples []time.Duration) {
	r.P50Ms, r.P99Ms = p50p99(samples)
	r.LatencySamples = int64(len(samples))
}

// Latency histograms span 1 µs to 1 hour at 3 significant digits: a
// percentile is off by at most 0.1 %, in 200 KB whatever the count.
const (
	histMin    = int64(time.Microsecond)
	histMax    = int64(time.Hour)
	histDigits = 3
)

// p50p99 returns the p50 and p99 of samples in milliseconds (0 for none).
func p50p99(samples []time.Duration) (float64, float64) {
	if len(samples) == 0 {
		return 0, 0
	}
	h := hdrhistogram.New(histMin, histMax, histDigits)
	hi := samples[0]
	for _, d := range samples {
		// Outside the range: clamped, so that no sample is dropped.
		h.RecordValue(min(max(int64(d), histMin), histMax))
		hi = max(hi, d)
	}
	// A bucket answers with its highest value: never above the largest
	// sample, which callers compare percentiles with.
	at := func(q float64) float64 { return ms(min(time.Duration(h.ValueAtQuantile(q)), hi)) }
	return at(50), at(99)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
