package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	axonembed "github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/storage/tikv"
)

// store is what an apiserver is pointed at: one or more etcd endpoints.
type store interface {
	// endpoints are the --etcd-servers URLs.
	endpoints() []string
}

// traced is a store whose write requests are traced (Axon's).
type traced interface {
	trace() *requestTrace
}

// cluster is a store of several members, one of which leads; the fault
// checks kill and restart members. Member i keeps its address across a
// restart, since the apiserver knows only the addresses it started with.
type cluster interface {
	store
	// leader returns the index of the member that leads, waiting up to
	// limit for one.
	leader(limit time.Duration) (int, error)
	kill(t *testing.T, i int)
	restart(t *testing.T, i int)
}

// setup is one subtest: a store to start and what to call it.
type setup struct {
	name  string
	about string
	start func(t *testing.T) store
}

var setups = []setup{
	{"etcd", "embedded etcd v3.7.3, three members (the control)", startEtcd},
	{"axon-badger", "one Axon instance over Badger", startAxonBadger},
	{"axon-tikv", "three Axon instances in the test process over one in-process mock TiKV cluster", startAxonTiKV},
	{"axon-tikv-procs", "three `axon serve --store tikv` processes over one `axon-bench tikv-server` process", startAxonProcs},
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// axonBadger is one Axon instance.
type axonBadger struct {
	url string
	tr  *requestTrace
}

func (a axonBadger) endpoints() []string  { return []string{a.url} }
func (a axonBadger) trace() *requestTrace { return a.tr }

// startAxonBadger runs one Axon server over Badger in a fresh directory,
// as `axon serve` does.
func startAxonBadger(t *testing.T) store {
	t.Helper()
	return startAxonBadgerWith(t, "")
}

// startAxonBadgerWith is startAxonBadger with Badger's table compression
// (serve's --badger-compression).
func startAxonBadgerWith(t *testing.T, compression string) store {
	t.Helper()
	cfg := axonConfig("axon-0", axonLogger(t, "axon-0"))
	cfg.DataDir = t.TempDir()
	cfg.BadgerCompression = compression
	tr := newRequestTrace()
	cfg.GRPCServerOptions = []grpc.ServerOption{tr.option()}
	a, err := axonembed.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.HardStop() })
	return axonBadger{url: "http://" + a.ClientAddrs()[0], tr: tr}
}

// axonConfig is serve's configuration for an instance on a port of the
// system's choice, without a metrics listener or a memory budget (the
// apiserver and the stores share the machine).
func axonConfig(name string, log *slog.Logger) *axonembed.Config {
	cfg := axonembed.NewConfig()
	cfg.Name = name
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.ListenMetricsURLs = nil
	cfg.MemoryBudget = -1
	cfg.Logger = log
	return cfg
}

