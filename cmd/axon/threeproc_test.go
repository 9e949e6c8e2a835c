package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pingcap/log"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/axon-kv/axon/internal/faultload"
	"github.com/axon-kv/axon/internal/proctest"
	"github.com/axon-kv/axon/storage/tikv"
)

// Production's shape on one machine: three `axon serve --store tikv`
// processes over one `axon-bench tikv-server` endpoint, which speaks PD's
// and TiKV's gRPC over client-go's mock store, so that every Axon request
// goes through client-go's whole network path. Knobs: AXON_PROC_KILLS
// (leader kills, default 5), AXON_PROC_LOGS (a directory to keep the
// processes' logs in), AXON_PROC_LOG_LEVEL (the instances', default warn),
// and faultload's AXON_FAILOVER_PORCUPINE.

// procFailover is quick failover, as the in-process cluster tests have
// it: a 1 s lease, 50 ms of clock drift allowed (one machine, one clock),
// engine transactions cut at 400 ms.
var procFailover = []string{"--leader-lease", "1s", "--max-clock-drift", "50ms", "--engine-deadline", "400ms"}

// procCluster is the endpoint and the instances.
type procCluster struct {
	t   *testing.T
	bin string
	pd  string // the endpoint's address
	ins []*procInstance
}

// procInstance is one `axon serve`, restarted on the same addresses.
type procInstance struct {
	name            string
	client, metrics string
	dir             string
	log             *os.File

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	stopped bool          // SIGSTOPped
}

// buildBench builds the axon-bench binary into a temporary directory.
func buildBench(t *testing.T) string {
	return proctest.Build(t, "github.com/axon-kv/axon/cmd/axon-bench")
}

