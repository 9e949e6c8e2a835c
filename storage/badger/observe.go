package badger

import (
	"sync"
	"time"

	"github.com/axon-kv/axon/storage"
)

var (
	_ storage.CommitObserver = (*Engine)(nil)
	_ storage.SyncObserver   = (*Engine)(nil)
	_ storage.InUser         = (*Engine)(nil)
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
	mu       sync.Mutex
	next     time.Time // when a scan is due
	bytes    int64
	stale    bool // bytes is unknown or out of date: scan before answering
	scanning bool // a scan runs in the background
	// gen counts defragmentations: a scan begun before one is not kept.
	gen int
}

// InUse estimates the bytes of data the store holds that a
// defragmentation keeps (keptBytes: the newest version of every live key
// with its value, the key of every other version and tombstone), as
// etcd's size in use counts the pages of its database in use. It scans
// the keys (no values): the first call and the first after a
// defragmentation wait for the scan; later ones answer from the last
// scan and start the next one in the background once it is due.
func (e *Engine) InUse() int64 {
	c := &e.inUse
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scanning || (!c.stale && !c.next.IsZero() && time.Now().Before(c.next)) {
		return c.bytes
	}
	if c.stale || c.next.IsZero() {
		c.store(e.scanInUse(c.gen))
		return c.bytes
	}
	c.scanning = true
	gen := c.gen
	go func() {
		r := e.scanInUse(gen)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.scanning = false
		c.store(r)
	}()
	return c.bytes
}

// inUseScan is one scan's result; ok is false if the engine closed.
type inUseScan struct {
	bytes int64
	next  time.Time
	gen   int
	ok    bool
}

// scanInUse scans once, without the cache's lock.
func (e *Engine) scanInUse(gen int) inUseScan {
	if e.acquire("in-use") != nil {
		return inUseScan{}
	}
	defer e.release()
	start := time.Now()
	bytes := e.keptBytes()
	return inUseScan{bytes: bytes, next: start.Add(max(inUseEvery, inUseDuty*time.Since(start))), gen: gen, ok: true}
}

// store keeps a scan's result; called with mu held.
func (c *inUseCache) store(r inUseScan) {
	if r.ok && r.gen == c.gen {
		c.bytes, c.next, c.stale = r.bytes, r.next, false
	}
}

// forgetInUse makes the next InUse scan before it answers (the data
// moved: a defragmentation).
func (e *Engine) forgetInUse() {
	e.inUse.mu.Lock()
	e.inUse.stale = true
	e.inUse.gen++
	e.inUse.mu.Unlock()
}
