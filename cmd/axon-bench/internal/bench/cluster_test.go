package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/internal/tikvserver"
)

func TestParseEndpointCounts(t *testing.T) {
	text := `# HELP tikv_server_busy_periods_total Times the requests in flight rose from none.
# TYPE tikv_server_busy_periods_total counter
tikv_server_busy_periods_total 41
# TYPE tikv_server_requests_total counter
tikv_server_requests_total{type="Commit"} 10
tikv_server_requests_total{type="PD/GetRegion"} 2
tikv_server_requests_total{type="TSO"} 1.5e+06
tikv_server_tso_timestamps_total 3e+06
`
	c := endpointCounts{requests: map[string]float64{}}
	if err := parseEndpointCounts(strings.NewReader(text), &c); err != nil {
		t.Fatal(err)
	}
	if c.requests["Commit"] != 10 || c.requests["PD/GetRegion"] != 2 || c.requests[tikvserver.TSO] != 1.5e6 ||
		c.timestamps != 3e6 || c.busy != 41 || len(c.requests) != 3 {
		t.Fatalf("parsed %+v", c)
	}
	if err := parseEndpointCounts(strings.NewReader("tikv_server_busy_periods_total\n"), &c); err == nil {
		t.Error("a line without a value parsed")
	}
}

func TestParseWatchCounts(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       watchCounts
	}{
		{"both counters", `# HELP etcd_debugging_mvcc_events_total Total number of events sent by this member.
# TYPE etcd_debugging_mvcc_events_total counter
etcd_debugging_mvcc_events_total 5e+06
# TYPE axon_watch_feed_events_sent_total counter
axon_watch_feed_events_sent_total 10000
axon_watch_slow_canceled_total 3
etcd_debugging_mvcc_put_total 5000
`, watchCounts{events: 5e6, feed: 1e4, slow: 3}},
		{"no feed counter", "etcd_debugging_mvcc_events_total 42\naxon_watch_slow_canceled_total 0\n", watchCounts{events: 42}},
		{"labeled others", `etcd_debugging_mvcc_events_total 7
grpc_server_handled_total{grpc_code="OK",grpc_method="Watch"} 9
`, watchCounts{events: 7}},
		{"none", "", watchCounts{}},
	} {
		var c watchCounts
		if err := parseWatchCounts(strings.NewReader(tt.text), &c); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		} else if c != tt.want {
			t.Errorf("%s: parsed %+v; want %+v", tt.name, c, tt.want)
		}
	}
	var c watchCounts
	if err := parseWatchCounts(strings.NewReader("etcd_debugging_mvcc_events_total x\n"), &c); err == nil {
		t.Error("a line without a number parsed")
	}
}

// TestClusterQuick builds axon and axon-bench, runs the cluster
// benchmark's quick form (the endpoint and three instances beside etcd)
// and checks its figures are sane.
func TestClusterQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs five servers")
	}
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/",
		"github.com/axon-kv/axon/cmd/axon", "github.com/axon-kv/axon/cmd/axon-bench").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	o := Quick()
	o.Binary, o.EtcdBinary = filepath.Join(dir, "axon"), filepath.Join(dir, "axon-bench")
	o.Clients = []int{1, 8}
	o.Ops = 100
	o.WorkDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := RunCluster(ctx, o, ClusterOptions{RPCDelay: 200 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	if len(rep.Rows) != len(TiKVWorkloads)*2 {
		t.Fatalf("%d rows; want %d", len(rep.Rows), len(TiKVWorkloads)*2)
	}
	if len(rep.Idle) != 1 || sumValues(rep.Idle[0].CallsPerSec) <= 0 {
		t.Errorf("idle: %+v; want one run's, with the instances' background calls", rep.Idle)
	}
	for _, r := range rep.Rows {
		for _, sys := range []string{"axon", "etcd"} {
			if res := r.Results[sys]; res == nil || res.Ops <= 0 || res.Errors != 0 || res.Conflicts != 0 {
				t.Errorf("%s %s: %+v; want ops, no errors, no conflicts", r.Name, sys, res)
			}
		}
		if r.Ratio == nil || r.Ratio.OpsPerSec <= 0 {
			t.Errorf("%s: ratio %+v", r.Name, r.Ratio)
		}
		loads := rep.Endpoint[r.Name]
		if len(loads) != 1 {
			t.Fatalf("%s: %d endpoint loads; want 1", r.Name, len(loads))
		}
		l := loads[0]
		if !strings.HasPrefix(l.Leader, "axon-") {
			t.Errorf("%s: leader %q", r.Name, l.Leader)
		}
		// Every request takes a timestamp, and a write two; the PD
		// client may batch concurrent ones into one TSO request.
		wantTS := 1.0
		writes := r.Workload == Create || r.Workload == Update
		if writes {
			wantTS = 2
		}
		if l.TimestampsPerOp < 0.9*wantTS || l.CallsPerOp[tikvserver.TSO] <= 0 || l.CallsPerOp[tikvserver.TSO] > l.TimestampsPerOp {
			t.Errorf("%s: %.2f timestamps in %.2f TSO requests per op; want about %v timestamps", r.Name, l.TimestampsPerOp, l.CallsPerOp[tikvserver.TSO], wantTS)
		}
		if p := l.CallsPerOp["Prewrite"]; writes != (p >= 0.9) {
			t.Errorf("%s: %.2f Prewrites per op", r.Name, p)
		}
		calls := sumValues(l.CallsPerOp)
		switch {
		case r.Clients == 1 && (l.StepsPerOp < 1 || l.StepsPerOp > calls+0.01):
			t.Errorf("%s: %.2f steps per op for %.2f calls", r.Name, l.StepsPerOp, calls)
		case r.Clients > 1 && l.StepsPerOp != 0:
			t.Errorf("%s: steps per op at %d clients", r.Name, r.Clients)
		}
	}
	for _, want := range []string{"axon/etcd", "steps/op", "Prewrite", "client i on axon-(i%3)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the table lacks %q", want)
		}
	}

	// A tiny watch fan-out on a fresh cluster.
	o.Systems, o.Ops = []string{"axon"}, 50
	frep, err := RunCluster(ctx, o, ClusterOptions{WatchFanout: 30})
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := frep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	if len(frep.Fanout) != 1 {
		t.Fatalf("%d fan-out runs; want 1", len(frep.Fanout))
	}
	f := frep.Fanout[0]
	if f.Watchers != 30 || f.Writes != 50 || f.Missing != 0 || f.DeliverySeconds <= 0 {
		t.Errorf("fan-out: %+v; want 30 watchers with all of 50 writes each", f)
	}
	l := f.leader()
	if l == nil || len(f.followers()) != ClusterInstances-1 {
		t.Fatalf("fan-out: leader %q among %d instances", f.Leader, len(f.Instances))
	}
	if l.EventsPerEvent <= 0 {
		t.Errorf("fan-out leader: %+v; want events sent per event", l)
	}
	for _, in := range f.Instances {
		if in.Watchers != 10 {
			t.Errorf("fan-out: %s has %d watchers; want 10", in.Name, in.Watchers)
		}
	}
	if !strings.Contains(buf.String(), "events sent/event") {
		t.Error("the fan-out table lacks its header")
	}
}
