package driver

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/storage"
)

// ErrLeaderChanged answers requests that were waiting when this member
// stopped leading: they may or may not have been applied (etcd's words).
var ErrLeaderChanged = errors.New("etcdserver: leader changed")

// Clock is the driver's time: the member's clock and timers on it.
type Clock interface {
	// Now is the member's clock (wall time in a server, virtual time
	// plus the node's drift in the simulator).
	Now() time.Duration
	// AfterFunc calls f after d; f may call back into the Driver. A
	// timer of a stopped or crashed member may never fire.
	AfterFunc(d time.Duration, f func())
}

// Executor does the engine IO of work items.
type Executor interface {
	// Exec runs w and calls d.Done with its result exactly once, from
	// any goroutine or event, later or before Exec returns; never with
	// the driver's lock held. An executor that is stopped (a crash, a
	// server closing) may drop w.
	Exec(d *Driver, w *core.Work)
}

// Result is how a work item ended (core.Result).
type Result = core.Result

// Hooks are what the outside world does with the member's outputs
// beyond answering requests. Each runs with the driver's lock held, in
// the order the member produced the outputs; nil hooks are skipped.
type Hooks struct {
	// Check runs before outputs are taken (the simulator checks the
	// node's invariants here).
	Check func(m *core.Member)
	// Unclaimed sees responses no request waits for (lease expiries).
	Unclaimed func(r core.Response)
	// RoleChanged runs once the member gained or lost the lead (after
	// waiting requests were answered ErrLeaderChanged on a loss).
	RoleChanged func(m *core.Member)
	// HandedOff tells the successor leadership was handed to it.
	HandedOff func(rec *core.ElectionRecord)
}

// Config configures a Driver.
type Config struct {
	Member *core.Member
	Clock  Clock
	Exec   Executor
	Hooks  Hooks
	// Transport reaches the leader from a follower.
	Transport Transport
	// Refused says an error in a call's Answer (run here or at the
	// leader) means it was not applied and may go to the next leader; nil:
	// core.ErrNotLeader and core.ErrNoLeader.
	Refused func(error) bool
	// Log receives the errors of failed work (nil: none logged).
	Log *slog.Logger
	// RetryEvery is how soon a refused call is tried again if the leader
	// does not change first (default 20 ms).
	RetryEvery time.Duration
	// AuthSecret draws the token secret of an auth store created by the
	// first change (nil: a store without one).
	AuthSecret func() ([]byte, error)
	// Binary names this binary in the format record an auth change writes
	// (auth.AuthWrites).
	Binary string
	// KeyCacheBytes bounds the cache of latest records the leader's
	// writes left (keycache.go), so a write of a key written before
	// reads no engine table; 0: no cache.
	KeyCacheBytes int64
	// Testing plants bugs for the simulator; production leaves it zero.
	Testing TestingKnobs
}

