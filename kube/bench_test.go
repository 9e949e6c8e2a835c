package kube

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestAPIServerBench measures kube-apiserver over Axon against the same
// apiserver over the etcd control, all systems up at once and measured in
// turn: every measurement runs on each system, round after round, and
// the order of the systems rotates each round, so that a slow spell of
// the machine does not fall on one system only. It runs only with
// -apiserver-bench (`make bench-kube`).
//
// Every apiserver here runs with the watch cache off for ConfigMaps
// (--watch-cache-sizes=configmaps#0): since 1.34 a LIST at
// resourceVersion "" is a consistent read served by the watch cache
// (after one progress-notify round trip to the store), so without this
// the LISTs would not reach the store. A watch on ConfigMaps is then
// served by a store watch of its own; the Secrets watch goes through the
// watch cache, as most watches do. Compaction runs at the apiserver's
// default interval (5 min) instead of the suite's 10 s.
func TestAPIServerBench(t *testing.T) {
	if !*benchRun {
		t.Skip("an apiserver benchmark: run with -apiserver-bench (make bench-kube)")
	}
	names := []string{}
	for n := range strings.SplitSeq(*benchAxon, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		t.Fatal("-apiserver-bench-axon names no Axon setup")
	}
	for _, n := range names {
		if setupNamed(n) == nil || n == setups[0].name {
			t.Fatalf("-apiserver-bench-axon: %q is not an Axon setup", n)
		}
	}
	names = append(names, setups[0].name) // the etcd control
	bin, err := apiserverBinary()
	if err != nil {
		t.Fatal(err)
	}
	cred := newCredentials(t)
	began := time.Now()
	// Each system's store and apiserver live in a subtest of their own
	// (their logs go to its artifact directory); the measurements run in
	// the innermost one, with every system up.
	startBenchSystems(t, bin, cred, names, nil, func(t *testing.T, systems []*benchSystem) {
		b := &bench{systems: systems, began: began}
		b.run(t)
	})
}

var (
	benchRun     = flag.Bool("apiserver-bench", false, "run TestAPIServerBench, kube-apiserver over Axon vs over etcd")
	benchOut     = flag.String("apiserver-bench-out", "", "also write TestAPIServerBench's table to this file")
	benchAxon    = flag.String("apiserver-bench-axon", "axon-badger,axon-tikv", "Axon setups TestAPIServerBench compares with etcd, comma-separated (also axon-tikv-procs: three axon serve processes over the tikv-server endpoint)")
	benchRounds  = flag.Int("apiserver-bench-rounds", 2, "rounds: each measurement runs this many times per system, the systems' order rotating")
	benchCreates = flag.Int("apiserver-bench-creates", 5000, "objects one create run makes at most (per system, round, kind and concurrency)")
	benchCTime   = flag.Duration("apiserver-bench-create-time", 20*time.Second, "time bound of one create run")
	benchObjects = flag.Int("apiserver-bench-objects", 10000, "ConfigMaps the LIST measurements read")
	benchReps    = flag.Int("apiserver-bench-list-reps", 5, "LISTs per system and round, for each kind of LIST")
	benchRate    = flag.Int("apiserver-bench-watch-rate", 100, "creates per second under the watch")
	benchWTime   = flag.Duration("apiserver-bench-watch-time", 5*time.Second, "how long the writer under the watch runs")
)

func setupNamed(name string) *setup {
	for i := range setups {
		if setups[i].name == name {
			return &setups[i]
		}
	}
	return nil
}

// benchSystem is one store with an apiserver over it.
type benchSystem struct {
	name string
	api  *apiServer
	log  *apiLog

	mu      sync.Mutex
	clients []kubernetes.Interface
}

func startBenchSystems(t *testing.T, bin string, cred credentials, names []string, up []*benchSystem, run func(*testing.T, []*benchSystem)) {
	if len(names) == 0 {
		run(t, up)
		return
	}
	s := setupNamed(names[0])
	t.Run(s.name, func(t *testing.T) {
		t.Logf("%s: %s", s.name, s.about)
		start := time.Now()
		st := s.start(t)
		log := newAPILog(t)
		api := newAPIServer(t, bin, cred, st.endpoints(), log)
		api.args = append(api.args,
			"--watch-cache-sizes=configmaps#0",
			"--etcd-compaction-interval=5m", // the default; the suite's is 10s
		)
		t.Cleanup(api.stop)
		api.start(t)
		t.Logf("%s: store and kube-apiserver up in %v; log %s", s.name, time.Since(start).Round(100*time.Millisecond), log.path)
		startBenchSystems(t, bin, cred, names[1:], append(up, &benchSystem{name: s.name, api: api, log: log}), run)
	})
}

