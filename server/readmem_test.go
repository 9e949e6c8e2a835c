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
	if s.rpc.reads == nil {
		return 0
	}
	return testutil.ToFloat64(s.rpc.reads.inUse)
}

// TestReadBudgetChunkByChunk follows a streamed read's share: a chunk's
// key-values are given back once it is queued, its message once written;
// a stream that holds nothing between chunks is not the oldest read any
// more (a younger read goes on past the budget in its place), and comes
// back as the youngest.
func TestReadBudgetChunkByChunk(t *testing.T) {
	b := newReadBudget(1000, prometheus.NewRegistry())
	ctx := t.Context()
	stream, other := &readAllowance{b: b}, &readAllowance{b: b}
	if err := stream.hold(ctx, 100); err != nil {
		t.Fatal(err)
	}
	stream.chunkQueued(100)
	if stream.held != 100 || stream.queued != 100 || b.used != 100 {
		t.Fatalf("a queued chunk of 100: held %d, queued %d, used %d; want its message's 100", stream.held, stream.queued, b.used)
	}
	stream.chunkWritten(100)
	if b.used != 0 || len(b.holding) != 0 {
		t.Fatalf("a written chunk: used %d, holding %v; want nothing", b.used, b.holding)
	}
	if err := other.hold(ctx, 1000); err != nil { // past the budget, the oldest now
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- stream.hold(ctx, 10) }()
	waitFor(t, "the stream to wait", func() bool { return testutil.ToFloat64(b.waits) == 1 })
	other.ended() // the unary answer's key-values are garbage: still past the budget
	if other.held != 1000 {
		t.Fatalf("an ended answer of 1000 holds %d; want 1000", other.held)
	}
	select {
	case err := <-done:
		t.Fatalf("the stream went on (%v) while the older read held past the budget", err)
	default:
	}
	other.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stream.release()
	if b.used != 0 || len(b.holding) != 0 {
		t.Fatalf("after every release: used %d, holding %v", b.used, b.holding)
	}
}
