package core

import pb "go.etcd.io/etcd/api/v3/etcdserverpb"

// MetaNoSpace stores the NOSPACE alarm, so that a restarted or a new
// leader keeps refusing writes until an operator disarms it.
const MetaNoSpace = "alarm-nospace"

// SetNoSpace raises (on) or disarms etcd's NOSPACE alarm. The driver
// raises it when the engine passes its quota or the disk runs low; an
// operator disarms it (etcdctl alarm disarm) once space is back. While it
// is raised the node refuses what would add data — a Put, a Txn with a put
// in either branch, a lease grant — with ErrNoSpace, as etcd's capped
// applier does; reads, deletes, revokes and compaction go on. The answer
// comes as a Response to id once the alarm is stored (id 0: the driver's
// own). Alarm changes are stored one at a time, in the order asked.
func (n *Node) SetNoSpace(id RequestID, on bool) {
	if n.draining {
		// Handing over: the successor stores it.
		n.respond(id, ErrNotLeader)
		return
	}
	w := &Work{Kind: WorkAlarm, ID: id, Raise: on, Term: n.cfg.Term}
	if n.alarming {
		n.alarms = append(n.alarms, w)
		return
	}
	n.alarming = true
	n.ready.Work = append(n.ready.Work, w)
}

// NoSpace reports whether the NOSPACE alarm is raised.
func (n *Node) NoSpace() bool { return n.nospace }

func (n *Node) reportAlarm(w *Work, out Outcome) {
	if out != Committed {
		// Storing the alarm's state again is idempotent: try again.
		n.ready.Work = append(n.ready.Work, &Work{Kind: WorkAlarm, ID: w.ID, Raise: w.Raise, Term: w.Term, Attempt: w.Attempt + 1})
		return
	}
	n.nospace = w.Raise
	n.ready.Responses = append(n.ready.Responses, Response{ID: w.ID, Rev: n.committed})
	if len(n.alarms) == 0 {
		n.alarming = false
		return
	}
	next := n.alarms[0]
	n.alarms = n.alarms[1:]
	n.ready.Work = append(n.ready.Work, next)
}

// evaluateAlarm stores the NOSPACE alarm's state.
func evaluateAlarm(raise bool) *Effects {
	if raise {
		return &Effects{Writes: []Write{{Key: MetaKey(MetaNoSpace), Value: []byte{1}}}}
	}
	return &Effects{Writes: []Write{{Key: MetaKey(MetaNoSpace), Delete: true}}}
}

// ReadNoSpace reports whether the stored NOSPACE alarm is raised, for
// Recover and for instances that do not lead.
func ReadNoSpace(rd Reader) (bool, error) {
	_, ok, err := rd.Get(MetaKey(MetaNoSpace))
	return ok, err
}

// addsData reports whether etcd refuses op while NOSPACE is raised: a put,
// or a txn with a put in either branch (nested txns included).
func addsData(op *pb.RequestOp) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		return true
	case *pb.RequestOp_RequestTxn:
		for _, ops := range [][]*pb.RequestOp{tv.RequestTxn.GetSuccess(), tv.RequestTxn.GetFailure()} {
			for _, o := range ops {
				if addsData(o) {
					return true
				}
			}
		}
	}
	return false
}
