package server_test

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestMetricsBetweenInstances checks the families of instance-to-instance
// calls and of TiKV on two instances over mock TiKV: a follower's
// linearizable reads time their read index round trips to the leader
// (etcd_network_peer_round_trip_time_seconds{To=<leader>}), calls to a
// leader that went away count as send failures and writes that failed
// meanwhile as failed proposals, and a forwarded write counts once,
// where the client sent it. The engine's commits feed
// etcd's backend commit histogram; TiKV has no fsync of Axon's to time,
// so the WAL fsync family is absent; client-go's RPC metrics are served.
func TestMetricsBetweenInstances(t *testing.T) {
	c := startCluster(t, newEngine(t), 2)
	l := c.awaitLeader()
	leader, follower := c.ins[l], c.ins[1-l]
	cli := c.client(follower.addr)
	ctx := ctxT(t)
	const n = 3
	for i := range n {
		if _, err := cli.Put(ctx, "/peer/"+strconv.Itoa(i), "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Get(ctx, "/peer/"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	to := `To="` + leader.addr + `"`
	fm, lm := scrape(t, follower.srv), scrape(t, leader.srv)
	if v, _ := sum(fm, "etcd_network_peer_round_trip_time_seconds_count", to); v < n {
		t.Errorf("follower's round trips to the leader: %v, want >= %d (one read index per read)", v, n)
	}
	if v, ok := sum(fm, "etcd_network_peer_sent_failures_total", to); !ok || v != 0 {
		t.Errorf("follower's send failures before the leader stops: %v (present %v), want 0", v, ok)
	}
	if v, _ := sum(fm, "etcd_mvcc_put_total"); v != n {
		t.Errorf("follower counted %v puts, want %d", v, n)
	}
	if v, _ := sum(lm, "etcd_mvcc_put_total"); v != 0 {
		t.Errorf("leader counted %v forwarded puts, want 0 (they count where the client sent them)", v)
	}
	if v, _ := sum(lm, "etcd_disk_backend_commit_duration_seconds_count"); v < n {
		t.Errorf("leader's engine commits: %v, want >= %d", v, n)
	}
	if _, ok := sum(lm, "etcd_disk_wal_fsync_duration_seconds_count"); ok {
		t.Error("etcd_disk_wal_fsync_duration_seconds served over TiKV, whose fsyncs Axon does not see")
	}
	// The mock cluster bypasses client-go's RPC client (no
	// request_seconds); its transaction layer still reports commits.
	if v, _ := sum(lm, "tikv_client_go_txn_cmd_duration_seconds_count", `type="commit"`); v < n {
		t.Errorf("client-go's transaction commits: %v, want >= %d", v, n)
	}
	if v, _ := sum(lm, "axon_engine_group_transactions_count"); v != 0 {
		t.Errorf("group commit sizes over TiKV: %v observations, want none", v)
	}

	// With the leader gone, reads and writes sent to the follower fail
	// until it takes over: the calls it forwards are send failures, the
	// writes failed proposals.
	leader.stop()
	failedPuts := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _ = cli.Get(rctx, "/peer/0")
		cancel()
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := cli.Put(wctx, "/peer/down", "v"); err != nil {
			failedPuts++
		}
		cancel()
		if v, _ := sum(scrape(t, follower.srv), "etcd_network_peer_sent_failures_total", to); v > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no send failure counted for a leader that stopped")
		}
	}
	if failedPuts == 0 {
		t.Log("the follower took over before a put failed: failed proposals not checked")
		return
	}
	// The server may finish a call the client gave up on a little later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		v, _ := sum(scrape(t, follower.srv), "etcd_server_proposals_failed_total")
		if v >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d puts failed while the leader was gone; etcd_server_proposals_failed_total = %v", failedPuts, v)
		}
	}
}