// client returns the i-th of the system's clients. Each has a connection
// of its own (a Proxy func keeps client-go from sharing transports), as
// separate controllers would.
func (s *benchSystem) client(t *testing.T, i int) kubernetes.Interface {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.clients) <= i {
		cfg := &rest.Config{
			Host:            s.api.url,
			BearerToken:     s.api.token,
			TLSClientConfig: rest.TLSClientConfig{Insecure: true},
			QPS:             -1, // no client-side rate limit
			WarningHandler:  rest.NoWarnings{},
			UserAgent:       "axon-kube-bench",
			ContentConfig: rest.ContentConfig{
				ContentType:        "application/vnd.kubernetes.protobuf",
				AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
			},
			Proxy: func(*http.Request) (*url.URL, error) { return nil, nil },
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.clients = append(s.clients, cs)
	}
	return s.clients[i]
}

// sample is what one or more runs of a measurement on one system gave.
type sample struct {
	ok      int
	errs    int
	missing int // watch events that did not arrive
	elapsed time.Duration
	lat     []time.Duration
	rounds  []float64 // ops/s of each run, for throughput
	errText string    // one error, as seen
}

func (s *sample) add(o sample) {
	s.ok += o.ok
	s.errs += o.errs
	s.missing += o.missing
	s.elapsed += o.elapsed
	s.lat = append(s.lat, o.lat...)
	if o.elapsed > 0 {
		s.rounds = append(s.rounds, float64(o.ok)/o.elapsed.Seconds())
	}
	if s.errText == "" {
		s.errText = o.errText
	}
}

