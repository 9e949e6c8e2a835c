package linearizability

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// MaxTxnOps is etcd's default --max-txn-ops, the limit the model holds
// txns to: a history's server must run with it.
const MaxTxnOps = 128

// invalid is what etcd's gRPC layer refuses a request with before it
// reaches the store (v3rpc's checkPutRequest, checkTxnRequest and
// checkIntervals), whatever the state: errNone if it is valid.
func invalid(op *pb.RequestOp) errKind {
	if k := checkOp(op, MaxTxnOps); k != errNone {
		return k
	}
	if t := op.GetRequestTxn(); t != nil {
		if _, _, dup := intervals(t.Success); dup {
			return errDuplicateKey
		}
		if _, _, dup := intervals(t.Failure); dup {
			return errDuplicateKey
		}
	}
	return errNone
}

// checkOp checks one operation; a txn's operations get what its own
// count leaves of maxOps.
func checkOp(op *pb.RequestOp, maxOps int) errKind {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		r := tv.RequestRange
		_, order := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]
		_, target := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]
		switch {
		case len(r.Key) == 0:
			return errEmptyKey
		case !order || !target:
			return errInvalidSort
		}
	case *pb.RequestOp_RequestPut:
		p := tv.RequestPut
		switch {
		case len(p.Key) == 0:
			return errEmptyKey
		case p.IgnoreValue && len(p.Value) != 0:
			return errValueProvided
		case p.IgnoreLease && p.Lease != 0:
			return errLeaseProvided
		}
	case *pb.RequestOp_RequestDeleteRange:
		if len(tv.RequestDeleteRange.Key) == 0 {
			return errEmptyKey
		}
	case *pb.RequestOp_RequestTxn:
		t := tv.RequestTxn
		opc := max(len(t.Compare), len(t.Success), len(t.Failure))
		if opc > maxOps {
			return errTooManyOps
		}
		for _, c := range t.Compare {
			if len(c.Key) == 0 {
				return errEmptyKey
			}
		}
		for _, o := range append(append([]*pb.RequestOp(nil), t.Success...), t.Failure...) {
			if k := checkOp(o, maxOps-opc); k != errNone {
				return k
			}
		}
	default:
		return errKeyNotFound // etcd's answer to an empty operation
	}
	return errNone
}

// keySpan is a key or etcd's [key, end).
type keySpan struct{ key, end []byte }

// holds reports whether the span holds k. As etcd's interval tree, an end
// of "\x00" holds nothing.
func (s keySpan) holds(k []byte) bool {
	if len(s.end) == 0 {
		return bytes.Equal(s.key, k)
	}
	return bytes.Compare(s.key, k) <= 0 && bytes.Compare(k, s.end) < 0
}

// intervals is etcd's checkIntervals over one branch: the keys it puts
// and the spans it deletes, nested txns included, and whether some key is
// written twice by operations that can both run (both branches of one
// nested txn may put the same key).
func intervals(ops []*pb.RequestOp) (puts map[string]bool, dels []keySpan, dup bool) {
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			dels = append(dels, keySpan{d.Key, d.RangeEnd})
		}
	}
	deleted := func(k string) bool {
		for _, s := range dels {
			if s.holds([]byte(k)) {
				return true
			}
		}
		return false
	}
	puts = map[string]bool{}
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenPuts, thenDels, dup := intervals(t.Success)
		if dup {
			return nil, nil, true
		}
		elsePuts, elseDels, dup := intervals(t.Failure)
		if dup {
			return nil, nil, true
		}
		for k := range thenPuts {
			if puts[k] || deleted(k) {
				return nil, nil, true
			}
		}
		for k := range thenPuts {
			puts[k] = true
		}
		for k := range elsePuts {
			if (puts[k] && !thenPuts[k]) || deleted(k) {
				return nil, nil, true
			}
			puts[k] = true
		}
		dels = append(append(dels, thenDels...), elseDels...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		if puts[string(p.Key)] || deleted(string(p.Key)) {
			return nil, nil, true
		}
		puts[string(p.Key)] = true
	}
	return puts, dels, false
}
