package sim

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

// chosenLeaseBase starts the lease IDs the etcd clients choose (and,
// negated, ends the negative ones): far from the ones a leader picks (its
// term in the high 32 bits), so that an ID a client drew for a call no
// grant named is known never granted.
const chosenLeaseBase = 1 << 52

// leaseQuery is what a time-to-live or lease list answered.
type leaseQuery struct {
	found   bool     // time-to-live: the lease exists (else etcd's TTL -1)
	ttl     int64    // remaining seconds, as the server answers them
	granted int64    // the lease's granted TTL
	keys    [][]byte // its keys, if asked
	ids     []int64  // the lease list
}

// leaseAPI draws one of the lease calls beyond a grant, keepalive or
// revoke of a lease the client holds, as etcdctl and clientv3 offer them:
// a grant of an ID the client chooses (a fresh one, a fifth of them
// negative, or one of its own
// leases of etcd's longest TTL, so refused), a grant above etcd's largest
// TTL, a revoke of a lease never granted or revoked already, a
// time-to-live (mostly with keys) of any lease a grant answered, and a
// lease list. No grant names an ID that may have ended: the checks know a
// lease ID by one grant.
func (c *client) leaseAPI() input {
	w := c.w
	fresh := chosenLeaseBase + int64(w.hist.issued) // no other call draws it
	if w.chance(0.2) {
		fresh = -fresh // etcd grants a negative ID a client names
	}
	ttl := int64(2 + w.rng.IntN(4))
	switch r := w.rng.IntN(20); {
	case r < 5:
		in := input{kind: opGrant, ttl: ttl, lease: fresh}
		if w.chance(0.5) {
			in.lease = c.liveLease(fresh)
		}
		if in.lease == fresh && w.chance(0.3) {
			in.ttl = core.MaxLeaseTTL // one it may name again, refused
		}
		return in
	case r < 7:
		in := input{kind: opGrant, ttl: core.MaxLeaseTTL + 1 + w.rng.Int64N(1000)}
		if w.chance(0.5) {
			in.lease = c.liveLease(fresh)
		}
		return in
	case r < 10:
		id := fresh
		if w.chance(0.5) {
			id = c.revokedLease(fresh)
		}
		return input{kind: opRevoke, lease: id}
	case r < 18:
		id := fresh
		if len(w.leasePool) > 0 && w.chance(0.85) {
			id = w.leasePool[w.rng.IntN(len(w.leasePool))]
		}
		return input{kind: opTimeToLive, lease: id, keys: w.chance(0.7)}
	}
	return input{kind: opLeases}
}

// liveLease is one of the client's leases of etcd's longest TTL that it
// has not revoked: it lives to the end of the run (no other client
// revokes a lease that may be live). Else it returns none.
func (c *client) liveLease(none int64) int64 {
	var ids []int64
	for _, cl := range c.w.hist.calls {
		if cl.client == c && cl.in.kind == opGrant && cl.in.ttl == core.MaxLeaseTTL && cl.status == answered && cl.err == nil && slices.Contains(c.leases, cl.lease.id) {
			ids = append(ids, cl.lease.id)
		}
	}
	if len(ids) == 0 {
		return none
	}
	return ids[c.w.rng.IntN(len(ids))]
}

// revokedLease is a lease a revoke was answered for (no grant names it
// again), or else none.
func (c *client) revokedLease(none int64) int64 {
	calls := c.w.hist.calls
	for i := len(calls) - 1; i >= 0; i-- {
		if cl := calls[i]; cl.in.kind == opRevoke && cl.status == answered && cl.err == nil {
			return cl.in.lease
		}
	}
	return none
}

// leaseQuery answers a time-to-live or lease list on the leader through
// the driver, as the server's LeaseTimeToLive and LeaseLeases do: a
// missing lease is TTL -1 (driver.TimeToLive).
func (n *node) leaseQuery(c *call, got *answer, done func(error)) {
	q := &leaseQuery{ttl: -1}
	var (
		rev int64
		ok  bool
	)
	if c.in.kind == opLeases {
		q.ids, rev, ok = n.drv.Leases()
	} else {
		var (
			resp *pb.LeaseTimeToLiveResponse
			err  error
		)
		resp, rev, ok, err = n.drv.TimeToLive(c.in.lease, c.in.keys)
		if ok && err != nil {
			done(err)
			return
		}
		if ok {
			// A lease found has a granted TTL (at least etcd's least).
			q.found, q.ttl, q.granted, q.keys = resp.GrantedTTL != 0, resp.TTL, resp.GrantedTTL, resp.Keys
		}
	}
	if !ok {
		done(core.ErrNotLeader)
		return
	}
	*got = answer{rev: rev, query: q}
	done(nil)
}