func (s *sample) opsPerSec() float64 {
	if s.elapsed <= 0 {
		return math.NaN()
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// pct is the nearest-rank percentile p (0 < p <= 1) of the latencies.
func (s *sample) pct(p float64) (time.Duration, bool) {
	if len(s.lat) == 0 {
		return 0, false
	}
	l := slices.Clone(s.lat)
	slices.Sort(l)
	i := max(int(math.Ceil(p*float64(len(l))))-1, 0)
	return l[i], true
}

type measurement struct {
	name       string
	throughput bool // report ops/s besides p50 and p99
	run        func(ctx context.Context, t *testing.T, s *benchSystem, round int) sample
}

type bench struct {
	systems []*benchSystem
	began   time.Time
	results [][]sample // [measurement][system]
	errs0   map[string]int
}

const (
	nsCreate = "bench-create"
	nsList   = "bench-list"
	nsWatch  = "bench-watch"
)

func (b *bench) run(t *testing.T) {
	ctx := t.Context()
	rounds := max(*benchRounds, 1)
	b.errs0 = map[string]int{}
	for _, s := range b.systems {
		b.prepare(ctx, t, s)
		b.errs0[s.name] = len(s.log.errorLines())
	}
	mss := b.measurements()
	b.results = make([][]sample, len(mss))
	for mi, m := range mss {
		b.results[mi] = make([]sample, len(b.systems))
		for r := range rounds {
			for k := range b.systems {
				si := (k + r) % len(b.systems)
				s := b.systems[si]
				runtime.GC()
				s.log.setPhase(fmt.Sprintf("bench %s round %d", m.name, r))
				began := time.Now()
				got := m.run(ctx, t, s, r)
				t.Logf("%s round %d on %s: %s (%v)", m.name, r, s.name, brief(m, got), time.Since(began).Round(100*time.Millisecond))
				b.results[mi][si].add(got)
				if got.errs > 0 {
					t.Errorf("%s round %d on %s: %d errors, e.g. %s", m.name, r, s.name, got.errs, got.errText)
				}
				if got.missing > 0 {
					t.Errorf("%s round %d on %s: %d watch events missing", m.name, r, s.name, got.missing)
				}
				sleep(ctx, time.Second) // let the apiserver settle
			}
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
	table := b.table(mss, rounds)
	t.Log("\n" + table)
	if *benchOut != "" {
		if err := os.MkdirAll(filepath.Dir(*benchOut), 0o755); err != nil {
			t.Error(err)
		} else if err := os.WriteFile(*benchOut, []byte(table), 0o644); err != nil {
			t.Error(err)
		} else {
			t.Logf("table written to %s", *benchOut)
		}
	}
}

func brief(m measurement, s sample) string {
	p50, _ := s.pct(0.5)
	p99, _ := s.pct(0.99)
	out := fmt.Sprintf("n=%d p50=%s p99=%s", len(s.lat), ms(p50), ms(p99))
	if m.throughput {
		out = fmt.Sprintf("%d in %v = %.0f ops/s, %s", s.ok, s.elapsed.Round(time.Millisecond), s.opsPerSec(), out)
	}
	if s.errs > 0 {
		out += fmt.Sprintf(", %d errors", s.errs)
	}
	return out
}

// prepare makes the namespaces and the ConfigMaps the LISTs read.
func (b *bench) prepare(ctx context.Context, t *testing.T, s *benchSystem) {
	s.log.setPhase("bench prepare")
	cs := s.client(t, 0)
	for _, ns := range []string{nsCreate, nsList, nsWatch} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: create namespace %s: %v", s.name, ns, err)
		}
	}
	// Pods need the namespace's default ServiceAccount (the ServiceAccount
	// admission plugin), which kube-controller-manager would make.
	_, err := cs.CoreV1().ServiceAccounts(nsCreate).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("%s: create service account: %v", s.name, err)
	}
	n := *benchObjects
	got := creates(ctx, t, s, 32, n, 10*time.Minute, "l-", func(ctx context.Context, cs kubernetes.Interface, name string) error {
		_, err := cs.CoreV1().ConfigMaps(nsList).Create(ctx, benchConfigMap(name), metav1.CreateOptions{})
		return err
	})
	t.Logf("%s: made %d ConfigMaps for the LISTs in %v (%.0f/s, 32 clients), %d errors", s.name, got.ok, got.elapsed.Round(100*time.Millisecond), got.opsPerSec(), got.errs)
	if got.ok != n {
		t.Fatalf("%s: made %d of %d ConfigMaps for the LISTs; e.g. %s", s.name, got.ok, n, got.errText)
	}
}

// payload is 1 KiB of ConfigMap data.
var payload = strings.Repeat("0123456789abcdef", 64)

func benchConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"payload": payload}}
}

func benchPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}}},
	}
}

func (b *bench) measurements() []measurement {
	var out []measurement
	for _, kind := range []string{"ConfigMap", "Pod"} {
		create := createConfigMap
		name := "create ConfigMap 1KiB"
		if kind == "Pod" {
			create, name = createPod, "create Pod"
		}
		for _, c := range []int{32, 128} {
			out = append(out, measurement{name: fmt.Sprintf("%s ×%d", name, c), throughput: true, run: func(ctx context.Context, t *testing.T, s *benchSystem, round int) sample {
				prefix := fmt.Sprintf("%s-%d-r%d-", strings.ToLower(kind[:1]), c, round)
				warmUp(ctx, t, s, c, prefix+"warm-", create)
				return creates(ctx, t, s, c, *benchCreates, *benchCTime, prefix, create)
			}})
		}
	}
	out = append(out,
		measurement{name: fmt.Sprintf("LIST %d ConfigMaps, rv=\"\", unpaginated", *benchObjects), run: func(ctx context.Context, t *testing.T, s *benchSystem, _ int) sample {
			return lists(ctx, t, s, 0)
		}},
		measurement{name: fmt.Sprintf("LIST %d ConfigMaps, rv=\"\", limit 500", *benchObjects), run: func(ctx context.Context, t *testing.T, s *benchSystem, _ int) sample {
			return lists(ctx, t, s, 500)
		}},
		measurement{name: "watch delivery, ConfigMaps (store watch)", run: func(ctx context.Context, t *testing.T, s *benchSystem, round int) sample {
			return watchDelivery(ctx, watchConfigMaps(s.client(t, 0), s.client(t, 1)), fmt.Sprintf("wc-r%d-", round))
		}},
		measurement{name: "watch delivery, Secrets (watch cache)", run: func(ctx context.Context, t *testing.T, s *benchSystem, round int) sample {
			return watchDelivery(ctx, watchSecrets(s.client(t, 0), s.client(t, 1)), fmt.Sprintf("ws-r%d-", round))
		}},
	)
	return out
}