// startProcCluster starts the endpoint and n instances, and waits for a
// leader.
func startProcCluster(t *testing.T, n int, endpointFlags ...string) *procCluster {
	t.Helper()
	c := &procCluster{t: t, bin: buildAxon(t), pd: freeAddr(t)}
	bench := buildBench(t)
	logs := os.Getenv("AXON_PROC_LOGS") // kept after the test, for a look
	if logs == "" {
		logs = t.TempDir()
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	epLog, err := os.Create(filepath.Join(logs, "tikv-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	ep := exec.Command(bench, append([]string{"tikv-server", "--listen", c.pd}, endpointFlags...)...)
	ep.Stdout, ep.Stderr = epLog, epLog
	if err := ep.Start(); err != nil {
		t.Fatal(err)
	}
	epDone := make(chan struct{})
	go func() { ep.Wait(); close(epDone) }()
	t.Cleanup(func() {
		ep.Process.Kill()
		<-epDone
		epLog.Close()
		if t.Failed() {
			dumpLog(t, epLog.Name())
		}
	})
	awaitListener(t, c.pd, epDone)
	for i := range n {
		in := &procInstance{name: fmt.Sprintf("axon-%d", i), client: freeAddr(t), metrics: freeAddr(t), dir: t.TempDir()}
		if in.log, err = os.Create(filepath.Join(logs, in.name+".log")); err != nil {
			t.Fatal(err)
		}
		c.ins = append(c.ins, in)
		c.start(i)
	}
	t.Cleanup(func() {
		for _, in := range c.ins {
			in.kill()
			in.log.Close()
			if t.Failed() {
				dumpLog(t, in.log.Name())
			}
		}
	})
	c.awaitLeader(30 * time.Second)
	return c
}

// start starts instance i on its addresses.
func (c *procCluster) start(i int) {
	in := c.ins[i]
	args := append([]string{"serve", "--store", "tikv", "--pd-endpoints", c.pd, "--name", in.name, "--data-dir", in.dir,
		"--listen-client-urls", "http://" + in.client, "--listen-metrics-urls", "http://" + in.metrics, "--log-level", cmp.Or(os.Getenv("AXON_PROC_LOG_LEVEL"), "warn")}, procFailover...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = in.log, in.log
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	in.mu.Lock()
	in.cmd, in.done, in.stopped = cmd, done, false
	in.mu.Unlock()
}

// kill sends SIGKILL, as a crash or the OOM killer would, and waits for
// the process to be gone.
func (in *procInstance) kill() {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
	in.mu.Lock()
	in.cmd, in.stopped = nil, false
	in.mu.Unlock()
}

// signal sends SIGSTOP or SIGCONT.
func (in *procInstance) signal(t *testing.T, sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		t.Fatalf("%s is not running", in.name)
	}
	if err := in.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	in.stopped = sig == syscall.SIGSTOP
}

// Endpoints are every instance's client address: they do not move across
// restarts, so clients keep the list they started with.
func (c *procCluster) Endpoints() []string {
	var out []string
	for _, in := range c.ins {
		out = append(out, in.client)
	}
	return out
}

// Describe says which instances run and which leads.
func (c *procCluster) Describe() string {
	l := c.leader()
	var parts []string
	for i, in := range c.ins {
		in.mu.Lock()
		parts = append(parts, fmt.Sprintf("%s running=%v stopped=%v leading=%v", in.name, in.cmd != nil, in.stopped, i == l))
		in.mu.Unlock()
	}
	return strings.Join(parts, ", ")
}

// leader asks each running instance whether it leads (Status: its member
// ID is the leader's); -1 if none says so.
func (c *procCluster) leader() int {
	for i, in := range c.ins {
		in.mu.Lock()
		up := in.cmd != nil && !in.stopped
		in.mu.Unlock()
		if !up {
			continue
		}
		if leads(in.client) {
			return i
		}
	}
	return -1
}

func leads(addr string) bool {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	st, err := cli.Status(ctx, addr)
	return err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId
}

// awaitLeader polls until an instance leads.
func (c *procCluster) awaitLeader(limit time.Duration) int {
	c.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for {
		if l := c.leader(); l >= 0 {
			return l
		}
		select {
		case <-deadline:
			c.t.Fatalf("no leader after %v: %s", limit, c.Describe())
		case <-tick.C:
		}
	}
}

// engine is a client of the endpoint's store, for the ground truth.
func (c *procCluster) engine() *tikv.Engine {
	// client-go's own log is chatty at info; the test says what matters.
	log.SetLevel(zapcore.ErrorLevel)
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	defer cancel()
	eng, err := tikv.Open(ctx, []string{c.pd}, tikv.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { eng.Close() })
	return eng
}

// brokenReads are what an instance logs when a read found the engine
// not as the store's invariants say: a latest record without the history
// record of its revision is a snapshot older than the work's (a stale or
// zero timestamp from PD: tsoGuard).
var brokenReads = []string{"malformed engine record", "zero timestamp"}

// checkLogs fails the test on any log line of an instance that says a
// read went wrong, even if a retry hid it from the client.
func (c *procCluster) checkLogs() {
	for _, in := range c.ins {
		b, err := os.ReadFile(in.log.Name())
		if err != nil {
			c.t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, bad := range brokenReads {
				if strings.Contains(line, bad) {
					c.t.Errorf("%s: %s", in.name, line)
				}
			}
		}
	}
}

// awaitListener waits until addr takes connections, failing if the
// process exits first.
func awaitListener(t *testing.T, addr string, done <-chan struct{}) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("the process serving %s exited", addr)
		case <-deadline:
			t.Fatalf("nothing listens on %s after 20s", addr)
		case <-tick.C:
		}
	}
}

// dumpLog logs the end of a process's log.
func dumpLog(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	t.Logf("%s:\n%s", filepath.Base(path), b)
}

