package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage/memkv"
)

// An exclusive server leads when New returns without waiting for the
// clock's ticks: awaitLeading is woken by the election work and the
// role change, not by time.
func TestLeadingAwaitsNoTick(t *testing.T) {
	began := time.Now()
	s := newMemServer(t, Config{TickInterval: time.Hour})
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("New took %v", took)
	}
	if !s.Leading() {
		t.Error("not leading after New")
	}
}

// awaitLeading keeps its limit and its context when the member cannot
// lead: another holder's lease is in the election record.
func TestAwaitLeadingLimitAndContext(t *testing.T) {
	eng := memkv.New()
	// No tick moves the member before awaitLeading does, after the
	// record is in place.
	s, err := New(Config{TickInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}, eng)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	txn, err := eng.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := &core.ElectionRecord{Holder: "other", Addr: "other:2379", Term: 1, Deadline: time.Duration(time.Now().Add(time.Hour).UnixNano())}
	if err := txn.Set(core.MetaKey(core.MetaLeader), core.AppendElectionRecord(nil, rec)); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	err = s.awaitLeading(ctx, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not leading after 50ms") {
		t.Errorf("awaitLeading past its limit: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.awaitLeading(canceled, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("awaitLeading with a canceled context: %v", err)
	}
}
