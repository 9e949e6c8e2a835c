package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/axon-kv/axon/internal/etcdtest"
)

// Grafana dashboards kept in monitoring/.
const (
	axonDashboard = "../../monitoring/axon-dashboard.json"
	etcdDashboard = "../../monitoring/etcd-mixin/dashboard.json"
)

// TestGrafanaDashboards runs a real Prometheus (Debian's package)
// scraping an embedded etcd and axon serve under the same short load
// (writes, reads, txns, a watch, a lease kept alive), then runs every
// query of both dashboards in monitoring/ through Prometheus' HTTP API,
// with Grafana's template variables replaced by concrete values. Each
// query of Axon's dashboard must return data for Axon; each query of
// etcd's mixin dashboard must return data on Axon wherever it does on
// etcd. A query naming a metric Axon does not export thus fails.
func TestGrafanaDashboards(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("AXON_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("prometheus is not on PATH (apt-get install prometheus)")
		}
		t.Skip("prometheus is not on PATH: apt-get install prometheus to run the dashboards' queries against Axon")
	}
	axonExprs := dashboardExprs(t, axonDashboard)
	etcdExprs := dashboardExprs(t, etcdDashboard)

	etcdURL := etcdtest.StartWith(t, func(cfg *embed.Config) { cfg.Metrics = "extensive" })
	// A read memory bound, so that its gauges are exported.
	axonClient, axonMetrics := serveForAlerts(t, "--metrics", "extensive", "--read-memory-bytes", "67108864")

	noRules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(noRules, []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, promBin, noRules, map[string]string{
		jobEtcd: etcdURL.Host,
		jobAxon: axonMetrics,
	})
	prom.awaitScrapes(t, 1)

	// A watch and a kept-alive lease stay open through the scrapes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, cli := range []*clientv3.Client{newClient(t, etcdURL.Host), newClient(t, axonClient)} {
		wch := cli.Watch(ctx, "/dash/", clientv3.WithPrefix())
		go func() {
			for range wch {
			}
		}()
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatalf("grant: %v", err)
		}
		ka, err := cli.KeepAlive(ctx, lease.ID)
		if err != nil {
			t.Fatalf("keepalive: %v", err)
		}
		go func() {
			for range ka {
			}
		}()
		if _, err := cli.Put(ctx, "/dash/leased", "v", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatalf("put with lease: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			load(t, cli, 3*time.Second)
		}()
	}
	wg.Wait()
	prom.awaitScrapes(t, 3)

	// Grafana's variables, as Grafana would substitute them here.
	vars := func(job string) *strings.Replacer {
		return strings.NewReplacer(
			"$__rate_interval", "1m", "${__rate_interval}", "1m",
			"$__interval", "15s", "${__interval}", "15s",
			"$__range", "5m", "${__range}", "5m",
			"$cluster", job, "${cluster}", job,
			"$job", job, "${job}", job,
			"$instance", ".*", "${instance}", ".*",
		)
	}

	for _, e := range axonExprs {
		q := vars(jobAxon).Replace(e)
		n := onJob(prom.query(t, q), q != e, jobAxon)
		t.Logf("axon dashboard: %3d series: %s", n, q)
		if n == 0 {
			t.Errorf("axon dashboard: no data on Axon: %s", q)
		}
	}
	for _, e := range etcdExprs {
		qEtcd, qAxon := vars(jobEtcd).Replace(e), vars(jobAxon).Replace(e)
		onEtcd := onJob(prom.query(t, qEtcd), qEtcd != e, jobEtcd)
		onAxon := onJob(prom.query(t, qAxon), qAxon != e, jobAxon)
		t.Logf("etcd dashboard: etcd %3d series, axon %3d: %s", onEtcd, onAxon, e)
		if onEtcd > 0 && onAxon == 0 {
			t.Errorf("etcd dashboard: data on etcd (%d series), none on Axon: %s", onEtcd, e)
		}
	}
}

// onJob counts a query's series for one job: all of them if the job was
// substituted into the query (aggregations drop the job label), else
// those labeled with the job (a variable's query over every job).
func onJob(res []sample, substituted bool, job string) int {
	if substituted {
		return len(res)
	}
	n := 0
	for _, s := range res {
		if s.Metric["job"] == job {
			n++
		}
	}
	return n
}

// dashboardExprs returns the distinct PromQL expressions of a Grafana
// dashboard: every panel target's expr (rows and nested panels
// included) and every query variable's query, label_values(q, label)
// reduced to q.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, ok := dash["schemaVersion"]; !ok && dash["rows"] == nil {
		t.Errorf("%s: no schemaVersion", path)
	}
	seen := map[string]bool{}
	var walk func(v any, inTargets bool)
	walk = func(v any, inTargets bool) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok && inTargets && strings.TrimSpace(e) != "" {
				seen[e] = true
			}
			for k, c := range v {
				walk(c, inTargets || k == "targets")
			}
		case []any:
			for _, c := range v {
				walk(c, inTargets)
			}
		}
	}
	walk(dash["panels"], false)
	walk(dash["rows"], false)
	if tmpl, ok := dash["templating"].(map[string]any); ok {
		list, _ := tmpl["list"].([]any)
		for _, v := range list {
			v, _ := v.(map[string]any)
			if v["type"] != "query" {
				continue
			}
			q, _ := v["query"].(string)
			if m, ok := v["query"].(map[string]any); ok {
				q, _ = m["query"].(string)
			}
			if rest, ok := strings.CutPrefix(q, "label_values("); ok {
				if i := strings.LastIndex(rest, ","); i > 0 {
					q = rest[:i]
				}
			}
			if q != "" {
				seen[q] = true
			}
		}
	}
	var out []string
	for e := range seen {
		out = append(out, e)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("%s: no queries", path)
	}
	return out
}
