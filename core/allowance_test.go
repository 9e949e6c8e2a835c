package core_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// recordingAllowance records what a read holds; past failAt bytes it
// refuses.
type recordingAllowance struct {
	held, calls int
	failAt      int
}

var errRefused = errors.New("refused")

func (a *recordingAllowance) Hold(n int) error {
	a.held += n
	a.calls++
	if a.failAt > 0 && a.held > a.failAt {
		return errRefused
	}
	return nil
}

// TestRangeHoldsWhatItCopies lists ranges with an Allowance: the answer
// is the one Range gives without, what it held covers the keys and values
// it answers (a read waits on that count), it reported in batches, not
// per key, and a refusal ends the read with the refusal's error.
func TestRangeHoldsWhatItCopies(t *testing.T) {
	s := newScene(t, core.Config{})
	id := core.RequestID(0)
	val := strings.Repeat("v", 1000)
	for i := range 1500 {
		id++
		s.propose(id, putOp(fmt.Sprintf("k%04d", i), val))
		if i%100 == 99 {
			s.settle()
		}
	}
	id++
	s.propose(id, putOp("k-big", strings.Repeat("b", 100<<10)))
	s.settle()
	read := func(req *pb.RangeRequest, mem core.Allowance) (*pb.RangeResponse, error) {
		txn, err := s.eng.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txn.Rollback()
		return core.RangeCounted(storage.NewReader(txn), req, s.node.Committed(), s.node.Compacted(), nil, mem)
	}
	for _, req := range []*pb.RangeRequest{
		{Key: []byte("k"), RangeEnd: []byte("l")},
		{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 700},
		{Key: []byte("k"), RangeEnd: []byte("l"), KeysOnly: true},
		{Key: []byte("k"), RangeEnd: []byte("l"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD},
		{Key: []byte("k-big")},
	} {
		t.Run(req.String(), func(t *testing.T) {
			want, err := read(req, nil)
			if err != nil {
				t.Fatal(err)
			}
			mem := &recordingAllowance{}
			got, err := read(req, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("with an allowance the answer differs: %d kvs, want %d", len(got.Kvs), len(want.Kvs))
			}
			answered := 0
			for _, kv := range got.Kvs {
				answered += len(kv.Key) + len(kv.Value)
			}
			if mem.held < answered {
				t.Fatalf("held %d bytes for an answer of %d", mem.held, answered)
			}
			if answered > 1<<20 && mem.calls > answered/(64<<10) {
				t.Fatalf("%d calls for %d bytes: not batched", mem.calls, answered)
			}
		})
	}
	small := &recordingAllowance{}
	if _, err := read(&pb.RangeRequest{Key: []byte("k0001")}, small); err != nil || small.calls != 0 {
		t.Fatalf("a small point read: %v, %d calls to its allowance; want none", err, small.calls)
	}
	if _, err := read(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")}, &recordingAllowance{failAt: 300 << 10}); !errors.Is(err, errRefused) {
		t.Fatalf("a refused read returned %v, want the refusal", err)
	}
}
