package core

import (
	"encoding/binary"
	"fmt"
	"time"
)

// ElectionRecord is the leader lease stored in the engine (MetaLeader).
// Deadline is on the holder's clock; every member's clock is within
// MaxDrift of every other's.
type ElectionRecord struct {
	Holder   string
	Addr     string
	Term     int64
	Deadline time.Duration
	// Transfer: the previous leader drained and handed over; the holder
	// may start at once instead of waiting the old lease out.
	Transfer bool
}

// MetaLeader names the election record.
const MetaLeader = "leader"

// ElectOp is a compare-and-swap of the election record. Observe only
// reads it.
type ElectOp struct {
	Observe bool
	// Expect is the record to replace (nil: none stored), compared whole.
	Expect *ElectionRecord
	Next   ElectionRecord
	reason electReason
}

type electReason uint8

const (
	electObserve electReason = iota
	electCampaign
	electRenew
	electTransfer
)

// AppendElectionRecord encodes rec.
func AppendElectionRecord(dst []byte, rec *ElectionRecord) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rec.Holder)))
	dst = append(dst, rec.Holder...)
	dst = binary.AppendUvarint(dst, uint64(len(rec.Addr)))
	dst = append(dst, rec.Addr...)
	dst = binary.AppendUvarint(dst, uint64(rec.Term))
	dst = binary.AppendVarint(dst, int64(rec.Deadline))
	if rec.Transfer {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// DecodeElectionRecord decodes an election record.
func DecodeElectionRecord(b []byte) (*ElectionRecord, error) {
	rec := &ElectionRecord{}
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	var ok bool
	if rec.Holder, ok = str(); !ok {
		return nil, ErrBadRecord
	}
	if rec.Addr, ok = str(); !ok {
		return nil, ErrBadRecord
	}
	term, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, ErrBadRecord
	}
	b = b[k:]
	dl, k := binary.Varint(b)
	if k <= 0 || len(b) != k+1 || b[k] > 1 {
		return nil, ErrBadRecord
	}
	rec.Term, rec.Deadline, rec.Transfer = int64(term), time.Duration(dl), b[k] == 1
	return rec, nil
}

