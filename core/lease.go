package core

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// MaxLeaseTTL is etcd's largest lease TTL in seconds.
const MaxLeaseTTL = 9_000_000_000

// LeaseOp is a lease request dealt a revision like a write: granting
// stores the lease record; revoking deletes it and every key attached.
type LeaseOp struct {
	Revoke bool
	ID     int64
	TTL    int64 // seconds, grant only
	// Keys attached to the lease when a revoke runs (set by the node).
	Keys [][]byte
}

// LeaseInfo describes a lease for TimeToLive and Leases.
type LeaseInfo struct {
	ID         int64
	GrantedTTL int64
	// Remaining is the time left before expiry (0 once expired).
	Remaining time.Duration
	Keys      [][]byte
}

// LeaseState is a stored lease, as Recover finds it.
type LeaseState struct {
	ID, TTL int64
	Keys    [][]byte
}

type lease struct {
	id, ttl int64
	expiry  time.Duration // on the driver's clock; 0 until first Tick
	// granted is when its grant committed (TestingKnobs.TimeToLiveFromGrant).
	granted time.Duration
	// busy: a grant or revoke of the lease is in flight. Requests that
	// use the lease meanwhile are parked until it ends, so that their
	// answer is ordered after it.
	busy bool
	// revoking: the busy lease is being revoked at a client's request.
	// Until that commits the lease exists, as in etcd: keepalives renew
	// it and TimeToLive describes it (an expiry's revoke is not so: the
	// lease's time is up, and its keepalives wait for the revoke).
	revoking bool
	// expired: the lease's time ran out; it is never renewed again, only
	// revoked (an expiry's revoke that failed is tried again).
	expired bool
	parked  []parkedRequest
	keys    map[string]struct{}
}

// parkedRequest waits for a lease's grant or revoke to end.
type parkedRequest struct {
	id  RequestID
	req *pb.RequestOp // a write using the lease; nil for a revoke or keepalive
	// lease is the lease a parked revoke or keepalive asks for.
	lease     int64
	keepAlive bool
}

type leases struct {
	byID map[int64]*lease
	now  time.Duration
}

func newLeases(st []LeaseState) leases {
	ls := leases{byID: make(map[int64]*lease, len(st))}
	for _, s := range st {
		l := &lease{id: s.ID, ttl: s.TTL, keys: map[string]struct{}{}}
		for _, k := range s.Keys {
			l.keys[string(k)] = struct{}{}
		}
		ls.byID[s.ID] = l
	}
	return ls
}

// live reports whether a lease may be used now: granted and not being
// revoked.
func (l *lease) live() bool { return !l.busy }

// timeUp reports whether the lease's time has run out by now, and
// remembers it: it can no longer be renewed, only revoked.
func (l *lease) timeUp(now time.Duration) bool {
	l.expired = l.expired || (l.expiry != 0 && l.expiry <= now)
	return l.expired
}

// existing returns the lease a keepalive or TimeToLive may see: granted,
// and not expired (a client's revoke in flight has not ended it yet).
func (ls *leases) existing(id int64) *lease {
	if l := ls.byID[id]; l != nil && (!l.busy || l.revoking) {
		return l
	}
	return nil
}

// attach moves keys between leases as committed events say (keep:
// TestingKnobs.LeaseKeepsDetachedKeys).
func (ls *leases) attach(events []Event, keep bool) {
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if ev.PrevKv != nil && ev.PrevKv.Lease != 0 && !keep {
			if l := ls.byID[ev.PrevKv.Lease]; l != nil {
				delete(l.keys, key)
			}
		}
		if ev.Type == mvccpb.PUT && ev.Kv.Lease != 0 {
			if l := ls.byID[ev.Kv.Lease]; l != nil {
				l.keys[key] = struct{}{}
			}
		}
	}
}

// leasesUsed lists the leases a request's puts attach keys to.
func leasesUsed(op *pb.RequestOp, out []int64) []int64 {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		if tv.RequestPut.Lease != 0 {
			out = append(out, tv.RequestPut.Lease)
		}
	case *pb.RequestOp_RequestTxn:
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.Success, tv.RequestTxn.Failure} {
			for _, o := range ops {
				out = leasesUsed(o, out)
			}
		}
	}
	return out
}

// checkLeases fails a request that attaches keys to a lease the node does
// not hold, and returns the busy lease it must wait for, if any. The
// leader's table is authoritative: a revoke is dealt after every put it
// must see, and marks the lease busy at once.
func (n *Node) checkLeases(op *pb.RequestOp) (*lease, error) {
	for _, id := range leasesUsed(op, nil) {
		l := n.leases.byID[id]
		switch {
		case l == nil:
			return nil, ErrLeaseNotFound
		case l.busy:
			return l, nil
		}
	}
	return nil, nil
}

