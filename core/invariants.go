package core

import "fmt"

// Invariants checks the node's internal consistency; the simulator and
// tests call it after every step. It costs O(in-flight + ring).
func (n *Node) Invariants() error {
	if n.committed >= n.next {
		return fmt.Errorf("commit point r%d not below next revision r%d", n.committed, n.next)
	}
	if n.compacted > n.committed {
		return fmt.Errorf("compacted %d above C=%d", n.compacted, n.committed)
	}
	for rev, s := range n.slots {
		if rev <= n.committed || rev >= n.next {
			return fmt.Errorf("slot r%d outside (C=%d, next=%d)", rev, n.committed, n.next)
		}
		if s.work.Rev != rev {
			return fmt.Errorf("slot r%d holds work of r%d", rev, s.work.Rev)
		}
	}
	if int64(len(n.slots)) != n.next-1-n.committed {
		return fmt.Errorf("%d slots for revisions (%d, %d)", len(n.slots), n.committed, n.next)
	}
	for i, w := range n.held {
		if w.Rev != 0 || w.after <= n.committed {
			return fmt.Errorf("held %s could go (after r%d, C=%d)", DescribeWork(w), w.after, n.committed)
		}
		if i > 0 && n.held[i-1].after > w.after {
			return fmt.Errorf("held work out of order")
		}
	}
	for w := range n.out {
		if w.Rev != 0 || w.Term != n.cfg.Term {
			return fmt.Errorf("undealt %s has a revision or another term", DescribeWork(w))
		}
		if latchedWork(w) && (w.latch == nil || w.latch.released || w.latch.work != nil) {
			return fmt.Errorf("%s handed out without a granted latch", DescribeWork(w))
		}
	}
	for i, r := range n.answers {
		if r.Rev <= n.committed || r.Rev >= n.next || (i > 0 && n.answers[i-1].Rev > r.Rev) {
			return fmt.Errorf("answer to req%d waits for r%d (C=%d, next=%d)", r.ID, r.Rev, n.committed, n.next)
		}
	}
	if n.hub.committed != n.committed || n.hub.compacted != n.compacted {
		return fmt.Errorf("hub at r%d compacted %d, node at C=%d compacted %d", n.hub.committed, n.hub.compacted, n.committed, n.compacted)
	}
	if err := n.hub.Invariants(); err != nil {
		return err
	}
	for rev, s := range n.slots {
		w := s.work
		if latchedWork(w) && s.state == slotRunning && (w.latch == nil || w.latch.released || w.latch.work != nil) {
			return fmt.Errorf("r%d dealt without a granted latch", rev)
		}
	}
	if err := n.latches.check(); err != nil {
		return err
	}
	for id, l := range n.leases.byID {
		// Only a grant or revoke in flight ends a wait: a request parked
		// on an idle lease would wait for ever.
		if len(l.parked) > 0 && !l.busy {
			return fmt.Errorf("lease %d idle with %d parked requests", id, len(l.parked))
		}
	}
	return nil
}

// latchedWork tells work that holds a latch while it runs: key-value
// requests and lease revokes.
func latchedWork(w *Work) bool {
	return w.Kind == WorkRequest && (w.Request != nil || w.Lease != nil && w.Lease.Revoke)
}
