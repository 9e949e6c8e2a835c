package driver

import (
	"sync"

	"github.com/axon-kv/axon/core"
)

// keyCache holds the latest records (a key's metadata: revisions,
// version, lease, tombstone; no value) the leader's own writes left, so
// that the next write of a key reads no engine table, as etcd's in-memory
// key index spares its writes. It is bounded in bytes and drops the
// oldest insertions first.
//
// An entry is always what the engine holds, because:
//   - entries come only from the committed writes of the member's own
//     node in its current term (Done, before the work's latches go), and
//     the writes of one key by one leader are ordered by its latches;
//     the sweep, which is not latched, only deletes latest records, and a
//     delete removes the entry;
//   - an uncertain commit removes the entries of every key it wrote: it
//     may have landed or not, and a fence decides, in the engine;
//   - a role change empties the cache: another leader may have written
//     since, and work of an old term is not applied.
//
// A miss reads the engine as before; a read fills nothing in, so a key
// is served from here only once this leader has written it.
type keyCache struct {
	mu      sync.Mutex
	budget  int64
	size    int64
	entries map[string]keyEntry
	// order lists insertions oldest first; an item whose seq no longer
	// matches its entry's was removed or replaced since.
	order []keyItem
	head  int
	seq   uint64
	stats KeyCacheStats
}

type keyEntry struct {
	value []byte
	seq   uint64
}

type keyItem struct {
	key string
	seq uint64
}

// KeyCacheStats counts the cache's use since the driver started.
type KeyCacheStats struct {
	Hits, Misses   uint64
	Entries        int
	Bytes, Budget  int64
	Evicted, Voids uint64 // dropped for room; removed by uncertain commits
}

// keyEntryOverhead is what an entry costs beyond its key and value: the
// map slot, the order item and the slice headers.
const keyEntryOverhead = 128

func newKeyCache(budget int64) *keyCache {
	if budget <= 0 {
		return nil
	}
	return &keyCache{budget: budget, entries: map[string]keyEntry{}}
}

// get returns the latest record cached for the engine key k.
func (c *keyCache) get(k []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[string(k)]
	if ok {
		c.stats.Hits++
	} else {
		c.stats.Misses++
	}
	return e.value, ok
}

// has reports whether k is cached, counting nothing.
func (c *keyCache) has(k []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[string(k)]
	return ok
}

// committed applies the latest-record writes of effects that committed.
func (c *keyCache) committed(eff *core.Effects) {
	c.mu.Lock()
	defer c.mu.Unlock()
	eachLatest(eff, func(w core.Write) {
		if w.Delete {
			c.remove(string(w.Key))
			return
		}
		c.set(string(w.Key), w.Value)
	})
	c.trim()
}

// void removes the keys effects wrote, whose commit is uncertain.
func (c *keyCache) void(eff *core.Effects) {
	c.mu.Lock()
	defer c.mu.Unlock()
	eachLatest(eff, func(w core.Write) {
		if _, ok := c.entries[string(w.Key)]; ok {
			c.stats.Voids++
			c.remove(string(w.Key))
		}
	})
	c.trim()
}

// clear empties the cache (a role change).
func (c *keyCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.order, c.head, c.size = nil, 0, 0
}

// Stats returns the counters and the cache's size now.
func (c *keyCache) Stats() KeyCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries, s.Bytes, s.Budget = len(c.entries), c.size, c.budget
	return s
}

// eachLatest calls fn for the latest-record writes of eff, a batch's in
// order.
func eachLatest(eff *core.Effects, fn func(core.Write)) {
	if eff == nil {
		return
	}
	for _, w := range eff.Writes {
		if core.IsLatestKey(w.Key) {
			fn(w)
		}
	}
	for _, sub := range eff.Batch {
		eachLatest(sub, fn)
	}
}

func entryCost(k string, v []byte) int64 { return int64(len(k)+len(v)) + keyEntryOverhead }

// set caches v for k; called with mu held.
func (c *keyCache) set(k string, v []byte) {
	if old, ok := c.entries[k]; ok {
		// Replaced in place: it keeps its place in the order.
		c.size += int64(len(v) - len(old.value))
		c.entries[k] = keyEntry{value: v, seq: old.seq}
		return
	}
	c.seq++
	c.entries[k] = keyEntry{value: v, seq: c.seq}
	c.order = append(c.order, keyItem{key: k, seq: c.seq})
	c.size += entryCost(k, v)
}

// remove drops k; its order item goes stale. Called with mu held.
func (c *keyCache) remove(k string) {
	if e, ok := c.entries[k]; ok {
		delete(c.entries, k)
		c.size -= entryCost(k, e.value)
	}
}

// trim drops the oldest entries until the cache fits its budget, and
// compacts the order once stale items make up most of it. Called with mu
// held.
func (c *keyCache) trim() {
	for c.size > c.budget && c.head < len(c.order) {
		it := c.order[c.head]
		c.order[c.head] = keyItem{}
		c.head++
		if e, ok := c.entries[it.key]; ok && e.seq == it.seq {
			c.remove(it.key)
			c.stats.Evicted++
		}
	}
	// Compacted once half the slice is evicted items or most of the live
	// part is stale: amortised, each item is copied a bounded number of
	// times.
	if live := len(c.order) - c.head; c.head > live || live > 2*len(c.entries)+64 {
		kept := make([]keyItem, 0, len(c.entries)+len(c.entries)/4)
		for _, it := range c.order[c.head:] {
			if e, ok := c.entries[it.key]; ok && e.seq == it.seq {
				kept = append(kept, it)
			}
		}
		c.order, c.head = kept, 0
	}
}

// cachedReader answers reads of latest records from the cache, and the
// rest (and misses) from the Reader. Records the transaction itself
// wrote (an earlier request of its batch: written) are read from it.
type cachedReader struct {
	core.Reader
	c       *keyCache
	written map[string]bool
}

func (r cachedReader) Get(key []byte) ([]byte, bool, error) {
	if core.IsLatestKey(key) && !r.written[string(key)] {
		if v, ok := r.c.get(key); ok {
			return v, true, nil
		}
	}
	return r.Reader.Get(key)
}

// skipCached drops from la the point reads of latest records the cache
// holds: a batched engine read need not fetch them.
func (c *keyCache) skipCached(la core.Lookahead) core.Lookahead {
	gets := la.Gets[:0:0]
	for _, k := range la.Gets {
		if !core.IsLatestKey(k) || !c.has(k) {
			gets = append(gets, k)
		}
	}
	la.Gets = gets
	return la
}
