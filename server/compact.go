package server

import (
	"context"
	"errors"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// sweepBatch bounds the records one sweep transaction reads.
const sweepBatch = 512

// compactor deletes what compactions made unreachable, in the
// background, and runs etcd's auto-compaction.
type compactor struct {
	s     *Server
	sweep chan int64 // latest compact revision to sweep to
}

func newCompactor(s *Server) *compactor {
	return &compactor{s: s, sweep: make(chan int64, 1)}
}

// swept asks for a sweep up to rev; the latest request wins.
func (c *compactor) swept(rev int64) {
	for {
		select {
		case c.sweep <- rev:
			return
		default:
		}
		select {
		case old := <-c.sweep:
			rev = max(rev, old)
		default:
		}
	}
}

// run sweeps until the server closes.
func (c *compactor) run() {
	defer c.s.work.Done()
	for {
		select {
		case <-c.s.ctx.Done():
			return
		case rev := <-c.sweep:
			if err := c.sweepTo(rev); err != nil && !errors.Is(err, context.Canceled) {
				c.s.log.Warn("compaction sweep", "revision", rev, "err", err)
			}
		}
	}
}

// sweepTo runs a sweep to its end, one engine transaction per batch; a
// batch that conflicts with a write is run again.
func (c *compactor) sweepTo(rev int64) error {
	start := time.Now()
	sw, deleted := core.Sweep{Rev: rev}, 0
	for !sw.Done {
		if err := c.s.ctx.Err(); err != nil {
			return err
		}
		txn, err := c.s.eng.Begin(c.s.ctx)
		if err != nil {
			return err
		}
		next, dels, err := core.SweepStep(storage.NewReader(txn), sw, sweepBatch)
		if err == nil {
			for _, d := range dels {
				if err = txn.Delete(d.Key); err != nil {
					break
				}
			}
		}
		if err == nil && len(dels) > 0 {
			err = txn.Commit(c.s.ctx)
		}
		txn.Rollback()
		switch {
		case errors.Is(err, storage.ErrConflict), errors.Is(err, storage.ErrUnavailable):
			continue // the same batch again
		case err != nil:
			return err
		}
		sw, deleted = next, deleted+len(dels)
	}
	c.s.log.Info("compaction swept", "revision", rev, "deleted", deleted, "took", time.Since(start))
	return nil
}

// AutoCompaction is etcd's --auto-compaction-mode and -retention.
type AutoCompaction struct {
	// Mode is "periodic" (keep Retention of history) or "revision" (keep
	// the last Revisions revisions). Empty: off.
	Mode      string
	Retention time.Duration
	Revisions int64
}

// On returns ac, or the zero value (off) when it keeps everything.
func (ac AutoCompaction) On() AutoCompaction {
	if ac.Retention <= 0 && ac.Revisions <= 0 {
		return AutoCompaction{}
	}
	return ac
}

// auto runs auto-compaction until the server closes.
func (c *compactor) auto(ac AutoCompaction) {
	defer c.s.work.Done()
	every := 5 * time.Minute
	if ac.Mode == "periodic" {
		every = max(ac.Retention/10, time.Second)
	}
	type sample struct {
		at  time.Time
		rev int64
	}
	var samples []sample
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.s.ctx.Done():
			return
		case now := <-t.C:
			var rev, compacted int64
			if !c.s.step(func(n *core.Node) { rev, compacted = n.Committed(), n.Compacted() }) {
				continue // the leader compacts
			}
			target := int64(0)
			switch ac.Mode {
			case "periodic":
				samples = append(samples, sample{now, rev})
				for len(samples) > 0 && now.Sub(samples[0].at) >= ac.Retention {
					target = samples[0].rev
					samples = samples[1:]
				}
			case "revision":
				target = rev - ac.Revisions
			}
			if target > compacted {
				c.compact(target)
			}
		}
	}
}

// compact compacts to rev through the node, as a client would, then
// sweeps.
func (c *compactor) compact(rev int64) {
	ctx, cancel := context.WithTimeout(c.s.ctx, time.Minute)
	defer cancel()
	if _, err := c.s.propose(ctx, func(n *core.Node, id core.RequestID) { n.Compact(id, rev) }); err != nil && !errors.Is(err, core.ErrCompacted) {
		c.s.log.Warn("auto-compaction", "revision", rev, "err", err)
		return
	}
	c.s.log.Info("auto-compacted", "revision", rev)
	c.swept(rev)
}