// leaseFacts is what the history tells of each lease, for the checks of
// time-to-live and lease list answers.
type leaseFacts struct {
	named   map[int64]bool            // some grant call named it (or was answered it)
	grants  map[int64][]*call         // grants answered without error
	regrant map[int64][]*call         // grant calls naming it that may have applied
	revoked map[int64][]*call         // client revokes answered without error
	revCall map[int64][]*call         // every client revoke call of it
	renews  map[int64][]*call         // grants and keepalives answered with a TTL
	commits map[int64][]time.Duration // engine commits of its revokes (maybe uncertain)
}

func (w *World) leaseFacts() leaseFacts {
	f := leaseFacts{named: map[int64]bool{}, grants: map[int64][]*call{}, regrant: map[int64][]*call{},
		revoked: map[int64][]*call{}, revCall: map[int64][]*call{}, renews: map[int64][]*call{}, commits: map[int64][]time.Duration{}}
	for _, cl := range w.hist.calls {
		ok := cl.status == answered && cl.err == nil
		switch cl.in.kind {
		case opGrant:
			if cl.in.lease != 0 {
				f.named[cl.in.lease] = true
				if !(cl.status == answered && cl.err != nil) && cl.status != failed {
					f.regrant[cl.in.lease] = append(f.regrant[cl.in.lease], cl)
				}
			}
			if ok {
				f.named[cl.lease.id] = true
				f.grants[cl.lease.id] = append(f.grants[cl.lease.id], cl)
				f.renews[cl.lease.id] = append(f.renews[cl.lease.id], cl)
			}
		case opKeepAlive:
			if ok && cl.lease.ttl > 0 {
				f.renews[cl.in.lease] = append(f.renews[cl.in.lease], cl)
			}
		case opRevoke:
			f.revCall[cl.in.lease] = append(f.revCall[cl.in.lease], cl)
			if ok {
				f.revoked[cl.in.lease] = append(f.revoked[cl.in.lease], cl)
			}
		}
	}
	for _, r := range w.revokes {
		f.commits[r.lease] = append(f.commits[r.lease], r.at)
	}
	return f
}

// revokedBetween reports whether a revoke of lease id may have committed
// in (from, to].
func (f *leaseFacts) revokedBetween(id int64, from, to time.Duration) bool {
	for _, at := range f.commits[id] {
		if at > from && at <= to {
			return true
		}
	}
	return false
}

// surelyGone reports whether lease id cannot exist during q: a revoke of
// it was answered before q began, and no grant naming it may have applied
// after that revoke began.
func (f *leaseFacts) surelyGone(id int64, q *call) (*call, bool) {
	for _, rv := range f.revoked[id] {
		if rv.end >= q.start {
			continue
		}
		again := false
		for _, g := range f.regrant[id] {
			again = again || g.status == unknown || g.end > rv.start
		}
		for _, g := range f.grants[id] {
			again = again || g.end > rv.start
		}
		if !again {
			return rv, true
		}
	}
	return nil, false
}

// lastGrant is the grant of lease id answered before q began that
// started last.
func (f *leaseFacts) lastGrant(id int64, q *call) *call {
	var last *call
	for _, g := range f.grants[id] {
		if g.end < q.start && (last == nil || g.start > last.start) {
			last = g
		}
	}
	return last
}

// floor is the latest end of a TTL run from the start of a grant or
// keepalive of lease id answered before q began, with no revoke of the
// lease committed since it started (then the ID may have been granted
// anew, with a shorter TTL); ok false if none.
func (f *leaseFacts) floor(id int64, q *call) (at time.Duration, ok bool) {
	for _, r := range f.renews[id] {
		if r.end >= q.start || f.revokedBetween(id, r.start, q.end) {
			continue
		}
		at, ok = max(at, r.start+time.Duration(r.lease.ttl)*time.Second), true
	}
	return at, ok
}

// checkLeaseQueries holds every answered time-to-live and lease list to
// the history and etcd's rules: a lease no grant named is never found; one
// whose revoke was answered before the call began, with no grant of it
// since, is not found nor listed; one a grant answered before, whose
// time cannot be up, is answered "not found" only once a revoke of it may
// have committed (checkLeaseLife's rule), and listed unless a revoke of
// it may have begun. A found
// lease's granted TTL is a grant's; its remaining TTL is at most that, and
// at least what its last grant or keepalive answered before promised,
// less the drift bound and the call's length; its keys are exactly the
// keys attached to it at the answer's revision, by the engine's events.
func (w *World) checkLeaseQueries(evs []core.Event) error {
	var qs []*call
	for _, cl := range w.hist.calls {
		if (cl.in.kind == opTimeToLive || cl.in.kind == opLeases) && cl.status == answered && cl.err == nil && cl.query != nil {
			qs = append(qs, cl)
		}
	}
	if len(qs) == 0 {
		return nil
	}
	f := w.leaseFacts()
	for _, q := range qs {
		var err error
		if q.in.kind == opLeases {
			err = f.checkList(q)
		} else {
			err = f.checkTimeToLive(q)
		}
		if err != nil {
			return fmt.Errorf("c%d op%d: %w", q.client.idx, q.id, err)
		}
	}
	return checkLeaseKeys(qs, evs)
}

