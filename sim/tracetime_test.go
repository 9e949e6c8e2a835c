package sim

import (
	"strings"
	"testing"
	"time"
)

// TestTraceTimes: a trace says when each line ran in virtual seconds,
// to the nanosecond, and the times stay small (world time, not a node's
// wall-clock epoch).
func TestTraceTimes(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                        "    0.000000000s",
		1250 * time.Millisecond:  "    1.250000000s",
		7*time.Minute + 3:        "  420.000000003s",
		100000*time.Second + 1e8: "100000.100000000s",
	} {
		if got := traceTime(d); got != want {
			t.Errorf("traceTime(%d) = %q, want %q", d, got, want)
		}
	}
	r := Run(Config{Seed: 3, Ops: 200, Trace: true})
	if len(r.Trace) == 0 {
		t.Fatal("no trace")
	}
	for _, l := range []string{r.Trace[0], r.Trace[len(r.Trace)-1]} {
		f := strings.Fields(l)
		d, err := time.ParseDuration(f[0])
		if err != nil || d < 0 || d > r.VirtualTime {
			t.Errorf("trace line %q: time %v (%v), want one within the run's %v", l, d, err, r.VirtualTime)
		}
	}
}

// TestTraceElectionDeadlines: an election's deadline shows near the
// world's time, not at the nodes' wall-clock epoch.
func TestTraceElectionDeadlines(t *testing.T) {
	r := Run(Config{Seed: 3, Ops: 200, Trace: true})
	seen := 0
	for _, l := range r.Trace {
		i := strings.Index(l, " deadline=")
		if i < 0 {
			continue
		}
		seen++
		f := strings.Fields(l[i+len(" deadline="):])
		d, err := time.ParseDuration(f[0])
		if err != nil || d < -time.Hour || d > r.VirtualTime+time.Hour {
			t.Fatalf("trace line %q: deadline %v (%v), want one near the run's %v", l, d, err, r.VirtualTime)
		}
	}
	if seen == 0 {
		t.Fatal("no election in the trace")
	}
}
