package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// metric is one line of a scenario's table: a number per system (ratio
// Axon/etcd when both are non-zero), or a text where a number says
// nothing (yes/no, errors by code).
type metric struct {
	name string
	val  func(sys string) float64
	show func(v float64) string
	text func(sys string) string // instead of val
}

// WriteTable writes a table per scenario: a line per metric, a column per
// system and the ratio Axon/etcd.
func (rep *ScaleReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "disk: 4 KiB write + fdatasync p50 %s, p99 %s; systems one after the other on this machine\n",
		fmtMs(rep.Fsync.P50Ms), fmtMs(rep.Fsync.P99Ms))
	o := rep.Options.Scale
	if len(rep.Lists) > 0 {
		fmt.Fprintf(w, "\nlists: %s objects of %d B in one prefix; %d clients each list it %d times in one Range (no limit) while %d clients create; %s; bound %v after %v of writes alone\n",
			count(o.ListObjects), o.ListObjectSize, o.Listers, o.ListRounds, o.Writers, inCgroup(o.MemoryLimit), o.MaxTime, o.Before)
		if err := rep.table(w, listsMetrics(rep.Lists)); err != nil {
			return err
		}
	}
	if len(rep.Storm) > 0 {
		where := "in the namespaces"
		if o.StormUnwatched {
			where = "outside them (a control: the watchers get no event)"
		}
		fmt.Fprintf(w, "\nstorm: %d clients connect at once, each lists its namespace of %d objects and watches it from there, while %d clients create %s; %s; bound %v; writes %v before, %v after all are in\n",
			o.StormClients, o.StormObjects, o.Writers, where, inCgroup(o.MemoryLimit), o.MaxTime, o.Before, o.StormAfter)
		if err := rep.table(w, stormMetrics(rep.Storm)); err != nil {
			return err
		}
	}
	if len(rep.Churn) > 0 {
		watcher := "no watcher"
		if o.ChurnWatch {
			watcher = fmt.Sprintf("a kube-apiserver-like watcher reads every event with prev_kv (one watch on the whole prefix) and checks those of 1 write in %d", sampleEvery)
		}
		fmt.Fprintf(w, "\nchurn: %s objects of %d B, %d clients updating 60%%, deleting 20%%, creating 20%% by CAS for %v, a compaction every %v to the revision of the one before; then a defragmentation while they go on; %s; %s; both systems' quota %s\n",
			count(o.ChurnObjects), o.ListObjectSize, o.Writers, o.ChurnTime, o.ChurnWindow, watcher, inCgroup(o.MemoryLimit), fmtBytes(o.Quota))
		if err := rep.table(w, churnMetrics(rep.Churn, o.ChurnWatch)); err != nil {
			return err
		}
	}
	if len(rep.Keys) > 0 {
		fmt.Fprintf(w, "\nkeys: objects of %d B in namespaces of %s, loaded to %v keys in turn; at each: %d point gets, %d paginated lists of a namespace, a physical compaction, a restart; %s; etcd's quota %s\n",
			o.ListObjectSize, count(o.KeysNamespace), o.KeysCounts, o.KeysGets, o.KeysLists, inCgroup(o.KeysMemoryLimit), fmtBytes(o.Quota))
		if err := rep.table(w, keysMetrics(rep.Keys, o.KeysCounts)); err != nil {
			return err
		}
	}
	return nil
}

