package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/cmd/axon-bench/internal/bench"
)

// TestBenchQuickMeasuresBothSystems runs `axon-bench --quick` against Axon
// and the embedded etcd and checks that every row has ops from both, no
// errors (conflicts are allowed), and JSON that parses.
func TestBenchQuickMeasuresBothSystems(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two servers")
	}
	bin := buildBench(t)
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

// runBenchCLI runs the axon-bench binary bin with args, writing its JSON
// to out, and decodes that into rep; it returns the table.
func runBenchCLI(t *testing.T, ctx context.Context, bin, out string, rep any, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--json", out, "--work-dir", t.TempDir()}, args...)...)
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

// TestFindAxon: the axon binary beside axon-bench comes first, then the
// one on PATH; without either the error names the flag that fixes it.
func TestFindAxon(t *testing.T) {
	dir, path := t.TempDir(), t.TempDir()
	self := filepath.Join(dir, "axon-bench")
	t.Setenv("PATH", path)
	executable := func(p string) string {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := findAxon(self); err == nil || !strings.Contains(err.Error(), "--axon-binary") {
		t.Errorf("no axon anywhere: got %q, %v; want an error naming --axon-binary", got, err)
	}
	onPath := executable(filepath.Join(path, "axon"))
	if got, err := findAxon(self); err != nil || got != onPath {
		t.Errorf("axon on PATH only: got %q, %v; want %s", got, err, onPath)
	}
	beside := executable(filepath.Join(dir, "axon"))
	if got, err := findAxon(self); err != nil || got != beside {
		t.Errorf("axon beside and on PATH: got %q, %v; want %s", got, err, beside)
	}
}

// TestStoreFlagRefusals: a --store the benchmark does not know, and a
// tikv-mock flag given to tikv-cluster, are refused before anything runs.
func TestStoreFlagRefusals(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "tikv"}, "want tikv-mock or tikv-cluster"},
		{[]string{"--store", "tikv-cluster", "--tikv-regions", "4"}, "--tikv-regions is for --store tikv-mock"},
		{[]string{"--store", "tikv-cluster", "--workloads", "list"}, `unknown tikv workload "list"`},
		{[]string{"--store", "tikv-cluster", "--tls"}, "plaintext only"},
		{[]string{"--watch-fanout", "30"}, "--watch-fanout is for --store tikv-cluster"},
		{[]string{"--store", "tikv-cluster", "--watch-fanout", "30", "--workloads", "get"}, "drop --workloads"},
		{[]string{"--store", "tikv-cluster", "--watch-fanout", "30", "--systems", "axon,etcd"}, "axon only"},
		{[]string{"--store", "tikv-cluster", "--watch-fanout", "-1"}, "want >= 0"},
	} {
		cmd := rootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append(tt.args, "--axon-binary", "/nonexistent/axon", "--work-dir", t.TempDir()))
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("axon-bench %v: %v; want an error with %q", tt.args, err, tt.want)
		}
	}
}
