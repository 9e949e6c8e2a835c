package server

import (
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axon-kv/axon/storage/memkv"
)

// newMemServer runs an exclusive server over memkv, closed at cleanup.
func newMemServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Exclusive = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg, memkv.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Pending timers live on the runtime's timer heap, not in goroutines of
// their own, and Close stops them without running them.
func TestPendingTimersCostNoGoroutines(t *testing.T) {
	s := newMemServer(t, Config{})
	const n = 10000
	before := runtime.NumGoroutine()
	var ran atomic.Int64
	for range n {
		wallClock{s}.AfterFunc(time.Hour, func() { ran.Add(1) })
	}
	// The server's own goroutines come and go (work past the idle
	// workers); a goroutine per timer would add n.
	if grew := runtime.NumGoroutine() - before; grew > 100 {
		t.Errorf("%d pending timers added %d goroutines", n, grew)
	}
	if got := s.bg.timers.len(); got != n {
		t.Errorf("pending timers = %d, want %d", got, n)
	}
	s.Close()
	if got := s.bg.timers.len(); got != 0 {
		t.Errorf("after Close, pending timers = %d, want 0", got)
	}
	wallClock{s}.AfterFunc(0, func() { ran.Add(1) })
	if got := s.bg.timers.len(); got != 0 {
		t.Errorf("a timer set after Close is pending (%d)", got)
	}
	if got := ran.Load(); got != 0 {
		t.Errorf("%d timers ran after Close", got)
	}
}

// A timer fires on its own, its f may call back into the driver, and it
// then leaves the pending set.
func TestTimerFiresAndCallsTheDriver(t *testing.T) {
	s := newMemServer(t, Config{})
	leading := make(chan bool, 1)
	wallClock{s}.AfterFunc(time.Millisecond, func() { leading <- s.drv.Leading() })
	select {
	case l := <-leading:
		if !l {
			t.Error("the exclusive server does not lead")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not fire")
	}
	s.Close()
	if got := s.bg.timers.len(); got != 0 {
		t.Errorf("pending timers = %d, want 0", got)
	}
}

// Close waits for a timer whose f runs, and f may still call into the
// driver while Close waits.
func TestCloseWaitsForARunningTimer(t *testing.T) {
	s := newMemServer(t, Config{})
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	wallClock{s}.AfterFunc(0, func() {
		close(started)
		<-release
		s.drv.Leading()
		finished.Store(true)
	})
	<-started
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a timer's f ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if !finished.Load() {
		t.Error("Close returned before the timer's f did")
	}
}