// sameRecord compares whole records: a CAS that matched on holder and
// term alone would let a follower with a stale view replace a lease the
// holder has renewed since.
func sameRecord(a, b *ElectionRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// evaluateElect runs an election CAS against a snapshot.
func evaluateElect(rd Reader, op *ElectOp) (*Effects, error) {
	v, ok, err := rd.Get(MetaKey(MetaLeader))
	if err != nil {
		return nil, err
	}
	var cur *ElectionRecord
	if ok {
		if cur, err = DecodeElectionRecord(v); err != nil {
			return nil, err
		}
	}
	if op.Observe || !sameRecord(cur, op.Expect) {
		return &Effects{Record: cur}, nil
	}
	next := op.Next
	return &Effects{
		Applied: true, Record: &next,
		Writes: []Write{{Key: MetaKey(MetaLeader), Value: AppendElectionRecord(nil, &next)}},
	}, nil
}

// Defaults of MemberConfig's leadership timing.
const (
	DefaultLease          = 3 * time.Second
	DefaultEngineDeadline = 2 * time.Second
)

// MemberConfig sets one instance's identity and the leadership timing.
// Safety rests on: clocks within MaxDrift of each other, and every engine
// operation ending within EngineDeadline (docs/design.md, "Leadership").
type MemberConfig struct {
	// ID names this incarnation: it must differ after a restart.
	ID   string
	Addr string
	// Lease is how long a leader holds the record after writing it
	// (default DefaultLease).
	Lease time.Duration
	// RenewEvery is how often a leader renews (well below Lease; default
	// a third of it).
	RenewEvery time.Duration
	// MaxDrift bounds the clocks' difference (default 0).
	MaxDrift time.Duration
	// EngineDeadline bounds an engine operation (default
	// DefaultEngineDeadline).
	EngineDeadline time.Duration
	// Exclusive says no other instance can reach the engine (Badger
	// holds a directory lock): a campaign need not wait out an old
	// holder's lease, so a restarted instance leads at once.
	Exclusive bool
	// LeaseTickEvery spaces the node's lease-expiry scans, which cost
	// O(leases), when Tick is called before every step (0: every Tick).
	LeaseTickEvery time.Duration
	Node           Config
}

func (c MemberConfig) withDefaults() MemberConfig {
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.RenewEvery <= 0 {
		c.RenewEvery = c.Lease / 3
	}
	if c.MaxDrift < 0 {
		c.MaxDrift = 0
	}
	if c.EngineDeadline <= 0 {
		c.EngineDeadline = DefaultEngineDeadline
	}
	c.Node = c.Node.withDefaults()
	return c
}

// Role is a member's part in the cluster.
type Role uint8

const (
	Follower Role = iota + 1
	Recovering
	Leader
)

func (r Role) String() string {
	switch r {
	case Follower:
		return "follower"
	case Recovering:
		return "recovering"
	case Leader:
		return "leader"
	}
	return "role?"
}

// Member is one Axon instance's state machine: leadership by the engine's
// election record, and a Node while it leads. Losing leadership is a
// state change: the Node goes, the Member stays.
type Member struct {
	cfg    MemberConfig
	now    time.Duration
	role   Role
	record *ElectionRecord // last seen; nil: none or unknown
	known  bool            // record was read at least once
	// electing is the election op whose result the member waits for;
	// only one is out at a time.
	electing *ElectOp
	// ledTerm is the last term this member had a node in.
	ledTerm int64
	// steppedDown says why the member last stopped leading, for traces.
	steppedDown string
	lastRenew   time.Duration
	leaseEnd    time.Duration
	term        int64
	transferTo  *ElectionRecord // successor while transferring
	// handingOver: the successor's record was sent to the engine; it may
	// have landed whatever the answer, so the member serves no more reads
	// (it steps down once the record is known).
	handingOver bool
	leaseTick   time.Duration // when the node's leases were last scanned
	node        *Node
	// dealt is the highest revision the member's earlier nodes dealt:
	// their writes may still land after a new node starts.
	dealt int64
	ready Ready
}

// NewMember returns a follower that has not read the record yet.
func NewMember(cfg MemberConfig) *Member {
	return &Member{cfg: cfg.withDefaults(), role: Follower}
}

// Config returns the member's configuration with defaults filled in.
func (m *Member) Config() MemberConfig { return m.cfg }

// SetAddr changes the address the member advertises in the records it
// writes from now on (a server learns it once it listens).
func (m *Member) SetAddr(addr string) { m.cfg.Addr = addr }

// Role returns the member's role.
func (m *Member) Role() Role { return m.role }

// Node returns the leader's node, or nil when not leading.
func (m *Member) Node() *Node {
	if m.role != Leader {
		return nil
	}
	return m.node
}

// Serving reports whether the member may answer reads at its node's
// commit point: it leads and has not issued a handover, after which the
// successor may start (and acknowledge writes) before this member hears
// that the handover landed.
func (m *Member) Serving() bool {
	return m.role == Leader && !m.handingOver
}

// Term returns the term the member leads in (0 if it never led).
func (m *Member) Term() int64 { return m.term }

// Leader returns the record of the leader the member believes in, if
// that lease has not run out on the member's clock.
func (m *Member) Leader() (ElectionRecord, bool) {
	if m.record == nil || m.now > m.record.Deadline+m.cfg.MaxDrift {
		return ElectionRecord{}, false
	}
	return *m.record, true
}

// Ready collects the member's and its node's outputs.
func (m *Member) Ready() Ready {
	rd := m.ready
	m.ready = Ready{}
	if m.node != nil {
		nr := m.node.Ready()
		rd.Work = append(rd.Work, nr.Work...)
		rd.Responses = append(rd.Responses, nr.Responses...)
		rd.WatchResponses = append(rd.WatchResponses, nr.WatchResponses...)
		rd.Committed = nr.Committed
	}
	return rd
}

func (m *Member) elect(op *ElectOp) {
	m.electing = op
	m.ready.Work = append(m.ready.Work, &Work{Kind: WorkElect, Elect: op})
}

// Tick advances the member's clock: a leader renews or steps down, a
// follower campaigns once the recorded lease is over for sure.
func (m *Member) Tick(now time.Duration) {
	m.now = now
	switch m.role {
	case Leader:
		if m.leaseOver(now) {
			m.stepDown("lease ran out")
			return
		}
		if now >= m.leaseTick+m.cfg.LeaseTickEvery {
			m.leaseTick = now
			m.node.Tick(now)
		}
		if m.electing != nil {
			return
		}
		if m.transferTo != nil {
			if m.node.Drained() {
				next := *m.transferTo
				next.Term, next.Transfer = m.term+1, true
				next.Deadline = now + m.cfg.Lease
				m.handingOver = true
				m.elect(&ElectOp{Expect: m.record, Next: next, reason: electTransfer})
			}
			return
		}
		if now >= m.lastRenew+m.cfg.RenewEvery {
			m.lastRenew = now
			m.elect(&ElectOp{Expect: m.record, Next: ElectionRecord{Holder: m.cfg.ID, Addr: m.cfg.Addr, Term: m.term, Deadline: now + m.cfg.Lease}, reason: electRenew})
		}
	case Recovering:
		if m.leaseOver(now) {
			m.stepDown("lease ran out while recovering")
		}
	case Follower:
		if m.electing != nil {
			return
		}
		switch r := m.record; {
		case !m.known:
			m.elect(&ElectOp{Observe: true})
		case r != nil && r.Holder == m.cfg.ID && r.Transfer && now < r.Deadline-m.cfg.MaxDrift && r.Term > m.ledTerm:
			// Handed over: start now. Not in a term this member led
			// already: that node's writes may still land, and only the
			// engine deadline, which a campaign waits out, settles them.
			m.startRecovery(r)
		case r == nil || m.cfg.Exclusive || now > r.Deadline+m.cfg.EngineDeadline+m.cfg.MaxDrift:
			var term int64
			if r != nil {
				term = r.Term
			}
			m.elect(&ElectOp{Expect: r, Next: ElectionRecord{Holder: m.cfg.ID, Addr: m.cfg.Addr, Term: term + 1, Deadline: now + m.cfg.Lease}, reason: electCampaign})
		}
	}
}

// leaseOver reports whether a leader must stop: its lease may have run
// out on another member's clock. An exclusive member has no rival, so a
// slow renewal (the engine stalled under load) does not cost it the lead.
func (m *Member) leaseOver(now time.Duration) bool {
	return !m.cfg.Exclusive && now >= m.leaseEnd-m.cfg.MaxDrift
}

// Refresh asks the member to read the election record again (e.g. when a
// request forwarded to the believed leader was refused).
func (m *Member) Refresh() {
	if m.role == Follower && m.electing == nil {
		m.elect(&ElectOp{Observe: true})
	}
}

// Transfer hands leadership to another member once what its node handed
// out drains (Node.Drained); new writes and compactions are refused
// meanwhile. The successor starts without
// waiting the lease out.
func (m *Member) Transfer(to, addr string) error {
	if m.role != Leader {
		return ErrNotLeader
	}
	m.transferTo = &ElectionRecord{Holder: to, Addr: addr}
	m.node.Drain()
	return nil
}

func (m *Member) stepDown(why string) {
	m.role = Follower
	if m.node != nil {
		m.dealt = max(m.dealt, m.node.next-1)
	}
	m.node = nil
	m.transferTo, m.handingOver = nil, false
	m.steppedDown = why
	m.ready.RoleChanged = true
}

func (m *Member) startRecovery(r *ElectionRecord) {
	m.role = Recovering
	m.term = r.Term
	m.leaseEnd = r.Deadline
	m.lastRenew = m.now
	m.ready.Work = append(m.ready.Work, &Work{Kind: WorkRecover})
}

// owns reports whether node work belongs to the node the member holds
// now: work handed out before a step-down is dropped, whoever reports it.
func (m *Member) owns(w *Work) bool { return m.node != nil && w.Term == m.term }

// Owns reports whether w may still run: the member's own work
// (elections, recovery reads) always, a node's only while the member
// holds that node. A driver that delays work (a backoff) asks again, after
// a Tick, before it starts it: work of a node that is gone could land
// after a successor started.
func (m *Member) Owns(w *Work) bool {
	if w.Kind == WorkElect || w.Kind == WorkRecover {
		return true
	}
	return m.owns(w)
}

// Deal deals undealt request work of the node the member holds now
// (Node.Deal); ErrNotLeader if that node is gone.
func (m *Member) Deal(w *Work) error {
	if !m.owns(w) {
		return ErrNotLeader
	}
	return m.node.Deal(w)
}

// Done tells the member how a work item it or its node handed out
// ended: the one completion call a driver makes (see Result).
func (m *Member) Done(w *Work, r Result) {
	switch w.Kind {
	case WorkRecover:
		m.recovered(r.State, r.Err)
	case WorkElect:
		m.elected(w, r.Effects, r.Outcome)
	default:
		if m.owns(w) {
			m.node.Done(w, r)
		}
	}
}

// elected takes the outcome of an election record write or read.
func (m *Member) elected(w *Work, eff *Effects, out Outcome) {
	op := w.Elect
	if op != m.electing {
		// Not the op this member waits for (a result delivered twice,
		// or to the wrong member): acting on it could step a leader
		// down over a campaign it never made.
		return
	}
	m.electing = nil
	if out != Committed || eff == nil {
		if op.reason == electCampaign || op.reason == electTransfer {
			m.known = false // the write may have landed: read again
		}
		return
	}
	m.known = true
	m.record = eff.Record
	switch {
	case !eff.Applied && (m.role == Leader || m.role == Recovering):
		if r := eff.Record; r != nil && r.Holder == m.cfg.ID && r.Term == m.term && op.reason == electRenew {
			// An earlier renew we thought uncertain landed: still ours.
			// Keep the lease end we know for sure.
			return
		}
		m.stepDown("record taken")
	case !eff.Applied:
		// A follower's CAS lost or it only observed: it learned the record.
	case op.reason == electCampaign:
		m.startRecovery(eff.Record)
	case op.reason == electRenew:
		m.leaseEnd = op.Next.Deadline
	case op.reason == electTransfer:
		m.stepDown("transferred")
		m.ready.HandedOff = eff.Record
	}
}

// recovered takes the State the recovery read found; err retries it.
func (m *Member) recovered(st State, err error) {
	if m.role != Recovering {
		return
	}
	if err != nil {
		m.ready.Work = append(m.ready.Work, &Work{Kind: WorkRecover})
		return
	}
	if m.leaseOver(m.now) {
		m.stepDown("lease ran out while recovering")
		return
	}
	cfg := m.cfg.Node
	cfg.Term = m.term
	if m.cfg.Exclusive {
		// Alone on the engine: above what is stored and what this
		// member dealt before, only this node writes revision records.
		cfg.FreshFrom = max(st.Committed, m.dealt) + 1
	}
	m.node = NewNode(cfg, st)
	m.ledTerm = m.term
	m.node.Tick(m.now)
	m.leaseTick = m.now
	m.role = Leader
	m.ready.RoleChanged = true
}

// DescribeMember renders the member's state on one line.
func DescribeMember(m *Member) string {
	s := fmt.Sprintf("%s %s term=%d", m.cfg.ID, m.role, m.term)
	if m.node != nil {
		s += fmt.Sprintf(" C=%d inflight=%d", m.node.Committed(), m.node.InFlight())
	} else if m.steppedDown != "" {
		s += fmt.Sprintf(" (stepped down: %s)", m.steppedDown)
	}
	return s
}
