package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// A client's call over the threshold writes the recent execution trace
// to the directory and logs where; more slow calls within the minute
// write no more.
func TestSlowRequestWritesATrace(t *testing.T) {
	eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	dir := filepath.Join(t.TempDir(), "traces")
	var logs lockedBuffer
	cfg := server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), SlowTraceDir: dir, SlowTraceAfter: time.Nanosecond}
	_, cli, stop := serveEngine(t, eng, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	stop() // waits for the trace being written
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("%d traces written for 3 slow calls within a minute, want 1; log:\n%s", len(ents), logs.String())
	}
	name := ents[0].Name()
	if !strings.HasPrefix(name, "slow-") || !strings.Contains(name, "-Put-") || !strings.HasSuffix(name, ".trace") {
		t.Errorf("trace named %q", name)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 1024 {
		t.Errorf("%s is no execution trace: %d bytes starting %q", name, len(b), b[:min(len(b), 16)])
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="request took too long; execution trace written"`) {
			line = l
		}
	}
	if !strings.Contains(line, "trace="+filepath.Join(dir, name)) || !strings.Contains(line, "method=/etcdserverpb.KV/Put") {
		t.Errorf("log line %q does not name the trace and the call; log:\n%s", line, logs.String())
	}
}
