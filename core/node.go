package core

// Defaults of Config, taken where a field is zero (or, but for
// RingBytes, negative).
const (
	DefaultRingSize     = 1 << 16
	DefaultRingBytes    = 32 << 20
	DefaultMaxTxnOps    = 128 // etcd's
	DefaultMaxAttempts  = 64
	DefaultCatchUpBatch = 1024
	DefaultMaxPending   = 10000
	DefaultMinLeaseTTL  = 2
	DefaultSweepBatch   = 512
	// DefaultRevisionBatch: see Config.RevisionBatch.
	DefaultRevisionBatch = 128
)

// Config tunes a node.
type Config struct {
	// RingSize is how many recent events stay in memory (default
	// DefaultRingSize).
	RingSize int
	// RingBytes bounds what those events weigh, values and previous
	// values included (default DefaultRingBytes; negative: no bound).
	RingBytes int64
	// MaxTxnOps is etcd's --max-txn-ops (default DefaultMaxTxnOps).
	MaxTxnOps int
	// MaxAttempts bounds how often one request is dealt again after
	// conflicts, lateness or engine failures (default DefaultMaxAttempts).
	MaxAttempts int
	// CatchUpBatch bounds the revisions one catch-up read covers
	// (default DefaultCatchUpBatch).
	CatchUpBatch int
	// MaxPending bounds the write requests admitted and not yet final
	// (dealt or waiting in latches); past it Propose answers
	// ErrTooManyRequests, as etcd does when its apply falls 5,000
	// entries behind (default DefaultMaxPending).
	MaxPending int
	// MinLeaseTTL is the smallest lease TTL granted, in seconds (etcd
	// derives it from its election timeout; default DefaultMinLeaseTTL).
	MinLeaseTTL int64
	// SweepBatch bounds the records one compaction sweep batch reads
	// (default DefaultSweepBatch).
	SweepBatch int
	// RevisionBatch is how many revision records of each shard one
	// round of a catch-up read takes before it merges them (default
	// DefaultRevisionBatch). The simulator makes it small so that its
	// short histories take many rounds.
	RevisionBatch int
	// Term is the leadership term the node deals in (Member sets it).
	Term int64
	// FreshFrom is the lowest revision no one but this node can have
	// stored a record at (Member sets it for an exclusive member; 0:
	// none). Its revision records at or above it are written Fresh.
	FreshFrom int64
	// Testing plants bugs for the simulator; production leaves it zero.
	Testing TestingKnobs
}

