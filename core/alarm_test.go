package core_test

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
)

func TestNoSpaceRefusesWhatAddsData(t *testing.T) {
	s := newScene(t, core.Config{})
	s.propose(1, putOp("a", "1"))
	s.settle()
	s.node.SetNoSpace(2, true)
	s.node.SetNoSpace(3, false)
	s.node.SetNoSpace(4, true)
	// One alarm change at a time, in the order asked.
	s.collect()
	s.out = nil
	s.run(s.take(core.WorkAlarm, 0))
	// Storing an alarm changes no key: it is answered at the store's
	// revision and takes none, as in etcd.
	s.expect("alarm nospace=false req3", "resp req2 at r1")
	s.settle()
	if !s.node.NoSpace() {
		t.Fatal("NOSPACE not raised after raise, disarm, raise")
	}
	txnPut := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
		Failure: []*pb.RequestOp{putOp("b", "2")}}}}
	del := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}}
	s.out = nil
	s.propose(5, putOp("b", "1"))
	s.propose(6, txnPut)
	s.node.Grant(7, 0, 10)
	s.propose(8, del)
	s.settle()
	for _, r := range s.resps[len(s.resps)-4:] {
		switch r.ID {
		case 5, 6, 7:
			if !errors.Is(r.Err, core.ErrNoSpace) {
				t.Errorf("req%d: %v, want %v", r.ID, r.Err, core.ErrNoSpace)
			}
		case 8:
			if r.Err != nil || r.Response.GetResponseDeleteRange().Deleted != 1 {
				t.Errorf("delete under NOSPACE: %v %v", r.Err, r.Response)
			}
		}
	}
	// A new leader reads the alarm from the engine.
	st, err := driver.Recover(s.ctx, s.eng)
	if err != nil || !st.NoSpace {
		t.Fatalf("recovered NoSpace=%v, %v", st.NoSpace, err)
	}
	s.node.SetNoSpace(9, false)
	s.settle()
	if st, _ := driver.Recover(s.ctx, s.eng); st.NoSpace || s.node.NoSpace() {
		t.Fatal("disarmed alarm still raised")
	}
}