// TestingKnobs are bugs the simulator plants to show its checks find
// them (sim.Plants), kept apart so none is taken for a real setting.
type TestingKnobs struct {
	// KeepGenOnFailedAuth: a failed auth change leaves gen alone (as
	// before the fix), so a check that looked before it and loads its
	// snapshot after may leave the leader trusting a store without the
	// change, once the deadline passed.
	KeepGenOnFailedAuth bool
	// KeepKeysOnUncertain: an uncertain commit leaves the key cache's
	// entries of the keys it wrote, so a write that landed after all is
	// evaluated against the record from before it.
	KeepKeysOnUncertain bool
	// SkipPrevReads: the watch sender sends events without reading the
	// previous values their writes left unread (WatchStream.Next), so a
	// prev_kv comes without its value.
	SkipPrevReads bool
	// DealEagerly: request work is dealt its revision before it is
	// evaluated (as Axon once did), so requests that change nothing
	// take revisions etcd does not.
	DealEagerly bool
	// StaleAuthReads: a follower checks every read against the auth
	// store it loaded first, not the one in the read's own snapshot, so
	// permissions are honoured after their revoke was acknowledged.
	StaleAuthReads bool
	// EarlyLeaseGone: a keepalive of a lease whose expiry is in flight
	// is answered "not found" at once (as Axon once did), not once the
	// expiry commits, so a lease is said gone before it is.
	EarlyLeaseGone bool
	// RetryUnknownOutcome: the leader-call loop (Lead) tries again a
	// call whose answer may hide that it applied (a timeout, a broken
	// connection), as it does a refusal, so a write may apply twice.
	RetryUnknownOutcome bool
	// ProgressAtCommitted: a progress notification (progress_notify)
	// says the member's commit point (a follower's: the newest it
	// learned) even for a watch still catching up or on a hub behind it,
	// not the revision the watch is synced to, so its client skips events
	// it never got.
	ProgressAtCommitted bool
	// GapAtResume: a member's feed resumes on a new leader one revision
	// past its hub's, so the hub's watches skip that revision's events.
	GapAtResume bool
	// StaleSnapshots: one in staleEvery of the driver's engine
	// transactions (work, reads, previous values' reads) begins a few
	// commits behind the latest (storage.WithStaleSnapshot), as one
	// handed a stale start timestamp by the PD client did before
	// storage/tikv's tsoGuard: reads answer old data, and a leader's key
	// cache holds records its snapshot lacks.
	StaleSnapshots bool
	// LearnGoesBack: the member takes each answer's revision as the
	// newest it learned, so an answer that arrives late (after one of a
	// higher revision) sets it back, and a serializable read answers
	// below what the member had answered before.
	LearnGoesBack bool
	// CompactionsLearnedLate: the hub hears of a compaction answered
	// through its member only from its feed, after the client heard of
	// it, so a watch from below it created meanwhile is served as if
	// the history were there, where etcd cancels it.
	CompactionsLearnedLate bool
	// LateAnchorOutputs: what an anchoring hub answers the calls that
	// waited for it goes out only with the step's other outputs (as it
	// once did), after what those calls' streams send at once: a watch
	// from below the compaction, canceled there, can get a progress
	// answer first.
	LateAnchorOutputs bool
	// ProgressAtFloor: a progress answer on a client stream whose hub
	// is behind the stream's floor (what a watch resumed there from
	// another instance had seen) is raised to the floor, as once, so
	// it tells the stream's other watches of revisions they have not
	// got.
	ProgressAtFloor bool
	// ProgressFirstWatchOnly: a RequestProgress answer waits for the
	// stream's first watch alone to be synced, not for all of them, so
	// it tells a watch still catching up of revisions it has not got.
	ProgressFirstWatchOnly bool
	// CancelKeepsWatch: a client's cancel of a watch is acknowledged,
	// but the watch stays registered and its events keep coming.
	CancelKeepsWatch bool
	// ReadPointUnlearned: the commit point a leader serves reads at is
	// not learned (as once), so once it follows, its serializable reads
	// may answer below a read it served while it led.
	ReadPointUnlearned bool
	// Auth plants bugs of the auth store's: every store the driver reads
	// from the engine carries them (auth.TestingKnobs).
	Auth auth.TestingKnobs
}

// Driver runs a core.Member: it serialises calls into it, acts on its
// Ready (answers, watch responses, work, role changes) and feeds work
// results back.
type Driver struct {
	cfg     Config
	m       *core.Member
	self    string // the member's ID
	mu      sync.Locker
	nextID  core.RequestID
	waiters map[core.RequestID]func(core.Response)

	seen          leaderSeen        // the leader known at the last step
	leaderWaiters map[uint64]func() // AwaitLeader wake-ups for the next change
	nextWaiter    uint64
	readWaiting   []func(int64, error)
	readBusy      bool
	known         atomic.Int64 // the newest commit point learned
	auth          authState
	keys          *keyCache                     // nil: none
	watches       map[core.WatchID]*WatchStream // the node's watches (feeds), by ID
	nextWatch     core.WatchID
	// hub serves this member's client watches (feed.go), nil until the
	// first feed anchors it; hubWaiting is what waits for that.
	hub        *core.Hub
	hubWaiting []func(*core.Hub)
	hubWatches map[core.WatchID]*WatchStream // the hub's watches, by ID
	hubWork    map[*core.Work]bool           // the hub's catch-up work out
	feed       *Feed                         // the feed open, if any
	feedPaused bool                          // a failed feed's retry waits
	hubWorkOut []*core.Work                  // the hub's work taken, to start after the step
	// engineDeadline is the member's, read once: its config changes
	// under the lock.
	engineDeadline time.Duration
	catchUpBatch   int
	scan           core.RecordScan
	begins         atomic.Uint64 // engine begins, for StaleSnapshots
}

