package core

import (
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// DescribeWork renders w on one line for traces and golden tests.
func DescribeWork(w *Work) string {
	switch w.Kind {
	case WorkRequest:
		what := DescribeRequest(w.Request)
		if l := w.Lease; l != nil && l.Revoke {
			what = fmt.Sprintf("revoke lease%d keys=%d", l.ID, len(l.Keys))
		} else if l != nil {
			what = fmt.Sprintf("grant lease%d ttl=%d", l.ID, l.TTL)
		}
		s := fmt.Sprintf("work req%d %s", w.ID, what)
		if w.Rev != 0 {
			s = fmt.Sprintf("work r%d req%d %s", w.Rev, w.ID, what)
		}
		if w.Serial {
			s += " serial"
		}
		if w.Attempt > 0 {
			s += fmt.Sprintf(" attempt=%d", w.Attempt)
		}
		return s
	case WorkFence:
		return fmt.Sprintf("fence r%d req%d attempt=%d", w.Rev, w.ID, w.Attempt)
	case WorkCompact:
		return fmt.Sprintf("compact r%d req%d", w.Rev, w.ID)
	case WorkSweep:
		s := fmt.Sprintf("sweep r%d", w.Sweep.Rev)
		if w.Sweep.Next != nil {
			s += fmt.Sprintf(" from %q", w.Sweep.Next)
		}
		if w.Attempt > 0 {
			s += fmt.Sprintf(" attempt=%d", w.Attempt)
		}
		return s
	case WorkCatchUp:
		return fmt.Sprintf("catchup watch%d r%d..r%d", w.Watch, w.From, w.To)
	case WorkElect:
		if w.Elect.Observe {
			return "elect observe"
		}
		return fmt.Sprintf("elect %s term=%d deadline=%v", w.Elect.Next.Holder, w.Elect.Next.Term, w.Elect.Next.Deadline)
	case WorkRecover:
		return "recover"
	case WorkAlarm:
		return fmt.Sprintf("alarm nospace=%v req%d", w.Raise, w.ID)
	case WorkBatch:
		parts := make([]string, len(w.Batch))
		for i, sub := range w.Batch {
			parts[i] = DescribeWork(sub)
		}
		return fmt.Sprintf("batch [%s]", strings.Join(parts, "; "))
	}
	return "work ?"
}

// DescribeRequest renders a request briefly.
func DescribeRequest(req *pb.RequestOp) string {
	switch tv := req.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		return fmt.Sprintf("put %q=%q", tv.RequestPut.Key, tv.RequestPut.Value)
	case *pb.RequestOp_RequestDeleteRange:
		return fmt.Sprintf("delete %q..%q", tv.RequestDeleteRange.Key, tv.RequestDeleteRange.RangeEnd)
	case *pb.RequestOp_RequestRange:
		return fmt.Sprintf("range %q..%q", tv.RequestRange.Key, tv.RequestRange.RangeEnd)
	case *pb.RequestOp_RequestTxn:
		return fmt.Sprintf("txn cmp=%d then=%d else=%d", len(tv.RequestTxn.Compare), len(tv.RequestTxn.Success), len(tv.RequestTxn.Failure))
	}
	return "empty"
}

// DescribeEvent renders an event on one line.
func DescribeEvent(ev Event) string {
	if ev.Type == mvccpb.DELETE {
		return fmt.Sprintf("r%d delete %q", ev.Rev, ev.Kv.Key)
	}
	return fmt.Sprintf("r%d put %q=%q v%d c%d", ev.Rev, ev.Kv.Key, ev.Kv.Value, ev.Kv.Version, ev.Kv.CreateRevision)
}

// DescribeResponse renders a response on one line.
func DescribeResponse(r Response) string {
	if r.Err != nil {
		return fmt.Sprintf("resp req%d err=%q", r.ID, r.Err)
	}
	lease := ""
	if r.LeaseTTL != 0 {
		lease = fmt.Sprintf(" lease%d ttl=%d", r.Lease, r.LeaseTTL)
	}
	if !r.Wrote {
		return fmt.Sprintf("resp req%d at r%d%s", r.ID, r.Rev, lease)
	}
	return fmt.Sprintf("resp req%d r%d%s", r.ID, r.Rev, lease)
}
