package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGrpcCodeIsWhatTheClientSaw(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"an etcd error keeps its code", rpctypes.Error(rpctypes.ErrGRPCNoSpace), codes.ResourceExhausted},
		{"a deadline, wrapped", fmt.Errorf("list: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"a gRPC status", status.Error(codes.Unavailable, "connection refused"), codes.Unavailable},
		{"anything else", errors.New("listed 3 objects, want 4"), codes.Unknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := grpcCode(tt.err); got != tt.want {
				t.Errorf("grpcCode(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestCodeTallyCountsByStepAndCode(t *testing.T) {
	var c codeTally
	c.addAt("list", status.Error(codes.Unavailable, "x"))
	c.addAt("list", status.Error(codes.Unavailable, "y"))
	c.add(context.DeadlineExceeded)
	if c.total() != 3 || !strings.HasPrefix(c.first, "list: ") {
		t.Fatalf("total %d, first %q", c.total(), c.first)
	}
	if got := fmtCodes(c.byCode()); got != "list Unavailable 2, DeadlineExceeded 1" {
		t.Errorf("fmtCodes = %q", got)
	}
}

func TestRecoveryEndsAtTheLastSlowWindow(t *testing.T) {
	ms := time.Millisecond
	var acks []ack
	for s := range 9 { // one write every 100 ms for 9 s
		for i := range 10 {
			took := 5 * ms
			if s == 2 { // slow in the third second
				took = 50 * ms
			}
			if s == 4 && i >= 5 { // half of the fifth second sends nothing: still a window with writes
				continue
			}
			acks = append(acks, ack{at: time.Duration(s)*time.Second + time.Duration(i)*100*ms, took: took})
		}
	}
	worst, rec, back := recovery(acks, time.Second, 9*time.Second, 5)
	// Percentiles come from a histogram: within 0.1 %.
	if math.Abs(worst-50) > 0.05 || rec != 2 || !back {
		t.Errorf("recovery = worst %v ms, back after %v s (%v); want 50 ms, 2 s, true", worst, rec, back)
	}
	// A second with no write at all is a stall, however fast the rest;
	// 3 s of good windows after it are too few to call it over.
	stalled := append(acks[:30:30], acks[40:]...)
	if _, rec, back := recovery(stalled, time.Second, 7*time.Second, 5); rec != 3 || back {
		t.Errorf("with the fourth second empty: back after %v s (%v), want 3 s and not yet back", rec, back)
	}
}

func TestCompletenessFindsAMissingEvent(t *testing.T) {
	st := func(ns string, listRev int64, got ...int64) *stormer {
		s := &stormer{ns: ns, listRev: listRev, got: map[int64]bool{}}
		s.ready.Store(true)
		for _, r := range got {
			s.take(clientv3.WatchResponse{Events: []*clientv3.Event{{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{ModRevision: r}}}})
		}
		return s
	}
	acks := []ack{{key: "/a/w0-0", rev: 5}, {key: "/a/w1-0", rev: 7}, {key: "/b/w0-1", rev: 8}, {key: "/b/w1-1", rev: 9}}
	never := &stormer{ns: "/c/", got: map[int64]bool{}}
	// /a/ listed at 5: wants 7 only. /b/ listed at 6 got 8 but not 9.
	complete, want, missing := completeness([]*stormer{st("/a/", 5, 7), st("/b/", 6, 8), never}, acks)
	if complete != 1 || want != 3 || missing != 1 {
		t.Errorf("completeness = %d complete, %d wanted, %d missing; want 1, 3, 1", complete, want, missing)
	}
}

func TestScaleTableShowsKillsCodesAndRatios(t *testing.T) {
	rep := &ScaleReport{RunInfo: RunInfo{Options: Default()}, Systems: []string{"axon", "etcd"}}
	rep.Lists = map[string]*ListsResult{
		"axon": {fate: fate{OOMKills: 1, Exited: "signal: killed", PeakRSSBytes: 1 << 30}, ListsWanted: 32, ListsFailed: 16, ListsNotRun: 16,
			ListErrors: map[string]int64{serverGone: 16}, WriteP99Ms: 800},
		"etcd": {fate: fate{PeakRSSBytes: 2 << 30}, ListsWanted: 32, ListsDone: 32, ListP50Ms: 9000, WriteP99Ms: 400},
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"YES", "signal: killed", "0 of 32", "32 of 32", "16 (server gone 16)", "0.50x", "2.00x", "1 GiB memory cgroup"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSlowestWritesOfAWindow(t *testing.T) {
	acks := []ack{
		{at: 1 * time.Second, took: 50 * time.Millisecond},
		{at: 2 * time.Second, took: 300 * time.Millisecond}, // before the window
		{at: 5 * time.Second, took: 20 * time.Millisecond},
		{at: 6 * time.Second, took: 90 * time.Millisecond},
		{at: 7 * time.Second, took: 10 * time.Millisecond},
		{at: 10 * time.Second, took: 500 * time.Millisecond}, // after it
	}
	got := slowest(acks, 3*time.Second, 10*time.Second, 2)
	want := []SlowWrite{{AtSeconds: 6, Ms: 90}, {AtSeconds: 5, Ms: 20}}
	if !slices.Equal(got, want) {
		t.Fatalf("slowest = %+v, want %+v", got, want)
	}
	if got := slowest(acks, 20*time.Second, 30*time.Second, 5); len(got) != 0 {
		t.Fatalf("an empty window's slowest = %+v", got)
	}
}