// TestingKnobs are bugs of core's the simulator plants to show its
// checks find them, kept apart so none is taken for a real setting.
type TestingKnobs struct {
	// LateNestedCompares: a nested txn's compares are evaluated when the
	// txn reaches it, after the writes before it in its branch, not
	// against the store before the txn as etcd evaluates every compare
	// of the tree.
	LateNestedCompares bool
	// LatchMissesRangeStart: a range's latch does not wait for a single
	// key's latch on the range's first key, so a put of that key and a
	// range over it, dealt one after the other, may evaluate on
	// snapshots that miss each other.
	LatchMissesRangeStart bool
	// MergeSkipsFullShards: a round of the revision-record merge takes a
	// shard whose batch came back full as read to the end of the range,
	// so that shard's records past its batch are skipped.
	MergeSkipsFullShards bool
	// ModFiltersExclusive: a range's min_mod_revision and
	// max_mod_revision filters (in a txn) drop the keys last modified at
	// the bound itself, which etcd keeps.
	ModFiltersExclusive bool
	// PagesCountOnlyRead: a paged range (RangePages, as RangeStream
	// answers) that its limit ends counts only the keys it sent, not
	// every key in the range as Range does.
	PagesCountOnlyRead bool
	// IgnoreLeaseDetaches: a put with ignore_lease detaches the key from
	// its lease instead of keeping it, so the lease's expiry or revoke
	// no longer deletes it.
	IgnoreLeaseDetaches bool
	// NoSpaceMissesFailureBranch: while NOSPACE is raised, a txn is
	// refused only for a put in its success branch, so one whose puts
	// are all in its failure branch adds data.
	NoSpaceMissesFailureBranch bool
	// AlarmForgottenOnRecover: a new leader starts without the stored
	// NOSPACE alarm, and takes writes until an operator raises it again.
	AlarmForgottenOnRecover bool
	// TxnOpsLimitOffByOne: a txn of exactly MaxTxnOps operations (in
	// compares or a branch) is refused as too many, which etcd allows.
	TxnOpsLimitOffByOne bool
	// GrantReplacesLease: a grant that names the ID of a live lease
	// replaces it instead of being refused (etcd: lease already exists).
	GrantReplacesLease bool
	// RevokeUnknownAnswersOK: a revoke of a lease the leader does not
	// hold is answered as done at the commit point, not "lease not found".
	RevokeUnknownAnswersOK bool
	// LeaseKeepsDetachedKeys: a key put with another lease, or without
	// one, or deleted, stays among its old lease's keys (time-to-live
	// lists it; a revoke skips it, as it checks each key's lease).
	LeaseKeepsDetachedKeys bool
	// TimeToLiveFromGrant: time-to-live counts a lease's remaining time
	// from when its grant committed, not from its last keepalive.
	TimeToLiveFromGrant bool
	// RefuseNegativeLeaseIDs: a grant naming a negative ID is refused
	// "lease not found" (Axon did so); etcd grants it.
	RefuseNegativeLeaseIDs bool
	// RevisionReadsGoEarly: a request whose range names a revision dealt
	// but not final yet goes out at once instead of waiting for it, and
	// answers ErrFutureRev, by the commit point as of dealing, for a
	// revision its compares may already see.
	RevisionReadsGoEarly bool
	// CompareFirstKeyOnly: a compare over a range holds when its first
	// key passes it; etcd holds it only when every key in the range does.
	CompareFirstKeyOnly bool
	// TxnRevisionReadsCommitted: a txn's range at a revision reads at the
	// commit point as of dealing instead (checked, but not the revision
	// asked for).
	TxnRevisionReadsCommitted bool
	// LeaseCompareReadsVersion: a compare of a key's lease takes the
	// compare's version field (0 for a lease compare) as the lease it
	// compares with.
	LeaseCompareReadsVersion bool
	// CompactAcceptsFuture: a compaction past the commit point is
	// stored, not refused as a future revision.
	CompactAcceptsFuture bool
	// CompactHeadIsFuture: a compaction to the commit point itself is
	// refused as a future revision, which etcd allows.
	CompactHeadIsFuture bool
	// SweepAnsweredEarly: a physical compaction is answered once its
	// compact revision is stored, before the sweep deleted what it made
	// unreachable.
	SweepAnsweredEarly bool
	// ExhaustedKeepsLatch: a request that ran out of attempts is
	// answered but keeps its latch, so later writes of its keys wait
	// for good.
	ExhaustedKeepsLatch bool
}

