package server

import (
	"bytes"
	"slices"
	"sync"
)

// counter is the server's core.Counter: the alive keys of the ranges
// recently listed, so the apiserver's later pages (same range end, same
// revision) are counted by a binary search instead of a scan of the rest
// of the range. Bounded by entries and keys; the least recently used
// entry goes first.
type counter struct {
	mu      sync.Mutex
	entries []*counted // most recently used last
	keys    int
}

type counted struct {
	from, end []byte
	rev       int64
	alive     [][]byte
}

const (
	counterEntries = 16
	counterKeys    = 1 << 20
)

func (c *counter) Count(from, end []byte, rev int64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.entries {
		if e.rev != rev || !bytes.Equal(e.end, end) || bytes.Compare(from, e.from) < 0 {
			continue
		}
		c.entries = append(slices.Delete(c.entries, i, i+1), e)
		skip, _ := slices.BinarySearchFunc(e.alive, from, bytes.Compare)
		return int64(len(e.alive) - skip), true
	}
	return 0, false
}

func (c *counter) Remember(from, end []byte, rev int64, alive [][]byte) {
	if len(alive) > counterKeys {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = append(c.entries, &counted{from: bytes.Clone(from), end: bytes.Clone(end), rev: rev, alive: alive})
	c.keys += len(alive)
	for len(c.entries) > counterEntries || c.keys > counterKeys {
		c.keys -= len(c.entries[0].alive)
		c.entries = c.entries[1:]
	}
}