// unpark lets a lease's parked requests go on once its grant or revoke
// ended; gone says the lease no longer exists.
func (n *Node) unpark(l *lease, gone bool) {
	parked := l.parked
	l.parked = nil
	for _, p := range parked {
		switch {
		case p.keepAlive:
			n.KeepAlive(p.id, p.lease, n.leases.now)
		case p.req == nil && gone:
			n.respond(p.id, ErrLeaseNotFound)
		case p.req == nil:
			n.Revoke(p.id, p.lease)
		case gone:
			n.respond(p.id, ErrLeaseNotFound)
		default:
			n.Propose(p.id, p.req)
		}
	}
}

// Grant asks to create a lease of ttl seconds; id 0 lets the node pick
// one: the term in the high 32 bits and a count within it below, so no
// two leaders pick the same. A client may name any other ID, negative
// ones too, as etcd grants them. A grant changes no key and takes no
// revision, as in etcd.
func (n *Node) Grant(id RequestID, leaseID, ttl int64) {
	switch {
	case n.draining:
		n.respond(id, ErrNotLeader)
		return
	case n.NoSpace():
		n.respond(id, ErrNoSpace)
		return
	case ttl > MaxLeaseTTL:
		n.respond(id, ErrLeaseTTLTooLarge)
		return
	case leaseID < 0 && n.cfg.Testing.RefuseNegativeLeaseIDs:
		n.respond(id, ErrLeaseNotFound)
		return
	case leaseID != 0 && n.leases.byID[leaseID] != nil && !n.cfg.Testing.GrantReplacesLease:
		n.respond(id, ErrLeaseExist)
		return
	}
	ttl = max(ttl, n.cfg.MinLeaseTTL)
	if leaseID == 0 {
		for leaseID == 0 || n.leases.byID[leaseID] != nil { // a client may have chosen it
			n.leaseSeq++
			leaseID = (n.cfg.Term&(1<<31-1))<<32 | n.leaseSeq&(1<<32-1)
		}
	}
	w := &Work{Kind: WorkRequest, ID: id, Lease: &LeaseOp{ID: leaseID, TTL: ttl}}
	n.deal(w)
	// Reserve the ID so a second grant of it fails; the lease becomes
	// usable when the grant commits.
	n.leases.byID[w.Lease.ID] = &lease{id: w.Lease.ID, ttl: ttl, busy: true, keys: map[string]struct{}{}}
}

// Revoke asks to revoke a lease and delete its keys in one revision.
// id 0 is an expiry: no client waits for it.
func (n *Node) Revoke(id RequestID, leaseID int64) {
	l := n.leases.byID[leaseID]
	switch {
	case n.draining && id == 0:
		return // the successor expires it
	case n.draining:
		n.respond(id, ErrNotLeader)
		return
	case l == nil && n.cfg.Testing.RevokeUnknownAnswersOK:
		n.answer(Response{ID: id, Rev: n.committed})
		return
	case l == nil:
		n.respond(id, ErrLeaseNotFound)
		return
	case l.busy && id == 0:
		return // already going
	case l.busy:
		l.parked = append(l.parked, parkedRequest{id: id, lease: leaseID})
		return
	}
	l.busy, l.revoking = true, id != 0
	// Its keys are known only when it runs: it latches every key.
	n.admit(&Work{Kind: WorkRequest, ID: id, Lease: &LeaseOp{Revoke: true, ID: leaseID}, Serial: true}, true)
}

// KeepAlive asks to renew a lease from now; the answer, with its TTL in
// seconds, comes in Ready. A lease whose time is up is not renewed: the
// keepalive waits for the expiry's revoke (started here if no Tick has
// yet) and is answered "not found" once it commits, as etcd's Renew waits
// for it. Answering before could be undone: a revoke that fails for good
// leaves the lease in place, and a later keepalive would find it alive.
func (n *Node) KeepAlive(id RequestID, leaseID int64, now time.Duration) {
	l := n.leases.byID[leaseID]
	switch {
	case l == nil || (l.busy && !l.revoking && !l.timeUp(now)):
		// Unknown, or its grant in flight; read at C, as etcd's header.
		n.ready.Responses = append(n.ready.Responses, Response{ID: id, Rev: n.committed, Err: ErrLeaseNotFound})
	case l.timeUp(now) && n.draining:
		n.respond(id, ErrNotLeader) // the successor expires it
	case l.timeUp(now):
		l.parked = append(l.parked, parkedRequest{id: id, lease: leaseID, keepAlive: true})
		if !l.busy {
			n.Revoke(0, leaseID)
		}
	default:
		l.expiry = expiryAfter(now, l.ttl)
		n.ready.Responses = append(n.ready.Responses, Response{ID: id, Rev: n.committed, Lease: leaseID, LeaseTTL: l.ttl})
	}
}

