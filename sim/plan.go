package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage/memkv"
)

// Config is one simulation run.
type Config struct {
	Seed    uint64
	Nodes   int // default 3
	Clients int // default 6
	// Ops is how many client operations to issue before healing.
	Ops int
	// BreakDrift lets clocks drift far beyond the bound the leadership
	// protocol assumes; the checks should then find anomalies.
	BreakDrift bool
	// Plants are the world's faults planted in this run (none by
	// default).
	Plants Plants
	// Knobs are Axon's own bugs planted in this run, in the code the
	// server runs (driver.TestingKnobs; none by default).
	Knobs driver.TestingKnobs
	// CoreKnobs are Axon's own bugs planted in core (none by default).
	CoreKnobs core.TestingKnobs
	// Trace keeps a readable trace in the Result.
	Trace bool
	// Porcupine also runs porcupine's search over the history (slow on
	// long histories; the revision-order witness check always runs).
	Porcupine bool
	// Exclusive runs one node alone on an engine shaped like Badger's,
	// as `axon serve` does by default: the member is exclusive
	// (core.MemberConfig.Exclusive: it leads again at once after a
	// restart, with revision records above what is stored Fresh), and
	// the engine's transactions have no Insert, so the driver writes a
	// Fresh record without reading its key first. A crashed node stays
	// down until its writes have landed or never will: a process's
	// writes end with it.
	Exclusive bool
}

// Plants are faults of the world planted on purpose, each for a test
// that proves a check finds what it leads to (docs/testing.md, "Planted
// bugs"). Axon's own bugs are planted in the code the server runs, as
// driver.TestingKnobs (Config.Knobs).
type Plants struct {
	// SkipConflictChecks plants a bug in the engine: each commit skips
	// its conflict check with this probability (memkv's
	// Fault.SkipConflictCheck); the checks should then find lost updates.
	SkipConflictChecks float64
	// EarlyRestart plants a bug in an exclusive world: a crashed node
	// comes back while its dead incarnation's writes may still land (as
	// a server that opened its engine again before the old one's commits
	// ended would), so a revision the new incarnation writes Fresh may
	// already hold a record; the checks should then find that record
	// overwritten.
	EarlyRestart bool
}

func (c Config) withDefaults() Config {
	if c.Nodes <= 0 {
		c.Nodes = 3
	}
	if c.Exclusive {
		c.Nodes = 1
	}
	if c.Clients <= 0 {
		c.Clients = 6
	}
	if c.Ops <= 0 {
		c.Ops = 1000
	}
	return c
}

// Timing shared by every node: the safety assumptions of
// docs/design.md, "Leadership".
const (
	leaseDuration  = 2 * time.Second
	renewEvery     = 500 * time.Millisecond
	maxDrift       = 100 * time.Millisecond
	engineDeadline = 400 * time.Millisecond
	tickEvery      = 50 * time.Millisecond
	clientTimeout  = 3 * time.Second
)

