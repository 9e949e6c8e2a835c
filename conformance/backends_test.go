package conformance

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/core"
	axonembed "github.com/axon-kv/axon/embed"
	"github.com/axon-kv/axon/internal/testpki"
	"github.com/axon-kv/axon/storage/tikv"
)

// backendOptions are per-test knobs a backend may honour.
type backendOptions struct {
	// progressNotifyInterval asks the server for periodic progress
	// notifications on watches that requested them (etcd's
	// --experimental-watch-progress-notify-interval). Zero keeps the
	// server default.
	progressNotifyInterval time.Duration
	// authToken is etcd's --auth-token ("": simple tokens).
	authToken string
}

// axonConfig is `axon serve`'s configuration for a test's instance: a
// port of the system's choice, no metrics listener, no memory budget,
// no log, and opts.
func axonConfig(name string, opts backendOptions) *axonembed.Config {
	cfg := axonembed.NewConfig()
	cfg.Name = name
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.ListenMetricsURLs = nil
	cfg.MemoryBudget = -1
	cfg.Logger = slog.New(slog.DiscardHandler)
	if opts.progressNotifyInterval > 0 {
		cfg.ProgressNotifyInterval = opts.progressNotifyInterval
	}
	if opts.authToken != "" {
		cfg.AuthToken = opts.authToken
	}
	return cfg
}

// backend starts one fresh server for a test and returns a client for it.
// The server and client are torn down by t.Cleanup.
type backend struct {
	name  string
	start func(t testing.TB, opts backendOptions) *kubernetes.Client
}

var backends = []backend{
	{name: "axon", start: startAxon},
	{name: "axon-mtls", start: startAxonMTLS},
	{name: "axon-tikv-follower", start: startAxonFollower},
	{name: "etcd", start: startEtcd},
}

func newClient(t testing.TB, endpoint string) *kubernetes.Client {
	return newTLSClient(t, endpoint, nil)
}

func newTLSClient(t testing.TB, endpoint string, cfg *tls.Config) *kubernetes.Client {
	t.Helper()
	c, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAxon runs an Axon server over Badger in a fresh directory on a
// loopback port chosen by the OS.
func startAxon(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	return startAxonTLS(t, opts, nil)
}

// etcdctlTLS holds, per client of the mTLS backend, the etcdctl flags
// that name its certificate files.
var etcdctlTLS sync.Map // *kubernetes.Client → []string

// startAxonMTLS is startAxon behind mutual TLS, configured as etcd's
// --cert-file, --key-file, --trusted-ca-file and --client-cert-auth are
// (etcd's transport.TLSInfo); the client presents a certificate of the
// trusted CA.
func startAxonMTLS(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	ca := testpki.NewCA(t, "conformance-ca")
	srvCert, srvKey := ca.Issue(t, 10, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.Issue(t, 11, x509.ExtKeyUsageClientAuth)
	dir := testpki.WriteFiles(t, t.TempDir(), map[string][]byte{"ca.pem": ca.PEM, "server.pem": srvCert, "server-key.pem": srvKey,
		"client.pem": cliCert, "client-key.pem": cliKey})
	file := func(name string) string { return filepath.Join(dir, name) }
	srvInfo := transport.TLSInfo{CertFile: file("server.pem"), KeyFile: file("server-key.pem"), TrustedCAFile: file("ca.pem"), ClientCertAuth: true}
	cliInfo := transport.TLSInfo{CertFile: file("client.pem"), KeyFile: file("client-key.pem"), TrustedCAFile: file("ca.pem")}
	c := startAxonTLS(t, opts, &tlsPair{server: srvInfo, client: cliInfo})
	etcdctlTLS.Store(c, []string{"--cacert=" + file("ca.pem"), "--cert=" + file("client.pem"), "--key=" + file("client-key.pem")})
	return c
}

// tlsPair is the server's and the client's side of a TLS backend.
type tlsPair struct{ server, client transport.TLSInfo }

func startAxonTLS(t testing.TB, opts backendOptions, tp *tlsPair) *kubernetes.Client {
	t.Helper()
	cfg := axonConfig("conformance", opts)
	cfg.DataDir = t.TempDir()
	var cliTLS *tls.Config
	if tp != nil {
		cfg.ListenClientURLs = []string{"https://127.0.0.1:0"}
		cfg.ClientTLS = axonembed.TLSInfo{CertFile: tp.server.CertFile, KeyFile: tp.server.KeyFile,
			TrustedCAFile: tp.server.TrustedCAFile, ClientCertAuth: tp.server.ClientCertAuth}
		var err error
		if cliTLS, err = tp.client.ClientConfig(); err != nil {
			t.Fatal(err)
		}
	}
	a, err := axonembed.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newTLSClient(t, a.ClientAddrs()[0], cliTLS)
	t.Cleanup(func() {
		c.Close()
		a.HardStop()
	})
	return c
}

// startAxonFollower runs three Axon instances over one in-process mock
// TiKV cluster (several regions) and returns a client of a follower, so
// every write, lease and watch of the suite is forwarded to the leader
// and every read goes through the read index.
func startAxonFollower(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	base, err := tikv.NewMock(tikv.MockOptions{Regions: 4, Layout: core.RegionSplits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Close() })
	var ins []*axonembed.Axon
	for i := range 3 {
		eng, err := base.Share()
		if err != nil {
			t.Fatal(err)
		}
		cfg := axonConfig("conformance-"+strconv.Itoa(i), opts)
		cfg.Engine = eng // shared by the three: not exclusive
		// Quick failover; one process has one clock.
		cfg.LeaderLease, cfg.TickInterval, cfg.MaxClockDrift = 2*time.Second, 20*time.Millisecond, 0
		a, err := axonembed.Start(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.HardStop() })
		ins = append(ins, a)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for i, a := range ins {
			if a.Server().Leading() {
				c := newClient(t, ins[(i+1)%len(ins)].ClientAddrs()[0])
				t.Cleanup(func() { c.Close() })
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader among three instances after 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// etcdPortMu serialises picking free ports and binding them in embed, so
// two embedded servers started concurrently cannot pick the same port.
var etcdPortMu sync.Mutex

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// etcdConfig is a single-member embedded etcd's configuration on two
// free ports, and its client URL.
func etcdConfig(t testing.TB, opts backendOptions) (*embed.Config, url.URL) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "conformance"
	cfg.Dir = t.TempDir()
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.UnsafeNoFsync = true // throw-away test data
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.progressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = opts.progressNotifyInterval
	}
	if opts.authToken != "" {
		cfg.AuthToken = opts.authToken
	}
	return cfg, clientURL
}

// startEtcd runs a single-member embedded etcd on 127.0.0.1 with ports
// from the OS and its data in t.TempDir().
func startEtcd(t testing.TB, opts backendOptions) *kubernetes.Client {
	t.Helper()
	etcdPortMu.Lock()
	defer etcdPortMu.Unlock()

	// A port freePort saw free may be taken before etcd binds it (by any
	// listener or outgoing connection of the process): then try new ones.
	var (
		e         *embed.Etcd
		clientURL url.URL
		err       error
	)
	for attempt := 0; ; attempt++ {
		var cfg *embed.Config
		cfg, clientURL = etcdConfig(t, opts)
		if e, err = embed.StartEtcd(cfg); err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 4 {
			t.Fatal(err)
		}
		t.Logf("embedded etcd: %v; again on other ports", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		t.Fatal("embedded etcd did not become ready")
	}
	c := newClient(t, clientURL.Host)
	t.Cleanup(func() {
		c.Close()
		e.Close()
	})
	return c
}
