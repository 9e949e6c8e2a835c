package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

var perSystem = []string{"ops/s", "p50", "p99", "tries/op", "srvCPU/1k", "ops/srvCPU-s", "genCPU/1k", "peakRSS", "RSS", "disk/op"}

// WriteTable writes the report as one table: a row per workload, a group
// of columns per system and, when both ran, the Axon/etcd ratios.
func (rep *Report) WriteTable(w io.Writer) error {
	runs := 0
	for _, r := range rep.Rows {
		for _, rs := range r.Runs {
			runs = max(runs, len(rs))
		}
	}
	fmt.Fprintf(w, "disk: 4 KiB write + fdatasync p50 %s, p99 %s (%d samples in the work dir); %d run(s) per system, alternating; each system's figures are its median run's (by ops/s)",
		fmtMs(rep.Fsync.P50Ms), fmtMs(rep.Fsync.P99Ms), rep.Fsync.Samples, runs)
	if runs > 1 {
		fmt.Fprint(w, ", each ratio the median of the runs' ratios [lowest-highest]")
	}
	fmt.Fprintln(w)
	ratios := false
	var names []string
	for _, r := range rep.Rows {
		ratios = ratios || r.Ratio != nil
		names = append(names, r.Name)
	}
	tw, pad, line := newTable(w, names)
	h1, h2 := []string{pad("")}, []string{pad("workload")}
	for _, s := range rep.Systems {
		for i, c := range perSystem {
			top := ""
			if i == 0 {
				top = s
			}
			h1 = append(h1, top)
			h2 = append(h2, c)
		}
	}
	if ratios {
		h1 = append(h1, "axon/etcd", "", "", "", "")
		h2 = append(h2, "ops/s", "p50", "p99", "ops/srvCPU-s", "peakRSS")
	}
	line(h1)
	line(h2)
	for _, r := range rep.Rows {
		cells := []string{pad(r.Name)}
		for _, s := range rep.Systems {
			res := r.Results[s]
			if res == nil {
				cells = append(cells, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-")
				continue
			}
			cells = append(cells, fmtRate(res.OpsPerSec), fmtLat(res.P50Ms, res.LatencySamples), fmtLat(res.P99Ms, res.LatencySamples),
				fmtTries(res.AttemptsPerOp), fmtSec(res.ServerCPUSecPer1kOps), fmtRate(res.OpsPerServerCPUSec), fmtSec(res.ClientCPUSecPer1kOps),
				fmtBytes(res.ServerPeakRSSBytes), fmtBytes(res.ServerRSSBytes), fmtSmallBytes(res.ServerWriteBytesPerOp))
		}
		if ratios {
			if q := r.Ratio; q != nil {
				cell := func(f func(Ratio) float64) string {
					if r.Spread == nil || f(*q) == 0 {
						return fmtRatio(f(*q))
					}
					return fmt.Sprintf("%s [%.2f-%.2f]", fmtRatio(f(*q)), f(r.Spread[0]), f(r.Spread[1]))
				}
				cells = append(cells, cell(func(q Ratio) float64 { return q.OpsPerSec }), cell(func(q Ratio) float64 { return q.P50 }),
					cell(func(q Ratio) float64 { return q.P99 }), cell(func(q Ratio) float64 { return q.OpsPerServerCPUSec }),
					cell(func(q Ratio) float64 { return q.ServerPeakRSS }))
			} else {
				cells = append(cells, "-", "-", "-", "-", "-")
			}
		}
		line(cells)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, r := range rep.Rows {
		for _, s := range rep.Systems {
			for i, res := range r.Runs[s] {
				name := r.Name + " " + s
				if len(r.Runs[s]) > 1 {
					name += fmt.Sprintf(" run %d", i+1)
				}
				notes = append(notes, res.notes(name)...)
			}
		}
	}
	fmt.Fprintln(w, `
One op: a request (create, update = Get + CAS txn, delete, get; a lost compare is a conflict, not
an op); a full paginated list (list); an event delivered to one watcher (watch; p50/p99 = write ack
to delivery, 0 if the event came first); an increment of the one key all clients share (hotkey:
Get + CAS txn until one applies; p50/p99 = first Get to that txn; tries/op = Get+txn rounds per
increment; a failed or timed-out request is an error and the increment goes on); a restart
(p50/p99 = process start to first linearizable Get); a key loaded in batches (memory). srvCPU/1k,
genCPU/1k: CPU seconds per 1,000 ops of the server, of this load generator. peakRSS: the server's
VmHWM so far; RSS: its VmRSS at the end of the row; disk/op: bytes the server sent to the disk per
op (write_bytes of /proc/<pid>/io). Ratios: Axon's over etcd's.`)
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// notes are what the table says under it about one result: errors and
// conflicts, a violation, and latencies that leave out more than 1% of
// the ops because the time bound cut them short.
func (res *Result) notes(name string) []string {
	var ns []string
	if res.Conflicts+res.Errors > 0 {
		n := fmt.Sprintf("%s: %d conflicts, %d errors", name, res.Conflicts, res.Errors)
		if res.FirstError != "" {
			n += " (first: " + res.FirstError + ")"
		}
		ns = append(ns, n)
	}
	if res.Violation != "" {
		ns = append(ns, name+": VIOLATION: "+res.Violation)
	}
	if res.CutShort*100 > res.Ops {
		ns = append(ns, fmt.Sprintf("%s: %d ops cut short by the time bound, %d finished: p50/p99 leave out the slowest",
			name, res.CutShort, res.Ops))
	}
	return ns
}

func fmtRate(f float64) string {
	switch {
	case f == 0:
		return "-"
	case f >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case f >= 1e4:
		return fmt.Sprintf("%.1fk", f/1e3)
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 1:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.3f", f)
}

// fmtLat is fmtMs, but 0 from real samples shows as 0.
func fmtLat(ms float64, samples int64) string {
	if ms == 0 && samples > 0 {
		return "0"
	}
	return fmtMs(ms)
}

func fmtMs(ms float64) string {
	switch {
	case ms == 0:
		return "-"
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0fms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fµs", ms*1000)
}

func fmtSec(s float64) string {
	switch {
	case s == 0:
		return "-"
	case s >= 100:
		return fmt.Sprintf("%.0fs", s)
	case s >= 1:
		return fmt.Sprintf("%.2fs", s)
	}
	return fmt.Sprintf("%.3fs", s)
}

func fmtBytes(b int64) string {
	switch {
	case b == 0:
		return "-"
	case b >= 1<<30:
		return fmt.Sprintf("%.2fG", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.0fM", float64(b)/(1<<20))
}

// fmtSmallBytes renders a per-op byte count.
func fmtSmallBytes(b float64) string {
	switch {
	case b <= 0:
		return "-"
	case b >= 1<<20:
		return fmt.Sprintf("%.1fM", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fK", b/(1<<10))
	}
	return fmt.Sprintf("%.0fB", b)
}

func fmtTries(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

func fmtRatio(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", f)
}

// newTable is a text table of right-aligned numbers whose first column,
// the row names, is padded to read left-aligned: tw to flush, pad for a
// name cell, line to write a row.
func newTable(w io.Writer, names []string) (tw *tabwriter.Writer, pad func(string) string, line func([]string)) {
	width := len("workload")
	for _, n := range names {
		width = max(width, len(n))
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	pad = func(s string) string { return s + strings.Repeat(" ", width-len(s)) }
	line = func(cells []string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	return tw, pad, line
}
