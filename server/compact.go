package server

import (
	"context"
	"errors"
	"time"

	"github.com/axon-kv/axon/core"
)

// compactor runs etcd's auto-compaction; the sweep that deletes what a
// compaction made unreachable is the node's work (core.WorkSweep).
type compactor struct {
	s *Server
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
	defer c.s.bg.work.Done()
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
			st := c.s.drv.Status()
			if !st.Leading {
				continue // the leader compacts
			}
			rev, compacted := st.Committed, st.Compacted
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

// compact compacts to rev through the node, as a client would.
func (c *compactor) compact(rev int64) {
	ctx, cancel := context.WithTimeout(c.s.ctx, time.Minute)
	defer cancel()
	if _, err := c.s.propose(ctx, func(answer func(core.Response)) core.RequestID { return c.s.drv.Compact(rev, answer) }); err != nil && !errors.Is(err, core.ErrCompacted) {
		c.s.log.Warn("auto-compaction", "revision", rev, "err", err)
		return
	}
	c.s.log.Info("auto-compacted", "revision", rev)
}