func (f *leaseFacts) checkTimeToLive(q *call) error {
	id, a := q.in.lease, q.query
	if !a.found {
		// A lease whose time is up may be answered -1 before its
		// expiry's revoke commits, as etcd's remaining time goes below
		// zero then.
		g := f.lastGrant(id, q)
		if at, ok := f.floor(id, q); g != nil && ok && q.end < at-maxDrift && !f.revokedBetween(id, g.start, q.end) {
			return fmt.Errorf("time-to-live of lease %d answered TTL -1 (not found) at %v, but op%d granted it, a grant or keepalive promised it until %v, and no revoke of it committed since", id, q.end, g.id, at)
		}
		return nil
	}
	if !f.named[id] {
		return fmt.Errorf("time-to-live found lease %d, which no grant named", id)
	}
	if rv, gone := f.surelyGone(id, q); gone {
		return fmt.Errorf("time-to-live found lease %d, revoked by op%d (answered at %v) and not granted since", id, rv.id, rv.end)
	}
	granted := false
	for _, g := range f.grants[id] {
		granted = granted || g.lease.ttl == a.granted
	}
	if len(f.grants[id]) > 0 && !granted {
		return fmt.Errorf("time-to-live of lease %d answered granted TTL %d, which no grant of it answered", id, a.granted)
	}
	if a.ttl > a.granted {
		return fmt.Errorf("time-to-live of lease %d answered %d s left, more than its granted TTL %d", id, a.ttl, a.granted)
	}
	// A deadline past what a Duration holds is the end of time
	// (core's expiryAfter): etcd's longest TTLs are not held to it.
	if at, ok := f.floor(id, q); ok && a.granted < 1_000_000 {
		if least := at - maxDrift - q.end; time.Duration(a.ttl+1)*time.Second <= least {
			return fmt.Errorf("time-to-live of lease %d answered %d s left at %v, but a grant or keepalive promised it until %v (less the drift bound %v)", id, a.ttl, q.end, at, maxDrift)
		}
	}
	return nil
}

func (f *leaseFacts) checkList(q *call) error {
	listed := map[int64]bool{}
	for _, id := range q.query.ids {
		listed[id] = true
		if (id >= chosenLeaseBase || id <= -chosenLeaseBase) && !f.named[id] {
			return fmt.Errorf("lease list holds lease %d, which no grant named", id)
		}
		if rv, gone := f.surelyGone(id, q); gone {
			return fmt.Errorf("lease list holds lease %d, revoked by op%d (answered at %v) and not granted since", id, rv.id, rv.end)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(f.grants)) {
		g := f.lastGrant(id, q)
		if g == nil || listed[id] || len(f.commits[id]) > 0 && slices.Min(f.commits[id]) <= q.end {
			continue
		}
		begun := false
		for _, rv := range f.revCall[id] {
			begun = begun || rv.start <= q.end
		}
		if at, ok := f.floor(id, q); begun || !ok || at-maxDrift <= q.end {
			continue // its revoke or expiry may have begun
		}
		return fmt.Errorf("lease list misses lease %d, granted by op%d and neither revoked nor expiring", id, g.id)
	}
	return nil
}

// checkLeaseKeys: a time-to-live that found its lease and asked for its
// keys lists exactly the keys whose newest event at the answer's revision
// is a put with that lease.
func checkLeaseKeys(qs []*call, evs []core.Event) error {
	var withKeys []*call
	for _, q := range qs {
		if q.in.kind == opTimeToLive && q.in.keys && q.query.found {
			withKeys = append(withKeys, q)
		}
	}
	slices.SortStableFunc(withKeys, func(a, b *call) int { return cmp.Compare(a.rev, b.rev) })
	leaseOf := map[string]int64{}
	i := 0
	for _, q := range withKeys {
		for ; i < len(evs) && evs[i].Rev <= q.rev; i++ {
			ev := evs[i]
			if ev.Type == mvccpb.PUT && ev.Kv.Lease != 0 {
				leaseOf[string(ev.Kv.Key)] = ev.Kv.Lease
			} else {
				delete(leaseOf, string(ev.Kv.Key))
			}
		}
		var want [][]byte
		for k, l := range leaseOf {
			if l == q.in.lease {
				want = append(want, []byte(k))
			}
		}
		slices.SortFunc(want, bytes.Compare)
		if !slices.EqualFunc(want, q.query.keys, bytes.Equal) {
			return fmt.Errorf("c%d op%d: time-to-live of lease %d at r%d listed keys %q, but the events attach %q to it there", q.client.idx, q.id, q.in.lease, q.rev, q.query.keys, want)
		}
	}
	return nil
}
