package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

// slowDisk is a Badger engine whose group commits report 150 ms more
// than they took, as on a disk whose fsyncs stall.
type slowDisk struct{ *badgerkv.Engine }

func (e slowDisk) ObserveSyncs(f func(time.Duration, int)) {
	e.Engine.ObserveSyncs(func(d time.Duration, txns int) { f(d+150*time.Millisecond, txns) })
}

// lockedBuffer is a log destination written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A group commit over etcd's 100 ms apply warning is logged, as etcd
// logs "apply request took too long"; one under it is not.
func TestSlowEngineCommitIsLogged(t *testing.T) {
	for _, slow := range []bool{false, true} {
		eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		var logs lockedBuffer
		cfg := server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		var cli *clientv3.Client
		if slow {
			_, cli, _ = serveEngine(t, slowDisk{eng}, cfg)
		} else {
			_, cli, _ = serveEngine(t, eng, cfg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		warned := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if !strings.Contains(line, `msg="engine commit took too long"`) {
				continue
			}
			warned++
			f := strings.Fields(line[strings.Index(line, "took="):])
			took, err := time.ParseDuration(strings.TrimPrefix(f[0], "took="))
			if err != nil || took <= 100*time.Millisecond || !strings.Contains(line, "expected-duration=100ms") || !strings.Contains(line, "transactions=") {
				t.Errorf("slow disk %v: warning %q (took %v, %v)", slow, line, took, err)
			}
		}
		if slow && warned == 0 {
			t.Fatalf("no warning of a 150 ms commit; log:\n%s", logs.String())
		}
	}
}
