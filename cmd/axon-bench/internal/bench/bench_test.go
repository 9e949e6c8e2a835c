package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestOwnProcessIsMeasurable reads this process's CPU time and memory as
// the bench reads a server's: the CPU time grows with work done, the
// resident set is within its peak.
func TestOwnProcessIsMeasurable(t *testing.T) {
	pid := os.Getpid()
	cpu0, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	var cpu1 float64
	deadline := time.Now().Add(10 * time.Second)
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
		if x%(1<<20) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("CPU time stayed at %v s for 10 s of spinning", cpu1)
			}
			if cpu1, err = procCPU(pid); err != nil {
				t.Fatal(err)
			}
			if cpu1 >= cpu0+0.05 {
				break
			}
		}
	}
	rss, err := procRSS(pid)
	if err != nil || rss <= 0 {
		t.Fatalf("procRSS = %d, %v", rss, err)
	}
	// The peak, read after, is at least what was resident before.
	if peak, err := procPeakRSS(pid); err != nil || peak < rss {
		t.Fatalf("procPeakRSS = %d, %v; resident before %d", peak, err, rss)
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Fatal("a process that does not exist: want an error")
	}
}

// TestP50P99 checks the histogram's percentiles against the exact ones,
// within its 0.1 %, on samples out of order and out of its range.
func TestP50P99(t *testing.T) {
	var s []time.Duration
	for i := 10000; i >= 1; i-- { // 1 ms … 10 s, descending
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	p50, p99 := p50p99(s)
	if math.Abs(p50-5000) > 5 || math.Abs(p99-9900) > 10 {
		t.Errorf("p50p99(1 ms … 10 s) = %v, %v ms; want 5000, 9900 within 0.1 %%", p50, p99)
	}
	if p50, p99 := p50p99(nil); p50 != 0 || p99 != 0 {
		t.Errorf("p50p99(nil) = %v, %v", p50, p99)
	}
	// A sample past the range counts at its edge rather than vanishing.
	p50, p99 = p50p99([]time.Duration{0, 0, 2 * time.Hour})
	if p50 > 0.002 || p99 < 3.5e6 {
		t.Errorf("p50p99(0, 0, 2 h) = %v, %v ms", p50, p99)
	}
}

func TestCountNamesRoundNumbersShort(t *testing.T) {
	for n, want := range map[int]string{200: "200", 1000: "1k", 10000: "10k", 100000: "100k", 1000000: "1m", 1500: "1500"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestTableHasARowPerWorkloadAndRatios(t *testing.T) {
	rep := &Report{Systems: []string{"axon", "etcd"}}
	row := rep.row("create c=64", Create, 64, 0, "request")
	// Three alternating runs: the ratios are the medians of the runs'
	// ratios (2, 3 and 1.5 for ops/s), with their spread.
	row.Runs["axon"] = []*Result{
		{Ops: 1000, OpsPerSec: 4000, P50Ms: 1, P99Ms: 4, OpsPerServerCPUSec: 8000, ServerPeakRSSBytes: 100 << 20, LatencySamples: 1000},
		{Ops: 1000, OpsPerSec: 6000, P50Ms: 1, P99Ms: 4, OpsPerServerCPUSec: 8000, ServerPeakRSSBytes: 100 << 20, LatencySamples: 1000},
		{Ops: 1000, OpsPerSec: 3000, P50Ms: 1, P99Ms: 4, OpsPerServerCPUSec: 8000, ServerPeakRSSBytes: 100 << 20, LatencySamples: 1000},
	}
	etcd := &Result{Ops: 1000, OpsPerSec: 2000, P50Ms: 2, P99Ms: 8, OpsPerServerCPUSec: 2000, ServerPeakRSSBytes: 300 << 20, LatencySamples: 1000}
	row.Runs["etcd"] = []*Result{etcd, {Ops: 1000, OpsPerSec: 2000, P50Ms: 2, P99Ms: 8, OpsPerServerCPUSec: 2000, ServerPeakRSSBytes: 300 << 20, LatencySamples: 1000, Conflicts: 3}, etcd}
	rep.row("list n=10k", List, 0, 10000, "full list").Runs["axon"] = []*Result{{Ops: 5, OpsPerSec: 10}}
	rep.row("watch w=10", Watch, 0, 10, "event delivered") // interrupted before any result
	rep.finish()
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want the 2 with results", len(rep.Rows))
	}
	if q := row.Ratio; q == nil || q.OpsPerSec != 2 || q.P99 != 0.5 || q.OpsPerServerCPUSec != 4 {
		t.Fatalf("ratio %+v", row.Ratio)
	}
	if sp := row.Spread; sp == nil || sp[0].OpsPerSec != 1.5 || sp[1].OpsPerSec != 3 {
		t.Fatalf("spread %+v", row.Spread)
	}
	if got := row.Results["axon"].OpsPerSec; got != 4000 {
		t.Fatalf("axon's figures are the run at %v ops/s, want the median run's 4000", got)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"create c=64", "list n=10k", "2.00x [1.50-3.00]", "0.50x", "4.00x", "etcd run 2: 3 conflicts", "3 run(s) per system"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

func TestQuickRunsEveryWorkload(t *testing.T) {
	o := Quick()
	o.Binary, o.EtcdBinary = "axon", "axon-bench"
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	for _, w := range AllWorkloads {
		if !o.has(w) {
			t.Errorf("quick lacks %s", w)
		}
	}
	o.Systems = []string{"zookeeper"}
	if err := o.validate(); err == nil {
		t.Error("unknown system: want an error")
	}
	o = Quick()
	o.Binary, o.EtcdBinary = "axon", "axon-bench"
	o.HotClients = []int{1, 0}
	if err := o.validate(); err == nil {
		t.Error("no hotkey clients: want an error")
	}
	o = Quick()
	o.Binary = "axon"
	if err := o.validate(); err == nil {
		t.Error("etcd without the axon-bench binary that runs it: want an error")
	}
}

func TestCounterViolationCatchesLostAndPhantomIncrements(t *testing.T) {
	for _, tt := range []struct {
		name                string
		value, acked, unknw int64
		want                string // a substring of the violation; "" for none
	}{
		{name: "every acknowledged increment is there", value: 40, acked: 40},
		{name: "a timed-out txn may have applied", value: 42, acked: 40, unknw: 2},
		{name: "a timed-out txn may not have applied", value: 40, acked: 40, unknw: 2},
		{name: "a missing acknowledged increment is a lost update", value: 39, acked: 40, unknw: 5, want: "LOST UPDATE"},
		{name: "an increment nobody sent is caught too", value: 43, acked: 40, unknw: 2, want: "more than 40 acknowledged"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := counterViolation("/bench/hot/8", tt.value, tt.acked, tt.unknw)
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Errorf("counterViolation = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTableShowsHotkeyTriesViolationsAndCutShortOps(t *testing.T) {
	rep := &Report{Systems: []string{"axon", "etcd"}}
	row := rep.row("hotkey c=256", Hotkey, 256, 0, "increment")
	row.Runs["axon"] = []*Result{{Ops: 13, OpsPerSec: 2.9, P50Ms: 800, P99Ms: 3000, AttemptsPerOp: 3.92, LatencySamples: 13,
		Errors: 383, FirstError: "txn: context deadline exceeded", CutShort: 250,
		Violation: "LOST UPDATE: /bench/hot/256 grew by 12 over 13 acknowledged increments"}}
	row.Runs["etcd"] = []*Result{{Ops: 1000, OpsPerSec: 30, P50Ms: 1000, P99Ms: 3000, AttemptsPerOp: 17.3, LatencySamples: 1000, CutShort: 10}}
	rep.finish()
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"3.92", "17.30", "0.10x",
		"hotkey c=256 axon: 0 conflicts, 383 errors (first: txn: context deadline exceeded)",
		"hotkey c=256 axon: VIOLATION: LOST UPDATE",
		"hotkey c=256 axon: 250 ops cut short"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "etcd: 10 ops cut short") {
		t.Errorf("1%% of the ops cut short needs no note:\n%s", out)
	}
}
