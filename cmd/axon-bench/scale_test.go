package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/cmd/axon-bench/internal/bench"
	"github.com/axon-kv/axon/internal/cgroup"
)

// runScaleQuick runs `axon-bench --scale <scenario> --quick` and flags
// on both systems, the servers in memory cgroups if inCgroup, and returns
// its report and table.
func runScaleQuick(t *testing.T, scenario string, inCgroup bool, flags ...string) (*bench.ScaleReport, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs two servers")
	}
	args := append([]string{"--scale", scenario, "--quick"}, flags...)
	switch {
	case !inCgroup:
		args = append(args, "--memory-limit-mib", "0")
	case !cgroup.Available():
		t.Skip("needs root and a cgroup memory controller")
	}
	bin := buildBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var rep bench.ScaleReport
	table := runBenchCLI(t, ctx, bin, filepath.Join(t.TempDir(), "scale.json"), &rep, args...)
	return &rep, table
}

// TestScaleListsQuickIsSane runs the expensive-reads scenario scaled down
// and checks that each system's outcome adds up: every list is done,
// failed or unfinished; a server that lived served every list and write;
// one that died was killed by the kernel, and the report says so.
func TestScaleListsQuickIsSane(t *testing.T) {
	rep, table := runScaleQuick(t, bench.ScaleLists, true)
	q := bench.QuickScale()
	for _, sys := range []string{"axon", "etcd"} {
		r := rep.Lists[sys]
		if r == nil {
			t.Fatalf("no lists result for %s", sys)
		}
		if r.MemoryLimitBytes != q.MemoryLimit || r.ListsWanted != q.Listers*q.ListRounds {
			t.Errorf("%s: limit %d, %d lists wanted; want %d, %d", sys, r.MemoryLimitBytes, r.ListsWanted, q.MemoryLimit, q.Listers*q.ListRounds)
		}
		if got := int64(r.ListsDone) + r.ListsFailed + int64(r.ListsUnfinished) + int64(r.ListsNotRun); got != int64(r.ListsWanted) {
			t.Errorf("%s: %d done + %d failed + %d unfinished + %d not run != %d wanted", sys, r.ListsDone, r.ListsFailed, r.ListsUnfinished, r.ListsNotRun, r.ListsWanted)
		}
		if r.PeakRSSBytes <= 0 || r.CgroupPeakBytes <= 0 || r.CgroupPeakBytes > 2*q.MemoryLimit {
			t.Errorf("%s: peak RSS %d, cgroup peak %d", sys, r.PeakRSSBytes, r.CgroupPeakBytes)
		}
		if r.Exited != "" {
			if r.OOMKills == 0 {
				t.Errorf("%s exited (%s) without an OOM kill", sys, r.Exited)
			}
			continue
		}
		if r.OOMKills != 0 || r.ListsDone != r.ListsWanted || r.WriteErrors != 0 {
			t.Errorf("%s lived: %d OOM kills, %d of %d lists, %d write errors (first: %s %s)", sys, r.OOMKills, r.ListsDone, r.ListsWanted,
				r.WriteErrors, r.FirstListError, r.FirstWriteError)
		}
		if r.Writes == 0 || r.WriteP99Ms <= 0 || r.ListP50Ms <= 0 || r.ListP99Ms < r.ListP50Ms {
			t.Errorf("%s: %d writes, write p99 %v ms, list p50 %v p99 %v ms", sys, r.Writes, r.WriteP99Ms, r.ListP50Ms, r.ListP99Ms)
		}
	}
	for _, want := range []string{"OOM-killed", "lists done", "write p99 during the lists", "axon/etcd"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// TestScaleStormQuickIsSane runs the reconnect storm scaled down. A server
// that lives must take every client, and every watcher must get every
// event acknowledged in its namespace after its list: a missing one is a
// lost event, whatever the load.
func TestScaleStormQuickIsSane(t *testing.T) {
	rep, table := runScaleQuick(t, bench.ScaleStorm, true)
	q := bench.QuickScale()
	for _, sys := range []string{"axon", "etcd"} {
		r := rep.Storm[sys]
		if r == nil {
			t.Fatalf("no storm result for %s", sys)
		}
		if r.Clients != q.StormClients || r.PeakRSSBytes <= 0 || r.WriteP99BeforeMs <= 0 {
			t.Errorf("%s: %d clients, peak RSS %d, write p99 before %v ms", sys, r.Clients, r.PeakRSSBytes, r.WriteP99BeforeMs)
		}
		if r.Exited != "" {
			if r.OOMKills == 0 {
				t.Errorf("%s exited (%s) without an OOM kill", sys, r.Exited)
			}
			continue
		}
		if r.Ready != r.Clients || r.WatchersComplete != r.Clients || r.EventsMissing != 0 || r.EventsExpected == 0 {
			t.Errorf("%s: %d of %d clients ready, %d complete, %d of %d events missing (first error: %s)", sys, r.Ready, r.Clients,
				r.WatchersComplete, r.EventsMissing, r.EventsExpected, r.FirstError)
		}
		if r.Writes == 0 || r.WorstWindowP99Ms <= 0 || r.RecoverySeconds < 0 {
			t.Errorf("%s: %d writes, worst window p99 %v ms, recovery %v s", sys, r.Writes, r.WorstWindowP99Ms, r.RecoverySeconds)
		}
	}
	for _, want := range []string{"clients listing and watching", "watchers with every event", "write p99 back within 1.5x after"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// liveChurns returns the churn result of each system whose server lived;
// one that exited must have been OOM-killed.
func liveChurns(t *testing.T, rep *bench.ScaleReport) map[string]*bench.ChurnResult {
	t.Helper()
	live := map[string]*bench.ChurnResult{}
	for _, sys := range []string{"axon", "etcd"} {
		r := rep.Churn[sys]
		switch {
		case r == nil:
			t.Fatalf("no churn result for %s", sys)
		case r.Exited == "":
			live[sys] = r
		case r.OOMKills == 0:
			t.Errorf("%s exited (%s) without an OOM kill", sys, r.Exited)
		}
	}
	return live
}

// TestScaleChurnQuickIsSane runs the churn scaled down: a window per
// compaction interval, each with writes and a disk size, and a
// defragmentation under the writes that neither fails nor fails them.
func TestScaleChurnQuickIsSane(t *testing.T) {
	rep, table := runScaleQuick(t, bench.ScaleChurn, true)
	q := bench.QuickScale()
	for sys, r := range liveChurns(t, rep) {
		if want := int(q.ChurnTime / q.ChurnWindow); len(r.Windows) != want {
			t.Fatalf("%s: %d windows, want %d", sys, len(r.Windows), want)
		}
		for i, w := range r.Windows {
			if w.Ops == 0 || w.P99Ms <= 0 || w.DiskBytes <= 0 {
				t.Errorf("%s window %d: %+v", sys, i+1, w)
			}
			if len(w.Slowest) == 0 || w.Slowest[0].Ms != w.MaxMs || w.Slowest[0].AtSeconds >= w.EndSeconds {
				t.Errorf("%s window %d: slowest writes %+v, longest %v ms, window ends at %v s", sys, i+1, w.Slowest, w.MaxMs, w.EndSeconds)
			}
		}
		if r.Errors != 0 || r.DefragError != "" || r.DefragErrors != 0 || r.DefragSeconds <= 0 || r.DiskBytesAfter <= 0 {
			t.Errorf("%s: %d churn errors (first: %s), defrag %v s error %q, %d write errors during it, %d bytes after", sys, r.Errors, r.FirstError,
				r.DefragSeconds, r.DefragError, r.DefragErrors, r.DiskBytesAfter)
		}
		if r.LongestStallMs < r.DefragP99Ms {
			t.Errorf("%s: the longest write overlapping the defragmentation (%v ms) is shorter than their p99 (%v ms)", sys, r.LongestStallMs, r.DefragP99Ms)
		}
		if r.Watch != nil {
			t.Errorf("%s: a watcher result without --churn-watch", sys)
		}
	}
	for _, want := range []string{"window 3: write p99", "defragmentation took", "longest write overlapping it", "no watcher"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// TestScaleChurnWatchQuickIsSane runs the churn scaled down with the
// kube-apiserver-like watcher: a server that lives must deliver an event
// per acknowledged write (and none for a write that surely failed), with
// the values and prev_kv that were written, and its watch must last.
func TestScaleChurnWatchQuickIsSane(t *testing.T) {
	rep, table := runScaleQuick(t, bench.ScaleChurn, true, "--churn-watch")
	for sys, r := range liveChurns(t, rep) {
		w := r.Watch
		if w == nil {
			t.Fatalf("%s: no watcher result", sys)
		}
		if w.Error != "" {
			t.Errorf("%s: watch error: %s", sys, w.Error)
		}
		if w.Events == 0 || w.Events < w.AckedWrites || w.Events > w.AckedWrites+w.UnsureWrites {
			t.Errorf("%s: %d events for %d acked writes and %d of unknown outcome", sys, w.Events, w.AckedWrites, w.UnsureWrites)
		}
		if w.PrevChecked == 0 || w.ValuesChecked == 0 {
			t.Errorf("%s: %d values and %d prev_kv checked against the samples, want some of each", sys, w.ValuesChecked, w.PrevChecked)
		}
		if w.ValuesWrong != 0 || w.PrevWrong != 0 || w.OutOfOrder != 0 {
			t.Errorf("%s: %d values, %d prev_kv wrong, %d events out of order (first: %s)", sys, w.ValuesWrong, w.PrevWrong, w.OutOfOrder, w.FirstWrong)
		}
		var perWindow int64
		for _, win := range r.Windows {
			perWindow += win.WatchEvents
		}
		if perWindow == 0 || perWindow > w.Events {
			t.Errorf("%s: %d events in the windows of %d in all", sys, perWindow, w.Events)
		}
		t.Logf("%s: %d events, %d acked, %d unsure, %d/%d checked, %d prev_kv missing, %d behind at the end, caught up in %.3fs",
			sys, w.Events, w.AckedWrites, w.UnsureWrites, w.ValuesChecked, w.PrevChecked, w.PrevMissing, w.LagRevisions, w.CatchUpSeconds)
	}
	for _, want := range []string{"a kube-apiserver-like watcher", "watcher: events received", "watcher: prev_kv wrong", "watcher: prev_kv missing", "window 1: watcher events"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// TestScaleKeysQuickIsSane runs the many-keys scenario scaled down: a step
// per key count with every figure measured, all keys stored (the quick
// counts are far below etcd's quota), the anon part of the peak within
// it, a bounded wait for the server to settle, and disk per key at least
// the value. Where a cgroup can be made, the server runs in one of its own
// (--keys-memory-limit-mib).
func TestScaleKeysQuickIsSane(t *testing.T) {
	var flags []string
	where := "no memory cgroup"
	if cgroup.Available() {
		flags, where = []string{"--keys-memory-limit-mib", "512"}, "each server in a 512 MiB memory cgroup"
	}
	rep, table := runScaleQuick(t, bench.ScaleKeys, false, flags...)
	q := bench.QuickScale()
	for _, sys := range []string{"axon", "etcd"} {
		r := rep.Keys[sys]
		if r == nil || len(r.Steps) != len(q.KeysCounts) {
			t.Fatalf("%s: %+v, want a step per count of %v", sys, r, q.KeysCounts)
		}
		for i, st := range r.Steps {
			if st.Keys != q.KeysCounts[i] || st.Stored != st.Keys || st.Full != "" || st.Errors != 0 {
				t.Errorf("%s step %d: %d of %d keys stored (full: %q), %d errors (first: %s)", sys, i, st.Stored, st.Keys, st.Full, st.Errors, st.FirstError)
			}
			if st.LoadRate <= 0 || st.GetP99Ms <= 0 || st.ListP99Ms <= 0 || st.CompactMs <= 0 || st.RestartMs <= 0 || st.PeakRSSBytes <= 0 {
				t.Errorf("%s step %d: a figure is missing: %+v", sys, i, st)
			}
			if st.PeakAnonBytes <= 0 || st.PeakAnonBytes > st.PeakRSSBytes {
				t.Errorf("%s step %d: peak anon RSS %d, want within (0, peak RSS %d]", sys, i, st.PeakAnonBytes, st.PeakRSSBytes)
			}
			if st.SettleSeconds <= 0 || st.SettleSeconds > 200 {
				t.Errorf("%s step %d: settled after %.1fs, want a wait bounded by the settling's limit", sys, i, st.SettleSeconds)
			}
			if st.DiskBytesPerKey < float64(q.ListObjectSize) {
				t.Errorf("%s step %d: %v disk bytes per key of %d B values", sys, i, st.DiskBytesPerKey, q.ListObjectSize)
			}
		}
	}
	for _, want := range []string{"20k: get p99", "50k: disk bytes/key", "50k: disk bytes read/get", where} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func TestBenchOptionsFromFlags(t *testing.T) {
	resolve := func(args ...string) (bench.Options, error) {
		cmd, f, o := newBenchCmd()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return benchOptions(cmd.Flags(), *f, *o)
	}
	q := bench.QuickScale()
	for _, tt := range []struct {
		name  string
		args  []string
		check func(o bench.Options) bool
	}{
		{"quick is one run", []string{"--quick"}, func(o bench.Options) bool { return o.Runs == 1 }},
		{"a flag given beats quick", []string{"--quick", "--runs", "2", "--listers", "3"}, func(o bench.Options) bool {
			return o.Runs == 2 && o.Scale.Listers == 3 && o.Scale.ListObjects == q.ListObjects
		}},
		{"quick scales the scenarios down", []string{"--quick", "--scale", "lists,storm"}, func(o bench.Options) bool {
			return o.Scale.MemoryLimit == q.MemoryLimit && o.Scale.StormClients == q.StormClients && len(o.Scale.Scenarios) == 2
		}},
		{"the limit is in MiB, 0 for none", []string{"--scale", "churn", "--memory-limit-mib", "0"}, func(o bench.Options) bool {
			return o.Scale.MemoryLimit == 0 && o.Scale.ChurnTime == bench.DefaultScale().ChurnTime
		}},
		{"the storm's control", []string{"--quick", "--scale", "storm", "--storm-unwatched"}, func(o bench.Options) bool {
			return o.Scale.StormUnwatched && o.Scale.StormClients == q.StormClients
		}},
		{"the churn's watcher", []string{"--quick", "--scale", "churn", "--churn-watch"}, func(o bench.Options) bool {
			return o.Scale.ChurnWatch && o.Scale.ChurnTime == q.ChurnTime
		}},
		{"full mode", []string{"--scale", "lists"}, func(o bench.Options) bool {
			return o.Scale.MemoryLimit == 1<<30 && o.Scale.ListObjects == 100000 && o.Scale.Listers == 16 && o.Scale.Writers == 64
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := resolve(tt.args...)
			if err != nil || !tt.check(o) {
				t.Errorf("%v: %v, options %+v", tt.args, err, o.Scale)
			}
		})
	}
	if _, err := resolve("--scale", "lists,bogus"); err == nil {
		t.Error("--scale bogus: want an error")
	}
}
