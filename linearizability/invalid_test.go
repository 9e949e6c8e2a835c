package linearizability

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestInvalid holds invalid to the answers of etcd 3.7.3 that
// server/parity_test.go records for the same shapes.
func TestInvalid(t *testing.T) {
	cmps := func(n int) []*pb.Compare {
		var out []*pb.Compare
		for range n {
			out = append(out, cmpMod("a", 0))
		}
		return out
	}
	gets := func(n int) []*pb.RequestOp {
		var out []*pb.RequestOp
		for range n {
			out = append(out, reqGet("a"))
		}
		return out
	}
	dels := func(n int) []*pb.RequestOp {
		var out []*pb.RequestOp
		for i := range n {
			out = append(out, del(fmt.Sprint(i)).KV)
		}
		return out
	}
	valueProvided := put("a", "v")
	valueProvided.KV.GetRequestPut().IgnoreValue = true
	rangeDel := DeleteInput(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("c")}).KV
	for _, tc := range []struct {
		name string
		in   Input
		want string
	}{
		{"empty key", put("", "v"), ErrEmptyKey},
		{"value with ignore_value", valueProvided, ErrValueProvided},
		{"lease with ignore_lease", PutInput(&pb.PutRequest{Key: []byte("a"), IgnoreLease: true, Lease: 7}), ErrLeaseProvided},
		{"empty compare key", txn([]*pb.Compare{{}}, nil, nil), ErrEmptyKey},
		{"put twice", txn(nil, []*pb.RequestOp{reqPut("a", "1"), reqGet("a"), reqPut("a", "2")}, nil), ErrDuplicateKey},
		{"put in both branches", txn(cmps(1), []*pb.RequestOp{reqPut("a", "1")}, []*pb.RequestOp{reqPut("a", "2")}), ""},
		{"put in a deleted range", txn(nil, []*pb.RequestOp{rangeDel, reqPut("b", "1")}, nil), ErrDuplicateKey},
		{"put at a deleted range's end", txn(nil, []*pb.RequestOp{rangeDel, reqPut("c", "1")}, nil), ""},
		{"nested both branches", txn(nil, []*pb.RequestOp{txn(cmps(1), []*pb.RequestOp{reqPut("a", "1")}, []*pb.RequestOp{reqPut("a", "2")}).KV}, nil), ""},
		{"nested and parent", txn(nil, []*pb.RequestOp{txn(cmps(1), []*pb.RequestOp{reqPut("a", "1")}, nil).KV, reqPut("a", "2")}, nil), ErrDuplicateKey},
		{"max compares", txn(cmps(MaxTxnOps), gets(1), nil), ""},
		{"one compare more", txn(cmps(MaxTxnOps+1), gets(1), nil), ErrTooManyOps},
		{"max deletes", txn(nil, dels(MaxTxnOps), nil), ""},
		{"one delete more", txn(nil, dels(MaxTxnOps+1), nil), ErrTooManyOps},
		{"nested at what is left", txn(cmps(2), []*pb.RequestOp{txn(nil, gets(MaxTxnOps-2), nil).KV}, nil), ""},
		{"nested past what is left", txn(cmps(2), []*pb.RequestOp{txn(nil, gets(MaxTxnOps-1), nil).KV}, nil), ErrTooManyOps},
		{"empty operation", txn(nil, []*pb.RequestOp{reqGet("a"), {}}, nil), ErrKeyNotFound},
	} {
		want := errNone
		if tc.want != "" {
			want = classify(tc.want)
		}
		if got := invalid(tc.in.KV); got != want {
			t.Errorf("%s: invalid = %d, want %d (%q)", tc.name, got, want, tc.want)
		}
	}
}
