package sim

import (
	"container/heap"
	"context"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// event is one scheduled step of the world.
type event struct {
	at   time.Duration
	seq  uint64
	what string
	fn   func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// World is one simulation: virtual time, one seeded PRNG from which every
// choice flows, one memkv engine, the nodes and the clients.
type World struct {
	cfg     Config
	plan    Plan
	rng     *rand.Rand
	now     time.Duration
	events  eventHeap
	seq     uint64
	eng     *memkv.Engine
	nodes   []*node
	clients []*client
	hash    hash.Hash64
	trace   []string
	hist    *history
	faults  map[string]int
	healed  bool
	stopped bool
	// transferOnCompact defers a transfer fault to the moment the leader
	// next starts storing a compaction, the race a handover must wait out.
	transferOnCompact bool
	// violation is the first invariant broken inside a node.
	violation error
	// ledBy is who led each term: a term is one leader's, once. A
	// member that led it again could deal its revisions a second time
	// without knowing what its first node committed.
	ledBy    map[int64]ledTerm
	expiries []expiry
	// expiryAttempts are lease expiries committed, maybe uncertainly.
	expiryAttempts []attempt
	// leasePool holds every lease a grant answered, for clients that keep
	// alive a lease another client may be revoking (a lease's keepalive
	// loop runs on while its revoke is in flight).
	leasePool []int64
	// revokes are the commits (maybe uncertain) of lease revokes, a
	// client's or an expiry's: when each lease may have ended.
	revokes []expired
	// expired are the lease expiries surely applied.
	expired []expired
	// authSeq0 is the Seq of the auth world's first store; authAttempts
	// are the commits (maybe uncertain) of the admin's changes.
	authSeq0     uint64
	authAttempts []authAttempt
}

func newWorld(cfg Config) *World {
	w := &World{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		eng:    memkv.New(),
		hash:   fnv.New64a(),
		faults: map[string]int{},
	}
	w.hist = newHistory()
	return w
}

// writer is the transaction a node writes through. On an exclusive
// world it is memkv's without Insert (and batched reads), as Badger's
// has neither: the driver then reads a revision record's key before
// writing it, unless core marks the record Fresh.
func (w *World) writer(txn storage.Txn) storage.Txn {
	if w.cfg.Exclusive {
		return plainTxn{txn}
	}
	return txn
}

// plainTxn hides every interface of a transaction beyond storage.Txn.
type plainTxn struct{ storage.Txn }

// nodeEngine is the engine as the nodes' work sees it: memkv, whose
// transactions are writer's.
type nodeEngine struct{ w *World }

func (e nodeEngine) Begin(ctx context.Context) (storage.Txn, error) {
	txn, err := e.w.eng.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return e.w.writer(txn), nil
}

func (e nodeEngine) Close() error { return nil }

// memTxn is the memkv transaction under txn (writer's).
func memTxn(txn storage.Txn) *memkv.Txn {
	if p, ok := txn.(plainTxn); ok {
		txn = p.Txn
	}
	return txn.(*memkv.Txn)
}

// after schedules fn at now+d.
func (w *World) after(d time.Duration, what string, fn func()) {
	w.seq++
	heap.Push(&w.events, &event{at: w.now + max(d, 0), seq: w.seq, what: what, fn: fn})
}

// note adds a line to the trace (and its hash), at the world's virtual
// time (not a node's clock, which runs at a wall clock's epoch).
func (w *World) note(format string, args ...any) {
	line := traceTime(w.now) + " " + fmt.Sprintf(format, args...)
	w.hash.Write([]byte(line))
	w.hash.Write([]byte{'\n'})
	if w.cfg.Trace {
		w.trace = append(w.trace, line)
	}
}

// traceTime formats a virtual time as seconds, to the nanosecond (exact:
// a line says when its event ran, as the run did), aligned in a column:
// "    1.250000000s".
func traceTime(d time.Duration) string {
	return fmt.Sprintf("%5d.%09ds", d/time.Second, d%time.Second)
}

func (w *World) fault(kind string, format string, args ...any) {
	w.faults[kind]++
	w.note("fault %s: %s", kind, fmt.Sprintf(format, args...))
}

// step runs the next event; false when none is left or time is up.
func (w *World) step(limit time.Duration) bool {
	if len(w.events) == 0 {
		return false
	}
	e := heap.Pop(&w.events).(*event)
	if e.at > limit {
		heap.Push(&w.events, e)
		return false
	}
	w.now = e.at
	w.eng.SetNow(w.now)
	e.fn()
	return true
}

// chance reports true with probability p.
func (w *World) chance(p float64) bool { return p > 0 && w.rng.Float64() < p }

// between draws a duration in [lo, hi].
func (w *World) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}
