package core_test

import (
	"testing"

	"github.com/axon-kv/axon/core"
)

// TestStats follows the node's stats through requests that wait in
// latches and a ring too small for their events.
func TestStats(t *testing.T) {
	s := newScene(t, core.Config{RingSize: 2})
	s.propose(1, putOp("a", "1"))
	s.propose(2, putOp("a", "2"))
	s.propose(3, putOp("a", "3"))
	s.propose(4, putOp("b", "4"))
	s.expect(`work r1 req1 put "a"="1"`, `work r2 req4 put "b"="4"`)
	st := s.node.Stats()
	if st.Dealt != 2 || st.Committed != 0 || st.LatchWaiting != 2 || st.Uncertain != 0 {
		t.Errorf("two dealt, two waiting on a: %+v", st)
	}
	s.runRev(1)
	s.runRev(2)
	st = s.node.Stats()
	if st.Committed != 2 || st.LatchWaiting != 0 || st.RingEvents != 2 || st.RingEvicted != 0 {
		t.Errorf("after r1 and r2, the waiting ones out in a batch: %+v", st)
	}
	s.expect(`batch [work req2 put "a"="2"; work req3 put "a"="3"]`, "resp req1 r1", "resp req4 r2")
	s.runReq(2)
	st = s.node.Stats()
	if st.Committed != 4 || st.RingEvents != 2 || st.RingEvicted != 2 || st.RingBytes <= 0 {
		t.Errorf("four events through a ring of two: %+v", st)
	}
}
