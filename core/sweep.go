package core

// sweeper tracks the node's compaction sweep: one batch (WorkSweep) out
// at a time, to the highest compact revision stored; requests that wait
// for it (physical compaction) are answered once it gets there.
type sweeper struct {
	to      int64 // the compact revision to sweep to
	done    int64 // swept to here: nothing below it is left
	out     bool  // a batch is running
	waiters []sweepWaiter
}

type sweepWaiter struct {
	id  RequestID
	rev int64
}

// sweepTo starts (or extends) the sweep to compact revision rev.
func (n *Node) sweepTo(rev int64) {
	s := &n.sweep
	if rev <= s.to {
		return
	}
	s.to = rev
	if !s.out {
		n.sweepBatch(&Sweep{Rev: rev, Limit: n.cfg.SweepBatch}, 0)
	}
}

func (n *Node) sweepBatch(s *Sweep, attempt int) {
	n.sweep.out = true
	n.ready.Work = append(n.ready.Work, &Work{Kind: WorkSweep, Sweep: s, Term: n.cfg.Term, Attempt: attempt})
}

// AwaitSweep answers id once the sweep has deleted everything compact
// revision rev made unreachable (etcd's physical compaction).
func (n *Node) AwaitSweep(id RequestID, rev int64) {
	if rev <= n.sweep.done || n.cfg.Testing.SweepAnsweredEarly && rev <= n.compacted {
		n.ready.Responses = append(n.ready.Responses, Response{ID: id, Rev: n.committed})
		return
	}
	n.sweep.waiters = append(n.sweep.waiters, sweepWaiter{id, rev})
	if rev <= n.compacted {
		n.sweepTo(rev)
	} // else storing the compaction starts it
}

// reportSweep moves the sweep on after a batch: the next batch, the same
// one again if it did not commit (its deletes are idempotent, and a read
// again sees what changed), or the sweep to a newer compact revision.
func (n *Node) reportSweep(w *Work, eff *Effects, out Outcome) {
	s := &n.sweep
	s.out = false
	if out != Committed || eff == nil || eff.Sweep == nil {
		n.sweepBatch(w.Sweep, w.Attempt+1)
		return
	}
	next := eff.Sweep
	if !next.Done {
		n.sweepBatch(next, 0)
		return
	}
	s.done = max(s.done, next.Rev)
	kept := s.waiters[:0]
	for _, sw := range s.waiters {
		if sw.rev <= s.done {
			n.ready.Responses = append(n.ready.Responses, Response{ID: sw.id, Rev: n.committed})
		} else {
			kept = append(kept, sw)
		}
	}
	s.waiters = kept
	if s.to > s.done {
		n.sweepBatch(&Sweep{Rev: s.to, Limit: n.cfg.SweepBatch}, 0)
	}
}
