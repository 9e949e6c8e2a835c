package core

import (
	"bytes"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// ValidateRange checks a RangeRequest the way etcd's gRPC layer does.
func ValidateRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return ErrEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return ErrInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return ErrInvalidSortOption
	}
	return nil
}

// ValidatePut checks a PutRequest the way etcd's gRPC layer does.
func ValidatePut(r *pb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return ErrEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return ErrValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return ErrLeaseProvided
	}
	return nil
}

// ValidateDeleteRange checks a DeleteRangeRequest.
func ValidateDeleteRange(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return ErrEmptyKey
	}
	return nil
}

// ValidateTxn checks a TxnRequest the way etcd does: the number of
// operations per branch, every nested request, and that no key is written
// twice (etcd's "duplicate key given in txn request").
func ValidateTxn(r *pb.TxnRequest, maxOps int) error {
	if err := validateTxnOps(r, maxOps); err != nil {
		return err
	}
	if err := checkWrites(r.Success); err != nil {
		return err
	}
	return checkWrites(r.Failure)
}

// flatOps is the size up to which checkWrites compares the puts of a
// branch without nested txns pairwise.
const flatOps = 8

// checkWrites is txnWrites' check of one branch. A small branch without
// nested txns (Kubernetes' create, update and delete) is checked pairwise:
// the map txnWrites builds cost two allocations per request.
func checkWrites(ops []*pb.RequestOp) error {
	if len(ops) > flatOps || slices.ContainsFunc(ops, func(op *pb.RequestOp) bool { return op.GetRequestTxn() != nil }) {
		_, _, err := txnWrites(ops)
		return err
	}
	for i, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		for j, o := range ops {
			if q := o.GetRequestPut(); q != nil && j < i && bytes.Equal(q.Key, p.Key) {
				return ErrDuplicateKey
			}
			if d := o.GetRequestDeleteRange(); d != nil && (span{d.Key, d.RangeEnd}).contains(p.Key) {
				return ErrDuplicateKey
			}
		}
	}
	return nil
}

func validateTxnOps(r *pb.TxnRequest, maxOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxOps {
		return ErrTooManyOps
	}
	for _, c := range r.Compare {
		if c == nil || len(c.Key) == 0 {
			return ErrEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := validateOp(op, maxOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateOp(op *pb.RequestOp, maxOps int) error {
	if op == nil {
		return ErrKeyNotFound
	}
	switch tv := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		if tv.RequestRange != nil {
			return ValidateRange(tv.RequestRange)
		}
	case *pb.RequestOp_RequestPut:
		if tv.RequestPut != nil {
			return ValidatePut(tv.RequestPut)
		}
	case *pb.RequestOp_RequestDeleteRange:
		if tv.RequestDeleteRange != nil {
			return ValidateDeleteRange(tv.RequestDeleteRange)
		}
	case *pb.RequestOp_RequestTxn:
		if tv.RequestTxn != nil {
			return validateTxnOps(tv.RequestTxn, maxOps)
		}
	}
	// etcd answers an empty operation with "key not found".
	return ErrKeyNotFound
}

// span is a key interval [key, end); end nil is the single key, end
// "\x00" is unbounded.
type span struct{ key, end []byte }

func (s span) contains(k []byte) bool {
	if len(s.end) == 0 {
		return bytes.Equal(s.key, k)
	}
	if bytes.Compare(k, s.key) < 0 {
		return false
	}
	return isInfinite(s.end) || bytes.Compare(k, s.end) < 0
}

func isInfinite(end []byte) bool { return len(end) == 1 && end[0] == 0 }

func anyContains(spans []span, k []byte) bool {
	for _, s := range spans {
		if s.contains(k) {
			return true
		}
	}
	return false
}

// txnWrites returns the keys put and the ranges deleted by one branch,
// including nested txns, and fails when a key is put twice or put and
// deleted by operations that can both run. Puts in the two branches of one
// nested txn may overlap: only one branch runs.
func txnWrites(ops []*pb.RequestOp) (puts map[string]bool, dels []span, err error) {
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			dels = append(dels, span{d.Key, d.RangeEnd})
		}
	}
	puts = make(map[string]bool)
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenPuts, thenDels, err := txnWrites(t.Success)
		if err != nil {
			return nil, nil, err
		}
		elsePuts, elseDels, err := txnWrites(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range thenPuts {
			if puts[k] || anyContains(dels, []byte(k)) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = true
		}
		for k := range elsePuts {
			if (puts[k] && !thenPuts[k]) || anyContains(dels, []byte(k)) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = true
		}
		dels = append(dels, thenDels...)
		dels = append(dels, elseDels...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if puts[k] || anyContains(dels, p.Key) {
			return nil, nil, ErrDuplicateKey
		}
		puts[k] = true
	}
	return puts, dels, nil
}
