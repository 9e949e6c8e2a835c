package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/internal/cgroup"
)

// system says how to run one kind of server: from which binary, with
// which arguments.
type system struct {
	name   string
	binary func(o *Options) string
	args   func(s *server) []string
}

var systems = map[string]system{
	"axon": {name: "axon", binary: func(o *Options) string { return o.Binary }, args: func(s *server) []string {
		a := []string{"serve", "--data-dir", s.dir,
			"--listen-client-urls", s.clientURL(), "--listen-metrics-urls", "http://" + s.metrics}
		a = append(a, s.tlsArgs()...)
		if s.pprof {
			a = append(a, "--enable-pprof")
		}
		if s.quota != 0 {
			a = append(a, "--quota-backend-bytes", strconv.FormatInt(s.quota, 10))
		}
		return append(a, s.extra...)
	}},
	"etcd": {name: "etcd", binary: func(o *Options) string { return o.EtcdBinary }, args: func(s *server) []string {
		a := []string{"etcd-reference", "--data-dir", s.dir,
			"--listen-client-urls", s.clientURL(), "--listen-peer-urls", "http://" + s.peer,
			"--log-file", s.logPath}
		if s.quota > 0 {
			a = append(a, "--quota-backend-bytes", strconv.FormatInt(s.quota, 10))
		}
		return append(a, s.tlsArgs()...)
	}},
}

// server is one server process on one data dir. Its ports stay the same
// across restarts: etcd keeps its peer URL in the data dir.
type server struct {
	sys                   system
	bin, dir, logPath     string
	client, peer, metrics string
	pprof                 bool
	tls                   *tlsFiles     // nil: plaintext
	extra                 []string      // more flags of axon serve
	cg                    *cgroup.Group // nil: not in a memory cgroup
	quota                 int64         // the backend quota; 0: the default; negative: none (Axon only)

	cmd    *exec.Cmd
	logf   *os.File
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

func newServer(bin string, sys system, dir string, pprof bool, tf *tlsFiles) (*server, error) {
	s := &server{sys: sys, bin: bin, dir: dir, logPath: dir + ".log", pprof: pprof, tls: tf}
	for _, p := range []*string{&s.client, &s.peer, &s.metrics} {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		*p = a
	}
	return s, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *server) start() error {
	if err := os.MkdirAll(filepath.Dir(s.dir), 0o755); err != nil {
		return fmt.Errorf("make work dir: %w", err)
	}
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	cmd := exec.Command(s.bin, s.sys.args(s)...)
	if s.cg != nil {
		cmd = s.cg.Command(s.bin, s.sys.args(s)...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// A server outliving a killed benchmark would hold its port and disk.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", s.sys.name, err)
	}
	s.cmd, s.logf, s.exited = cmd, f, make(chan struct{})
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	return nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// died reports whether the process has exited or does within a second:
// a request can fail on a killed server before its exit is reaped.
func (s *server) died() bool {
	select {
	case <-s.exited:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// waitReady returns once a linearizable Get succeeds. It first waits for
// the port to accept, so that the time measured is the server's and not
// gRPC's reconnect backoff.
func (s *server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	wait := func(what string, last error) error {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v (%s): %w", s.sys.name, timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exited:
			return fmt.Errorf("%s exited while starting (%v); log %s:\n%s", s.sys.name, s.err, s.logPath, s.logTail())
		case <-tick.C:
			return nil
		}
	}
	for {
		c, err := net.DialTimeout("tcp", s.client, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if err := wait("port", err); err != nil {
			return err
		}
	}
	cli, err := s.dial()
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(gctx, "/bench/ready")
		cancel()
		if err == nil {
			return nil
		}
		if err := wait("get", err); err != nil {
			return err
		}
	}
}

// stop sends SIGTERM and waits for the process to exit, killing it if it
// takes more than 30 s.
func (s *server) stop() error {
	if s.cmd == nil {
		return nil
	}
	defer func() {
		s.logf.Close()
		s.cmd = nil
	}()
	if s.running() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("%s did not stop within 30s of SIGTERM; killed", s.sys.name)
	}
	var ee *exec.ExitError
	if s.err != nil && !errors.As(s.err, &ee) {
		return fmt.Errorf("%s: %w", s.sys.name, s.err)
	}
	return nil
}

func (s *server) logTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	const n = 4096
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func (s *server) dial() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{s.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if s.tls != nil {
		cfg.TLS = s.tls.client
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", s.client, err)
	}
	return cli, nil
}

// clientURL is the URL the server listens for clients at.
func (s *server) clientURL() string {
	if s.tls != nil {
		return "https://" + s.client
	}
	return "http://" + s.client
}

func (s *server) tlsArgs() []string {
	if s.tls == nil {
		return nil
	}
	return []string{"--cert-file", s.tls.cert, "--key-file", s.tls.key}
}

// tlsFiles is the run's self-signed certificate (etcd's SelfCert, as
// --auto-tls makes) and the client side that trusts it.
type tlsFiles struct {
	cert, key string
	client    *tls.Config
}

func newTLSFiles(dir string) (*tlsFiles, error) {
	info, err := transport.SelfCert(zap.NewNop(), dir, []string{"127.0.0.1:0"}, 1) // host:port, as etcd passes
	if err != nil {
		return nil, fmt.Errorf("make a certificate: %w", err)
	}
	pool, err := tlsutil.NewCertPool([]string{info.CertFile})
	if err != nil {
		return nil, fmt.Errorf("read the certificate: %w", err)
	}
	return &tlsFiles{cert: info.CertFile, key: info.KeyFile, client: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, nil
}

// procCPU returns the user plus system CPU seconds process pid has used.
func procCPU(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("read cpu time: %w", err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("read cpu time: %w", err)
	}
	return st.CPUTime(), nil
}

// procReadBytes is what process pid has caused to be read from the
// disk so far.
func procReadBytes(pid int) (uint64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("read io: %w", err)
	}
	pio, err := p.IO()
	if err != nil {
		return 0, fmt.Errorf("read io: %w", err)
	}
	return pio.ReadBytes, nil
}

// procPeakRSS returns the peak resident set size (VmHWM) of process pid
// in bytes.
func procPeakRSS(pid int) (int64, error) {
	st, err := procStatus(pid)
	return int64(st.VmHWM), err
}

// procRSS returns the resident set size (VmRSS) of process pid in bytes.
func procRSS(pid int) (int64, error) {
	st, err := procStatus(pid)
	return int64(st.VmRSS), err
}

// procStatus reads /proc/<pid>/status (sizes in bytes).
func procStatus(pid int) (procfs.ProcStatus, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, fmt.Errorf("read status: %w", err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return procfs.ProcStatus{}, fmt.Errorf("read status: %w", err)
	}
	return st, nil
}

// selfCPU returns the user plus system CPU seconds of this process.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
