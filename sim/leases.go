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

// checkLeaseLife: a keepalive answers "lease not found" only once a
// revoke of the lease (a client's or its expiry's) has committed, maybe
// uncertainly. Until then the lease exists, as in etcd: a client's revoke
// in flight has not ended it, and a keepalive of a lease whose time is up
// waits for the expiry's revoke (etcd's Renew does). Answering earlier
// could be undone: a revoke that fails for good leaves the lease, and a
// later keepalive would find it alive.
func (w *World) checkLeaseLife() error {
	first := map[int64]time.Duration{} // earliest revoke that may have applied
	for _, r := range w.revokes {
		if at, ok := first[r.lease]; !ok || r.at < at {
			first[r.lease] = r.at
		}
	}
	granted := map[int64]bool{}
	for _, cl := range w.hist.calls {
		if cl.in.kind == opGrant && cl.status == answered && cl.err == nil {
			granted[cl.lease.id] = true
		}
	}
	for _, cl := range w.hist.calls {
		if cl.in.kind != opKeepAlive || cl.status != answered || !errors.Is(cl.err, core.ErrLeaseNotFound) || !granted[cl.in.lease] {
			continue
		}
		if at, ok := first[cl.in.lease]; !ok || at > cl.end {
			return fmt.Errorf("keepalive of lease %d (call %d) answered %v at %v, before any revoke of it committed", cl.in.lease, cl.id, cl.err, cl.end)
		}
	}
	return nil
}
