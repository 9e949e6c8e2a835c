package tikvserver

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tikv/client-go/v2/tikvrpc"
)

func TestRequestType(t *testing.T) {
	for _, tt := range []struct {
		method string
		want   string
	}{
		{"/tikvpb.Tikv/KvGet", tikvrpc.CmdGet.String()},
		{"/tikvpb.Tikv/KvBatchGet", tikvrpc.CmdBatchGet.String()},
		{"/tikvpb.Tikv/KvScan", tikvrpc.CmdScan.String()},
		{"/tikvpb.Tikv/KvPrewrite", tikvrpc.CmdPrewrite.String()},
		{"/tikvpb.Tikv/KvCommit", tikvrpc.CmdCommit.String()},
		{"/tikvpb.Tikv/KvPessimisticLock", tikvrpc.CmdPessimisticLock.String()},
		{"/tikvpb.Tikv/KVPessimisticRollback", tikvrpc.CmdPessimisticRollback.String()},
		{"/tikvpb.Tikv/KvTxnHeartBeat", tikvrpc.CmdTxnHeartBeat.String()},
		{"/tikvpb.Tikv/KvCheckTxnStatus", tikvrpc.CmdCheckTxnStatus.String()},
		{"/tikvpb.Tikv/KvCleanup", tikvrpc.CmdCleanup.String()},
		{"/tikvpb.Tikv/KvBatchRollback", tikvrpc.CmdBatchRollback.String()},
		{"/tikvpb.Tikv/KvScanLock", tikvrpc.CmdScanLock.String()},
		{"/tikvpb.Tikv/KvResolveLock", tikvrpc.CmdResolveLock.String()},
		{"/tikvpb.Tikv/GetStoreSafeTS", "Tikv/GetStoreSafeTS"},
		{"/pdpb.PD/GetRegion", "PD/GetRegion"},
		{"/etcdserverpb.Cluster/MemberList", "Cluster/MemberList"},
		{"/grpc.health.v1.Health/Check", "Health/Check"},
		{"odd", "odd"},
	} {
		if got := requestType(tt.method); got != tt.want {
			t.Errorf("requestType(%q) = %q; want %q", tt.method, got, tt.want)
		}
	}
}

// TestBusyPeriodsCountOverlapsOnce: requests in flight together make one
// busy period; one that starts after all ended makes another.
func TestBusyPeriodsCountOverlapsOnce(t *testing.T) {
	var l load
	endA := l.begin("Get")
	endB := l.begin("Get")
	endA()
	endC := l.begin(TSO) // B is still in flight
	endB()
	endC()
	l.begin("Commit")()
	got := l.snapshot()
	if got.BusyPeriods != 2 || got.Requests["Get"] != 2 || got.Requests[TSO] != 1 || got.Requests["Commit"] != 1 {
		t.Fatalf("got %+v; want 2 busy periods, 2 Get, 1 TSO, 1 Commit", got)
	}
}

// TestLoadCountsAWrite commits one key through client-go's network path
// and finds its round trips in the counts and the metrics: two
// timestamps, a Prewrite and a Commit, each a busy period of its own.
func TestLoadCountsAWrite(t *testing.T) {
	s := start(t, Options{RPCDelay: time.Millisecond})
	e := open(t, s)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := put(ctx, e, "warm", "v"); err != nil { // loads the region cache
		t.Fatal(err)
	}
	before := s.Load()
	if err := put(ctx, e, "k", "v"); err != nil {
		t.Fatal(err)
	}
	after := s.Load()
	d := func(typ string) int64 { return after.Requests[typ] - before.Requests[typ] }
	busy := after.BusyPeriods - before.BusyPeriods
	t.Logf("one write: %d TSO, %d Prewrite, %d Commit, %d busy periods", d(TSO), d("Prewrite"), d("Commit"), busy)
	// client-go's background calls may add to these, never take away.
	if d(TSO) < 2 || d("Prewrite") < 1 || d("Commit") < 1 || busy < 4 {
		t.Errorf("one write: %d TSO, %d Prewrite, %d Commit, %d busy periods; want at least 2, 1, 1, 4\ncounts after: %+v",
			d(TSO), d("Prewrite"), d("Commit"), busy, after)
	}
	if ts := after.Timestamps - before.Timestamps; ts < d(TSO) {
		t.Errorf("%d timestamps for %d TSO requests", ts, d(TSO))
	}
	for name, want := range map[string]int{MetricTimestamps: 1, MetricBusyPeriods: 1} {
		if n := testutil.CollectAndCount(s.Collector(), name); n != want {
			t.Errorf("%s: %d series exported; want %d", name, n, want)
		}
	}
	if n := testutil.CollectAndCount(s.Collector(), MetricRequests); n < 4 {
		t.Errorf("%d request types exported; want TSO, Prewrite, Commit and more", n)
	}
}
