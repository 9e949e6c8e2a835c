package storage

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CommitObserver is an engine that reports how long its commits take,
// for metrics (etcd's backend commit histogram). The function is called
// once per Commit that wrote something, from the committing goroutine;
// it must be cheap.
type CommitObserver interface {
	ObserveCommits(func(d time.Duration))
}

// SyncObserver is an engine that makes its writes durable itself (an
// fsync of its own log) and reports each durable write, for metrics
// (etcd's WAL fsync histogram): how long it took and how many
// transactions it carried. Engines whose durability lives elsewhere
// (TiKV's raft log) are not one.
type SyncObserver interface {
	ObserveSyncs(func(d time.Duration, txns int))
}

// MetricsSource is an engine with metrics of its own, under its own
// names (TiKV: client-go's RPC metrics, which TiDB's dashboards read).
// The server registers them next to its own.
type MetricsSource interface {
	Collectors() []prometheus.Collector
}

// Observers is a list of observer functions that an engine calls on its
// hot path without a lock: several servers may share one engine (tests
// run instances over one mock cluster).
type Observers[F any] struct {
	mu  sync.Mutex
	all atomic.Pointer[[]F]
}

// Add appends f (copy on write).
func (o *Observers[F]) Add(f F) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var fs []F
	if p := o.all.Load(); p != nil {
		fs = append(fs, *p...)
	}
	fs = append(fs, f)
	o.all.Store(&fs)
}

// Load returns the observers, nil if none.
func (o *Observers[F]) Load() []F {
	if p := o.all.Load(); p != nil {
		return *p
	}
	return nil
}
