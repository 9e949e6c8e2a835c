package kube

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeAPIServer runs a kube-apiserver over each setup and drives it
// with client-go. What an Axon setup shows that the etcd control does not
// — a 5xx answer, a klog error line, a 410 on a resumed watch, a failed
// read or a non-retryable failed write under faults — fails it.
func TestKubeAPIServer(t *testing.T) {
	bin, err := apiserverBinary()
	if err != nil {
		t.Fatal(err)
	}
	cred := newCredentials(t)
	var control *report
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			if s.name == setups[0].name {
				control = newReport(s.name)
				runSetup(t, bin, cred, s, control)
				return
			}
			if control == nil { // -run left the control out: run it here
				control = newReport(setups[0].name)
				t.Run("etcd-control", func(t *testing.T) { runSetup(t, bin, cred, setups[0], control) })
			}
			r := newReport(s.name)
			runSetup(t, bin, cred, s, r)
			compare(t, control, r)
		})
	}
}

// env is what the checks of one setup share.
type env struct {
	setup string
	api   *apiServer
	log   *apiLog
	rec   *recorder
	store store
	trace *requestTrace // nil for etcd
	clients
	report *report
	// firstRV is the resourceVersion of a list right after the first
	// start: compaction removes it within a minute.
	firstRV string
}

// phase names the running check in the apiserver's log and in what the
// recorder keeps.
func (e *env) phase(p string) {
	e.log.setPhase(p)
	e.rec.setPhase(p)
	e.report.setPhase(p)
}

// check is one part of the suite.
type check struct {
	name string
	run  func(t *testing.T, e *env)
	// faults says the check needs a store of several members.
	faults bool
}

// runSetup starts the setup's store and an apiserver over it, runs the
// checks, and fills r with what it saw.
func runSetup(t *testing.T, bin string, cred credentials, s setup, r *report) {
	t.Logf("%s: %s", s.name, s.about)
	began := time.Now()
	st := s.start(t)
	r.times["store start"] = time.Since(began)
	var tr *requestTrace
	if ts, ok := st.(traced); ok {
		tr = ts.trace()
	}
	revs, err := watchRevisions(st.endpoints(), tr)
	if err != nil {
		t.Fatalf("watching the store: %v", err)
	}
	log := newAPILog(t)
	e := &env{setup: s.name, log: log, rec: &recorder{}, store: st, report: r, trace: tr}
	e.api = newAPIServer(t, bin, cred, st.endpoints(), log)
	// Whatever happens below, the report gets what the apiserver logged
	// and what the clients were answered.
	defer func() {
		e.phase("end")
		e.collectMetrics(t)
		e.api.stop()
		r.collect(e)
		r.note(revs.stop())
		r.times["total"] = time.Since(began)
		t.Logf("%s: kube-apiserver log: %s", s.name, log.path)
		r.log(t)
	}()
	e.phase("apiserver start")
	e.api.start(t)
	r.times["apiserver start"] = time.Since(began) - r.times["store start"]
	e.clients = newClients(t, e.api, e.rec)
	first, err := e.cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("first list: %v", err)
	}
	e.firstRV = first.ResourceVersion

	_, isCluster := st.(cluster)
	for _, c := range checks {
		if c.faults && !isCluster {
			continue
		}
		e.phase(c.name)
		began := time.Now()
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
		r.times[c.name] = time.Since(began)
	}
}

// collectMetrics keeps the apiserver's own count of the 5xx it answered
// (to any client, its loopback clients too) before the process goes.
func (e *env) collectMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := e.api.metrics5xx(ctx)
	if err != nil {
		t.Logf("apiserver metrics: %v", err)
		return
	}
	for series, n := range m {
		e.report.add(observation{kind: kindMetrics5xx, key: series, detail: fmt.Sprintf("%s: %g (apiserver start %d)", series, n, e.api.starts)})
	}
}

// The kinds of observation: each is a failure for an Axon setup unless
// the etcd control shows the same kind and key.
const (
	kindHTTP5xx    = "HTTP 5xx answered to the suite"
	kindKlogError  = "kube-apiserver klog error line"
	kindMetrics5xx = "5xx in apiserver_request_total"
	kindWatchGone  = "410 Gone on a resumed watch"
	kindFaultRead  = "failed read under store faults"
	kindFaultWrite = "failed write under store faults, not retryable"
	kindAnswer     = "answer to an edge request"
	kindNoWrite    = "store revision that holds no write"
)

// answer keeps how the apiserver answered an edge request, for the
// comparison with etcd.
func (e *env) answer(what string, err error) {
	got := "ok"
	if st, ok := err.(apierrors.APIStatus); ok {
		s := st.Status()
		got = fmt.Sprintf("%d %s: %s", s.Code, s.Reason, s.Message)
	} else if err != nil {
		got = err.Error()
	}
	e.report.add(observation{kind: kindAnswer, key: normalize(what + ": " + got), detail: what + ": " + got})
}