func (c Config) withDefaults() Config {
	if c.RingSize <= 0 {
		c.RingSize = DefaultRingSize
	}
	if c.RingBytes == 0 {
		c.RingBytes = DefaultRingBytes
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.CatchUpBatch <= 0 {
		c.CatchUpBatch = DefaultCatchUpBatch
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MinLeaseTTL <= 0 {
		c.MinLeaseTTL = DefaultMinLeaseTTL
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = DefaultSweepBatch
	}
	if c.RevisionBatch <= 0 {
		c.RevisionBatch = DefaultRevisionBatch
	}
	return c
}

// State is what a node starts from, read from the engine by Recover.
type State struct {
	// Committed is the highest revision stored: everything at or below
	// it is final.
	Committed int64
	Compacted int64
	Leases    []LeaseState
	// NoSpace: the NOSPACE alarm is raised, by the members Alarmed.
	NoSpace bool
	Alarmed []uint64
}

// Node is the pure state machine of one Axon leader: it deals revisions,
// orders outcomes, advances the commit point, and releases responses and
// watch events in revision order. It is not safe for concurrent use: the
// driver serialises calls. It never blocks, reads a clock or does IO.
type Node struct {
	cfg       Config
	next      int64 // next revision to deal
	committed int64 // C
	compacted int64
	slots     map[int64]*slot
	// held is serial work waiting for C to reach its after revision.
	held []*Work
	// out is request work handed out undealt: it may still call Deal.
	out map[*Work]struct{}
	// answers of requests that wrote nothing, waiting for C to reach
	// the revision they were read at.
	answers []Response
	// leaseSeq numbers the lease IDs the node picks in its term.
	leaseSeq int64
	// hub serves the node's watches: the feeds of the members' hubs.
	hub     *Hub
	leases  leases
	ready   Ready
	latches latches
	// draining refuses new writes while leadership is handed over.
	draining bool
	// alarmed are the members whose NOSPACE alarm is raised; alarming
	// says a WorkAlarm is out, alarms are the changes asked for meanwhile.
	alarmed  []uint64
	alarming bool
	alarms   []*Work
	// compacting is the compact revision being stored, if above
	// compacted; a second request for it or below fails, as in etcd.
	compacting int64
	// compactQueue holds compactions asked for while one is stored: they
	// take effect in order, each judged against the one before (a lower
	// one stored after a higher one answered would be out of order).
	compactQueue []compactAsk
	sweep        sweeper
}

// NewNode returns a node that continues from st.
func NewNode(cfg Config, st State) *Node {
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:       cfg,
		next:      st.Committed + 1,
		committed: st.Committed,
		compacted: st.Compacted,
		slots:     make(map[int64]*slot),
		out:       make(map[*Work]struct{}),
		hub:       newHub(cfg, st.Committed, st.Compacted),
		leases:    newLeases(st.Leases),
		latches:   newLatches(cfg.Testing.LatchMissesRangeStart),
		alarmed:   st.Alarmed,
	}
	if cfg.Testing.AlarmForgottenOnRecover {
		n.alarmed, st.NoSpace = nil, false
	}
	if st.NoSpace && len(n.alarmed) == 0 {
		n.alarmed = []uint64{AnyMember}
	}
	n.hub.ready = &n.ready
	if st.Compacted > 1 {
		// Finish what a predecessor's sweep may have left.
		n.sweepTo(st.Compacted)
	}
	return n
}

// Committed returns the commit point C: reads at C see every write whose
// response was released.
func (n *Node) Committed() int64 { return n.committed }

// Compacted returns the compact revision.
func (n *Node) Compacted() int64 { return n.compacted }

// Compacting is the highest compact revision asked for: above Compacted
// while a compaction is being stored.
func (n *Node) Compacting() int64 { return max(n.compacting, n.compacted) }

// InFlight returns how many dealt revisions are above C, plus the work
// out undealt and the answers waiting for C.
func (n *Node) InFlight() int { return len(n.slots) + len(n.out) + len(n.answers) }

// Drained reports that nothing this node handed out can still change the
// engine's records: no request in flight and no compaction or alarm being
// stored. A handover waits for it: the successor recovers at once, and a
// compact revision stored after its recovery would leave it believing
// history it cannot read is still there. (Sweep batches may still run:
// they only delete what a stored compaction already made unreachable.)
func (n *Node) Drained() bool {
	return n.InFlight() == 0 && n.compacting <= n.compacted && !n.alarming
}

// Config returns the node's effective configuration.
func (n *Node) Config() Config { return n.cfg }

// Ready returns the outputs collected since the last call and clears them.
func (n *Node) Ready() Ready {
	n.hub.prepare()
	rd := n.ready
	rd.Committed = n.committed
	n.ready = Ready{}
	return rd
}

// HasReady reports whether Ready would return any output.
func (n *Node) HasReady() bool {
	return len(n.ready.Work) > 0 || len(n.ready.Responses) > 0 || len(n.ready.WatchResponses) > 0
}