// requestTimeout bounds every request of the benchmark.
const requestTimeout = 30 * time.Second

func createConfigMap(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().ConfigMaps(nsCreate).Create(ctx, benchConfigMap(name), metav1.CreateOptions{})
	return err
}

func createPod(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Pods(nsCreate).Create(ctx, benchPod(name), metav1.CreateOptions{})
	return err
}

// warmUp has each of c clients make one object, not counted, which opens
// its connection (again, if it was idle long enough to be closed).
func warmUp(ctx context.Context, t *testing.T, s *benchSystem, c int, prefix string, create func(context.Context, kubernetes.Interface, string) error) {
	var wg sync.WaitGroup
	var failed atomic.Int32
	for w := range c {
		cs := s.client(t, w)
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			if err := create(rctx, cs, fmt.Sprintf("%s%03d", prefix, w)); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Logf("%s: %d of %d warm-up creates failed", s.name, f, c)
	}
}

// creates runs c workers, each on its own client, that create the
// objects prefix000000 to prefix<n-1> between them until all are made or
// limit passed; requests in flight then finish.
func creates(ctx context.Context, t *testing.T, s *benchSystem, c, n int, limit time.Duration, prefix string, create func(context.Context, kubernetes.Interface, string) error) sample {
	var next atomic.Int64
	lats := make([][]time.Duration, c)
	errs := make([]int, c)
	errText := make([]string, c)
	began := time.Now()
	deadline := began.Add(limit)
	var wg sync.WaitGroup
	for w := range c {
		cs := s.client(t, w)
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, requestTimeout)
				t0 := time.Now()
				err := create(rctx, cs, fmt.Sprintf("%s%06d", prefix, i))
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs[w]++
					if errText[w] == "" {
						errText[w] = err.Error()
					}
					continue
				}
				lats[w] = append(lats[w], d)
			}
		})
	}
	wg.Wait()
	out := sample{elapsed: time.Since(began)}
	for w := range c {
		out.ok += len(lats[w])
		out.lat = append(out.lat, lats[w]...)
		out.errs += errs[w]
		if out.errText == "" {
			out.errText = errText[w]
		}
	}
	return out
}

// lists runs -apiserver-bench-list-reps LISTs of the ConfigMaps at
// resourceVersion "" (after one not counted), unpaginated (limit 0) or
// page by page, and checks each sees every ConfigMap.
func lists(ctx context.Context, t *testing.T, s *benchSystem, limit int64) sample {
	cms := s.client(t, 0).CoreV1().ConfigMaps(nsList)
	want := *benchObjects
	maxPages := 1
	if limit > 0 {
		maxPages = want/int(limit) + 2
	}
	var out sample
	listAll := func() (int, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		got, cont := 0, ""
		for range maxPages {
			l, err := cms.List(rctx, metav1.ListOptions{ResourceVersion: "", Limit: limit, Continue: cont})
			if err != nil {
				return got, err
			}
			got += len(l.Items)
			if cont = l.Continue; cont == "" {
				return got, nil
			}
		}
		return got, fmt.Errorf("more than %d pages of %d", maxPages, limit)
	}
	for i := range *benchReps + 1 {
		t0 := time.Now()
		got, err := listAll()
		d := time.Since(t0)
		if err == nil && got != want {
			err = fmt.Errorf("listed %d ConfigMaps, want %d", got, want)
		}
		if err != nil {
			out.errs++
			if out.errText == "" {
				out.errText = err.Error()
			}
			continue
		}
		if i > 0 {
			out.ok++
			out.lat = append(out.lat, d)
		}
	}
	return out
}

// watchTarget is a resource to watch in nsWatch and create objects of.
type watchTarget struct {
	list   func(context.Context) (string, error) // returns the resourceVersion
	watch  func(context.Context, metav1.ListOptions) (watch.Interface, error)
	create func(context.Context, string) error
}