// New returns a driver of cfg.Member.
func New(cfg Config) *Driver {
	mu := &sync.Mutex{}
	if cfg.AuthSecret == nil {
		cfg.AuthSecret = func() ([]byte, error) { return nil, nil }
	}
	return &Driver{cfg: cfg, m: cfg.Member, self: cfg.Member.Config().ID, mu: mu, waiters: map[core.RequestID]func(core.Response){},
		engineDeadline: cfg.Member.Config().EngineDeadline, catchUpBatch: cfg.Member.Config().Node.CatchUpBatch, scan: cfg.Member.Config().Node.Scan(), keys: newKeyCache(cfg.KeyCacheBytes)}
}

// KeyCacheStats reports the key cache's use (zero without one).
func (d *Driver) KeyCacheStats() KeyCacheStats {
	if d.keys == nil {
		return KeyCacheStats{}
	}
	return d.keys.Stats()
}

// Member is the driven member; read it only with the lock held.
func (d *Driver) Member() *core.Member { return d.m }

// Step ticks the member, runs fm against it and fn against its node if
// it leads, acts on the outputs and reports whether it leads. Outputs are
// delivered before the lock goes: left pending across an unlock they
// could be overtaken by another step's (a progress notification would
// then reach a watcher before the events it covers).
func (d *Driver) Step(fm func(m *core.Member), fn func(n *core.Node)) bool {
	d.mu.Lock()
	// The member sees the clock first: a leader whose lease ran out must
	// step down before it hands out more work.
	d.m.Tick(d.cfg.Clock.Now())
	if fm != nil {
		fm(d.m)
	}
	n := d.m.Node()
	if n != nil && fn != nil {
		fn(n)
	}
	work, answers, wake := d.ready()
	d.mu.Unlock()
	for _, f := range answers {
		f()
	}
	d.start(work, wake)
	return n != nil
}

// propose submits a request through the node, if the member leads, and
// calls answer with its response once it is final (or with
// ErrLeaderChanged if the lead is lost first). It returns the request's
// ID, 0 if the member does not lead; then answer is never called.
func (d *Driver) propose(submit func(n *core.Node, id core.RequestID), answer func(core.Response)) core.RequestID {
	var id core.RequestID
	d.Step(nil, func(n *core.Node) {
		d.nextID++
		id = d.nextID
		d.waiters[id] = answer
		submit(n, id)
	})
	return id
}

// LeaseKeys returns the keys attached to a lease, as the leader's node
// knows them (none on a follower or for an unknown lease): the auth
// check of a put with a lease needs write on each.
func (d *Driver) LeaseKeys(lease int64) [][]byte {
	var keys [][]byte
	d.Step(nil, func(n *core.Node) {
		if info, err := n.TimeToLive(lease, d.cfg.Clock.Now()); err == nil {
			keys = info.Keys
		}
	})
	return keys
}

// Done feeds back how a work item ended; a failure's error is logged
// once, here (a conflict, normal under contention, only at debug level).
func (d *Driver) Done(w *core.Work, r Result) {
	if r.Err != nil && d.cfg.Log != nil {
		level := slog.LevelWarn
		if errors.Is(r.Err, storage.ErrConflict) || errors.Is(r.Err, context.Canceled) {
			level = slog.LevelDebug
		}
		d.cfg.Log.Log(context.Background(), level, "engine work failed", "work", w.Kind.String(), "rev", w.Rev, "attempt", w.Attempt, "err", r.Err)
	}
	d.Step(func(m *core.Member) {
		if d.hubWork[w] {
			delete(d.hubWork, w)
			d.hub.Done(w, r)
			return
		}
		if d.keys != nil && m.Owns(w) {
			// Before m.Done releases the work's latches: the next write
			// of these keys must find them as this one left them.
			switch {
			case r.Outcome == core.Committed:
				d.keys.committed(r.Effects)
			case r.Outcome == core.Uncertain && !d.cfg.Testing.KeepKeysOnUncertain:
				d.keys.void(r.Effects)
			}
		}
		m.Done(w, r)
	}, nil)
}

var _ Dealer = (*Driver)(nil)

// Deal deals undealt request work its revision (Dealer).
func (d *Driver) Deal(w *core.Work) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Deal(w)
}

