package driver

import (
	"fmt"
	"testing"

	"github.com/axon-kv/axon/core"
)

func latestWrites(keys ...string) *core.Effects {
	eff := &core.Effects{}
	for _, k := range keys {
		eff.Writes = append(eff.Writes, core.Write{Key: core.LatestKey([]byte(k)), Value: []byte("rec-" + k)})
	}
	return eff
}

func cachedKeys(c *keyCache, keys ...string) string {
	s := ""
	for _, k := range keys {
		if c.has(core.LatestKey([]byte(k))) {
			s += k
		} else {
			s += "-"
		}
	}
	return s
}

// TestKeyCacheEvictsOldestInsertions: past its budget the cache drops
// the entries inserted first; a rewrite keeps an entry's place, and only
// latest records are cached.
func TestKeyCacheEvictsOldestInsertions(t *testing.T) {
	one := entryCost(string(core.LatestKey([]byte("a"))), []byte("rec-a"))
	c := newKeyCache(3 * one)
	c.committed(latestWrites("a", "b", "c"))
	c.committed(latestWrites("a")) // rewritten: still the oldest
	c.committed(&core.Effects{Writes: []core.Write{{Key: core.HistoryKey([]byte("h"), 5), Value: []byte("x")}}})
	c.committed(&core.Effects{Batch: []*core.Effects{latestWrites("d")}})
	if got := cachedKeys(c, "a", "b", "c", "d", "h"); got != "-bcd-" {
		t.Fatalf("cached %q, want -bcd-", got)
	}
	st := c.Stats()
	if st.Entries != 3 || st.Bytes != 3*one || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	c.void(latestWrites("c", "zz"))
	c.committed(&core.Effects{Writes: []core.Write{{Key: core.LatestKey([]byte("b")), Delete: true}}})
	if got := cachedKeys(c, "b", "c", "d"); got != "--d" {
		t.Fatalf("after a void and a delete: cached %q, want --d", got)
	}
	if st := c.Stats(); st.Voids != 1 || st.Bytes != one {
		t.Fatalf("stats %+v: want one void and one entry's bytes", st)
	}
}

// TestKeyCacheOrderStaysBounded: entries removed and inserted again
// many times leave stale order items behind; the order is compacted
// rather than growing with them.
func TestKeyCacheOrderStaysBounded(t *testing.T) {
	c := newKeyCache(1 << 20)
	for i := range 10000 {
		k := fmt.Sprint(i % 10)
		c.committed(latestWrites(k))
		c.void(latestWrites(k))
	}
	if n := len(c.order) - c.head; n > 2*len(c.entries)+64 {
		t.Fatalf("%d order items for %d entries", n, len(c.entries))
	}
	c.committed(latestWrites("x", "y"))
	c.clear()
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 || len(c.order) != 0 {
		t.Fatalf("after clear: %+v, %d order items", st, len(c.order))
	}
}