// axonLogger writes an instance's warnings and errors to a file next to
// the apiserver's log.
func axonLogger(t *testing.T, name string) *slog.Logger {
	t.Helper()
	f, err := os.Create(fmt.Sprintf("%s/%s.log", t.ArtifactDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewTextHandler(&syncWriter{w: f}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type syncWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// axonTiKV is three Axon instances in the test process over one
// in-process mock TiKV cluster (no network between Axon and the engine),
// each with its own share of the engine: the axon-tikv row. The
// processes of production's shape are axon-tikv-procs (axonProcs).
type axonTiKV struct {
	t    *testing.T
	base *tikv.Engine
	ins  []*axonInstance
	tr   *requestTrace
}

func (c *axonTiKV) trace() *requestTrace { return c.tr }

type axonInstance struct {
	name string
	addr string
	log  *slog.Logger

	mu sync.Mutex
	a  *axonembed.Axon // nil while down
}

func startAxonTiKV(t *testing.T) store {
	t.Helper()
	base, err := tikv.NewMock(tikv.MockOptions{Regions: 4, Layout: core.RegionSplits, Sample: [][]byte{
		[]byte("/registry/configmaps/"), []byte("/registry/coordination.k8s.io/"),
		[]byte("/registry/events/"), []byte("/registry/pods/"), []byte("/registry/secrets/"),
		[]byte("/registry/serviceaccounts/"), []byte("/registry/widgets.kube.axon.test/"),
		[]byte("compact_rev_key"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := &axonTiKV{t: t, base: base, tr: newRequestTrace()}
	t.Cleanup(func() {
		for _, in := range c.ins {
			c.stop(in)
		}
		base.Close()
	})
	for i := range 3 {
		name := "axon-" + strconv.Itoa(i)
		in := &axonInstance{name: name, log: axonLogger(t, name)}
		c.ins = append(c.ins, in)
		if err := c.serve(t, in, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.leader(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// serve starts instance in on addr over its own share of the engine.
func (c *axonTiKV) serve(t *testing.T, in *axonInstance, addr string) error {
	t.Helper()
	eng, err := c.base.Share()
	if err != nil {
		return err
	}
	cfg := axonConfig(in.name, in.log)
	cfg.ListenClientURLs = []string{"http://" + addr}
	cfg.Engine = eng // shared by the three: not exclusive
	// Quick failover; one process has one clock.
	cfg.LeaderLease, cfg.TickInterval, cfg.MaxClockDrift = 2*time.Second, 20*time.Millisecond, 0
	cfg.GRPCServerOptions = []grpc.ServerOption{c.tr.option()}
	a, err := axonembed.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.a, in.addr = a, a.ClientAddrs()[0]
	in.mu.Unlock()
	return nil
}

func (c *axonTiKV) endpoints() []string {
	var out []string
	for _, in := range c.ins {
		out = append(out, "http://"+in.addr)
	}
	return out
}

func (c *axonTiKV) leader(limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for i, in := range c.ins {
			in.mu.Lock()
			leads := in.a != nil && in.a.Server().Leading()
			in.mu.Unlock()
			if leads {
				return i, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1, fmt.Errorf("no Axon instance leads after %v", limit)
}

// kill stops instance i at once, as kill -9 would: its listener and
// streams go, no leadership handoff; the engine (TiKV) stays.
func (c *axonTiKV) kill(_ *testing.T, i int) { c.stop(c.ins[i]) }

func (c *axonTiKV) stop(in *axonInstance) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.a == nil {
		return
	}
	in.a.HardStop()
	in.a = nil
}

// restart starts instance i again on its old address.
func (c *axonTiKV) restart(t *testing.T, i int) {
	t.Helper()
	in := c.ins[i]
	var err error
	for range 50 { // the old listener's port may take a moment to free
		if err = c.serve(t, in, in.addr); !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart %s: %v", in.name, err)
	}
}

// etcdCluster is three embedded etcd members in this process.
type etcdCluster struct {
	t       *testing.T
	cfgs    []*embed.Config
	mu      sync.Mutex
	members []*embed.Etcd   // nil while killed
	closing []chan struct{} // closed when a killed member has let go of its ports
}

func startEtcd(t *testing.T) store {
	t.Helper()
	c := &etcdCluster{t: t}
	var initial []string
	for i := range 3 {
		name := "etcd-" + strconv.Itoa(i)
		cfg := embed.NewConfig()
		cfg.Name = name
		cfg.Dir = t.TempDir()
		if err := os.Chmod(cfg.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		cfg.UnsafeNoFsync = true // throw-away test data
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
		peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialClusterToken = "kube"
		initial = append(initial, name+"="+peer.String())
		c.cfgs = append(c.cfgs, cfg)
	}
	for _, cfg := range c.cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
	}
	c.members = make([]*embed.Etcd, 3)
	c.closing = make([]chan struct{}, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range c.cfgs {
		wg.Go(func() { c.members[i], errs[i] = c.run(c.cfgs[i]) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for i := range c.members {
			c.kill(t, i)
		}
		for _, ch := range c.closing {
			if ch != nil {
				<-ch
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *etcdCluster) run(cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd member %s not ready after 60s", cfg.Name)
	}
}

func (c *etcdCluster) endpoints() []string {
	var out []string
	for _, cfg := range c.cfgs {
		out = append(out, cfg.AdvertiseClientUrls[0].String())
	}
	return out
}

func (c *etcdCluster) leader(limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for i, e := range c.members {
			if e != nil && e.Server.Leader() == e.Server.MemberID() {
				c.mu.Unlock()
				return i, nil
			}
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	return -1, fmt.Errorf("no etcd member leads after %v", limit)
}

// kill stops member i's raft at once, without a leadership transfer,
// then closes its listeners in the background (embed's Close lets
// client requests drain for seconds first).
func (c *etcdCluster) kill(_ *testing.T, i int) {
	c.mu.Lock()
	e := c.members[i]
	c.members[i] = nil
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.Server.HardStop()
	done := make(chan struct{})
	c.closing[i] = done
	go func() {
		defer close(done)
		e.Close()
	}()
}

// restart starts member i again from its data directory, on its old
// addresses.
func (c *etcdCluster) restart(t *testing.T, i int) {
	t.Helper()
	if ch := c.closing[i]; ch != nil {
		<-ch
	}
	old := c.cfgs[i]
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir, cfg.UnsafeNoFsync, cfg.LogLevel = old.Name, old.Dir, true, "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = old.ListenClientUrls, old.AdvertiseClientUrls
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = old.ListenPeerUrls, old.AdvertisePeerUrls
	cfg.InitialCluster, cfg.InitialClusterToken = old.InitialCluster, old.InitialClusterToken
	var e *embed.Etcd
	var err error
	for range 50 { // ports may take a moment to free
		if e, err = c.run(cfg); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart %s: %v", cfg.Name, err)
	}
	c.mu.Lock()
	c.members[i] = e
	c.mu.Unlock()
}