// lister is a typed client of one resource in one namespace.
type lister[L metav1.ListInterface] interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// targetOf watches and lists through r and creates through create.
func targetOf[L metav1.ListInterface](r lister[L], create func(context.Context, string) error) watchTarget {
	return watchTarget{
		list: func(ctx context.Context) (string, error) {
			l, err := r.List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return "", err
			}
			return l.GetResourceVersion(), nil
		},
		watch:  r.Watch,
		create: create,
	}
}

// watchConfigMaps lists and watches on reader and creates on writer.
func watchConfigMaps(reader, writer kubernetes.Interface) watchTarget {
	w := writer.CoreV1().ConfigMaps(nsWatch)
	return targetOf(reader.CoreV1().ConfigMaps(nsWatch), func(ctx context.Context, name string) error {
		_, err := w.Create(ctx, benchConfigMap(name), metav1.CreateOptions{})
		return err
	})
}

// watchSecrets is watchConfigMaps for Secrets of the same payload.
func watchSecrets(reader, writer kubernetes.Interface) watchTarget {
	w := writer.CoreV1().Secrets(nsWatch)
	return targetOf(reader.CoreV1().Secrets(nsWatch), func(ctx context.Context, name string) error {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"payload": []byte(payload)}}
		_, err := w.Create(ctx, s, metav1.CreateOptions{})
		return err
	})
}

// watchDelivery watches nsWatch from a listed resourceVersion while one
// writer (another client) creates objects at -apiserver-bench-watch-rate
// for -apiserver-bench-watch-time, and measures from each create's
// request to its ADDED event's arrival at the watcher: the write's commit
// and the event's way through the store's watch and the apiserver. (The
// event often arrives before the create's own response.)
func watchDelivery(ctx context.Context, tg watchTarget, prefix string) sample {
	var out sample
	fail := func(err error) sample {
		out.errs++
		out.errText = err.Error()
		return out
	}
	rate := max(*benchRate, 1)
	n := max(int(float64(rate)*benchWTime.Seconds()), 1)
	wctx, cancel := context.WithTimeout(ctx, *benchWTime+2*time.Minute)
	defer cancel()
	// The writer's connection may have idled out: open it (again).
	if err := tg.create(wctx, "warm-"+strings.TrimSuffix(prefix, "-")); err != nil {
		return fail(fmt.Errorf("warm-up create: %w", err))
	}
	rv, err := tg.list(wctx)
	if err != nil {
		return fail(fmt.Errorf("list: %w", err))
	}
	tmo := int64((*benchWTime + 2*time.Minute).Seconds())
	wi, err := tg.watch(wctx, metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &tmo})
	if err != nil {
		return fail(fmt.Errorf("watch: %w", err))
	}
	defer wi.Stop()

	var mu sync.Mutex
	arrived := map[string]time.Time{}
	var watchErr error
	all := make(chan struct{})
	go func() {
		defer close(all)
		for ev := range wi.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				mu.Lock()
				watchErr = apierrors.FromObject(ev.Object)
				mu.Unlock()
				return
			}
			if ev.Type != watch.Added {
				continue
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil || !strings.HasPrefix(m.GetName(), prefix) {
				continue
			}
			mu.Lock()
			arrived[m.GetName()] = now
			done := len(arrived) == n
			mu.Unlock()
			if done {
				return
			}
		}
	}()

	answered := map[string]time.Time{}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(*benchWTime + 30*time.Second)
	for i := 0; i < n && time.Now().Before(deadline) && wctx.Err() == nil; i++ {
		<-tick.C
		name := fmt.Sprintf("%s%05d", prefix, i)
		rctx, rcancel := context.WithTimeout(wctx, requestTimeout)
		sent := time.Now()
		err := tg.create(rctx, name)
		rcancel()
		if err != nil {
			out.errs++
			if out.errText == "" {
				out.errText = err.Error()
			}
			continue
		}
		answered[name] = sent
	}
	// Wait for the rest of the events, up to 10 s.
	select {
	case <-all:
	case <-time.After(10 * time.Second):
	}
	wi.Stop()
	mu.Lock()
	defer mu.Unlock()
	if watchErr != nil {
		out.errs++
		out.errText = "watch: " + watchErr.Error()
	}
	for name, at := range answered {
		got, ok := arrived[name]
		if !ok {
			out.missing++
			continue
		}
		out.ok++
		out.lat = append(out.lat, got.Sub(at))
	}
	return out
}