func (rep *ScaleReport) table(w io.Writer, ms []metric) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := append([]string{"metric"}, rep.Systems...)
	both := len(rep.Systems) == 2 && rep.Systems[0] == "axon" && rep.Systems[1] == "etcd"
	if both {
		head = append(head, "axon/etcd")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, m := range ms {
		cells := []string{m.name}
		for _, s := range rep.Systems {
			switch {
			case m.text != nil:
				cells = append(cells, m.text(s))
			default:
				cells = append(cells, m.show(m.val(s)))
			}
		}
		if both {
			q := "-"
			if m.val != nil {
				q = fmtRatio(div(m.val("axon"), m.val("etcd")))
			}
			cells = append(cells, q)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

// num reads a figure of each system's result; 0 for one that did not run.
func num[T any](res map[string]*T, f func(*T) float64) func(string) float64 {
	return func(s string) float64 {
		if r := res[s]; r != nil {
			return f(r)
		}
		return 0
	}
}

// text renders a non-numeric line; "-" for a system that did not run.
func text[T any](res map[string]*T, f func(*T) string) func(string) string {
	return func(s string) string {
		if r := res[s]; r != nil {
			return f(r)
		}
		return "-"
	}
}

func showBytes(v float64) string { return fmtBytes(int64(v)) }

// fateMetrics are the lines every cgroup scenario starts with.
func fateMetrics[T any](res map[string]*T, f func(*T) fate) []metric {
	return []metric{
		{name: "OOM-killed", text: text(res, func(r *T) string { return yesNo(f(r).OOMKills > 0) })},
		{name: "server exited", text: text(res, func(r *T) string { return orDash(f(r).Exited) })},
		{name: "peak RSS", val: num(res, func(r *T) float64 { return float64(f(r).PeakRSSBytes) }), show: showBytes},
		{name: "cgroup peak (with page cache)", val: num(res, func(r *T) float64 { return float64(f(r).CgroupPeakBytes) }), show: showBytes},
	}
}

func listsMetrics(res map[string]*ListsResult) []metric {
	type R = ListsResult
	return append(fateMetrics(res, func(r *R) fate { return r.fate }), []metric{
		{name: "lists done", text: text(res, func(r *R) string { return fmt.Sprintf("%d of %d", r.ListsDone, r.ListsWanted) })},
		{name: "lists failed", text: text(res, func(r *R) string { return withCodes(r.ListsFailed, r.ListErrors) })},
		{name: "refusals retried", text: text(res, func(r *R) string { return withCodes(r.ListsRefused, r.ListRefusals) })},
		{name: "lists cut by the time bound", text: text(res, func(r *R) string { return fmt.Sprint(r.ListsUnfinished) })},
		{name: "lists not begun (server gone)", text: text(res, func(r *R) string { return fmt.Sprint(r.ListsNotRun) })},
		{name: "list p50", val: num(res, func(r *R) float64 { return r.ListP50Ms }), show: fmtMs},
		{name: "list p99", val: num(res, func(r *R) float64 { return r.ListP99Ms }), show: fmtMs},
		{name: "write p99 before the lists", val: num(res, func(r *R) float64 { return r.WriteP99BeforeMs }), show: fmtMs},
		{name: "writes during the lists", val: num(res, func(r *R) float64 { return float64(r.Writes) }), show: fmtCount},
		{name: "write p50 during the lists", val: num(res, func(r *R) float64 { return r.WriteP50Ms }), show: fmtMs},
		{name: "write p99 during the lists", val: num(res, func(r *R) float64 { return r.WriteP99Ms }), show: fmtMs},
		{name: "write errors", text: text(res, func(r *R) string { return withCodes(r.WriteErrors, r.WriteErrorCodes) })},
		{name: "server CPU-s during the lists", val: num(res, func(r *R) float64 { return r.ServerCPUSec }), show: fmtSec},
		{name: "time of the lists", val: num(res, func(r *R) float64 { return r.Seconds }), show: fmtSec},
	}...)
}

func stormMetrics(res map[string]*StormResult) []metric {
	type R = StormResult
	return append(fateMetrics(res, func(r *R) fate { return r.fate }), []metric{
		{name: "clients listing and watching", text: text(res, func(r *R) string { return fmt.Sprintf("%d of %d", r.Ready, r.Clients) })},
		{name: "time until the last was", val: num(res, func(r *R) float64 { return r.ReadySeconds }), show: fmtSec},
		{name: "storm errors", text: text(res, func(r *R) string { return withCodes(r.ErrorsTotal, r.Errors) })},
		{name: "write p99 before the storm", val: num(res, func(r *R) float64 { return r.WriteP99BeforeMs }), show: fmtMs},
		{name: "worst 1 s write p99 after", val: num(res, func(r *R) float64 { return r.WorstWindowP99Ms }), show: fmtMs},
		{name: "write p99 back within 1.5x after", text: text(res, func(r *R) string {
			if !r.Recovered {
				return fmt.Sprintf("not by the end (bad until %s)", fmtSec(r.RecoverySeconds))
			}
			return fmtSec(r.RecoverySeconds)
		})},
		{name: "write p99 over the last 10 s", val: num(res, func(r *R) float64 { return r.SettledP99Ms }), show: fmtMs},
		{name: "writes from the storm on", val: num(res, func(r *R) float64 { return float64(r.Writes) }), show: fmtCount},
		{name: "write errors", text: text(res, func(r *R) string { return withCodes(r.WriteErrors, r.WriteErrorCodes) })},
		{name: "watchers with every event", text: text(res, func(r *R) string { return fmt.Sprintf("%d of %d", r.WatchersComplete, r.Clients) })},
		{name: "events missing", text: text(res, func(r *R) string { return fmt.Sprintf("%d of %d", r.EventsMissing, r.EventsExpected) })},
	}...)
}

func churnMetrics(res map[string]*ChurnResult, watch bool) []metric {
	type R = ChurnResult
	ms := fateMetrics(res, func(r *R) fate { return r.fate })
	n := 0
	for _, r := range res {
		n = max(n, len(r.Windows))
	}
	window := func(i int, f func(ChurnWindow) float64) func(string) float64 {
		return num(res, func(r *R) float64 {
			if i < len(r.Windows) {
				return f(r.Windows[i])
			}
			return 0
		})
	}
	for i := range n {
		ms = append(ms,
			metric{name: fmt.Sprintf("window %d: write p99", i+1), val: window(i, func(w ChurnWindow) float64 { return w.P99Ms }), show: fmtMs},
			metric{name: fmt.Sprintf("window %d: longest write", i+1), val: window(i, func(w ChurnWindow) float64 { return w.MaxMs }), show: fmtMs},
			metric{name: fmt.Sprintf("window %d: server CPU per 1k writes", i+1), val: window(i, func(w ChurnWindow) float64 { return w.CPUPer1k }), show: fmtSec},
			metric{name: fmt.Sprintf("window %d: writes", i+1), val: window(i, func(w ChurnWindow) float64 { return float64(w.Ops) }), show: fmtCount},
			metric{name: fmt.Sprintf("window %d: disk after compaction", i+1), val: window(i, func(w ChurnWindow) float64 { return float64(w.DiskBytes) }), show: showBytes},
			metric{name: fmt.Sprintf("window %d: compaction took", i+1), val: window(i, func(w ChurnWindow) float64 { return w.CompactMs }), show: fmtMs})
		if watch {
			ms = append(ms, metric{name: fmt.Sprintf("window %d: watcher events", i+1), val: window(i, func(w ChurnWindow) float64 { return float64(w.WatchEvents) }), show: fmtCount})
		}
	}
	ms = append(ms, []metric{
		{name: "last window's p99 / first's", val: num(res, func(r *R) float64 { return r.LastOverFst }), show: fmtRatio},
		{name: "churn errors", text: text(res, func(r *R) string { return withCodes(r.Errors, r.ErrorCodes) })},
		{name: "defragmentation took", val: num(res, func(r *R) float64 { return r.DefragSeconds }), show: fmtSec},
		{name: "defragmentation error", text: text(res, func(r *R) string { return orDash(r.DefragError) })},
		{name: "writes during it", val: num(res, func(r *R) float64 { return float64(r.DefragOps) }), show: fmtCount},
		{name: "write p99 during it", val: num(res, func(r *R) float64 { return r.DefragP99Ms }), show: fmtMs},
		{name: "write errors during it", text: text(res, func(r *R) string { return withCodes(r.DefragErrors, r.DefragErrorCodes) })},
		{name: "longest write overlapping it", val: num(res, func(r *R) float64 { return r.LongestStallMs }), show: fmtMs},
		{name: "disk after it", val: num(res, func(r *R) float64 { return float64(r.DiskBytesAfter) }), show: showBytes},
	}...)
	if watch {
		ms = append(ms, watchMetrics(res)...)
	}
	return ms
}

// watchMetrics are the churn watcher's lines.
func watchMetrics(res map[string]*ChurnResult) []metric {
	type W = ChurnWatch
	w := map[string]*W{}
	for s, r := range res {
		w[s] = r.Watch
	}
	n := func(f func(*W) int64) func(string) float64 {
		return num(w, func(r *W) float64 { return float64(f(r)) })
	}
	return []metric{
		{name: "watcher: error", text: text(w, func(r *W) string { return orDash(r.Error) })},
		{name: "watcher: events received", val: n(func(r *W) int64 { return r.Events }), show: fmtCount},
		{name: "watcher: writes acked", val: n(func(r *W) int64 { return r.AckedWrites }), show: fmtCount},
		{name: "watcher: writes of unknown outcome", val: n(func(r *W) int64 { return r.UnsureWrites }), show: fmtCount},
		{name: "watcher: events vs writes", text: text(w, func(r *W) string {
			switch {
			case r.Events < r.AckedWrites:
				return fmt.Sprintf("%d fewer than acked", r.AckedWrites-r.Events)
			case r.Events > r.AckedWrites+r.UnsureWrites:
				return fmt.Sprintf("%d more than written", r.Events-r.AckedWrites-r.UnsureWrites)
			}
			return "ok"
		})},
		{name: "watcher: values checked (event / prev_kv)", text: text(w, func(r *W) string { return fmt.Sprintf("%d / %d", r.ValuesChecked, r.PrevChecked) })},
		{name: "watcher: event values wrong", val: n(func(r *W) int64 { return r.ValuesWrong }), show: fmtCount},
		{name: "watcher: prev_kv wrong", val: n(func(r *W) int64 { return r.PrevWrong }), show: fmtCount},
		{name: "watcher: events out of order", val: n(func(r *W) int64 { return r.OutOfOrder }), show: fmtCount},
		{name: "watcher: first wrong", text: text(w, func(r *W) string { return orDash(r.FirstWrong) })},
		{name: "watcher: prev_kv missing (compacted?)", val: n(func(r *W) int64 { return r.PrevMissing }), show: fmtCount},
		{name: "watcher: revisions behind when the writes stopped", val: n(func(r *W) int64 { return r.LagRevisions }), show: fmtCount},
		{name: "watcher: caught up after", val: num(w, func(r *W) float64 { return r.CatchUpSeconds }), show: fmtSec},
	}
}

func keysMetrics(res map[string]*KeysResult, counts []int) []metric {
	var ms []metric
	for i, n := range counts {
		step := func(f func(KeysStep) float64) func(string) float64 {
			return num(res, func(r *KeysResult) float64 {
				if i < len(r.Steps) {
					return f(r.Steps[i])
				}
				return 0
			})
		}
		at := func(what string) string { return count(n) + ": " + what }
		ms = append(ms, []metric{
			{name: at("keys stored"), text: text(res, func(r *KeysResult) string {
				if i >= len(r.Steps) {
					return "skipped (full)"
				}
				if st := r.Steps[i]; st.Full != "" {
					return fmt.Sprintf("%d (full: %s)", st.Stored, st.Full)
				}
				return fmt.Sprint(r.Steps[i].Stored)
			})},
			{name: at("load keys/s"), val: step(func(s KeysStep) float64 { return s.LoadRate }), show: fmtRate},
			{name: at("settled after load"), val: step(func(s KeysStep) float64 { return s.SettleSeconds * 1000 }), show: fmtMs},
			{name: at("get p99"), val: step(func(s KeysStep) float64 { return s.GetP99Ms }), show: fmtMs},
			{name: at("namespace list p99"), val: step(func(s KeysStep) float64 { return s.ListP99Ms }), show: fmtMs},
			{name: at("compaction (physical)"), val: step(func(s KeysStep) float64 { return s.CompactMs }), show: fmtMs},
			{name: at("restart"), val: step(func(s KeysStep) float64 { return s.RestartMs }), show: fmtMs},
			{name: at("peak RSS"), val: step(func(s KeysStep) float64 { return float64(s.PeakRSSBytes) }), show: showBytes},
			{name: at("peak anon RSS"), val: step(func(s KeysStep) float64 { return float64(s.PeakAnonBytes) }), show: showBytes},
			{name: at("RSS after restart"), val: step(func(s KeysStep) float64 { return float64(s.RSSAfterRestartBytes) }), show: showBytes},
			{name: at("disk bytes/key"), val: step(func(s KeysStep) float64 { return s.DiskBytesPerKey }), show: fmtCount},
			{name: at("disk bytes read/get"), val: step(func(s KeysStep) float64 { return s.ReadBytesPerGet }), show: fmtCount},
			{name: at("errors"), text: text(res, func(r *KeysResult) string {
				if i >= len(r.Steps) {
					return "-"
				}
				return fmt.Sprint(r.Steps[i].Errors)
			})},
		}...)
	}
	return ms
}

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// withCodes is "n (by code)", or "0".
func withCodes(n int64, codes map[string]int64) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, fmtCodes(codes))
}

func fmtCount(v float64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0f", v)
}

// inCgroup says where the servers ran.
func inCgroup(limit int64) string {
	switch {
	case limit == 0:
		return "no memory cgroup"
	case limit%(1<<30) == 0:
		return fmt.Sprintf("each server in a %d GiB memory cgroup", limit>>30)
	}
	return fmt.Sprintf("each server in a %d MiB memory cgroup", limit>>20)
}