// ready takes the member's outputs and acts on all but the work, which
// it returns to start once the lock is released, with the waiters'
// answers (they may call into the driver again) and the calls to wake
// because the leader changed. Called with the lock.
func (d *Driver) ready() (work []*core.Work, answers, wake []func()) {
	h := d.cfg.Hooks
	if h.Check != nil {
		h.Check(d.m)
	}
	rd := d.m.Ready()
	for _, r := range rd.Responses {
		if answer := d.waiters[r.ID]; answer != nil {
			delete(d.waiters, r.ID)
			answers = append(answers, func() { answer(r) })
		} else if h.Unclaimed != nil {
			h.Unclaimed(r)
		}
	}
	if n := d.m.Node(); n != nil {
		for i, wr := range rd.WatchResponses {
			if ws := d.watches[wr.ID]; ws != nil {
				ws.deliver(n, wr)
			} else if f := d.feed; f != nil && f.watch == wr.ID {
				d.localGot(n, &rd.WatchResponses[i])
			}
		}
		d.localGot(n, nil)
	}
	if rd.RoleChanged {
		d.auth.gen.Add(1) // another leader may have changed the auth store
		if d.keys != nil {
			d.keys.clear() // and any key
		}
		if d.m.Node() == nil {
			// The node that held these requests and watches is gone and
			// will never answer them.
			d.stopWatches()
			// In ID order: the simulator replays by seed.
			for _, id := range slices.Sorted(maps.Keys(d.waiters)) {
				answer := d.waiters[id]
				delete(d.waiters, id)
				answers = append(answers, func() { answer(core.Response{ID: id, Err: ErrLeaderChanged}) })
			}
		}
		if h.RoleChanged != nil {
			h.RoleChanged(d.m)
		}
	}
	if rd.HandedOff != nil && h.HandedOff != nil {
		h.HandedOff(rd.HandedOff)
	}
	wake = d.leaderChanged()
	if open := d.follow(); open != nil {
		wake = append(wake, open)
	}
	// After follow: a leader's own feed may anchor the hub there.
	d.hubReady()
	work, d.hubWorkOut = append(rd.Work, d.hubWorkOut...), nil
	return work, answers, wake
}

// start hands work to the executor, a retry after its backoff, and wakes
// calls waiting for a new leader (on the clock, not in the caller).
func (d *Driver) start(work []*core.Work, wake []func()) {
	for _, f := range wake {
		d.cfg.Clock.AfterFunc(0, f)
	}
	for _, w := range work {
		if b := Backoff(w.Attempt); b > 0 {
			d.cfg.Clock.AfterFunc(b, func() { d.execIfOwned(w) })
			continue
		}
		d.cfg.Exec.Exec(d, w)
	}
}

// execIfOwned runs delayed work only if the member, ticked to now, still
// holds the node that handed it out: the lease that made the work safe
// may have run out while it waited, and a successor may have started.
func (d *Driver) execIfOwned(w *core.Work) {
	var owned bool
	d.Step(func(m *core.Member) { owned = m.Owns(w) || d.hubWork[w] }, nil)
	if owned {
		d.cfg.Exec.Exec(d, w)
	}
}

// The planted StaleSnapshots: one begin in staleEvery is stale, by 1 to
// maxStaleBy commits. A few commits behind is the subtle case of a stale
// timestamp (a zero one, the empty store, is the blatant case): the
// commits a read must not miss are the last few.
const (
	staleEvery = 50
	maxStaleBy = 4
)

// beginCtx is ctx for an engine begin of the driver's: with the planted
// StaleSnapshots, now and then a stale one. Which begins are is decided
// by their count, so the simulator replays it by seed.
func (d *Driver) beginCtx(ctx context.Context) context.Context {
	if !d.cfg.Testing.StaleSnapshots {
		return ctx
	}
	if n := d.begins.Add(1); n%staleEvery == 0 {
		return storage.WithStaleSnapshot(ctx, 1+n/staleEvery%maxStaleBy)
	}
	return ctx
}

// Backoff is how long to wait before attempt n of a work item: 5 ms more
// per attempt, at most a second.
func Backoff(attempt int) time.Duration {
	if attempt == 0 {
		return 0
	}
	return min(time.Duration(attempt)*5*time.Millisecond, time.Second)
}
