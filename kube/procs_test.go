package kube

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axon-kv/axon/core"
)

// axonBinaries builds axon and axon-bench into bin/ once per test run,
// from the main module (../), which holds their dependencies; Go leaves
// a binary that is up to date alone.
var axonBinaries = sync.OnceValues(func() (string, error) {
	dir, err := filepath.Abs("bin")
	if err != nil {
		return "", err
	}
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/axon", "./cmd/axon-bench")
	cmd.Dir = ".."
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building axon and axon-bench: %w", err)
	}
	fmt.Fprintf(os.Stderr, "kube: axon and axon-bench built or up to date in bin/ in %v\n", time.Since(start).Round(100*time.Millisecond))
	return dir, nil
})

// Flags of the three `axon serve` processes: a quick failover, as the
// in-process setup has (lease 2 s; the tick stays at serve's 100 ms, it
// has no flag), no clock drift since the processes share one clock, and
// no memory budget (the apiserver and the stores share the machine).
var axonProcFlags = []string{"--leader-lease=2s", "--max-clock-drift=0", "--memory-budget-bytes=-1", "--log-level=info"}

// axonProcs is production's shape on one machine: three `axon serve
// --store tikv` processes over one `axon-bench tikv-server` process that
// speaks PD's and TiKV's gRPC, so every Axon request goes through
// client-go's network path. kill is SIGKILL.
//
// It is not traced (no trace method): requestTrace is a gRPC interceptor
// in this process and cannot see into another one. A revision that holds
// no write is still found (from the store's own history), but not the
// request that took it.
type axonProcs struct {
	endpoint *proc
	ins      []*axonProc
}

// axonProc is one Axon instance: its ports are fixed at the first start,
// so that a restart comes back where the apiserver expects it.
type axonProc struct {
	*proc
	client, metrics string // URLs
}

