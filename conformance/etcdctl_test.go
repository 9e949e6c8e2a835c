package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// etcdctlVersion is the etcdctl the script runs: the version required by
// this module's go.mod (tool directive), built from the module proxy.
const etcdctlVersion = "3.7.3"

// etcdctlCmdTimeout bounds every etcdctl invocation.
const etcdctlCmdTimeout = 30 * time.Second

// etcdctlKnown lists, per backend, the checks of the etcdctl script (by
// name) that are known to diverge from etcd, with the reason. A listed
// check that fails is logged instead of failing the test;
// AXON_CONFORMANCE_NO_SKIP=1 makes it fail.
var etcdctlKnown = map[string]map[string]string{}

// TestEtcdctlScript drives an Axon server, and an embedded etcd as the
// control, with the real etcdctl binary and checks its output.
func TestEtcdctlScript(t *testing.T) {
	bin := buildEtcdctl(t)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.start(t, backendOptions{})
			eps := c.Endpoints()
			if len(eps) != 1 {
				t.Fatalf("endpoints: %v", eps)
			}
			flags, _ := etcdctlTLS.Load(c)
			tlsFlags, _ := flags.([]string)
			runEtcdctlScript(&ctl{t: t, backend: b.name, bin: bin, endpoint: eps[0], tls: tlsFlags})
			if tlsFlags != nil {
				// The CA alone, without a client certificate: refused.
				noCert := &ctl{t: t, backend: b.name, bin: bin, endpoint: eps[0], tls: tlsFlags[:1]}
				if _, _, err := noCert.run("", "get", "/x"); err == nil {
					t.Error("etcdctl without a client certificate got an answer from an mTLS server")
				}
			}
		})
	}
}

// buildEtcdctl builds etcdctl from this module's dependency graph (go.mod
// has `tool go.etcd.io/etcd/etcdctl/v3`), so `go install …@version`, which
// refuses modules with replace directives, is not needed. AXON_ETCDCTL
// names a prebuilt binary instead.
func buildEtcdctl(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := os.Getenv("AXON_ETCDCTL")
	if bin == "" {
		gobin, err := exec.LookPath("go")
		if err != nil {
			t.Fatalf("go command not found (set AXON_ETCDCTL to an etcdctl binary): %v", err)
		}
		bin = filepath.Join(t.TempDir(), "etcdctl")
		start := time.Now()
		out, err := exec.CommandContext(ctx, gobin, "build", "-o", bin, "go.etcd.io/etcd/etcdctl/v3").CombinedOutput()
		if err != nil {
			t.Fatalf("building etcdctl: %v\n%s", err, out)
		}
		t.Logf("built etcdctl in %v", time.Since(start).Round(time.Millisecond))
	}
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "etcdctl version: "+etcdctlVersion+"\n") {
		t.Fatalf("etcdctl version: want %s, got:\n%s", etcdctlVersion, out)
	}
	return bin
}

// ctl runs etcdctl against one endpoint.
type ctl struct {
	t        *testing.T
	backend  string
	bin      string
	endpoint string
	tls      []string // --cacert, --cert, --key for a TLS backend
}

func (c *ctl) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--endpoints=" + c.endpoint, "--dial-timeout=5s", "--command-timeout=10s"}, c.tls...)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, c.bin, full...)
	// No ETCDCTL_API=3: etcdctl 3.7 speaks only v3 and warns about the
	// variable as unrecognized. Inherited ETCDCTL_* settings are dropped.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs etcdctl with stdin and returns its stdout and stderr.
func (c *ctl) run(stdin string, args ...string) (string, string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), etcdctlCmdTimeout)
	defer cancel()
	cmd := c.command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	c.t.Logf("$ etcdctl %s (err=%v)\n%s%s", strings.Join(args, " "), err, indent(stdout.String()), indent(stderr.String()))
	return stdout.String(), stderr.String(), err
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// ok runs etcdctl and fails the test unless it succeeds.
func (c *ctl) ok(args ...string) string {
	c.t.Helper()
	return c.okIn("", args...)
}

