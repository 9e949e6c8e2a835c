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
	for i, rev := range n.held {
		if s := n.slots[rev]; s == nil || s.state != slotHeld {
			return fmt.Errorf("held r%d has no held slot", rev)
		}
		if i > 0 && n.held[i-1] >= rev {
			return fmt.Errorf("held revisions out of order")
		}
	}
	if n.ring.First() > n.committed+1 {
		return fmt.Errorf("ring claims events from r%d beyond C=%d", n.ring.First(), n.committed)
	}
	var last int64
	for i := 0; i < n.ring.Len(); i++ {
		ev := n.ring.at(i)
		if ev.Rev < last || ev.Rev > n.committed {
			return fmt.Errorf("ring event r%d after r%d (C=%d)", ev.Rev, last, n.committed)
		}
		last = ev.Rev
	}
	for rev, s := range n.slots {
		w := s.work
		latched := w.Kind == WorkRequest && (w.Request != nil || w.Lease != nil && w.Lease.Revoke)
		if latched && (s.state == slotRunning || s.state == slotHeld) && (w.latch == nil || w.latch.released || w.latch.work != nil) {
			return fmt.Errorf("r%d dealt without a granted latch", rev)
		}
	}
	if err := n.latches.check(); err != nil {
		return err
	}
	for _, w := range n.watch.list {
		if !w.catching && w.next <= n.committed {
			return fmt.Errorf("watch%d synced but next r%d ≤ C=%d", w.ID, w.next, n.committed)
		}
	}
	return nil
}
