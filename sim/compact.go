package sim

import (
	"fmt"

	"github.com/axon-kv/axon/core"
)

// awaitSweep answers a physical compaction, as the server does: once its
// compact revision is stored (r), it waits for the sweep to delete what
// the compaction made unreachable (driver.AwaitSweep). A node that
// crashes or stops leading meanwhile leaves it unanswered: its client
// times out, not knowing. Then the engine must hold no revision record
// below the compact revision (checkSwept).
func (n *node) awaitSweep(c *call, r core.Response, answer func(core.Response)) {
	if r.Err != nil {
		answer(r)
		return
	}
	// Not from inside the driver's answer: it holds the driver's lock.
	n.on(0, "await-sweep", func() {
		n.drv.AwaitSweep(c.in.rev, func(s core.Response) {
			if s.Err != nil {
				return
			}
			n.w.checkSwept(n, c.in.rev)
			answer(r)
		})
	})
}

// checkSwept holds a physical compaction's answer against the engine:
// every revision record below the compact revision is gone (the sweep
// deletes history first, revision records after).
func (w *World) checkSwept(n *node, rev int64) {
	if w.violation != nil {
		return
	}
	for r := int64(1); r < rev; r++ {
		if _, ok := w.eng.Peek(core.RevisionKey(r)); ok {
			w.violation = fmt.Errorf("%s answered a physical compaction to r%d while the engine still holds the revision record of r%d", n.id(), rev, r)
			return
		}
	}
}