// TestThreeProcessesOverTiKV is production's shape under faults:
// clients that know every endpoint run a Kubernetes-shaped load (guarded
// creates, updates, deletes, reads, paginated lists and prev_kv watches),
// and a list-watcher is pinned to each instance, while the leader process is SIGKILLed and
// restarted again and again (a write load keeps commits in flight, so
// kills land during commits), and a follower is SIGSTOPped for longer
// than the leader's lease. The whole history must be linearizable, every
// acknowledged write in the store, every revision made by one call, and
// every watch must see every event once, in order, with its prev_kv.
func TestThreeProcessesOverTiKV(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four processes")
	}
	c := startProcCluster(t, 3)
	kills := faultload.EnvInt(t, "AXON_PROC_KILLS", 5)
	ld := faultload.Start(t, c, faultload.PinWatchers())
	// When each instance died or froze: only then may its pinned
	// watcher's stream break.
	downs := make([][]int64, len(c.ins))
	ld.AwaitWrites(ld.Now(), 150)
	for k := range kills {
		l := c.awaitLeader(10 * time.Second)
		victim := c.ins[l]
		at := ld.Now()
		downs[l] = append(downs[l], at)
		victim.kill()
		ld.Mark(at, "SIGKILL "+victim.name)
		nl := c.awaitLeader(10 * time.Second)
		t.Logf("kill %d: %s killed, %s leads after %v", k+1, victim.name, c.ins[nl].name, time.Duration(ld.Now()-at).Round(time.Millisecond))
		ld.AwaitWrites(ld.Now(), 100)
		c.start(l)
		ld.AwaitWrites(ld.Now(), 100)
	}
	// A follower frozen for longer than the leader's lease: its clients'
	// calls wait or go elsewhere; when it wakes it must not act on what
	// it knew before.
	l := c.awaitLeader(10 * time.Second)
	f := c.ins[(l+1)%len(c.ins)]
	at := ld.Now()
	downs[(l+1)%len(c.ins)] = append(downs[(l+1)%len(c.ins)], at)
	f.signal(t, syscall.SIGSTOP)
	ld.Mark(at, "SIGSTOP "+f.name)
	ld.During(2500 * time.Millisecond)
	f.signal(t, syscall.SIGCONT)
	ld.AwaitWrites(ld.Now(), 150)
	// And the leader frozen likewise: it wakes after its lease ran out.
	l = c.awaitLeader(10 * time.Second)
	at = ld.Now()
	downs[l] = append(downs[l], at)
	c.ins[l].signal(t, syscall.SIGSTOP)
	ld.Mark(at, "SIGSTOP leader "+c.ins[l].name)
	ld.During(2500 * time.Millisecond)
	c.ins[l].signal(t, syscall.SIGCONT)
	ld.AwaitWrites(ld.Now(), 150)

	res := ld.Finish(c.engine())
	c.checkLogs()
	checkPinnedStreams(t, c, ld.PinnedOpens(), downs)
	res.LogWindows(t, "process fault")
	applied, dropped := ld.Uncertain()
	t.Logf("%d leader kills: %d client errors (%s); %d watch relists; %d writes failed at the client and applied, %d not",
		kills, res.Errors, faultload.DescribeErrors(res.Errs), res.Relists, applied, dropped)
}

// checkPinnedStreams fails the test if a pinned watcher's stream broke
// while its instance lived: every instance serves its watches itself, so
// a leader's death elsewhere must not end them. Each stream after a
// watcher's first must follow a death (or freeze) of its own instance
// since the stream before.
func checkPinnedStreams(t *testing.T, c *procCluster, opens, downs [][]int64) {
	t.Helper()
	for i, o := range opens {
		for j := 1; j < len(o); j++ {
			if !slices.ContainsFunc(downs[i], func(at int64) bool { return at >= o[j-1] && at < o[j] }) {
				t.Errorf("%s's pinned watcher opened a stream at %v, with its instance up since its stream of %v: the stream broke while the instance lived",
					c.ins[i].name, time.Duration(o[j]).Round(time.Millisecond), time.Duration(o[j-1]).Round(time.Millisecond))
			}
		}
		t.Logf("%s's pinned watcher: %d streams, %d deaths or freezes of its instance", c.ins[i].name, len(o), len(downs[i]))
	}
}
