package core

// Stats are a node's gauges and counters for metrics. Counters start at
// zero with each node (each term this member leads).
type Stats struct {
	// Dealt is the highest revision dealt; Committed the commit point C.
	Dealt, Committed int64
	// Uncertain counts dealt revisions whose outcome the engine did not
	// tell, waiting for their fences (docs/design.md, "Uncertain writes
	// and fences").
	Uncertain int
	// LatchWaiting counts requests waiting for an earlier request on an
	// overlapping key to finish before they are dealt.
	LatchWaiting int
	// RingEvents and RingBytes are what the event ring holds;
	// RingEvicted counts the events it dropped for room.
	RingEvents  int
	RingBytes   int64
	RingEvicted int64
	// SweepTo is the compact revision the sweep works towards, SweepDone
	// the one it finished (nothing below it is left in the engine).
	SweepTo, SweepDone int64
}

// Stats returns the node's stats. It walks the latches and the dealt
// revisions: call it at scrape time, not per request.
func (n *Node) Stats() Stats {
	st := Stats{
		Dealt: n.next - 1, Committed: n.committed,
		RingEvents: n.hub.ring.Len(), RingBytes: n.hub.ring.Bytes(), RingEvicted: n.hub.ring.evicted,
		SweepTo: n.sweep.to, SweepDone: n.sweep.done,
	}
	for _, s := range n.slots {
		if s.state == slotUncertain {
			st.Uncertain++
		}
	}
	for l := range n.latches.live {
		if l.waiting > 0 && l.work != nil {
			st.LatchWaiting++
		}
	}
	return st
}
