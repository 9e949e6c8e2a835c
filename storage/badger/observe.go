package badger

import (
	"sync"
	"time"

	"github.com/axon-kv/axon/storage"
)

var (
	_ storage.CommitObserver = (*Engine)(nil)
	_ storage.SyncObserver   = (*Engine)(nil)
)

// ObserveCommits reports each Commit that wrote something: the time from
// its call to its answer (waiting for its group, the write and the
// fsync).
func (e *Engine) ObserveCommits(f func(time.Duration)) { e.observers.commits.Add(f) }

// ObserveSyncs reports each group commit: one badger write with its
// fsync (SyncWrites), and how many transactions it carried.
func (e *Engine) ObserveSyncs(f func(time.Duration, int)) { e.observers.syncs.Add(f) }

func (e *Engine) observeCommit(start time.Time) {
	if fs := e.observers.commits.Load(); fs != nil {
		d := time.Since(start)
		for _, f := range fs {
			f(d)
		}
	}
}

// timedWrite is write, reported to the sync observer.
func (e *Engine) timedWrite(ts uint64, group []*commitReq) error {
	fs := e.observers.syncs.Load()
	if fs == nil {
		return e.write(ts, group)
	}
	start := time.Now()
	err := e.write(ts, group)
	d := time.Since(start)
	for _, f := range fs {
		f(d, len(group))
	}
	return err
}

// InUse scans again at most every inUseEvery, and at most every
// inUseDuty times its last scan took, so that scans take at most 1/20 of
// one core however large the store.
const (
	inUseEvery = 2 * time.Second
	inUseDuty  = 20
)

// inUseCache keeps InUse's last scan.
type inUseCache struct {
	mu    sync.Mutex
	next  time.Time // zero: scan at the next call
	bytes int64
}

// InUse estimates the bytes of data the store holds that a
// defragmentation keeps (keptBytes: the newest version of every live key
// with its value, the key of every other version and tombstone), as
// etcd's size in use counts the pages of its database in use. It scans
// the keys (no values) at most every inUseEvery and answers from the
// last scan meanwhile; the first call after a defragmentation scans.
func (e *Engine) InUse() int64 {
	c := &e.inUse
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	if start.Before(c.next) {
		return c.bytes
	}
	if e.acquire("in-use") != nil {
		return c.bytes
	}
	defer e.release()
	c.bytes = e.keptBytes()
	c.next = start.Add(max(inUseEvery, inUseDuty*time.Since(start)))
	return c.bytes
}

// forgetInUse makes the next InUse scan again (the data moved: a
// defragmentation).
func (e *Engine) forgetInUse() {
	e.inUse.mu.Lock()
	e.inUse.next = time.Time{}
	e.inUse.mu.Unlock()
}