// TimeToLive describes a lease as of now.
func (n *Node) TimeToLive(leaseID int64, now time.Duration) (LeaseInfo, error) {
	l := n.leases.existing(leaseID)
	if l == nil {
		return LeaseInfo{}, ErrLeaseNotFound
	}
	info := LeaseInfo{ID: l.id, GrantedTTL: l.ttl}
	if n.cfg.Testing.TimeToLiveFromGrant && l.granted != 0 {
		info.Remaining = max(0, expiryAfter(l.granted, l.ttl)-now)
	} else if l.expiry == 0 {
		info.Remaining = time.Duration(l.ttl) * time.Second
	} else if l.expiry > now {
		info.Remaining = l.expiry - now
	}
	for k := range l.keys {
		info.Keys = append(info.Keys, []byte(k))
	}
	slices.SortFunc(info.Keys, bytes.Compare)
	return info, nil
}

// Leases lists the live lease IDs in ascending order.
func (n *Node) Leases() []int64 {
	ids := make([]int64, 0, len(n.leases.byID))
	for id, l := range n.leases.byID {
		if l.live() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Tick advances the node's clock: leases past their deadline are revoked.
// Leases restored by Recover get their full TTL from the first Tick, as
// etcd extends them on a leader change.
func (n *Node) Tick(now time.Duration) {
	n.leases.now = now
	var expired []int64
	for id, l := range n.leases.byID {
		if l.busy {
			continue
		}
		if l.expiry == 0 {
			l.expiry = expiryAfter(now, l.ttl)
		}
		if l.timeUp(now) {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	for _, id := range expired {
		n.Revoke(0, id)
	}
}

// commitLease applies a committed lease revision to the table.
func (n *Node) commitLease(op *LeaseOp) {
	l := n.leases.byID[op.ID]
	if l == nil {
		return
	}
	if op.Revoke {
		delete(n.leases.byID, op.ID)
		n.unpark(l, true)
		return
	}
	l.busy = false
	l.expiry = expiryAfter(n.leases.now, l.ttl)
	l.granted = n.leases.now
	n.unpark(l, false)
}

// abandonLease undoes a grant that failed for good.
func (n *Node) abandonLease(op *LeaseOp) {
	l := n.leases.byID[op.ID]
	if l == nil {
		return
	}
	if op.Revoke {
		l.busy, l.revoking = false, false
		n.unpark(l, false)
		return
	}
	delete(n.leases.byID, op.ID)
	n.unpark(l, true)
}

func (n *Node) respond(id RequestID, err error) {
	n.ready.Responses = append(n.ready.Responses, Response{ID: id, Err: err})
}

// leaseOp evaluates a grant or revoke at the work's revision.
func (tx *txnEval) leaseOp(op *LeaseOp) error {
	if !op.Revoke {
		tx.extra = append(tx.extra, leaseWrite(op.ID, op.TTL))
		return nil
	}
	for _, k := range op.Keys {
		e, err := tx.get(k)
		if err != nil {
			return err
		}
		if e.cur == nil || e.cur.Lease != op.ID {
			continue
		}
		prev := e.cur
		e.cur, e.written = nil, true
		tx.events = append(tx.events, deleteEvent(tx.rev, e.key, prev))
	}
	tx.extra = append(tx.extra, Write{Key: LeaseKey(op.ID), Delete: true})
	return nil
}

// leaseWrite stores lease id's record: its TTL.
func leaseWrite(id, ttl int64) Write {
	return Write{Key: LeaseKey(id), Value: binary.AppendUvarint(nil, uint64(ttl))}
}

// DecodeLeaseRecord returns the TTL stored in a lease record.
func DecodeLeaseRecord(b []byte) (int64, error) {
	ttl, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, ErrBadRecord
	}
	return int64(ttl), nil
}

// expiryAfter is the deadline ttl seconds after now, or the end of time
// if that lies past what a Duration holds: etcd grants up to 9e9 s
// (MaxLeaseTTL), and a wall clock's now plus that overflows.
func expiryAfter(now time.Duration, ttl int64) time.Duration {
	if ttl > int64((math.MaxInt64-now)/time.Second) {
		return math.MaxInt64
	}
	return now + time.Duration(ttl)*time.Second
}