// Plan is the swarm of faults one seed draws: which kinds and how often.
type Plan struct {
	Engine         memkv.Rates
	EngineLatency  time.Duration // upper bound of per-op engine latency
	NetDelay       time.Duration // upper bound of one message's delay
	NetDrop        float64       // client↔node and node↔node message loss
	NetDup         float64       // duplicated idempotent node↔node messages
	CrashEvery     time.Duration // mean time between node crashes (0: none)
	PauseEvery     time.Duration
	PartitionEvery time.Duration
	TransferEvery  time.Duration
	ClockJumpEvery time.Duration
	// UnavailableEvery: windows in which every engine call fails.
	UnavailableEvery time.Duration

	// Clients is how many clients run (more on hot-key seeds).
	Clients int
	// HotKeys take HotShare of the operations that name a key, and
	// HotShare/2 of all operations start a hot-counter CAS loop on one.
	HotKeys  []string
	HotShare float64
	// Abandoning clients give up on a call while it may still apply:
	// TimeoutShare of the calls wait only Timeout, CancelShare are
	// cancelled within one network delay of being sent.
	Timeout      time.Duration
	TimeoutShare float64
	CancelShare  float64
	// Slow watchers: StallEvery, clients stop reading their watch stream
	// for up to 2 s, and a stream holds at most WatchQueue unsent
	// responses (0: the driver's default) before its watcher is cut off.
	StallEvery time.Duration
	WatchQueue int
	// SlowReadShare of a follower's reads stall between the read index
	// and the snapshot.
	SlowReadShare float64
	// RingBytes bounds the leader's event ring by weight (0: only its
	// 64 events), so that watchers fall behind it and catch up from the
	// engine mid-revision as well as at revision ends.
	RingBytes int64
	// KeyCacheBytes bounds the leader's key cache (driver.Config): by
	// the seed's parity, room for a few entries (evicted all the time)
	// or for every key. Not drawn, so that adding it moved no seed.
	KeyCacheBytes int64
	// RevisionBatch and CatchUpBatch are core's (Config): on half the
	// seeds 1–3 records of each of the 16 shards a round and 48
	// revisions a catch-up read, so that catch-ups merge the shards over
	// several rounds, as a long history's do with core's 128; elsewhere
	// 16 revisions a read, within one round. Not drawn, like
	// KeyCacheBytes.
	RevisionBatch int
	CatchUpBatch  int
	// SerializableShare of the plain reads are serializable: a follower
	// answers them at the newest commit point it learned.
	SerializableShare float64
	// Auth turns auth on (auth.go): clients run as users whose roles
	// and permissions an admin client changes, AuthShare of its calls.
	Auth      bool
	AuthShare float64
	// A troubled auth store: AuthFaults of the admin's commits end
	// uncertain (applied, applied later or not), the leader's loads of
	// the store from a snapshot take AuthLoadStall more (a slow region;
	// the snapshot is the one taken before), and the admin waits up to
	// AdminBackoff after a change that failed. Together they let a load
	// begun before a change that fails end after it, and the leader's
	// copy go unread for a whole distrust window.
	AuthFaults    float64
	AuthLoadStall time.Duration
	AdminBackoff  time.Duration
	// AlarmShare of an etcd client's calls raise a member's NOSPACE
	// alarm (alarm.go), which it disarms soon after; InvalidShare of the
	// etcd clients' calls are requests etcd refuses, or at the edge of
	// its rules (not under auth, whose checks do not judge them).
	AlarmShare   float64
	InvalidShare float64
	// MaxPending is core's (Config): on some seeds a few writes in
	// flight, past which the leader refuses more as etcd does when its
	// apply falls behind (0: core's default).
	MaxPending int
	// MaxAttempts is core's (Config): on some seeds a request whose
	// revision ends a no-op twice or thrice fails for good
	// (ErrRetriesExhausted; 0: the sim's 64).
	MaxAttempts int
}

// hotKeyPool is where hot keys come from: under the prefixes that
// watchers watch and lists list, so every checker sees their traffic.
var hotKeyPool = []string{"/registry/pods/a", "/registry/pods/b", "/registry/pods/hot", "/e/a", "/e/hot"}

