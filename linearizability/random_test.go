package linearizability

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

var genKeys = []string{"a", "b", "c", "k/1", "k/2", "k/3", "k/4"}

// genHistory runs n random operations one after another through the
// model, which stands in for the store, with random revision gaps; then it
// blurs their times so neighbours overlap. Each operation's real moment
// lies inside its interval, so the history is linearizable by
// construction. A few writes are uncertain and patched, a few never
// applied and dropped.
func genHistory(seed uint64, n int) []porcupine.Operation {
	rng := rand.New(rand.NewPCG(seed, 0))
	s := &state{}
	var r Recorder
	nextLease := int64(100)
	for i := range n {
		at := int64(i) * 100
		call, ret := at-rng.Int64N(250), at+rng.Int64N(250)
		in := genInput(rng, s, &nextLease)
		if rng.IntN(100) == 0 {
			id := r.Call(i%8, genInput(rng, s, &nextLease), call)
			r.Unknown(id)
			r.Drop(id)
		}
		var hint *Output
		if in.Grant != nil {
			hint = &Output{Grant: &pb.LeaseGrantResponse{ID: in.Grant.ID}}
		}
		h := s.rev + rng.Int64N(3)
		x := newExec(s, h)
		out, kind := x.run(in, hint)
		if kind == errNone && x.wrote && h == s.rev {
			h++
			x = newExec(s, h)
			out, kind = x.run(in, hint)
		}
		id := r.Call(i%8, in, call)
		if kind != errNone {
			r.Return(id, Output{Err: errText[kind]}, ret)
			continue
		}
		setHeaders(&out, h)
		s = x.commit()
		if !readOnly(in) && rng.IntN(50) == 0 {
			r.Unknown(id)
			r.Patch(id, out)
			continue
		}
		r.Return(id, out, ret)
	}
	return r.Operations()
}

var errText = map[errKind]string{
	errCompacted:        ErrCompacted,
	errFutureRev:        ErrFutureRev,
	errLeaseNotFound:    ErrLeaseNotFound,
	errLeaseExist:       ErrLeaseExist,
	errKeyNotFound:      ErrKeyNotFound,
	errLeaseTTLTooLarge: ErrLeaseTTLTooLarge,
}

func genInput(rng *rand.Rand, s *state, nextLease *int64) Input {
	key := func() []byte { return []byte(genKeys[rng.IntN(len(genKeys))]) }
	lease := func() int64 {
		if len(s.leases) > 0 && rng.IntN(10) > 0 {
			return s.leases[rng.IntN(len(s.leases))]
		}
		return *nextLease + 50 // never granted
	}
	switch p := rng.IntN(100); {
	case p < 30:
		return PutInput(genPut(rng, key(), lease))
	case p < 55:
		return RangeInput(genRange(rng, s))
	case p < 65:
		d := &pb.DeleteRangeRequest{Key: key(), PrevKv: rng.IntN(2) == 0}
		if rng.IntN(3) == 0 {
			d.Key, d.RangeEnd = []byte("k/"), []byte("k0")
		}
		return DeleteInput(d)
	case p < 85:
		k := key()
		var mod int64
		if i, ok := find(s.kvs, k); ok {
			mod = s.kvs[i].ModRevision
		}
		if rng.IntN(3) == 0 {
			mod = max(0, mod-1) // usually stale
		}
		then := []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: genPut(rng, k, lease)}}}
		if rng.IntN(4) == 0 {
			// etcd refuses a branch that puts and deletes one key.
			if d := key(); !bytes.Equal(d, k) {
				then = append(then, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: d}}})
			}
		}
		els := []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: genRange(rng, s)}}}
		return TxnInput(&pb.TxnRequest{Compare: []*pb.Compare{cmpMod(string(k), mod)}, Success: then, Failure: els})
	case p < 91:
		*nextLease++
		return Input{Grant: &pb.LeaseGrantRequest{ID: *nextLease, TTL: 5}}
	case p < 96:
		return Input{Revoke: &pb.LeaseRevokeRequest{ID: lease()}}
	}
	return Input{Compact: &pb.CompactionRequest{Revision: s.compact + rng.Int64N(s.rev-s.compact+2)}}
}

func genPut(rng *rand.Rand, key []byte, lease func() int64) *pb.PutRequest {
	p := &pb.PutRequest{Key: key, Value: fmt.Appendf(nil, "v%d", rng.IntN(1000)), PrevKv: rng.IntN(3) == 0}
	if rng.IntN(5) == 0 {
		p.Lease = lease()
	}
	return p
}

