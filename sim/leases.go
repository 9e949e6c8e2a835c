package sim

import (
	"fmt"
	"time"
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
	for _, e := range w.expired {
		if f, ok := floor[e.lease]; ok && e.at < f-maxDrift {
			return fmt.Errorf("lease %d expired by %s at %v, before %v: its TTL from the last grant or keepalive, less the drift bound %v", e.lease, e.by, e.at, f, maxDrift)
		}
	}
	return nil
}
