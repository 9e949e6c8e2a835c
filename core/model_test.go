package core_test

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

// model is a plain sequential etcd: requests applied one at a time in
// revision order. The model test compares Axon's concurrent core with it.
type model struct {
	rev       int64
	compacted int64
	kvs       map[string]*mvccpb.KeyValue
	states    map[int64]map[string]*mvccpb.KeyValue // state after each revision with events
	events    []core.Event
}

func newModel() *model {
	return &model{kvs: map[string]*mvccpb.KeyValue{}, states: map[int64]map[string]*mvccpb.KeyValue{0: {}}}
}

// stateAt returns the state as of revision rev.
func (m *model) stateAt(rev int64) map[string]*mvccpb.KeyValue {
	best := int64(-1)
	for r := range m.states {
		if r <= rev && r > best {
			best = r
		}
	}
	return m.states[best]
}

// apply runs a write request at revision rev.
func (m *model) apply(op *pb.RequestOp, rev int64) (*pb.ResponseOp, error) {
	e := &modelTxn{rev: rev, kvs: maps.Clone(m.kvs)}
	resp, err := e.request(op, nil)
	if err != nil {
		return nil, err
	}
	m.rev = rev
	if len(e.events) > 0 {
		m.kvs = e.kvs
		m.states[rev] = maps.Clone(e.kvs)
		m.events = append(m.events, e.events...)
	}
	return resp, nil
}

// revoke deletes every key attached to lease id at revision rev.
func (m *model) revoke(id, rev int64) {
	e := &modelTxn{rev: rev, kvs: maps.Clone(m.kvs)}
	for _, kv := range sortedIn(m.kvs, []byte{0}, []byte{0}) {
		if kv.Lease == id {
			delete(e.kvs, string(kv.Key))
			e.events = append(e.events, core.Event{Rev: rev, Event: &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: kv.Key, ModRevision: rev}, PrevKv: kv}})
		}
	}
	m.rev = rev
	if len(e.events) > 0 {
		m.kvs = e.kvs
		m.states[rev] = maps.Clone(e.kvs)
		m.events = append(m.events, e.events...)
	}
}

type modelTxn struct {
	rev    int64
	kvs    map[string]*mvccpb.KeyValue
	events []core.Event
}

func inRange(k, key, end []byte) bool {
	if len(end) == 0 {
		return bytes.Equal(k, key)
	}
	if len(end) == 1 && end[0] == 0 {
		return bytes.Compare(k, key) >= 0
	}
	return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
}

func sortedIn(kvs map[string]*mvccpb.KeyValue, key, end []byte) []*mvccpb.KeyValue {
	var out []*mvccpb.KeyValue
	for _, kv := range kvs {
		if inRange(kv.Key, key, end) {
			out = append(out, kv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	return out
}

func (e *modelTxn) hdr() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: e.rev} }

func (e *modelTxn) request(op *pb.RequestOp, pre map[string]*mvccpb.KeyValue) (*pb.ResponseOp, error) {
	switch tv := op.Request.(type) {
	case *pb.RequestOp_RequestPut:
		p := tv.RequestPut
		prev := e.kvs[string(p.Key)]
		if (p.IgnoreValue || p.IgnoreLease) && prev == nil {
			return nil, core.ErrKeyNotFound
		}
		kv := &mvccpb.KeyValue{Key: p.Key, Value: p.Value, CreateRevision: e.rev, ModRevision: e.rev, Version: 1, Lease: p.Lease}
		if prev != nil {
			kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
			if p.IgnoreValue {
				kv.Value = prev.Value
			}
			if p.IgnoreLease {
				kv.Lease = prev.Lease
			}
		}
		e.kvs[string(p.Key)] = kv
		e.events = append(e.events, core.Event{Rev: e.rev, Event: &mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev}})
		r := &pb.PutResponse{Header: e.hdr()}
		if p.PrevKv {
			r.PrevKv = prev
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: r}}, nil
	case *pb.RequestOp_RequestDeleteRange:
		d := tv.RequestDeleteRange
		r := &pb.DeleteRangeResponse{Header: e.hdr()}
		for _, kv := range sortedIn(e.kvs, d.Key, d.RangeEnd) {
			delete(e.kvs, string(kv.Key))
			e.events = append(e.events, core.Event{Rev: e.rev, Event: &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: kv.Key, ModRevision: e.rev}, PrevKv: kv}})
			r.Deleted++
			if d.PrevKv {
				r.PrevKvs = append(r.PrevKvs, kv)
			}
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: r}}, nil
	case *pb.RequestOp_RequestRange:
		r := modelRange(tv.RequestRange, sortedIn(e.kvs, tv.RequestRange.Key, tv.RequestRange.RangeEnd))
		r.Header = e.hdr()
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: r}}, nil
	case *pb.RequestOp_RequestTxn:
		if pre == nil {
			pre = maps.Clone(e.kvs) // nested compares see the state before the txn
		}
		t := tv.RequestTxn
		ok := true
		for _, c := range t.Compare {
			if !modelCompare(c, sortedIn(pre, c.Key, c.RangeEnd)) {
				ok = false
				break
			}
		}
		ops := t.Success
		if !ok {
			ops = t.Failure
		}
		r := &pb.TxnResponse{Header: e.hdr(), Succeeded: ok, Responses: []*pb.ResponseOp{}}
		for _, o := range ops {
			sub, err := e.request(o, pre)
			if err != nil {
				return nil, err
			}
			r.Responses = append(r.Responses, sub)
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: r}}, nil
	}
	return nil, errors.New("model: unknown request")
}

func modelCompare(c *pb.Compare, kvs []*mvccpb.KeyValue) bool {
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		kvs = []*mvccpb.KeyValue{{}}
	}
	for _, kv := range kvs {
		var a, b int64
		switch c.Target {
		case pb.Compare_VALUE:
			a, b = int64(bytes.Compare(kv.Value, c.GetValue())), 0
		case pb.Compare_VERSION:
			a, b = kv.Version, c.GetVersion()
		case pb.Compare_MOD:
			a, b = kv.ModRevision, c.GetModRevision()
		case pb.Compare_CREATE:
			a, b = kv.CreateRevision, c.GetCreateRevision()
		case pb.Compare_LEASE:
			a, b = kv.Lease, c.GetLease()
		}
		var good bool
		switch c.Result {
		case pb.Compare_EQUAL:
			good = a == b
		case pb.Compare_NOT_EQUAL:
			good = a != b
		case pb.Compare_GREATER:
			good = a > b
		case pb.Compare_LESS:
			good = a < b
		}
		if !good {
			return false
		}
	}
	return true
}

// modelRange shapes a range result the way etcd documents it.
func modelRange(req *pb.RangeRequest, kvs []*mvccpb.KeyValue) *pb.RangeResponse {
	r := &pb.RangeResponse{Count: int64(len(kvs))}
	if req.CountOnly {
		return r
	}
	if req.SortOrder == pb.RangeRequest_DESCEND {
		kvs = slices.Clone(kvs)
		slices.Reverse(kvs)
	}
	if req.Limit > 0 && int64(len(kvs)) > req.Limit {
		kvs, r.More = kvs[:req.Limit], true
	}
	for _, kv := range kvs {
		if req.KeysOnly {
			kv = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version} // etcd drops the lease too
		}
		r.Kvs = append(r.Kvs, kv)
	}
	return r
}