func startAxonProcs(t *testing.T) store {
	t.Helper()
	bin, err := axonBinaries()
	if err != nil {
		t.Fatal(err)
	}
	pd := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	c := &axonProcs{endpoint: newProc(t, "tikv-server", filepath.Join(bin, "axon-bench"), "tikv-server", "--listen="+pd)}
	t.Cleanup(func() { c.stop(t) })
	if err := c.endpoint.start(); err != nil {
		t.Fatal(err)
	}
	if err := awaitListener(pd, c.endpoint, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := "axon-" + strconv.Itoa(i)
		client := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		metrics := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		args := append([]string{"serve", "--store=tikv", "--pd-endpoints=" + pd, "--name=" + name,
			"--listen-client-urls=" + client, "--listen-metrics-urls=" + metrics, "--data-dir=" + t.TempDir()}, axonProcFlags...)
		in := &axonProc{proc: newProc(t, name, filepath.Join(bin, "axon"), args...), client: client, metrics: metrics}
		c.ins = append(c.ins, in)
		if err := in.start(); err != nil {
			t.Fatal(err)
		}
	}
	// Each answers /readyz once it reaches a leader through TiKV.
	for _, in := range c.ins {
		if err := in.awaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.leader(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("3 axon processes over tikv-server at %s; logs %s; their requests are not traced (other processes)", pd, filepath.Join(t.ArtifactDir(), "{axon-*,tikv-server}.log"))
	return c
}

func (c *axonProcs) endpoints() []string {
	var out []string
	for _, in := range c.ins {
		out = append(out, in.client)
	}
	return out
}

// leader asks each instance's metrics port whether it leads
// (etcd_server_is_leader: the instance runs the core node).
func (c *axonProcs) leader(limit time.Duration) (int, error) {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for i, in := range c.ins {
			if in.leads(hc) {
				return i, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1, fmt.Errorf("no Axon process leads after %v", limit)
}

// kill sends instance i SIGKILL and waits until it is gone: its sockets
// close, no leadership handoff; TiKV keeps the data.
func (c *axonProcs) kill(t *testing.T, i int) {
	t.Helper()
	t.Logf("SIGKILL %s; before: %s", c.ins[i].name, c.describe())
	c.ins[i].kill()
}

// restart runs instance i's command again, on its ports, and waits until
// it is ready.
func (c *axonProcs) restart(t *testing.T, i int) {
	t.Helper()
	in := c.ins[i]
	t.Logf("restart %s; before: %s", in.name, c.describe())
	if err := in.start(); err != nil {
		t.Fatalf("restart %s: %v", in.name, err)
	}
	if err := in.awaitReady(60 * time.Second); err != nil {
		t.Fatalf("restart %s: %v", in.name, err)
	}
}

// stop reports a process that ended on its own (a crash, or client-go
// stopping it), then kills the instances and stops the endpoint, which
// logs the calls it served on SIGTERM.
func (c *axonProcs) stop(t *testing.T) {
	for _, p := range append([]*proc{c.endpoint}, procsOf(c.ins)...) {
		if err := p.unexpectedExit(); err != nil {
			t.Errorf("%s: %v (log %s)", p.name, err, p.logPath)
		}
	}
	for _, in := range c.ins {
		in.kill()
	}
	c.endpoint.terminate(10 * time.Second)
	for _, in := range c.ins {
		for _, l := range in.badLines(5) {
			t.Errorf("%s logged: %s", in.name, l)
		}
	}
	for _, p := range append([]*proc{c.endpoint}, procsOf(c.ins)...) {
		p.log.Close()
	}
}

// badLines returns up to max lines of the instance's log that no run
// should show: an error, or a record the engine should never hold (the
// core's check of a snapshot that lacks a commit, which it retries and the
// clients never see).
func (in *axonProc) badLines(max int) []string {
	f, err := os.Open(in.logPath)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(out) < max {
		if l := sc.Text(); strings.Contains(l, "level=ERROR") || strings.Contains(l, core.ErrBadRecord.Error()) {
			out = append(out, l)
		}
	}
	return out
}

func procsOf(ins []*axonProc) []*proc {
	out := make([]*proc, len(ins))
	for i, in := range ins {
		out[i] = in.proc
	}
	return out
}

func (in *axonProc) leads(hc *http.Client) bool {
	m, err := in.gauges(hc, "etcd_server_is_leader")
	return err == nil && m["etcd_server_is_leader"] == "1"
}

// shown are the gauges describe reports of each instance: where its
// commit point and compaction are, and the client watches it serves.
var shown = []string{"etcd_server_is_leader", "axon_committed_revision", "axon_compact_revision",
	"etcd_debugging_mvcc_watch_stream_total", "etcd_debugging_mvcc_watcher_total"}

// describe renders each instance's gauges on one line, for the log of a
// kill or a restart.
func (c *axonProcs) describe() string {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	var out []string
	for _, in := range c.ins {
		m, err := in.gauges(hc, shown...)
		if err != nil {
			out = append(out, in.name+": down")
			continue
		}
		out = append(out, fmt.Sprintf("%s: leader=%s committed=%s compacted=%s watch streams=%s watchers=%s", in.name,
			m[shown[0]], m[shown[1]], m[shown[2]], m[shown[3]], m[shown[4]]))
	}
	return strings.Join(out, "; ")
}

// gauges reads the named unlabeled series from the metrics port.
func (in *axonProc) gauges(hc *http.Client, names ...string) (map[string]string, error) {
	resp, err := hc.Get(in.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if ok && slices.Contains(names, name) {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// awaitReady polls /readyz on the metrics port until it answers 200.
func (in *axonProc) awaitReady(limit time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	last := "no answer"
	for time.Now().Before(deadline) {
		if !in.running() {
			return fmt.Errorf("%s exited before it was ready (log %s)", in.name, in.logPath)
		}
		resp, err := hc.Get(in.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v: last /readyz: %s (log %s)", in.name, limit, last, in.logPath)
}

// awaitListener waits until addr accepts connections, or p exits.
func awaitListener(addr string, p *proc, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if !p.running() {
			return fmt.Errorf("%s exited before it listened on %s (log %s)", p.name, addr, p.logPath)
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s does not listen on %s after %v (log %s)", p.name, addr, limit, p.logPath)
}

// proc is one command run as a child process, again after each kill.
// Its stdout and stderr go to name.log in the artifacts directory, every
// run appended with a mark at its start and its end.
type proc struct {
	name    string
	bin     string
	args    []string
	logPath string
	log     *os.File

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current run ended
	ending bool          // the current run is being killed or stopped
	err    error         // a run that ended on its own: why
	runs   int
}

// newProc opens name's log; its owner closes it once the process is
// gone.
func newProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	path := filepath.Join(t.ArtifactDir(), name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return &proc{name: name, bin: bin, args: args, logPath: path, log: f}
}

func (p *proc) mark(s string) {
	fmt.Fprintf(p.log, "===== %s %s: %s\n", time.Now().Format("15:04:05.000"), p.name, s)
}

// start runs the command; the previous run must have ended.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	p.mark(fmt.Sprintf("start %d: %s %s", p.runs, p.bin, strings.Join(p.args, " ")))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	// Should the test binary die (a panic, its -timeout), the child goes
	// with it instead of holding its ports. (Linux sends it when the
	// thread that started the child ends; Go ends a thread only when a
	// goroutine locked to it exits, which nothing here does.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.ending = cmd, exited, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.ending && p.err == nil {
			p.err = fmt.Errorf("run %d exited on its own at %s: %v", p.runs, time.Now().Format("15:04:05.000"), err)
		}
		p.mark(fmt.Sprintf("exited: %v", err))
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

func (p *proc) running() bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// unexpectedExit says whether a run ended without kill or terminate.
func (p *proc) unexpectedExit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() { p.end(syscall.SIGKILL, 0) }

// terminate sends SIGTERM and waits up to grace, then kills.
func (p *proc) terminate(grace time.Duration) { p.end(syscall.SIGTERM, grace) }

func (p *proc) end(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.ending = true
	p.mark("sending " + sig.String())
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.mark(fmt.Sprintf("signal: %v", err))
	}
	if grace > 0 {
		select {
		case <-exited:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-exited
}

// TestBadLines: the log check finds what the three-process setup fails
// on, and passes what a healthy run logs.
func TestBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "axon-0.log")
	log := `===== 07:22:23.444 axon-0: start 1: axon serve --store=tikv
time=2026-12-02T07:22:24.011Z level=INFO msg=serving client=[http://127.0.0.1:42049]
[2026/12/02 07:29:54.530 +00:00] [WARN] [pd.go:263] ["get timestamp too slow"] ["cost time"=75.378984ms]
time=2026-12-02T07:22:51.147Z level=WARN msg="engine work failed" work=request rev=0 attempt=0 err="core: malformed engine record: \"/registry/configmaps/kube-contend/counter\" has no history record at its revision 432"
time=2026-12-02T07:22:52.000Z level=ERROR msg="shutdown did not finish in time; exiting" timeout=30s
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := (&axonProc{proc: &proc{logPath: path}}).badLines(5)
	if len(got) != 2 || !strings.Contains(got[0], "malformed engine record") || !strings.Contains(got[1], "level=ERROR") {
		t.Errorf("bad lines: %q, want the malformed record and the error", got)
	}
}
