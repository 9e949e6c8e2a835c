package embed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// testConfig is serve's defaults on ports of the system's choice, over
// dir, without a log.
func testConfig(dir string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.DataDir = dir
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.ListenMetricsURLs = []string{"http://127.0.0.1:0"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

func start(t *testing.T, cfg *embed.Config) *embed.Axon {
	t.Helper()
	a, err := embed.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return a
}

func client(t *testing.T, a *embed.Axon) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: a.ClientAddrs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestStartServesAndRestartKeepsData starts an instance on ports of the
// system's choice, advertised as bound, puts, gets and watches through
// clientv3, closes it and starts another on the same directory, which
// has the data and goes on from its revision.
func TestStartServesAndRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	a := start(t, testConfig(dir))
	cli := client(t, a)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	if code := get(t, "http://"+a.MetricsAddrs()[0]+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz of a started instance: %d", code)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 1 || len(ml.Members[0].ClientURLs) != 1 || ml.Members[0].ClientURLs[0] != "http://"+a.ClientAddrs()[0] {
		t.Errorf("members %v: want one advertising http://%s", ml.Members, a.ClientAddrs()[0])
	}

	wch := cli.Watch(ctx, "/k/", clientv3.WithPrefix())
	put, err := cli.Put(ctx, "/k/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case wr := <-wch:
		if len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "/k/a" || wr.Events[0].Kv.ModRevision != put.Header.Revision {
			t.Errorf("watch: %+v, want the put of /k/a at %d", wr, put.Header.Revision)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	if resp, err := cli.Get(ctx, "/k/a"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("get: %v %v", resp, err)
	}
	cli.Close() // else the watch stream holds Close for its grace
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := http.Get("http://" + a.MetricsAddrs()[0] + "/readyz"); err == nil {
		t.Error("the metrics listener answers after Close")
	}

	b := start(t, testConfig(dir))
	defer b.Close()
	cli = client(t, b)
	resp, err := cli.Get(ctx, "/k/a")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" || resp.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after a restart, get: %v %v; want 1 at %d", resp, err, put.Header.Revision)
	}
	again, err := cli.Put(ctx, "/k/b", "2")
	if err != nil {
		t.Fatal(err)
	}
	if again.Header.Revision <= put.Header.Revision {
		t.Errorf("after a restart a put got revision %d, not past %d", again.Header.Revision, put.Header.Revision)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// closeCounter is an engine that says whether it was closed.
type closeCounter struct {
	storage.Engine
	closed atomic.Bool
}

func (c *closeCounter) Close() error {
	c.closed.Store(true)
	return c.Engine.Close()
}

// TestBadConfigIsRefused: Start refuses a configuration it cannot serve
// with an error naming the setting's flag, binds nothing, and closes an
// engine it was handed.
func TestBadConfigIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*embed.Config)
		want string
	}{
		{"unknown metrics", func(c *embed.Config) { c.Metrics = "all" }, `--metrics "all": want basic or extensive`},
		{"unknown store", func(c *embed.Config) { c.Store = "bolt" }, `--store "bolt": want badger or tikv`},
		{"tikv without PD", func(c *embed.Config) { c.Store = "tikv" }, "--store tikv needs --pd-endpoints"},
		{"unknown compression", func(c *embed.Config) { c.BadgerCompression = "lz4" }, "--badger-compression"},
		{"value threshold too large", func(c *embed.Config) { c.BadgerValueThreshold = 2 << 20 }, "--badger-value-threshold 2097152"},
		{"unknown compaction mode", func(c *embed.Config) { c.AutoCompactionMode = "hourly" }, `--auto-compaction-mode "hourly"`},
		{"bad retention", func(c *embed.Config) { c.AutoCompactionRetention = "-2" }, `--auto-compaction-retention "-2"`},
		{"bcrypt cost too low", func(c *embed.Config) { c.BcryptCost = 1 }, "--bcrypt-cost 1"},
		{"unknown token", func(c *embed.Config) { c.AuthToken = "paseto" }, "--auth-token"},
		{"https without a certificate", func(c *embed.Config) { c.ListenClientURLs = []string{"https://127.0.0.1:0"} }, embed.ErrNoCert.Error()},
		{"client certificates with an open peer URL", func(c *embed.Config) {
			c.ClientTLS.ClientCertAuth = true
			c.ListenPeerURLs = []string{"http://127.0.0.1:0"}
		}, "--client-cert-auth with --listen-peer-urls"},
		// etcd's own words (types.NewURLs) for URLs it refuses.
		{"a URL of another scheme", func(c *embed.Config) { c.ListenClientURLs = []string{"tcp://127.0.0.1:0"} }, "URL scheme must be http, https, unix, or unixs: tcp://127.0.0.1:0"},
		{"a URL without a scheme", func(c *embed.Config) { c.ListenPeerURLs = []string{"127.0.0.1:0"} },
			`invalid value "127.0.0.1:0" for flag --listen-peer-urls: parse "127.0.0.1:0": first path segment in URL cannot contain colon`},
		{"an upper-case URL without a port", func(c *embed.Config) { c.ListenMetricsURLs = []string{"HTTPS://127.0.0.1"} }, `URL address does not have the form "host:port": HTTPS://127.0.0.1`},
		{"a URL with a path", func(c *embed.Config) { c.AdvertiseClientURLs = []string{"http://127.0.0.1:2379/v3"} }, "--advertise-client-urls: URL must not contain a path"},
		{"peer certificates without a peer CA", func(c *embed.Config) { c.PeerTLS.ClientCertAuth = true }, "--peer-client-cert-auth without --peer-trusted-ca-file"},
		{"client certificates without a CA", func(c *embed.Config) { c.ClientTLS.ClientCertAuth = true }, "--client-cert-auth without --trusted-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			tc.set(cfg)
			a, err := embed.Start(t.Context(), cfg)
			if err == nil {
				a.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("a handed engine is closed", func(t *testing.T) {
		eng := &closeCounter{Engine: memkv.New()}
		cfg := testConfig(t.TempDir())
		cfg.Engine, cfg.Metrics = eng, "all"
		if _, err := embed.Start(t.Context(), cfg); err == nil {
			t.Fatal("started")
		}
		if !eng.closed.Load() {
			t.Error("Start failed and left the engine it was handed open")
		}
	})

	t.Run("a port in use", func(t *testing.T) {
		a := start(t, testConfig(t.TempDir()))
		defer a.Close()
		cfg := testConfig(t.TempDir())
		cfg.ListenClientURLs = []string{"http://" + a.ClientAddrs()[0]}
		if b, err := embed.Start(t.Context(), cfg); err == nil {
			b.Close()
			t.Fatal("started on a port in use")
		}
	})
}

// TestCloseMidWriteKeepsTheStoreConsistent closes an instance while
// clients with short deadlines write, restarts it on the same directory
// and checks the store: every acknowledged put is there with its
// revision, no two keys share one, and the next put goes past them all.
func TestCloseMidWriteKeepsTheStoreConsistent(t *testing.T) {
	dir := t.TempDir()
	a := start(t, testConfig(dir))
	cli := client(t, a)

	var (
		mu    sync.Mutex
		acked = map[string]int64{} // key → revision of its acknowledged put
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("/w/%d/%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				resp, err := cli.Put(ctx, key, key)
				cancel()
				if err == nil {
					mu.Lock()
					acked[key] = resp.Header.Revision
					mu.Unlock()
				}
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d puts acknowledged in 10 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	close(stop)
	wg.Wait()

	b := start(t, testConfig(dir))
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cli = client(t, b)
	resp, err := cli.Get(ctx, "/w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	byRev := map[int64]string{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if string(kv.Value) != k {
			t.Errorf("%s holds %q", k, kv.Value)
		}
		if other, ok := byRev[kv.ModRevision]; ok {
			t.Errorf("%s and %s both at revision %d", k, other, kv.ModRevision)
		}
		byRev[kv.ModRevision] = k
		stored[k] = kv.ModRevision
	}
	for k, rev := range acked {
		if got, ok := stored[k]; !ok || got != rev {
			t.Errorf("acknowledged put of %s at %d: stored at %d (%v)", k, rev, got, ok)
		}
	}
	next, err := cli.Put(ctx, "/after", "x")
	if err != nil {
		t.Fatal(err)
	}
	for rev := range byRev {
		if next.Header.Revision <= rev {
			t.Errorf("a put after the restart got revision %d, not past the stored %d", next.Header.Revision, rev)
		}
	}
	t.Logf("%d puts acknowledged before Close, %d stored", len(acked), len(stored))
}

// TestHardStopLetsARestartIn: after HardStop the data directory and the
// ports are free for the next instance.
func TestHardStopLetsARestartIn(t *testing.T) {
	dir := t.TempDir()
	a := start(t, testConfig(dir))
	if _, err := client(t, a).Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := a.HardStop(); err != nil {
		t.Fatalf("hard stop: %v", err)
	}
	cfg := testConfig(dir)
	cfg.ListenClientURLs = []string{"http://" + a.ClientAddrs()[0]}
	var (
		b   *embed.Axon
		err error
	)
	for range 50 { // the port may take a moment to free
		if b, err = embed.Start(t.Context(), cfg); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := client(t, b).Get(t.Context(), "k"); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("get after a hard stop: %v %v", resp, err)
	}
	for range 2 {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// TestHardStopClosesSniffedConnections: a client connection that has
// had the server's SETTINGS but sent no request yet (cmux still sniffing
// it, no server owning it) is closed by a stop. Left open, a gRPC client
// holds it as ready and its next call, however much later, meets a reset
// (kube's in-process axon-tikv row: a compaction 5 s after a member's
// restart failed "connection reset by peer").
func TestHardStopClosesSniffedConnections(t *testing.T) {
	a := start(t, testConfig(t.TempDir()))
	c, err := net.Dial("tcp", a.ClientAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The HTTP/2 client preface and an empty SETTINGS frame, as gRPC's.
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 9)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[3] != 4 {
		t.Fatalf("no SETTINGS from the server: % x %v", hdr, err)
	}
	if err := a.HardStop(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection is still open 5 s after the stop")
	}
}
