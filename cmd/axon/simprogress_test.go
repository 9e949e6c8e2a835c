package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestSwarmProgressOffATerminal: off a terminal (a CI log), a swarm's
// progress is a line per report, no carriage return, one at most every
// interval and one at the end; on a terminal it is one line updated in
// place every 100 seeds, ended at the end.
func TestSwarmProgressOffATerminal(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	run := func(tty bool) string {
		var b bytes.Buffer
		p := newProgress(&b, 1000, start)
		if p.tty {
			t.Fatal("a buffer taken for a terminal")
		}
		p.tty = tty
		for n := 1; n <= 1000; n++ {
			p.report(n, n/400, start.Add(time.Duration(n)*100*time.Millisecond))
		}
		return b.String()
	}

	log := run(false)
	if strings.Contains(log, "\r") {
		t.Fatalf("progress off a terminal holds carriage returns: %q", log)
	}
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	// 100 s of seeds, a line every 10 s (the last one is also the end's).
	if len(lines) != 10 {
		t.Fatalf("progress off a terminal: %d lines, want 10:\n%s", len(lines), log)
	}
	if lines[0] != "100/1000 seeds, 0 failed, 600 seeds/min" || lines[9] != "1000/1000 seeds, 2 failed, 600 seeds/min" {
		t.Errorf("progress lines:\n%s", log)
	}

	term := run(true)
	if strings.Count(term, "\r") != 10 || strings.Count(term, "\n") != 1 || !strings.HasSuffix(term, "\r1000/1000 seeds, 2 failed, 600 seeds/min\n") {
		t.Errorf("progress on a terminal: %q", term)
	}
}

// TestSimSwarmLogsLines: `axon sim --seeds N` writing to a file (not a
// terminal) ends its progress with a newline and holds no carriage
// return.
func TestSimSwarmLogsLines(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := simCmd()
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--seeds", "3", "--ops", "30", "--out", t.TempDir()})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if got := stderr.String(); strings.Contains(got, "\r") || !strings.HasPrefix(got, "3/3 seeds, 0 failed, ") || strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n") {
		t.Errorf("swarm progress off a terminal: %q", got)
	}
	if !strings.HasPrefix(stdout.String(), "swarm: 3 seeds (1..3) in ") {
		t.Errorf("swarm summary: %q", stdout.String())
	}
}
