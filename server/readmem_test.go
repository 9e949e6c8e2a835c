package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// waitFor polls cond until it holds or five seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadBudgetLetsTheOldestReadOn checks the budget's rules one by one:
// the oldest read holding memory goes on past the budget, a younger one
// waits until memory is given back, and a read canceled while it waits
// fails with its context's error and gives back what it held.
func TestReadBudgetLetsTheOldestReadOn(t *testing.T) {
	b := newReadBudget(1000, prometheus.NewRegistry())
	ctx := t.Context()
	oldest, younger, canceled := &readAllowance{b: b}, &readAllowance{b: b}, &readAllowance{b: b}
	if err := oldest.hold(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := younger.hold(ctx, 100); err != nil { // 400 of 1000: no wait
		t.Fatal(err)
	}
	if err := oldest.hold(ctx, 2000); err != nil { // past the budget, but the oldest
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- younger.hold(ctx, 10) }()
	waitFor(t, "the younger read to wait", func() bool { return testutil.ToFloat64(b.waits) == 1 })

	cctx, cancel := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() { cdone <- canceled.hold(cctx, 10) }()
	waitFor(t, "the third read to wait", func() bool { return testutil.ToFloat64(b.waits) == 2 })
	cancel()
	if err := <-cdone; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled read: %v, want context.Canceled", err)
	}
	canceled.release()
	select {
	case err := <-done:
		t.Fatalf("the younger read went on (%v) while the oldest held past the budget", err)
	default:
	}
	oldest.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	younger.release()
	younger.release() // twice is harmless
	if b.used != 0 || len(b.holding) != 0 {
		t.Fatalf("after every release: used %d, holding %v", b.used, b.holding)
	}
}

// ReadMemoryInUse is what the answers of reads in flight hold, as the
// read budget counts it (0 without one).
func (s *Server) ReadMemoryInUse() float64 {
	if s.reads == nil {
		return 0
	}
	return testutil.ToFloat64(s.reads.inUse)
}
