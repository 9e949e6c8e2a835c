package server_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/server"
)

// scrape fetches the server's metrics in the text format and returns each
// sample line's value keyed by the line's name and labels as printed.
func scrape(t *testing.T, srv *server.Server) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d: %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// sum adds the samples of metric name whose labels include every one of
// labels (each `key="value"`).
func sum(samples map[string]float64, name string, labels ...string) (total float64, found bool) {
	for k, v := range samples {
		n, ls, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(ls, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
			found = true
		}
	}
	return total, found
}

func TestMetrics(t *testing.T) {
	srv, cli := startServer(t, server.Config{Core: core.Config{RingSize: 16}, MemberID: 1, ClusterID: 2, Name: "test", Metrics: server.MetricsExtensive})
	ctx := ctxT(t)

	before := scrape(t, srv)
	if v, ok := sum(before, "grpc_server_started_total", `grpc_method="Put"`); !ok || v != 0 {
		t.Fatalf("Put's started series before any call: %v %v", v, ok)
	}

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := cli.Watch(wctx, "/m/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r := <-wch; !r.Created {
		t.Fatalf("watch not created: %+v", r)
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	// A lease left to expire.
	if _, err := cli.Grant(ctx, 3); err != nil {
		t.Fatal(err)
	}
	const puts = 3
	var last int64
	for i := range puts {
		opts := []clientv3.OpOption{}
		if i == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		r, err := cli.Put(ctx, "/m/"+strconv.Itoa(i), "v", opts...)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	for got := 0; got < puts; {
		r, ok := <-wch
		if !ok {
			t.Fatal("watch closed")
		}
		got += len(r.Events)
	}
	if _, err := cli.Get(ctx, "/m/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "/m/", clientv3.WithRev(last+100)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("future revision: %v", err)
	}

	m := scrape(t, srv)
	want := func(name string, cmp func(float64) bool, what string, labels ...string) {
		t.Helper()
		v, ok := sum(m, name, labels...)
		if !ok || !cmp(v) {
			t.Errorf("%s%v = %v (present %v), want %s", name, labels, v, ok, what)
		}
	}
	atLeast := func(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
	equal := func(n float64) func(float64) bool { return func(v float64) bool { return v == n } }

	want("axon_committed_revision", equal(float64(last)), strconv.FormatInt(last, 10))
	want("axon_compact_revision", equal(0), "0")
	want("axon_inflight_revisions", atLeast(0), ">= 0")
	want("axon_watchers", equal(1), "1")
	want("axon_leases", equal(2), "2")
	want("etcd_debugging_lease_granted_total", equal(2), "2")
	want("etcd_debugging_lease_ttl_total_count", equal(2), "2")
	want("etcd_debugging_mvcc_events_total", atLeast(puts), ">= puts")
	want("axon_engine_outcomes_total", atLeast(puts), ">= puts", `outcome="committed"`)
	want("axon_engine_outcomes_total", equal(0), "0", `outcome="uncertain"`)
	want("axon_engine_commit_duration_seconds_count", atLeast(puts), ">= puts")
	want("grpc_server_started_total", equal(puts), "puts", `grpc_service="etcdserverpb.KV"`, `grpc_method="Put"`, `grpc_type="unary"`)
	want("grpc_server_handled_total", equal(puts), "puts", `grpc_method="Put"`, `grpc_code="OK"`)
	want("grpc_server_handling_seconds_count", equal(puts), "puts", `grpc_method="Put"`, `grpc_type="unary"`)
	want("grpc_server_handled_total", equal(1), "1", `grpc_method="Range"`, `grpc_code="OutOfRange"`)
	want("grpc_server_handled_total", equal(2), "2", `grpc_method="LeaseGrant"`, `grpc_code="OK"`)
	want("grpc_server_started_total", equal(1), "1", `grpc_method="Watch"`, `grpc_type="bidi_stream"`)
	want("grpc_server_msg_sent_total", atLeast(2), ">= 2", `grpc_method="Watch"`)
	want("etcd_server_has_leader", equal(1), "1")
	want("go_goroutines", atLeast(1), ">= 1")

	// etcd's families, as etcd counts them.
	want("etcd_mvcc_put_total", equal(puts), "puts")
	want("etcd_mvcc_range_total", equal(1), "1 (the failed future-revision range does not count)")
	want("etcd_mvcc_delete_total", equal(0), "0")
	want("etcd_server_proposals_applied_total", equal(float64(last)), "the commit point")
	want("etcd_server_proposals_committed_total", atLeast(float64(last)), ">= the commit point")
	want("etcd_server_proposals_pending", equal(0), "0")
	want("etcd_server_proposals_failed_total", equal(0), "0")
	want("etcd_debugging_mvcc_current_revision", equal(float64(last)), "the commit point")
	want("etcd_debugging_mvcc_watcher_total", equal(1), "1")
	want("etcd_debugging_mvcc_watch_stream_total", equal(1), "1")
	want("etcd_server_is_learner", equal(0), "0")
	want("etcd_disk_wal_fsync_duration_seconds_count", atLeast(1), ">= 1")
	want("etcd_disk_backend_commit_duration_seconds_count", atLeast(puts), ">= puts")
	// Badger measures its own size once a minute: only present here.
	want("etcd_mvcc_db_total_size_in_bytes", atLeast(0), "present")
	want("etcd_mvcc_db_total_size_in_use_in_bytes", atLeast(0), "present")
	want("etcd_server_quota_backend_bytes", equal(server.DefaultQuotaBytes), "2 GiB")
	// The key count is a scan, repeated every few seconds at most.
	if v := eventually(t, srv, "etcd_debugging_mvcc_keys_total", puts); v != puts {
		t.Errorf("etcd_debugging_mvcc_keys_total = %v, want %d", v, puts)
	}
	want("etcd_network_client_grpc_received_bytes_total", atLeast(float64(puts*len("/m/0v"))), ">= what was put")
	want("etcd_network_client_grpc_sent_bytes_total", atLeast(1), "> 0")
	want("etcd_server_version", equal(1), "1", `server_version="`+server.Version+`"`)
	want("etcd_cluster_version", equal(1), "1", `cluster_version="3.6"`)
	want("etcd_server_id", equal(1), "1", `server_id="1"`)
	want("axon_engine_group_transactions_count", atLeast(1), ">= 1")
	want("axon_engine_work_total", atLeast(puts), ">= puts", `kind="request"`)
	want("axon_latch_waiting_requests", equal(0), "0")
	want("axon_uncertain_revisions", equal(0), "0")
	want("axon_watch_ring_events", equal(puts), "puts")
	want("axon_watch_ring_bytes", atLeast(puts), "> 0")

	// A txn counts its compares as ranges and its branch's operations,
	// and itself once.
	if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("/m/0"), ">", 0)).
		Then(clientv3.OpPut("/m/0", "w"), clientv3.OpDelete("/m/1"), clientv3.OpGet("/m/2")).Commit(); err != nil {
		t.Fatal(err)
	}
	after := scrape(t, srv)
	for name, d := range map[string]float64{"etcd_mvcc_txn_total": 1, "etcd_mvcc_put_total": 1, "etcd_mvcc_delete_total": 1, "etcd_mvcc_range_total": 2} {
		b, _ := sum(m, name)
		a, _ := sum(after, name)
		if a-b != d {
			t.Errorf("%s grew by %v over a txn, want %v", name, a-b, d)
		}
	}
	// The puts wrote each key the txn uses: the key cache answers its
	// three reads of latest records (the compare, the delete, the get),
	// and its writes replace entries in place.
	for name, d := range map[string]float64{"axon_key_cache_hits_total": 3, "axon_key_cache_misses_total": 0, "axon_key_cache_entries": 0} {
		b, _ := sum(m, name)
		a, _ := sum(after, name)
		if a-b != d {
			t.Errorf("%s grew by %v over a txn, want %v", name, a-b, d)
		}
	}
	if v, _ := sum(after, "axon_key_cache_entries"); v < puts {
		t.Errorf("axon_key_cache_entries = %v, want at least the %d keys put", v, puts)
	}

	// The lease gauge follows a revoke at once; expiries count as
	// revokes, as etcd's lessor counts them.
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if v := eventually(t, srv, "etcd_debugging_server_lease_expired_total", 1); v != 1 {
		t.Errorf("etcd_debugging_server_lease_expired_total = %v, want 1 (a lease of 3 s)", v)
	}
	m = scrape(t, srv)
	if v, _ := sum(m, "axon_leases"); v != 0 {
		t.Errorf("axon_leases after revoke and expiry = %v", v)
	}
	if v, _ := sum(m, "etcd_debugging_lease_revoked_total"); v != 2 {
		t.Errorf("etcd_debugging_lease_revoked_total = %v, want 2 (one revoked, one expired)", v)
	}
}

// eventually scrapes until metric name reads want, for up to 10 s, and
// returns what it last read.
func eventually(t *testing.T, srv *server.Server, name string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, _ := sum(scrape(t, srv), name)
		if v == want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRequestTooLarge(t *testing.T) {
	t.Run("configured", func(t *testing.T) {
		_, cli := startServer(t, server.Config{MaxRequestBytes: 1024})
		ctx := ctxT(t)
		big := strings.Repeat("x", 2048)
		if _, err := cli.Put(ctx, "k", big); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
			t.Fatalf("put: got %v, want %v", err, rpctypes.ErrRequestTooLarge)
		}
		if _, err := cli.Txn(ctx).Then(clientv3.OpPut("k", big)).Commit(); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
			t.Fatalf("txn: got %v", err)
		}
		if _, err := cli.Delete(ctx, big); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
			t.Fatalf("delete: got %v", err)
		}
		if _, err := cli.Put(ctx, "k", "small"); err != nil {
			t.Fatalf("small put: %v", err)
		}
		// Reads are not proposals: etcd does not bound them.
		if _, err := cli.Get(ctx, big); err != nil {
			t.Fatalf("big get: %v", err)
		}
	})
	t.Run("default", func(t *testing.T) {
		_, cli := startServer(t, server.Config{})
		ctx := ctxT(t)
		if _, err := cli.Put(ctx, "k", strings.Repeat("x", server.DefaultMaxRequestBytes+1)); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
			t.Fatalf("put over default: got %v", err)
		}
		if _, err := cli.Put(ctx, "k", strings.Repeat("x", server.DefaultMaxRequestBytes-1024)); err != nil {
			t.Fatalf("put under default: %v", err)
		}
	})
}