func genRange(rng *rand.Rand, s *state) *pb.RangeRequest {
	r := &pb.RangeRequest{Key: []byte(genKeys[rng.IntN(len(genKeys))])}
	switch rng.IntN(3) {
	case 0:
		r.Key, r.RangeEnd = []byte("k/"), []byte("k0")
	case 1:
		r.Key, r.RangeEnd = []byte("a"), []byte{0}
	}
	if rng.IntN(4) == 0 {
		r.Limit = 1 + rng.Int64N(3)
	}
	switch rng.IntN(10) {
	case 0:
		r.CountOnly = true
	case 1:
		r.KeysOnly = true
	case 2:
		r.SortTarget, r.SortOrder = pb.RangeRequest_MOD, pb.RangeRequest_DESCEND
	case 3:
		r.SortTarget = pb.RangeRequest_VERSION
	}
	if rng.IntN(6) == 0 {
		r.Revision = 1 + rng.Int64N(s.rev+2) // sometimes compacted or future
	}
	return r
}

// setHeaders stamps h on every header of out, as a server does.
func setHeaders(out *Output, h int64) {
	switch {
	case out.KV != nil:
		setResponseHeaders(out.KV, h)
	case out.Grant != nil:
		out.Grant.Header = hdr(h)
	case out.Revoke != nil:
		out.Revoke.Header = hdr(h)
	case out.Compact != nil:
		out.Compact.Header = hdr(h)
	}
}

func setResponseHeaders(r *pb.ResponseOp, h int64) {
	switch tv := r.GetResponse().(type) {
	case *pb.ResponseOp_ResponseRange:
		tv.ResponseRange.Header = hdr(h)
	case *pb.ResponseOp_ResponsePut:
		tv.ResponsePut.Header = hdr(h)
	case *pb.ResponseOp_ResponseDeleteRange:
		tv.ResponseDeleteRange.Header = hdr(h)
	case *pb.ResponseOp_ResponseTxn:
		tv.ResponseTxn.Header = hdr(h)
		for _, sub := range tv.ResponseTxn.Responses {
			setResponseHeaders(sub, h)
		}
	}
}

func TestRandomHistories(t *testing.T) {
	for seed := range uint64(10) {
		ops := genHistory(seed, 400)
		if res, _ := Check(ops, time.Minute); res != porcupine.Ok {
			t.Errorf("seed %d: Check = %s, want Ok", seed, res)
		}
		if err := CheckRevisionOrder(ops); err != nil {
			t.Errorf("seed %d: CheckRevisionOrder: %v", seed, err)
		}
	}
}

// TestRandomHistoriesMutated corrupts one answer in a valid history and
// expects the check to notice: it proves the random tests are not vacuous.
func TestRandomHistoriesMutated(t *testing.T) {
	mutations := []struct {
		name   string
		mutate func(out *Output) bool
	}{
		{"range value", func(out *Output) bool {
			r := out.KV.GetResponseRange()
			if r == nil || len(r.Kvs) == 0 || r.Kvs[0].Value == nil {
				return false
			}
			r.Kvs[0].Value = []byte("bogus")
			return true
		}},
		{"range count", func(out *Output) bool {
			r := out.KV.GetResponseRange()
			if r == nil {
				return false
			}
			r.Count++
			return true
		}},
		{"txn branch", func(out *Output) bool {
			r := out.KV.GetResponseTxn()
			if r == nil {
				return false
			}
			r.Succeeded = !r.Succeeded
			return true
		}},
		{"put prev_kv version", func(out *Output) bool {
			r := out.KV.GetResponsePut()
			if r == nil || r.PrevKv == nil {
				return false
			}
			r.PrevKv.Version++
			return true
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			mutated := 0
			for seed := range uint64(5) {
				ops := genHistory(seed, 200)
				rng := rand.New(rand.NewPCG(seed, 1))
				for _, i := range rng.Perm(len(ops)) {
					out, ok := ops[i].Output.(Output)
					if !ok || out.KV == nil {
						continue
					}
					out.KV = proto.Clone(out.KV).(*pb.ResponseOp)
					if !m.mutate(&out) {
						continue
					}
					ops[i].Output = out
					mutated++
					if res, _ := Check(ops, time.Minute); res != porcupine.Illegal {
						t.Errorf("seed %d: op %d mutated (%s): Check = %s, want Illegal", seed, i, describeOp(ops[i].Input.(Input), out), res)
					}
					if err := CheckRevisionOrder(ops); err == nil {
						t.Errorf("seed %d: op %d mutated (%s): CheckRevisionOrder passed", seed, i, describeOp(ops[i].Input.(Input), out))
					}
					break
				}
			}
			if mutated == 0 {
				t.Fatal("no operation to mutate")
			}
		})
	}
}

// BenchmarkCheck2000 checks a valid random history of 2,000 operations.
func BenchmarkCheck2000(b *testing.B) {
	ops := genHistory(1, 2000)
	for b.Loop() {
		if res, _ := Check(ops, 0); res != porcupine.Ok {
			b.Fatalf("Check = %s, want Ok", res)
		}
	}
}
