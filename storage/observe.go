package storage

import "time"

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
