package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/axon-kv/axon/internal/etcdtest"
)

// alertRules is etcd's alerting rules, rendered from etcd's mixin.
const alertRules = "../../monitoring/etcd-mixin/alerts.yaml"

// Scrape jobs; each matches the rules' selector job=~".*etcd.*".
const (
	jobEtcd  = "etcd"            // embedded etcd 3.7.3
	jobAxon  = "axon-etcd"       // axon serve under the same load
	jobQuota = "axon-quota-etcd" // axon serve with a tiny quota, filled
)

// TestEtcdAlertRules runs a real Prometheus (Debian's package) with
// etcd's own alerting rules, scraping an embedded etcd and Axon under the
// same short write, read and watch load, and a second Axon whose tiny
// quota is filled. Through Prometheus' HTTP API it checks that every rule
// evaluates without error, that every series selector in every rule
// returns data on Axon wherever it does on etcd, that the latency
// histograms the rules read (fsync, backend commit, gRPC) give a 99th
// percentile on both, and that etcdDatabaseQuotaLowSpace's expression is
// true for the filled Axon and for no other.
func TestEtcdAlertRules(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("AXON_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("prometheus is not on PATH (apt-get install prometheus)")
		}
		t.Skip("prometheus is not on PATH: apt-get install prometheus to run etcd's alert rules against Axon")
	}
	rules, err := filepath.Abs(alertRules)
	if err != nil {
		t.Fatal(err)
	}

	etcdURL := etcdtest.StartWith(t, func(cfg *embed.Config) { cfg.Metrics = "extensive" })
	axonClient, axonMetrics := serveForAlerts(t, "--metrics", "extensive")
	const quota = 32 << 20
	quotaClient, quotaMetrics := serveForAlerts(t, "--quota-backend-bytes", strconv.Itoa(quota))

	prom := startPrometheus(t, promBin, rules, map[string]string{
		jobEtcd:  etcdURL.Host,
		jobAxon:  axonMetrics,
		jobQuota: quotaMetrics,
	})

	// Prometheus hands out its first targets some seconds after it starts:
	// load only once every target is scraped, so that rates see it.
	prom.awaitScrapes(t, 1)
	etcdCli := newClient(t, etcdURL.Host)
	axonCli := newClient(t, axonClient)
	var wg sync.WaitGroup
	for _, cli := range []*clientv3.Client{etcdCli, axonCli} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			load(t, cli, 4*time.Second)
		}()
	}
	fillQuota(t, newClient(t, quotaClient))
	wg.Wait()
	// Both /health endpoints once, for etcd's health counters.
	for _, addr := range []string{etcdURL.Host, axonMetrics} {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
		}
	}
	// Three scrapes of every target after the load, so that rates have
	// samples on both sides of it.
	prom.awaitScrapes(t, 3)

	rs := prom.rules(t)
	if len(rs) != 15 {
		t.Fatalf("prometheus loaded %d rules from %s, want etcd's 15", len(rs), alertRules)
	}
	prom.awaitEvaluated(t)
	selectors := map[string]bool{}
	for _, r := range rs {
		for _, sel := range seriesSelectors(r.Query) {
			selectors[sel] = true
		}
	}
	var sorted []string
	for sel := range selectors {
		sorted = append(sorted, sel)
	}
	sort.Strings(sorted)
	for _, sel := range sorted {
		onEtcd := prom.count(t, withJob(sel, jobEtcd))
		onAxon := prom.count(t, withJob(sel, jobAxon))
		t.Logf("%-95s etcd %3d series, axon %3d", sel, onEtcd, onAxon)
		if onEtcd > 0 && onAxon == 0 {
			t.Errorf("%s: data on etcd (%d series), none on Axon", sel, onEtcd)
		}
	}

	// The latency histograms the rules read saw the load on both sides.
	for _, h := range []string{"etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds", "grpc_server_handling_seconds"} {
		for _, job := range []string{jobEtcd, jobAxon} {
			q := fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(%s_bucket{job=%q}[5m])))`, h, job)
			res := prom.query(t, q)
			v := math.NaN()
			if len(res) == 1 {
				v, _ = strconv.ParseFloat(fmt.Sprint(res[0].Value[1]), 64)
			}
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s: %v, want a latency", q, v)
			}
		}
	}

	var lowSpace string
	for _, r := range rs {
		if r.Name == "etcdDatabaseQuotaLowSpace" {
			lowSpace = r.Query
		}
	}
	res := prom.query(t, lowSpace)
	fired := map[string]bool{}
	for _, s := range res {
		fired[s.Metric["job"]] = true
	}
	if !fired[jobQuota] {
		t.Errorf("etcdDatabaseQuotaLowSpace (%s) is not true for the Axon whose quota is full: %v", strings.TrimSpace(lowSpace), res)
	}
	if fired[jobAxon] || fired[jobEtcd] {
		t.Errorf("etcdDatabaseQuotaLowSpace is true where the quota is not full: %v", res)
	}
}

// serveForAlerts runs axon serve in this process with args added and
// returns its client and metrics addresses once it answers.
func serveForAlerts(t *testing.T, args ...string) (client, metrics string) {
	t.Helper()
	client, metrics = freeAddr(t), freeAddr(t)
	serveInProcess(t, append([]string{"--data-dir", t.TempDir(), "--listen-client-urls", "http://" + client,
		"--listen-metrics-urls", "http://" + metrics, "--memory-budget-bytes", "-1", "--log-level", "warn"}, args...)...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client, metrics
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("axon serve %v not ready: %v", args, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// load runs writes, reads, txns, deletes and a watch against cli for d.
func load(t *testing.T, cli *clientv3.Client, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	wch := cli.Watch(ctx, "/load/", clientv3.WithPrefix())
	go func() {
		for range wch {
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 2000; i++ {
				key := fmt.Sprintf("/load/%d/%d", w, i%50)
				if _, err := cli.Put(ctx, key, strings.Repeat("v", 100)); err != nil && ctx.Err() == nil {
					if err.Error() == rpctypes.ErrTimeout.Error() {
						// Either server may answer so when the suite's
						// parallel packages starve it; the load is
						// for the metrics, which count the timeout too.
						t.Logf("put: %v", err)
						continue
					}
					t.Errorf("put: %v", err)
					return
				}
				_, _ = cli.Get(ctx, key)
				_, _ = cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), ">", 0)).Then(clientv3.OpPut(key, "w")).Commit()
				if i%10 == 0 {
					_, _ = cli.Delete(ctx, key)
				}
			}
		}()
	}
	wg.Wait()
}

// fillQuota writes until the NOSPACE alarm refuses writes (bounded);
// some writes must fit first, or the quota was full from the start.
func fillQuota(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	value := strings.Repeat("x", 256<<10)
	for i := range 400 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", i), value)
		cancel()
		if err != nil {
			if err.Error() != rpctypes.ErrNoSpace.Error() {
				t.Fatalf("filling the quota: put %d: %v", i, err)
			}
			if i < 10 {
				t.Fatalf("the quota was full after %d puts: too small for an empty store", i)
			}
			t.Logf("NOSPACE after %d puts of 256 KiB", i)
			return
		}
	}
	t.Fatal("400 puts of 256 KiB did not fill the quota")
}

// promServer is a Prometheus server run for one test.
type promServer struct {
	api  string // http://host:port
	jobs []string
}

func startPrometheus(t *testing.T, bin, rules string, targets map[string]string) *promServer {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
	fmt.Fprintf(&cfg, "rule_files:\n  - %q\nscrape_configs:\n", rules)
	p := &promServer{}
	for job, addr := range targets {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", job, addr)
		p.jobs = append(p.jobs, job)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p.api = "http://" + addr
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.api + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// apiGet calls Prometheus' HTTP API and decodes its data into out.
func (p *promServer) apiGet(t *testing.T, path string, params url.Values, out any) {
	t.Helper()
	resp, err := http.Get(p.api + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if body.Status != "success" {
		t.Fatalf("%s %v: %s", path, params, body.Error)
	}
	if err := json.Unmarshal(body.Data, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// query evaluates an instant PromQL query now.
func (p *promServer) query(t *testing.T, q string) []sample {
	t.Helper()
	var data struct {
		Result []sample `json:"result"`
	}
	p.apiGet(t, "/api/v1/query", url.Values{"query": {q}}, &data)
	return data.Result
}

// count is how many series an instant selector returns.
func (p *promServer) count(t *testing.T, selector string) int { return len(p.query(t, selector)) }

// awaitScrapes waits until every job has n more successful scrapes.
func (p *promServer) awaitScrapes(t *testing.T, n int) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for _, job := range p.jobs {
		for {
			res := p.query(t, fmt.Sprintf(`count_over_time(up{job=%q}[%ds]) and up{job=%q} == 1`, job, int(time.Since(start).Seconds())+1, job))
			if len(res) == 1 {
				if v, _ := strconv.Atoi(fmt.Sprint(res[0].Value[1])); v >= n {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s: fewer than %d scrapes in %v: %v", job, n, time.Since(start), res)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

type rule struct {
	Name           string `json:"name"`
	Query          string `json:"query"`
	Health         string `json:"health"`
	LastError      string `json:"lastError"`
	LastEvaluation string `json:"lastEvaluation"`
}

// rules lists the loaded rules.
func (p *promServer) rules(t *testing.T) []rule {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	p.apiGet(t, "/api/v1/rules", url.Values{"type": {"alert"}}, &data)
	var out []rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// awaitEvaluated waits until every rule was evaluated after the load,
// and fails on any that did not evaluate cleanly.
func (p *promServer) awaitEvaluated(t *testing.T) {
	t.Helper()
	since := time.Now()
	deadline := since.Add(10 * time.Second)
	for {
		pending := 0
		for _, r := range p.rules(t) {
			at, err := time.Parse(time.RFC3339Nano, r.LastEvaluation)
			if err != nil || at.Before(since) {
				pending++
				continue
			}
			if r.Health != "ok" || r.LastError != "" {
				t.Errorf("rule %s: health %q: %s", r.Name, r.Health, r.LastError)
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rules not evaluated in %v", pending, time.Since(since))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// selectorRE finds the series selectors of the mixin's expressions, all
// written as name{matchers}.
var selectorRE = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)

// seriesSelectors returns the series selectors of a PromQL expression.
func seriesSelectors(expr string) []string {
	var out []string
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1]+"{"+strings.TrimSpace(m[2])+"}")
	}
	return out
}

// withJob narrows a selector to one scrape job.
func withJob(selector, job string) string {
	return strings.TrimSuffix(selector, "}") + fmt.Sprintf(", job=%q}", job)
}