// drawPlan picks the seed's fault mix: each kind is on with some
// probability, at a rate of its own.
func drawPlan(w *World) Plan {
	on := func(p float64) bool { return w.chance(p) }
	var p Plan
	p.EngineLatency = w.between(time.Millisecond, 20*time.Millisecond)
	p.NetDelay = w.between(time.Millisecond, 30*time.Millisecond)
	if on(0.6) {
		p.Engine.Error = w.rng.Float64() * 0.05
		p.Engine.Unavailable = w.rng.Float64() * 0.03
	}
	if on(0.7) {
		p.Engine.UncertainNotApplied = w.rng.Float64() * 0.04
		p.Engine.UncertainApplied = w.rng.Float64() * 0.04
		p.Engine.UncertainAppliedLater = w.rng.Float64() * 0.04
	}
	p.Engine.MinDelay = 0
	p.Engine.MaxDelay = p.EngineLatency
	// A delayed apply lands within the engine deadline (half of it for
	// the apply, half for the commit call itself).
	p.Engine.MaxApplyAfter = engineDeadline / 2
	if on(0.5) {
		p.NetDrop = w.rng.Float64() * 0.03
	}
	if on(0.3) {
		p.NetDup = w.rng.Float64() * 0.2
	}
	if on(0.3) {
		p.NetDup = w.rng.Float64() * 0.2
	}
	every := func(prob float64, lo, hi time.Duration) time.Duration {
		if !on(prob) {
			return 0
		}
		return w.between(lo, hi)
	}
	p.CrashEvery = every(0.5, 3*time.Second, 15*time.Second)
	p.PauseEvery = every(0.4, 3*time.Second, 15*time.Second)
	p.PartitionEvery = every(0.4, 3*time.Second, 15*time.Second)
	p.TransferEvery = every(0.5, 2*time.Second, 10*time.Second)
	p.ClockJumpEvery = every(0.5, 2*time.Second, 10*time.Second)
	p.UnavailableEvery = every(0.3, 2*time.Second, 10*time.Second)
	// Every seed runs at least one kind of node or network fault.
	if p.CrashEvery+p.PauseEvery+p.PartitionEvery+p.TransferEvery+p.ClockJumpEvery+p.UnavailableEvery == 0 {
		p.CrashEvery = w.between(2*time.Second, 5*time.Second)
	}
	drawTraffic(w, &p)
	if w.cfg.Exclusive {
		p.TransferEvery = 0 // one node has no one to hand over to
	}
	p.KeyCacheBytes = 1 << 20
	if w.cfg.Seed%2 == 0 {
		p.KeyCacheBytes = 600
	}
	p.CatchUpBatch = 16
	if w.cfg.Seed/2%2 == 1 {
		p.RevisionBatch = 1 + int(w.cfg.Seed/4%3)
		p.CatchUpBatch = 48
	}
	return p
}

// drawTraffic picks the seed's contention and impatience: a hot-key mix
// (most operations on 1–3 keys, counters updated by CAS loops, more
// clients) and clients that abandon calls after a timeout comparable to
// one engine commit, or cancel them at once, while the call may still
// apply through the leader or a follower.
func drawTraffic(w *World, p *Plan) {
	p.Clients = w.cfg.Clients
	if w.chance(0.4) {
		keys := slices.Clone(hotKeyPool)
		w.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		p.HotKeys = keys[:1+w.rng.IntN(3)]
		p.HotShare = 0.7 + 0.25*w.rng.Float64()
		p.Clients += w.rng.IntN(5)
	}
	if w.chance(0.4) {
		// A write's round trip: a network delay or two there and back,
		// several engine reads, a commit.
		p.Timeout = w.between(p.EngineLatency, 4*p.EngineLatency+2*p.NetDelay)
		p.TimeoutShare = 0.2 + 0.8*w.rng.Float64()
		if w.chance(0.5) {
			p.CancelShare = 0.2 * w.rng.Float64()
		}
	}
	if w.chance(0.3) {
		p.StallEvery = w.between(time.Second, 5*time.Second)
		p.WatchQueue = 2 + w.rng.IntN(14)
	}
	if w.chance(0.4) {
		p.SlowReadShare = 0.05 + 0.25*w.rng.Float64()
	}
	if w.chance(0.3) {
		p.RingBytes = 300 + w.rng.Int64N(3000)
	}
	if w.chance(0.5) {
		p.SerializableShare = 0.2 + 0.5*w.rng.Float64()
	}
	if w.chance(0.35) {
		p.Auth = true
		p.AuthShare = 0.2 + 0.5*w.rng.Float64()
		if w.chance(0.5) {
			p.AuthFaults = 0.1 + 0.4*w.rng.Float64()
			p.AuthLoadStall = w.between(engineDeadline/2, 3*engineDeadline)
			p.AdminBackoff = w.between(engineDeadline, 5*engineDeadline)
		}
	}
	if w.chance(0.3) {
		p.AlarmShare = 0.03 + 0.07*w.rng.Float64()
	}
	if !p.Auth && w.chance(0.5) {
		p.InvalidShare = 0.01 + 0.04*w.rng.Float64()
	}
	if w.chance(0.15) {
		p.MaxPending = 2 + w.rng.IntN(4)
	}
	if w.chance(0.15) {
		p.MaxAttempts = 2 + w.rng.IntN(2)
	}
}