// ms renders a duration in milliseconds.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// ratio is axon/etcd; with a value at or below zero (a watch event that
// came before the create's response) there is none.
func ratio(axon, etcd float64) string {
	if math.IsNaN(axon) || math.IsNaN(etcd) || etcd <= 0 || axon <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", axon/etcd)
}

// table renders the results: one row per figure, the etcd control's
// value, then each Axon setup's value and its ratio to etcd's.
func (b *bench) table(mss []measurement, rounds int) string {
	ctl := len(b.systems) - 1 // the etcd control comes last
	var sb strings.Builder
	fmt.Fprintf(&sb, "kube-apiserver over Axon vs over etcd (TestAPIServerBench), %s, %d CPUs, took %v\n",
		time.Now().Format("2006-01-02 15:04"), runtime.NumCPU(), time.Since(b.began).Round(time.Second))
	fmt.Fprintf(&sb, "rounds %d (systems alternate, order rotating); creates: at most %d objects or %v per run; LIST: %d ConfigMaps of 1 KiB, %d reps per round; watch: %d creates/s for %v\n",
		rounds, *benchCreates, *benchCTime, *benchObjects, *benchReps, *benchRate, *benchWTime)
	fmt.Fprintf(&sb, "ratio = Axon / etcd: above 1 is better for ops/s, below 1 is better for latencies\n\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "measurement\t\t" + b.systems[ctl].name + "\t"
	for _, s := range b.systems[:ctl] {
		head += s.name + "\t" + strings.TrimPrefix(s.name, "axon-") + "/etcd\t"
	}
	fmt.Fprintln(tw, head)
	for mi, m := range mss {
		res := b.results[mi]
		type fig struct {
			unit string
			val  func(*sample) (float64, bool)
		}
		var figs []fig
		if m.throughput {
			figs = append(figs, fig{"ops/s", func(s *sample) (float64, bool) { v := s.opsPerSec(); return v, !math.IsNaN(v) && s.ok > 0 }})
		}
		for _, p := range []float64{0.5, 0.99} {
			figs = append(figs, fig{fmt.Sprintf("p%.0f ms", p*100), func(s *sample) (float64, bool) {
				d, ok := s.pct(p)
				return float64(d) / float64(time.Millisecond), ok
			}})
		}
		for fi, f := range figs {
			name := ""
			if fi == 0 {
				name = m.name
			}
			ev, eok := f.val(&res[ctl])
			line := name + "\t" + f.unit + "\t" + num(ev, eok) + "\t"
			for si := range b.systems[:ctl] {
				av, aok := f.val(&res[si])
				r := "n/a"
				if aok && eok {
					r = ratio(av, ev)
				}
				line += num(av, aok) + "\t" + r + "\t"
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()

	sb.WriteString("\nper system: samples, errors, missing watch events, ops/s of each run\n")
	for mi, m := range mss {
		for si, s := range b.systems {
			r := b.results[mi][si]
			fmt.Fprintf(&sb, "  %s on %s: %d samples", m.name, s.name, len(r.lat))
			if r.errs > 0 {
				fmt.Fprintf(&sb, ", %d errors (e.g. %s)", r.errs, r.errText)
			}
			if r.missing > 0 {
				fmt.Fprintf(&sb, ", %d events missing", r.missing)
			}
			if m.throughput {
				var each []string
				for _, v := range r.rounds {
					each = append(each, fmt.Sprintf("%.0f", v))
				}
				fmt.Fprintf(&sb, ", runs %s ops/s", strings.Join(each, " "))
			}
			sb.WriteString("\n")
		}
	}
	for _, s := range b.systems {
		fmt.Fprintf(&sb, "kube-apiserver klog error lines during the measurements, %s: %d\n", s.name, len(s.log.errorLines())-b.errs0[s.name])
	}
	return sb.String()
}

func num(v float64, ok bool) string {
	switch {
	case !ok || math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