type observation struct {
	kind   string
	key    string // what is compared: normalized, without names, times, numbers
	phase  string
	detail string // one example, as seen
}

func newReport(setup string) *report {
	return &report{setup: setup, times: map[string]time.Duration{}}
}

// report is what one setup showed.
type report struct {
	setup string
	times map[string]time.Duration

	mu    sync.Mutex
	phase string
	obs   []observation
	notes []string // divergences that do not fail the setup
}

func (r *report) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf("[%s] %s", r.phase, s))
}

func (r *report) setPhase(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = p
}

func (r *report) add(o observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.phase == "" {
		o.phase = r.phase
	}
	r.obs = append(r.obs, o)
}

func (r *report) observations() []observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observation(nil), r.obs...)
}

// collect adds the apiserver's error lines and the clients' 5xx answers.
func (r *report) collect(e *env) {
	for _, l := range e.log.errorLines() {
		r.add(observation{kind: kindKlogError, key: normalizeKlog(l.text), phase: l.phase, detail: l.text})
	}
	for _, h := range e.rec.results() {
		r.add(observation{kind: kindHTTP5xx, key: normalize(fmt.Sprintf("%s %s: %d %s: %s", h.method, h.path, h.code, h.reason, h.msg)),
			phase: h.phase, detail: h.String()})
	}
}

// log writes the setup's timings and observations to the test log and a
// file next to the apiserver's log.
func (r *report) log(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s timings:", r.setup)
	for _, k := range slices.Sorted(maps.Keys(r.times)) {
		fmt.Fprintf(&b, " %s=%v", k, r.times[k].Round(100*time.Millisecond))
	}
	b.WriteString("\n")
	r.mu.Lock()
	for _, n := range r.notes {
		fmt.Fprintf(&b, "%s: note: %s\n", r.setup, n)
	}
	r.mu.Unlock()
	groups := group(r.observations())
	if len(groups) == 0 {
		fmt.Fprintf(&b, "%s: nothing observed\n", r.setup)
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "%s: %s ×%d in %s: %s\n", r.setup, g.kind, g.count, strings.Join(g.phases, ","), g.detail)
	}
	t.Log(b.String())
	_ = os.WriteFile(filepath.Join(t.ArtifactDir(), "observations.txt"), []byte(b.String()), 0o644)
}

// obsGroup is the observations of one kind and key.
type obsGroup struct {
	kind, key, detail string
	count             int
	phases            []string
}

func group(obs []observation) []obsGroup {
	idx := map[string]*obsGroup{}
	var order []string
	for _, o := range obs {
		id := o.kind + "\x00" + o.key
		g := idx[id]
		if g == nil {
			g = &obsGroup{kind: o.kind, key: o.key, detail: o.detail}
			idx[id] = g
			order = append(order, id)
		}
		g.count++
		if !slices.Contains(g.phases, o.phase) {
			g.phases = append(g.phases, o.phase)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return idx[order[i]].kind < idx[order[j]].kind })
	var out []obsGroup
	for _, id := range order {
		out = append(out, *idx[id])
	}
	return out
}

// compare fails r for every observation the control does not share, and
// logs the rest.
func compare(t *testing.T, control, r *report) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range control.observations() {
		seen[o.kind+"\x00"+o.key] = true
		if c := faultClass(o); c != "" {
			seen[c] = true
		}
	}
	for _, k := range etcdAlsoLogs {
		seen[kindKlogError+"\x00"+normalizeKlog(k)] = true
	}
	var diverge, same []string
	mine := map[string]bool{}
	for _, g := range group(r.observations()) {
		mine[g.kind+"\x00"+g.key] = true
		line := fmt.Sprintf("%s ×%d in %s:\n\t\t%s", g.kind, g.count, strings.Join(g.phases, ","), g.detail)
		if why, ok := knownDivergences[g.kind+"\x00"+g.key]; ok {
			t.Logf("%s: known divergence from etcd (%s):\n\t%s", r.setup, why, line)
			continue
		}
		switch c := faultClass(observation{kind: g.kind, key: g.key, phase: g.phases[0], detail: g.detail}); {
		case seen[g.kind+"\x00"+g.key]:
			same = append(same, line)
		case c != "" && len(g.phases) == 1 && seen[c]:
			same = append(same, line+"\n\t\t(etcd shows the same class: "+c+")")
		default:
			diverge = append(diverge, line)
		}
	}
	var only []string
	for _, g := range group(control.observations()) {
		if !mine[g.kind+"\x00"+g.key] {
			only = append(only, fmt.Sprintf("%s ×%d in %s:\n\t\t%s", g.kind, g.count, strings.Join(g.phases, ","), g.detail))
		}
	}
	if len(same) > 0 {
		t.Logf("%s shows these as etcd does:\n\t%s", r.setup, strings.Join(same, "\n\t"))
	}
	if len(only) > 0 {
		t.Logf("etcd shows these, %s does not:\n\t%s", r.setup, strings.Join(only, "\n\t"))
	}
	if len(diverge) > 0 {
		t.Errorf("%s diverges from etcd (%d):\n\t%s", r.setup, len(diverge), strings.Join(diverge, "\n\t"))
	}
}

