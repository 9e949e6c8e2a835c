package sim

import (
	"time"
)

// history is every client call, in the order they started.
type history struct {
	calls      []*call
	issued     int
	maxSeenRev int64
}

func newHistory() *history { return &history{} }

func (h *history) add(c *client, in input, at time.Duration) *call {
	cl := &call{id: len(h.calls), client: c, in: in, start: at}
	h.calls = append(h.calls, cl)
	h.issued++
	return cl
}