func (c *ctl) okIn(stdin string, args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(stdin, args...)
	if err != nil {
		c.t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// fails runs etcdctl, expects it to fail and returns its stderr.
func (c *ctl) fails(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run("", args...)
	if err == nil {
		c.t.Fatalf("etcdctl %s: succeeded, want an error; output:\n%s", strings.Join(args, " "), out)
	}
	return errOut
}

// okJSON runs etcdctl -w json and decodes its output into v.
func (c *ctl) okJSON(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append([]string{"-w", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("etcdctl -w json %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// check reports a failed expectation, unless it is a known divergence of
// this backend.
func (c *ctl) check(name string, ok bool, format string, args ...any) {
	c.t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if why, known := etcdctlKnown[c.backend][name]; known && os.Getenv("AXON_CONFORMANCE_NO_SKIP") == "" {
		c.t.Logf("known divergence %q (%s): %s", name, why, msg)
		return
	}
	c.t.Errorf("%s: %s", name, msg)
}

func (c *ctl) equal(name, got, want string) {
	c.t.Helper()
	c.check(name, got == want, "got %q, want %q", got, want)
}

// putRev puts key=val and returns the revision of the write.
func (c *ctl) putRev(key, val string, flags ...string) int64 {
	c.t.Helper()
	var resp pb.PutResponse
	c.okJSON(&resp, append(append([]string{"put"}, flags...), key, val)...)
	if resp.Header == nil || resp.Header.Revision <= 0 {
		c.t.Fatalf("put %s: no revision in %+v", key, &resp)
	}
	return resp.Header.Revision
}

// rev returns the store's current revision (the header of a get).
func (c *ctl) rev() int64 {
	c.t.Helper()
	var r pb.RangeResponse
	c.okJSON(&r, "get", "/nonexistent")
	if r.Header == nil {
		c.t.Fatal("get: no header")
	}
	return r.Header.Revision
}

// revStep checks that the steps since the store was at revision base
// moved it by delta revisions, as they would on etcd, and returns the
// current revision.
func (c *ctl) revStep(name string, base, delta int64) int64 {
	c.t.Helper()
	got := c.rev()
	c.check("revision "+name, got == base+delta, "store revision %d, want %d+%d", got, base, delta)
	return got
}

func runEtcdctlScript(c *ctl) {
	t := c.t
	const compacted = "etcdserver: mvcc: required revision has been compacted"

	// ---- put / get ----
	c.equal("put", c.ok("put", "/s/a", "1"), "OK\n")
	var r1 pb.RangeResponse
	c.okJSON(&r1, "get", "/s/a")
	if len(r1.Kvs) != 1 {
		t.Fatalf("get /s/a: %d kvs", len(r1.Kvs))
	}
	rev1 := r1.Kvs[0].ModRevision
	c.check("get json", r1.Header.Revision == rev1 && r1.Kvs[0].CreateRevision == rev1 && r1.Kvs[0].Version == 1 &&
		string(r1.Kvs[0].Value) == "1", "got %+v", &r1)
	rev2 := c.putRev("/s/a", "2")
	rev3 := c.putRev("/s/b", "3")
	c.check("put revisions", rev2 == rev1+1 && rev3 == rev2+1, "revisions %d, %d, %d", rev1, rev2, rev3)

	c.equal("get", c.ok("get", "/s/a"), "/s/a\n2\n")
	c.equal("get --print-value-only", c.ok("get", "--print-value-only", "/s/a"), "2\n")
	c.equal("get --prefix", c.ok("get", "--prefix", "/s/"), "/s/a\n2\n/s/b\n3\n")
	c.equal("get --prefix --keys-only", c.ok("get", "--prefix", "--keys-only", "/s/"), "/s/a\n\n/s/b\n\n")
	c.equal("get --rev", c.ok("get", "--rev", strconv.FormatInt(rev1, 10), "/s/a"), "/s/a\n1\n")
	c.equal("get --rev --prefix", c.ok("get", "--rev", strconv.FormatInt(rev2, 10), "--prefix", "/s/"), "/s/a\n2\n")
	var r2 pb.RangeResponse
	c.okJSON(&r2, "get", "/s/a")
	c.check("get json after update", len(r2.Kvs) == 1 && r2.Kvs[0].CreateRevision == rev1 && r2.Kvs[0].ModRevision == rev2 &&
		r2.Kvs[0].Version == 2 && r2.Header.Revision == rev3, "got %+v", &r2)
	c.equal("get missing", c.ok("get", "/s/nope"), "")
	c.check("get future rev", strings.Contains(c.fails("get", "--rev", strconv.FormatInt(rev3+100, 10), "/s/a"),
		"etcdserver: mvcc: required revision is a future revision"), "wrong error")

	// ---- del ----
	c.equal("del", c.ok("del", "/s/b"), "1\n")
	r := c.revStep("after del", rev3, 1)
	c.equal("del missing", c.ok("del", "/s/b"), "0\n")
	r = c.revStep("after del of a missing key", r, 0)
	c.equal("del --prev-kv", c.ok("put", "/s/c", "4")+c.ok("del", "--prev-kv", "/s/c"), "OK\n1\n/s/c\n4\n")
	c.equal("get after del", c.ok("get", "--prefix", "/s/"), "/s/a\n2\n")
	r = c.revStep("after put, del --prev-kv", r, 2)

	// ---- txn (interactive, from stdin) ----
	txn := func(cmp string) string {
		return c.okIn(cmp+"\n\nput /s/t yes\nget /s/a\n\nput /s/t no\n\n", "txn", "--interactive")
	}
	const prompts = "compares:\nsuccess requests (get, put, del):\nfailure requests (get, put, del):\n"
	c.equal("txn success", txn(`value("/s/a") = "2"`), prompts+"SUCCESS\n\nOK\n\n/s/a\n2\n")
	c.equal("txn success effect", c.ok("get", "--print-value-only", "/s/t"), "yes\n")
	r = c.revStep("after txn success", r, 1)
	c.equal("txn failure", txn(`mod("/s/a") > "`+strconv.FormatInt(rev3+100, 10)+`"`), prompts+"FAILURE\n\nOK\n")
	c.equal("txn failure effect", c.ok("get", "--print-value-only", "/s/t"), "no\n")
	r = c.revStep("after txn failure", r, 1)
	ro := c.okIn(`value("/s/t") = "no"`+"\n\nget /s/t\n\n\n", "txn")
	c.equal("read-only txn", ro, "SUCCESS\n\n/s/t\nno\n")
	r = c.revStep("after read-only txn", r, 0)

	// ---- watch ----
	watchEtcdctl(c, r+1)
	r = c.revStep("after watched put, del", r, 2)

	// ---- lease ----
	grant := c.ok("lease", "grant", "60")
	gm := regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\((\d+)s\)\n$`).FindStringSubmatch(grant)
	if gm == nil {
		t.Fatalf("lease grant output %q", grant)
	}
	id, _ := strconv.ParseInt(gm[1], 16, 64)
	c.check("lease grant", gm[2] == "60", "TTL %s, want 60", gm[2])
	r = c.revStep("after lease grant", r, 0)
	hexID := gm[1]
	c.equal("put --lease", c.ok("put", "--lease="+hexID, "/l/k", "v"), "OK\n")
	var lk pb.RangeResponse
	c.okJSON(&lk, "get", "/l/k")
	c.check("get leased key", len(lk.Kvs) == 1 && lk.Kvs[0].Lease == id, "got %+v, want lease %x", &lk, id)
	ttlOut := c.ok("lease", "timetolive", "--keys", hexID)
	tm := regexp.MustCompile(`^lease ` + hexID + ` granted with TTL\(60s\), remaining\((\d+)s\), attached keys\(\[/l/k\]\)\n$`).FindStringSubmatch(ttlOut)
	var remaining int
	if tm != nil {
		remaining, _ = strconv.Atoi(tm[1])
	}
	c.check("lease timetolive --keys", tm != nil && remaining > 0 && remaining <= 60, "output %q", ttlOut)
	var lt struct { // etcdctl's own JSON shape for timetolive
		ID         int64    `json:"id"`
		TTL        int64    `json:"ttl"`
		GrantedTTL int64    `json:"granted-ttl"`
		Keys       [][]byte `json:"keys"`
	}
	c.okJSON(&lt, "lease", "timetolive", "--keys", hexID)
	c.check("lease timetolive json", lt.ID == id && lt.GrantedTTL == 60 && lt.TTL > 0 && lt.TTL <= 60 &&
		len(lt.Keys) == 1 && string(lt.Keys[0]) == "/l/k", "got %+v", lt)
	c.check("lease list", strings.Contains(c.ok("lease", "list"), fmt.Sprintf("found 1 leases\n%016x\n", id)), "lease missing")
	c.equal("lease revoke", c.ok("lease", "revoke", hexID), fmt.Sprintf("lease %016x revoked\n", id))
	c.equal("get after revoke", c.ok("get", "/l/k"), "")
	c.revStep("after put --lease, lease revoke", r, 2)
	c.equal("lease timetolive after revoke", c.ok("lease", "timetolive", hexID), fmt.Sprintf("lease %016x already expired\n", id))
	c.check("lease revoke twice", strings.Contains(c.fails("lease", "revoke", hexID), "etcdserver: requested lease not found"), "wrong error")

	// ---- compaction ----
	compactRev := c.putRev("/s/a", "5")
	c.equal("compact", c.ok("compact", strconv.FormatInt(compactRev, 10)), fmt.Sprintf("compacted revision %d\n", compactRev))
	c.check("get --rev compacted", strings.Contains(c.fails("get", "--rev", strconv.FormatInt(rev1, 10), "/s/a"), compacted), "wrong error")
	c.check("get --rev below compaction", strings.Contains(c.fails("get", "--rev", strconv.FormatInt(compactRev-1, 10), "/s/a"), compacted), "wrong error")
	c.equal("get --rev at compaction", c.ok("get", "--rev", strconv.FormatInt(compactRev, 10), "/s/a"), "/s/a\n5\n")
	c.check("compact again", strings.Contains(c.fails("compact", strconv.FormatInt(rev2, 10)), compacted), "wrong error")
	c.check("watch --rev compacted", strings.Contains(c.fails("watch", "--rev", strconv.FormatInt(rev1, 10), "/s/a"), compacted), "wrong error")

	// ---- endpoint status / health, member list ----
	last := c.putRev("/s/z", "last")
	st1 := endpointStatus(c)
	c.check("status version", versionAtLeast(st1.Version, 3, 5, 13), "version %q, want >= 3.5.13", st1.Version)
	c.check("status revision", st1.Header.Revision == last, "revision %d, want %d (last write)", st1.Header.Revision, last)
	c.check("status raft index", st1.RaftIndex > 0 && st1.RaftAppliedIndex <= st1.RaftIndex,
		"raftIndex %d, raftAppliedIndex %d", st1.RaftIndex, st1.RaftAppliedIndex)
	// A single instance leads itself; a follower names another member.
	c.check("status leader", st1.Leader != 0, "leader %x, member %x", st1.Leader, st1.Header.MemberId)
	next := c.putRev("/s/z", "after")
	st2 := endpointStatus(c)
	c.check("status after write", st2.Header.Revision == next && next == last+1 && st2.RaftIndex > st1.RaftIndex &&
		st2.RaftAppliedIndex > st1.RaftAppliedIndex, "revision %d→%d, raftIndex %d→%d, raftAppliedIndex %d→%d",
		st1.Header.Revision, st2.Header.Revision, st1.RaftIndex, st2.RaftIndex, st1.RaftAppliedIndex, st2.RaftAppliedIndex)
	t.Logf("endpoint status: version %s, revision %d→%d, raftIndex %d→%d, raftAppliedIndex %d→%d, raftTerm %d, storageVersion %q",
		st2.Version, st1.Header.Revision, st2.Header.Revision, st1.RaftIndex, st2.RaftIndex,
		st1.RaftAppliedIndex, st2.RaftAppliedIndex, st2.RaftTerm, st2.StorageVersion)

	out, errOut, err := c.run("", "endpoint", "health")
	c.check("endpoint health", err == nil && strings.HasPrefix(out, c.endpoint+" is healthy: successfully committed proposal: took = "),
		"err %v, stdout %q, stderr %q", err, out, errOut)
	out, _, err = c.run("", "-w", "json", "endpoint", "health")
	var hs []struct {
		Endpoint string `json:"endpoint"`
		Health   bool   `json:"health"`
		Error    string `json:"error"`
	}
	jerr := json.Unmarshal([]byte(out), &hs)
	c.check("endpoint health json", err == nil && jerr == nil && len(hs) == 1 && hs[0].Endpoint == c.endpoint && hs[0].Health && hs[0].Error == "",
		"err %v, json err %v, output %q", err, jerr, out)

	var ml pb.MemberListResponse
	c.okJSON(&ml, "member", "list")
	// Every instance is listed; find the one the client talks to.
	var m *pb.Member
	for _, mm := range ml.Members {
		if mm.ID == st2.Header.MemberId {
			m = mm
		}
	}
	if m == nil {
		t.Fatalf("member list %v has no member %x", ml.Members, st2.Header.MemberId)
	}
	leaderListed := false
	for _, mm := range ml.Members {
		leaderListed = leaderListed || mm.ID == st2.Leader
	}
	c.check("member list has the leader", leaderListed, "leader %x not in %v", st2.Leader, ml.Members)
	c.check("member list", strings.HasPrefix(m.Name, "conformance") && !m.IsLearner,
		"member %+v, want name conformance*", m)
	scheme := "http://"
	if c.tls != nil {
		scheme = "https://"
	}
	c.check("member list client URLs", slices.Contains(m.ClientURLs, scheme+c.endpoint), "clientURLs %v, want %s%s", m.ClientURLs, scheme, c.endpoint)
	simple := c.ok("member", "list")
	c.check("member list simple", strings.Contains(simple, fmt.Sprintf("%x, started, %s, ", m.ID, m.Name)), "output %q", simple)

	snap := filepath.Join(c.t.TempDir(), "backup.db")
	saved := c.ok("snapshot", "save", snap)
	info, err := os.Stat(snap)
	c.check("snapshot save", strings.Contains(saved, "Snapshot saved at "+snap) && err == nil && info.Size() > 0, "output %q, file: %v", saved, err)
}

// watchEtcdctl runs `etcdctl watch --prefix /w/` in the background, puts a
// key under /w/ and reads the event from its stdout. The watch starts at
// rev (the revision the put will get), so the event is delivered however
// the watch registration and the put race.
func watchEtcdctl(c *ctl, rev int64) {
	t := c.t
	ctx, cancel := context.WithTimeout(t.Context(), etcdctlCmdTimeout)
	defer cancel()
	cmd := c.command(ctx, "watch", "--prefix", "--rev", strconv.FormatInt(rev, 10), "/w/")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		_ = cmd.Process.Kill()
		err := cmd.Wait()
		t.Logf("$ etcdctl watch --prefix --rev %d /w/ (killed: %v)\n%s", rev, err, indent(stderr.String()))
	}()

	putRev := c.putRev("/w/x", "hello")
	c.check("watch put revision", putRev == rev, "put got revision %d, watch started at %d", putRev, rev)
	c.equal("del /w/x", c.ok("del", "/w/x"), "1\n")

	want := []string{"PUT", "/w/x", "hello", "DELETE", "/w/x", ""}
	var got []string
	deadline := time.After(15 * time.Second)
	for len(got) < len(want) {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("watch exited early; read %q; stderr:\n%s", got, stderr.String())
			}
			got = append(got, l)
		case <-deadline:
			t.Fatalf("watch: timed out; read %q, want %q", got, want)
		}
	}
	t.Logf("watch output: %q", got)
	c.check("watch events", slices.Equal(got, want), "got %q, want %q", got, want)
}

func endpointStatus(c *ctl) *pb.StatusResponse {
	c.t.Helper()
	var st []struct {
		Endpoint string
		Status   *pb.StatusResponse
	}
	c.okJSON(&st, "endpoint", "status")
	if len(st) != 1 || st[0].Status == nil || st[0].Status.Header == nil {
		c.t.Fatalf("endpoint status: %+v", st)
	}
	c.check("status endpoint", st[0].Endpoint == c.endpoint, "endpoint %q, want %q", st[0].Endpoint, c.endpoint)
	return st[0].Status
}

// versionAtLeast reports whether v (major.minor.patch[-suffix]) is at least
// major.minor.patch.
func versionAtLeast(v string, major, minor, patch int) bool {
	v, _, _ = strings.Cut(v, "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		n[i] = x
	}
	return slices.Compare(n[:], []int{major, minor, patch}) >= 0
}
