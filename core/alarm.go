package core

import (
	"bytes"
	"encoding/binary"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// MetaNoSpace marks a raised NOSPACE alarm, so that a restarted or a new
// leader keeps refusing writes until an operator disarms it. It is set
// while any member's alarm is, so a binary that knows no members still
// refuses writes; the members carrying the alarm are each a record of
// their own under MetaNoSpace + "/" + BE64(member), as etcd keys alarms
// by the member a request names (0 included).
const MetaNoSpace = "alarm-nospace"

// AnyMember names the alarm of no particular member: the one stored by a
// binary before alarms were kept per member, and SetNoSpace's.
const AnyMember = ^uint64(0)

func alarmKey(member uint64) []byte {
	return binary.BigEndian.AppendUint64(MetaKey(MetaNoSpace+"/"), member)
}

// SetNoSpace raises (on) the NOSPACE alarm of no particular member, or
// disarms every member's.
func (n *Node) SetNoSpace(id RequestID, on bool) { n.SetAlarm(id, AnyMember, on) }

// SetAlarm raises (on) or disarms etcd's NOSPACE alarm of a member (the
// one a request names; disarming one also disarms AnyMember's, and
// disarming AnyMember's disarms all). The driver raises its own when the
// engine passes its quota or the disk runs low; an operator disarms it
// (etcdctl alarm disarm) once space is back. While any is raised the
// node refuses what would add data — a Put, a Txn with a put in either
// branch, a lease grant — with ErrNoSpace, as etcd's capped applier does;
// reads, deletes, revokes and compaction go on. The answer comes as a
// Response to id once the alarm is stored (id 0: the driver's own).
// Alarm changes are stored one at a time, in the order asked.
func (n *Node) SetAlarm(id RequestID, member uint64, on bool) {
	if n.draining {
		// Handing over: the successor stores it.
		n.respond(id, ErrNotLeader)
		return
	}
	w := &Work{Kind: WorkAlarm, ID: id, Raise: on, AlarmMember: member, Term: n.cfg.Term}
	if n.alarming {
		n.alarms = append(n.alarms, w)
		return
	}
	n.alarming = true
	n.dispatchAlarm(w)
}

// dispatchAlarm hands out an alarm change with the members it leaves
// raised.
func (n *Node) dispatchAlarm(w *Work) {
	var set []uint64
	switch {
	case w.Raise:
		set = append(slices.Clone(n.alarmed), w.AlarmMember)
		slices.Sort(set)
		set = slices.Compact(set)
	case w.AlarmMember != AnyMember:
		set = slices.DeleteFunc(slices.Clone(n.alarmed), func(m uint64) bool { return m == w.AlarmMember || m == AnyMember })
	}
	w.Alarmed = set
	n.ready.Work = append(n.ready.Work, w)
}

// NoSpace reports whether the NOSPACE alarm is raised.
func (n *Node) NoSpace() bool { return len(n.alarmed) > 0 }

// Alarmed returns the members whose NOSPACE alarm is raised, in order.
func (n *Node) Alarmed() []uint64 { return slices.Clone(n.alarmed) }

func (n *Node) reportAlarm(w *Work, out Outcome) {
	if out != Committed {
		// Storing the alarm's state again is idempotent: try again.
		n.ready.Work = append(n.ready.Work, &Work{Kind: WorkAlarm, ID: w.ID, Raise: w.Raise, AlarmMember: w.AlarmMember, Alarmed: w.Alarmed, Term: w.Term, Attempt: w.Attempt + 1})
		return
	}
	n.alarmed = w.Alarmed
	n.ready.Responses = append(n.ready.Responses, Response{ID: w.ID, Rev: n.committed})
	if len(n.alarms) == 0 {
		n.alarming = false
		return
	}
	next := n.alarms[0]
	n.alarms = n.alarms[1:]
	n.dispatchAlarm(next)
}

// evaluateAlarm stores the members whose NOSPACE alarm is raised.
func evaluateAlarm(rd Reader, set []uint64) (*Effects, error) {
	eff := &Effects{}
	lower := alarmKey(0)
	upper := append(MetaKey(MetaNoSpace+"/"), bytes.Repeat([]byte{0xff}, 9)...)
	err := rd.Scan(lower, upper, false, 0, func(k, _ []byte) bool {
		eff.Writes = append(eff.Writes, Write{Key: bytes.Clone(k), Delete: true})
		return true
	})
	if err != nil {
		return nil, err
	}
	for _, m := range set {
		eff.Writes = append(eff.Writes, Write{Key: alarmKey(m), Value: []byte{1}})
	}
	if len(set) > 0 {
		eff.Writes = append(eff.Writes, Write{Key: MetaKey(MetaNoSpace), Value: []byte{1}})
	} else {
		eff.Writes = append(eff.Writes, Write{Key: MetaKey(MetaNoSpace), Delete: true})
	}
	return eff, nil
}

// ReadNoSpace reports whether the stored NOSPACE alarm is raised, for
// instances that do not lead.
func ReadNoSpace(rd Reader) (bool, error) {
	_, ok, err := rd.Get(MetaKey(MetaNoSpace))
	return ok, err
}

// ReadAlarmed reads the members whose NOSPACE alarm is stored raised, in
// order; a store marked by a binary that kept no members has AnyMember's.
func ReadAlarmed(rd Reader) ([]uint64, error) {
	on, err := ReadNoSpace(rd)
	if err != nil || !on {
		return nil, err
	}
	var set []uint64
	upper := append(MetaKey(MetaNoSpace+"/"), bytes.Repeat([]byte{0xff}, 9)...)
	err = rd.Scan(alarmKey(0), upper, false, 0, func(k, _ []byte) bool {
		if len(k) == len(alarmKey(0)) {
			set = append(set, binary.BigEndian.Uint64(k[len(k)-8:]))
		}
		return true
	})
	if len(set) == 0 {
		set = []uint64{AnyMember}
	}
	return set, err
}

// addsData reports whether etcd refuses op while NOSPACE is raised: a put,
// or a txn with a put in either branch (nested txns included).
// (successOnly plants TestingKnobs.NoSpaceMissesFailureBranch.)
func addsData(op *pb.RequestOp, successOnly bool) bool {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		return true
	case *pb.RequestOp_RequestTxn:
		branches := [][]*pb.RequestOp{tv.RequestTxn.GetSuccess(), tv.RequestTxn.GetFailure()}
		if successOnly {
			branches = branches[:1]
		}
		for _, ops := range branches {
			for _, o := range ops {
				if addsData(o, successOnly) {
					return true
				}
			}
		}
	}
	return false
}
