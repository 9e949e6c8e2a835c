package core_test

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
)

func vPut(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}}}
}

func vDel(key, end string) *pb.RequestOp {
	d := &pb.DeleteRangeRequest{Key: []byte(key)}
	if end != "" {
		d.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
}

func vGet(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

func vTxn(then, els []*pb.RequestOp, cmps ...*pb.Compare) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}}}
}

func vCmp(key string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL}
}

func nOps(n int, mk func(i int) *pb.RequestOp) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, n)
	for i := range ops {
		ops[i] = mk(i)
	}
	return ops
}

func TestValidateRange(t *testing.T) {
	cases := []struct {
		name string
		req  *pb.RangeRequest
		want error
	}{
		{"a single key is valid", &pb.RangeRequest{Key: []byte("a")}, nil},
		{"a sorted range is valid", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VALUE}, nil},
		{"an empty key is refused", &pb.RangeRequest{}, core.ErrEmptyKey},
		{"an unknown sort order is refused", &pb.RangeRequest{Key: []byte("a"), SortOrder: 7}, core.ErrInvalidSortOption},
		{"an unknown sort target is refused", &pb.RangeRequest{Key: []byte("a"), SortTarget: -1}, core.ErrInvalidSortOption},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := core.ValidateRange(tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestValidatePut(t *testing.T) {
	cases := []struct {
		name string
		req  *pb.PutRequest
		want error
	}{
		{"a key and value are valid", &pb.PutRequest{Key: []byte("a"), Value: []byte("v")}, nil},
		{"an empty value is valid", &pb.PutRequest{Key: []byte("a")}, nil},
		{"ignore_value without a value is valid", &pb.PutRequest{Key: []byte("a"), IgnoreValue: true}, nil},
		{"an empty key is refused", &pb.PutRequest{Value: []byte("v")}, core.ErrEmptyKey},
		{"ignore_value with a value is refused", &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), IgnoreValue: true}, core.ErrValueProvided},
		{"ignore_lease with a lease is refused", &pb.PutRequest{Key: []byte("a"), Lease: 5, IgnoreLease: true}, core.ErrLeaseProvided},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := core.ValidatePut(tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestValidateDeleteRange(t *testing.T) {
	if err := core.ValidateDeleteRange(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}); err != nil {
		t.Fatalf("a range delete: %v", err)
	}
	if err := core.ValidateDeleteRange(&pb.DeleteRangeRequest{}); !errors.Is(err, core.ErrEmptyKey) {
		t.Fatalf("an empty key: got %v", err)
	}
}

func TestValidateTxn(t *testing.T) {
	const maxOps = 4
	put := func(i int) *pb.RequestOp { return vPut(string(rune('a' + i))) }
	cases := []struct {
		name string
		txn  *pb.RequestOp
		want error
	}{
		{"an empty txn is valid", vTxn(nil, nil), nil},
		{"puts of distinct keys are valid", vTxn(nOps(maxOps, put), nil), nil},
		{"as many compares as the limit are valid", vTxn(nil, nil, vCmp("a"), vCmp("b"), vCmp("c"), vCmp("d")), nil},
		{"more then-ops than the limit are too many", vTxn(nOps(maxOps+1, put), nil), core.ErrTooManyOps},
		{"more else-ops than the limit are too many", vTxn(nil, nOps(maxOps+1, put)), core.ErrTooManyOps},
		{"more compares than the limit are too many", vTxn(nil, nil, vCmp("a"), vCmp("b"), vCmp("c"), vCmp("d"), vCmp("e")), core.ErrTooManyOps},
		{"a nested txn fitting the remaining budget is valid", vTxn([]*pb.RequestOp{vTxn(nOps(3, put), nil)}, nil), nil},
		{"a nested txn over the remaining budget is too many", vTxn([]*pb.RequestOp{vPut("x"), vTxn(nOps(3, put), nil)}, nil), core.ErrTooManyOps},
		{"a nested txn's compares count against the budget", vTxn([]*pb.RequestOp{vPut("x"), vTxn(nil, nil, vCmp("a"), vCmp("b"), vCmp("c"))}, nil), core.ErrTooManyOps},
		{"a compare with an empty key is refused", vTxn(nil, nil, &pb.Compare{}), core.ErrEmptyKey},
		{"a nil compare is refused", vTxn(nil, nil, nil), core.ErrEmptyKey},
		{"a put with an empty key is refused", vTxn([]*pb.RequestOp{vPut("")}, nil), core.ErrEmptyKey},
		{"a range with an empty key in else is refused", vTxn(nil, []*pb.RequestOp{vGet("")}), core.ErrEmptyKey},
		{"a delete with an empty key is refused", vTxn([]*pb.RequestOp{vDel("", "")}, nil), core.ErrEmptyKey},
		{"a nil op is key not found", vTxn([]*pb.RequestOp{nil}, nil), core.ErrKeyNotFound},
		{"an op without a request is key not found", vTxn([]*pb.RequestOp{{}}, nil), core.ErrKeyNotFound},
		{"a put op holding nil is key not found", vTxn([]*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{}}}, nil), core.ErrKeyNotFound},
		{"a range op holding nil is key not found", vTxn([]*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{}}}, nil), core.ErrKeyNotFound},
		{"a delete op holding nil is key not found", vTxn([]*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{}}}, nil), core.ErrKeyNotFound},
		{"a txn op holding nil is key not found", vTxn([]*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{}}}, nil), core.ErrKeyNotFound},
		{"an invalid sort option inside a txn is refused", vTxn([]*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), SortOrder: 9}}}}, nil), core.ErrInvalidSortOption},
		{"a put with ignore_value and a value inside a txn is refused", vTxn([]*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), IgnoreValue: true}}}}, nil), core.ErrValueProvided},
		{"two puts of one key are a duplicate", vTxn([]*pb.RequestOp{vPut("a"), vPut("a")}, nil), core.ErrDuplicateKey},
		{"two puts of one key in else are a duplicate", vTxn(nil, []*pb.RequestOp{vPut("a"), vPut("a")}), core.ErrDuplicateKey},
		{"a put of one key in then and in else is valid", vTxn([]*pb.RequestOp{vPut("a")}, []*pb.RequestOp{vPut("a")}), nil},
		{"a put inside a deleted range is a duplicate", vTxn([]*pb.RequestOp{vDel("a", "c"), vPut("b")}, nil), core.ErrDuplicateKey},
		{"a put of a deleted single key is a duplicate", vTxn([]*pb.RequestOp{vPut("a"), vDel("a", "")}, nil), core.ErrDuplicateKey},
		{"a put of a key deleted from there to the end is a duplicate", vTxn([]*pb.RequestOp{vDel("a", "\x00"), vPut("zz")}, nil), core.ErrDuplicateKey},
		{"a put just past a deleted range is valid", vTxn([]*pb.RequestOp{vDel("a", "c"), vPut("c")}, nil), nil},
		{"a put just before a deleted range is valid", vTxn([]*pb.RequestOp{vDel("b", "c"), vPut("a")}, nil), nil},
		{"a put and a range read of the same key are valid", vTxn([]*pb.RequestOp{vPut("a"), vGet("a")}, nil), nil},
		{
			"a put in the then branch and the else branch of a nested txn is valid",
			vTxn([]*pb.RequestOp{vTxn([]*pb.RequestOp{vPut("a")}, []*pb.RequestOp{vPut("a")}, vCmp("a"))}, nil), nil,
		},
		{
			"a put in a nested txn and beside it is a duplicate",
			vTxn([]*pb.RequestOp{vPut("a"), vTxn([]*pb.RequestOp{vPut("a")}, nil)}, nil), core.ErrDuplicateKey,
		},
		{
			"a put in a nested else and beside it is a duplicate",
			vTxn([]*pb.RequestOp{vPut("a"), vTxn(nil, []*pb.RequestOp{vPut("a")})}, nil), core.ErrDuplicateKey,
		},
		{
			"puts of one key in two sibling nested txns are a duplicate",
			vTxn([]*pb.RequestOp{vTxn([]*pb.RequestOp{vPut("a")}, nil), vTxn(nil, []*pb.RequestOp{vPut("a")})}, nil), core.ErrDuplicateKey,
		},
		{
			"a nested put inside a range deleted beside it is a duplicate",
			vTxn([]*pb.RequestOp{vDel("a", "c"), vTxn([]*pb.RequestOp{vPut("b")}, nil)}, nil), core.ErrDuplicateKey,
		},
		{
			"a nested else put inside a range deleted beside it is a duplicate",
			vTxn([]*pb.RequestOp{vDel("a", "c"), vTxn(nil, []*pb.RequestOp{vPut("b")})}, nil), core.ErrDuplicateKey,
		},
		{
			"a put beside a nested txn that deletes its key is a duplicate",
			vTxn([]*pb.RequestOp{vPut("b"), vTxn([]*pb.RequestOp{vDel("a", "c")}, nil)}, nil), core.ErrDuplicateKey,
		},
		{
			"a duplicate deep in a nested branch is found",
			vTxn([]*pb.RequestOp{vTxn([]*pb.RequestOp{vTxn([]*pb.RequestOp{vPut("a"), vPut("a")}, nil)}, nil)}, nil), core.ErrDuplicateKey,
		},
		{
			"a duplicate deep in a nested else branch is found",
			vTxn([]*pb.RequestOp{vTxn(nil, []*pb.RequestOp{vPut("a"), vPut("a")})}, nil), core.ErrDuplicateKey,
		},
		{
			"a duplicate in the outer else branch is found after a clean then",
			vTxn([]*pb.RequestOp{vPut("a")}, []*pb.RequestOp{vPut("b"), vDel("b", "")}), core.ErrDuplicateKey,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := core.ValidateTxn(tc.txn.GetRequestTxn(), maxOps)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
