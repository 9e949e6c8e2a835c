package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/axon-kv/axon/core"
)

// expired is a lease expiry the engine surely applied, and when.
type expired struct {
	lease int64
	at    time.Duration
	by    string
}

// checkLeaseDeadlines: no lease expires before its TTL has run from the
// start of its last successful grant or keepalive, less the clock drift
// between members, whichever leader expired it (a successor restores
// leases with their full TTL, as etcd does on a leader change).
func (w *World) checkLeaseDeadlines() error {
	floor := w.leaseFloors()
	for _, e := range w.expired {
		if f, ok := floor[e.lease]; ok && e.at < f-maxDrift {
			return fmt.Errorf("lease %d expired by %s at %v, before %v: its TTL from the last grant or keepalive, less the drift bound %v", e.lease, e.by, e.at, f, maxDrift)
		}
	}
	return nil
}

// leaseFloors returns, per lease, the latest end of a TTL that ran from
// the start of a successful grant or keepalive: no expiry comes before it
// (less the drift bound).
func (w *World) leaseFloors() map[int64]time.Duration {
	floor := map[int64]time.Duration{}
	for _, cl := range w.hist.calls {
		if cl.status != answered || cl.err != nil || cl.lease.ttl <= 0 {
			continue
		}
		if cl.in.kind != opGrant && cl.in.kind != opKeepAlive {
			continue
		}
		id := cl.lease.id
		if cl.in.kind == opKeepAlive {
			id = cl.in.lease
		}
		floor[id] = max(floor[id], cl.start+time.Duration(cl.lease.ttl)*time.Second)
	}
	return floor
}

// checkLeaseLife: a keepalive answers "lease not found" only once the
// lease may be gone: its time may be up (its TTL has run from its last
// grant or keepalive, less the drift bound), or a client's revoke of it
// has committed (maybe uncertainly). Until then the lease exists, as in
// etcd, even while a revoke of it is in flight. (Once its time is up
// Axon answers "not found" while the expiry's revoke is in flight, where
// etcd waits for that revoke.)
func (w *World) checkLeaseLife() error {
	ends := map[int64]time.Duration{} // earliest commit of a client's revoke
	for _, r := range w.revokes {
		if e, ok := ends[r.lease]; !ok || r.at < e {
			ends[r.lease] = r.at
		}
	}
	type renewal struct{ start, until time.Duration }
	renewals := map[int64][]renewal{} // successful grants and keepalives
	for _, cl := range w.hist.calls {
		if cl.status != answered || cl.err != nil || cl.lease.ttl <= 0 || (cl.in.kind != opGrant && cl.in.kind != opKeepAlive) {
			continue
		}
		id := cl.lease.id
		if cl.in.kind == opKeepAlive {
			id = cl.in.lease
		}
		renewals[id] = append(renewals[id], renewal{cl.start, cl.start + time.Duration(cl.lease.ttl)*time.Second})
	}
	for _, cl := range w.hist.calls {
		if cl.in.kind != opKeepAlive || cl.status != answered || !errors.Is(cl.err, core.ErrLeaseNotFound) {
			continue
		}
		// Its time is up no earlier than the TTL from the last renewal
		// begun before this answer.
		var floor time.Duration
		for _, r := range renewals[cl.in.lease] {
			if r.start < cl.end {
				floor = max(floor, r.until)
			}
		}
		if floor == 0 || cl.end >= floor-maxDrift {
			continue // never granted here, or its time may be up
		}
		if e, ok := ends[cl.in.lease]; !ok || e > cl.end {
			return fmt.Errorf("keepalive of lease %d (call %d) answered %v at %v, before any revoke of it committed", cl.in.lease, cl.id, cl.err, cl.end)
		}
	}
	return nil
}
