package embed_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// stuckEngine is an engine whose transactions, once stuck is closed,
// begin only when release is: a disk that hangs, which need not heed a
// context.
type stuckEngine struct {
	storage.Engine
	stuck, release chan struct{}
}

func (e *stuckEngine) Begin(ctx context.Context) (storage.Txn, error) {
	select {
	case <-e.stuck:
		<-e.release
	default:
	}
	return e.Engine.Begin(ctx)
}

// TestHealthAnswersUnhealthyOnAStuckEngine: with the engine hung, /health,
// /livez and /readyz still answer, 503, within etcd's request timeout,
// so that a probe restarts the member rather than waiting on it.
func TestHealthAnswersUnhealthyOnAStuckEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 7 s health timeout")
	}
	eng := &stuckEngine{Engine: memkv.New(), stuck: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(t.TempDir())
	cfg.Engine, cfg.EngineExclusive = eng, true
	a := start(t, cfg)
	t.Cleanup(func() { a.Close() })
	t.Cleanup(func() { close(eng.release) }) // before Close
	metrics := "http://" + a.MetricsAddrs()[0]
	if code, body := getBody(t, metrics+"/health"); code != http.StatusOK {
		t.Fatalf("/health before the engine hangs: %d %s", code, body)
	}
	close(eng.stuck)
	var wg sync.WaitGroup
	for _, path := range []string{"/health", "/livez", "/readyz", "/health?serializable=true"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, body := getBody(t, metrics+path)
			if code != http.StatusServiceUnavailable {
				t.Errorf("%s on a stuck engine: %d %s", path, code, body)
			}
			t.Logf("%s: %d after %v: %s", path, code, time.Since(start).Round(time.Millisecond), body)
		}()
	}
	wg.Wait()
}

// getBody is the status and body of GET url, with a client that waits
// longer than the server's health timeout.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: 20 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