// traffic renders the plan's client mix for the one-line result.
func (p Plan) traffic() string {
	s := fmt.Sprintf("clients=%d", p.Clients)
	if len(p.HotKeys) > 0 {
		s += fmt.Sprintf(" hot=%d@%.0f%%", len(p.HotKeys), 100*p.HotShare)
	}
	if p.TimeoutShare > 0 {
		s += fmt.Sprintf(" timeout=%v@%.0f%%", p.Timeout.Round(time.Millisecond), 100*p.TimeoutShare)
	}
	if p.CancelShare > 0 {
		s += fmt.Sprintf(" cancel=%.0f%%", 100*p.CancelShare)
	}
	if p.RingBytes > 0 {
		s += fmt.Sprintf(" ring=%dB", p.RingBytes)
	}
	s += fmt.Sprintf(" keycache=%dB", p.KeyCacheBytes)
	if p.RevisionBatch > 0 {
		s += fmt.Sprintf(" recbatch=%d", p.RevisionBatch)
	}
	if p.SerializableShare > 0 {
		s += fmt.Sprintf(" serializable=%.0f%%", 100*p.SerializableShare)
	}
	if p.Auth {
		s += fmt.Sprintf(" auth=%.0f%%", 100*p.AuthShare)
	}
	if p.AlarmShare > 0 {
		s += fmt.Sprintf(" alarm=%.0f%%", 100*p.AlarmShare)
	}
	if p.InvalidShare > 0 {
		s += fmt.Sprintf(" invalid=%.0f%%", 100*p.InvalidShare)
	}
	if p.MaxAttempts > 0 {
		s += fmt.Sprintf(" maxattempts=%d", p.MaxAttempts)
	}
	if p.MaxPending > 0 {
		s += fmt.Sprintf(" maxpending=%d", p.MaxPending)
	}
	if p.AuthFaults > 0 {
		s += fmt.Sprintf(" authfaults=%.0f%% authstall=%v backoff=%v", 100*p.AuthFaults, p.AuthLoadStall.Round(time.Millisecond), p.AdminBackoff.Round(time.Millisecond))
	}
	return s
}

// Result is one run's outcome.
type Result struct {
	Seed        uint64
	VirtualTime time.Duration
	Ops         int
	Events      int
	Faults      map[string]int
	Traffic     string // the seed's client mix (Plan.traffic)
	Late        int    // calls that applied after their client gave up
	Err         error  // nil: every check passed
	Hash        uint64
	Trace       []string
	// Visualize writes porcupine's HTML rendering of the run's history.
	Visualize func(path string) error
	// lateVia splits Late by the node the call entered: [leader, follower].
	lateVia [2]int
	// increments counts the hot-counter increments that applied.
	increments int
	// authJudged counts the permission decisions the auth check judged,
	// [allowed, denied]; authChanges the auth changes that applied.
	authJudged  [2]int
	authChanges int
}

// Line renders the result on one line.
func (r Result) Line() string {
	kinds := make([]string, 0, len(r.Faults))
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		total += n
	}
	sort.Strings(kinds)
	verdict := "ok"
	if r.Err != nil {
		verdict = "FAIL: " + r.Err.Error()
	}
	return fmt.Sprintf("seed=%d vtime=%v ops=%d events=%d faults=%d[%s] traffic=[%s] late=%d hash=%016x %s",
		r.Seed, r.VirtualTime.Round(time.Millisecond), r.Ops, r.Events, total, strings.Join(kinds, ","), r.Traffic, r.Late, r.Hash, verdict)
}
