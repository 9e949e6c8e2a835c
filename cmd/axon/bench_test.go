package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/axon-kv/axon/cmd/axon/internal/bench"
)

// TestBenchQuickMeasuresBothSystems runs `axon bench --quick` against Axon
// and the embedded etcd and checks that every row has ops from both, no
// errors (conflicts are allowed), and JSON that parses.
func TestBenchQuickMeasuresBothSystems(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two servers")
	}
	bin := buildAxon(t)
	out := filepath.Join(t.TempDir(), "bench.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rep bench.Report
	runBenchCLI(t, ctx, bin, out, &rep, "--quick")
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Workload] = true
		for _, sys := range []string{"axon", "etcd"} {
			res := r.Results[sys]
			switch {
			case res == nil:
				t.Errorf("%s: no %s result", r.Name, sys)
			case res.Ops <= 0:
				t.Errorf("%s %s: %d ops", r.Name, sys, res.Ops)
			case res.Errors != 0:
				t.Errorf("%s %s: %d errors, first: %s", r.Name, sys, res.Errors, res.FirstError)
			case res.Conflicts != 0 && r.Workload != bench.Update:
				t.Errorf("%s %s: %d conflicts", r.Name, sys, res.Conflicts)
			}
		}
		if r.Ratio == nil {
			t.Errorf("%s: no ratio", r.Name)
		}
	}
	for _, w := range bench.AllWorkloads {
		if !seen[w] {
			t.Errorf("no row for %s", w)
		}
	}
}

// runBenchCLI runs `axon bench` with args, writing its JSON to out, and
// decodes that into rep; it returns the table.
func runBenchCLI(t *testing.T, ctx context.Context, bin, out string, rep any, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"bench", "--json", out, "--work-dir", t.TempDir()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	t.Logf("bench %v took %v\n%s", args, time.Since(t0).Round(time.Millisecond), stdout.String())
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, rep); err != nil {
		t.Fatalf("results JSON: %v", err)
	}
	return stdout.String()
}