// knownDivergences are divergences from etcd that are known and tracked:
// logged, not failed, so that the rest of the suite guards CI. Delete an
// entry once it is fixed; the suite then fails if it comes back.
var knownDivergences = map[string]string{}

// storeCutOff matches the errors a store request in flight gets when the
// store member serving it is killed: etcd's raft gives up waiting
// ("request timed out"); a killed Axon instance's connection drops
// (Unavailable, EOF). Both are the apiserver's 500 for a request whose
// outcome is unknown.
// "leader changed" is etcd's ErrLeaderChanged, which Axon answers to the
// requests a leader held when it lost the lead: in leader_faults, those a
// takeover after the kill cut off.
var storeCutOff = regexp.MustCompile(`request timed out|error reading from server|code = Unavailable|connection refused|transport is closing|connection reset|etcdserver: leader changed`)

// faultClass is the class an observation falls in, or "": a 5xx whose
// store request was cut off while a store member was killed is the same
// failure whatever the store's words for it; the apiserver's own 5xx
// count (read once, at the end) is compared by code alone. Every 5xx
// the suite's clients get and every error the apiserver logs is still
// compared in detail.
func faultClass(o observation) string {
	switch o.kind {
	case kindHTTP5xx, kindKlogError, kindFaultWrite:
		if strings.HasPrefix(o.phase, "leader_faults") && storeCutOff.MatchString(o.detail) {
			return o.kind + "\x00store request cut off by a killed member"
		}
	case kindMetrics5xx:
		if m := metricsCode.FindString(o.key); m != "" {
			return o.kind + "\x00" + m
		}
	}
	return ""
}

var metricsCode = regexp.MustCompile(`\bcode=5[0-9]+`)

// etcdAlsoLogs are klog error lines kube-apiserver printed over the etcd
// control in earlier runs, and not in every run: races of its own start
// (controllers that start before the namespaces they write to exist), and
// its cancels of its own requests. They count as shown by etcd even when
// this run's control missed them.
//
// The two "context canceled" lines are the apiserver's own cancels
// (clientv3 says context.Canceled only when its caller's context ended):
// at start it builds a serviceaccounts storage and destroys it at once for
// one with token support, canceling the watch cache's initial list if that
// list is still running; at stop it cancels a compaction in flight. Over
// etcd both show whenever that request takes long enough (README.md,
// "The apiserver's own cancels").
var etcdAlsoLogs = []string{
	`E1202 13:50:51.858419   25368 watcher.go:458] failed to sync with latest state: context canceled`,
	`E1202 16:20:18.849006   11270 compact.go:207] etcd: endpoint ([http://127.0.0.1:43379]) compact failed: context canceled`,
	`E1123 20:35:50.260540   25035 controller.go:208] "Failed to ensure lease exists, will retry" err="namespaces \"kube-system\" not found" interval="200ms"`,
	`E1123 20:31:56.411467   24143 controller.go:156] "Error while syncing ConfigMap" err="namespaces \"kube-system\" not found" logger="UnhandledError" configmap="kube-system/kube-apiserver-legacy-service-account-token-tracking"`,
	`E1123 20:52:20.438939   29167 repairip.go:383] "Unhandled Error" err="the ClusterIP [IPv4]: 10.0.0.1 for Service default/kubernetes is not allocated; repairing" logger="UnhandledError"`,
}

var (
	uuidLike = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	hexLike  = regexp.MustCompile(`\b[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*\b`)
	number   = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	// klogHeader is "E1123 20:14:05.123456   12345 " before file:line].
	klogHeader = regexp.MustCompile(`^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ `)
)

// normalize keeps what says which error it is and drops what differs
// from run to run: numbers, IDs, hashes.
func normalize(s string) string {
	s = uuidLike.ReplaceAllString(s, "<id>")
	s = hexLike.ReplaceAllString(s, "<hex>")
	s = number.ReplaceAllString(s, "#")
	if len(s) > 400 {
		s = s[:400]
	}
	return s
}

func normalizeKlog(line string) string {
	line = endpointList.ReplaceAllString(klogHeader.ReplaceAllString(line, ""), "endpoint (<endpoints>)")
	return normalize(line)
}

// endpointList is the apiserver's etcd client's endpoints in a log line,
// which name each setup's own addresses, one or three of them.
var endpointList = regexp.MustCompile(`endpoint \(\[[^\]]*\]\)`)
