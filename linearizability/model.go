package linearizability

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// state is the model's view of the store. It is immutable: steps build a
// new state that shares what did not change.
type state struct {
	rev, compact int64
	kvs          []*mvccpb.KeyValue // alive keys, sorted; entries never mutated
	leases       []int64            // live lease IDs, sorted
	hist         *record            // applied writes, newest first
	kvSum        uint64             // xor of entry hashes, kept incrementally
}

// record is one applied write revision: enough to undo it, so reads at an
// older revision can be answered from the current keys.
type record struct {
	rev     int64
	changes []change // one per key, before the revision and after it
	prev    *record
	sum     uint64 // digest of this record and every older one
}

type change struct {
	key           string
	before, after *mvccpb.KeyValue
}

// Model returns the porcupine model of Axon's (and etcd's) KV, lease and
// compaction API. It does not partition: ranges and txns span keys.
func Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return &state{} },
		Step: func(st, in, out any) (bool, any) {
			return step(st.(*state), in.(Input), out.(Output))
		},
		Equal:             func(a, b any) bool { return a.(*state).equal(b.(*state)) },
		Hash:              func(st any) uint64 { return st.(*state).hash() },
		DescribeOperation: func(in, out any) string { return describeOp(in.(Input), out.(Output)) },
		DescribeState:     func(st any) string { return st.(*state).describe() },
		DescribeOperationMetadata: func(m any) string {
			if c, ok := m.(int); ok {
				return fmt.Sprintf("client %d", c)
			}
			return ""
		},
	}
}

// Check checks a history (Recorder.Operations) for linearizability. A
// timeout of 0 means none.
func Check(history []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model(), history, timeout)
}

// Visualize writes porcupine's HTML visualisation of a checked history.
func Visualize(info porcupine.LinearizationInfo, path string) error {
	return porcupine.VisualizePath(Model(), info, path)
}

func step(s *state, in Input, out Output) (bool, *state) {
	if out.unknown {
		// It may have applied; if it did not, porcupine can place it
		// last, where applying it changes nothing anyone saw.
		x := newExec(s, s.rev+1)
		if _, kind := x.run(in, nil); kind != errNone || x.ownRevisionRead() {
			return true, s
		}
		if !x.wrote {
			x.rev = s.rev // no key changed: no revision to claim
		}
		return true, x.commit()
	}
	if out.Err != "" {
		kind := classify(out.Err)
		if kind == errOther {
			return true, s
		}
		x := newExec(s, s.rev)
		_, got := x.run(in, nil)
		return got == kind, s
	}
	h := out.Revision()
	if h < s.rev {
		return false, s
	}
	x := newExec(s, h)
	exp, kind := x.run(in, &out)
	if kind != errNone || (x.wrote && h == s.rev) || x.ownRevisionRead() || !x.sameOutput(exp, out) {
		return false, s
	}
	return true, x.commit()
}

// ownRevisionRead reports whether a txn that wrote read at its own
// revision: etcd checks a txn's ranges against the revision before it,
// so such a txn fails ErrFutureRev.
func (x *exec) ownRevisionRead() bool { return x.wrote && x.readAt >= x.rev }

const errNone errKind = -1

// exec runs one operation against a state, stamping writes with rev.
type exec struct {
	s       *state
	rev     int64
	kvs     []*mvccpb.KeyValue
	copied  bool
	wrote   bool
	changes []change
	leases  []int64
	compact int64
	ranges  map[*pb.RangeResponse]rangeInfo // only for non-key sorts
	// readAt is the highest revision a range of the operation named.
	readAt int64
}

type rangeInfo struct {
	req  *pb.RangeRequest
	full []*mvccpb.KeyValue // sorted, filtered and shaped, before the limit
}

func newExec(s *state, rev int64) *exec {
	return &exec{s: s, rev: rev, kvs: s.kvs, leases: s.leases, compact: s.compact}
}

// run evaluates in; out is consulted only for a granted lease ID.
func (x *exec) run(in Input, out *Output) (Output, errKind) {
	switch {
	case in.KV != nil:
		if k := invalid(in.KV); k != errNone {
			return Output{}, k
		}
		if k := x.precheck(in.KV); k != errNone {
			return Output{}, k
		}
		r, k := x.request(in.KV)
		return Output{KV: r}, k
	case in.Grant != nil:
		return x.grant(in.Grant, out)
	case in.Revoke != nil:
		return x.revoke(in.Revoke.ID)
	case in.Compact != nil:
		rev := in.Compact.Revision
		switch {
		case rev <= x.compact:
			return Output{}, errCompacted
		case rev > x.rev:
			return Output{}, errFutureRev
		}
		x.compact = rev
		return Output{Compact: &pb.CompactionResponse{}}, errNone
	}
	return Output{}, errOther
}

func (x *exec) commit() *state {
	n := &state{rev: x.rev, compact: x.compact, kvs: x.kvs, leases: x.leases, hist: x.s.hist, kvSum: x.s.kvSum}
	if x.wrote {
		r := &record{rev: x.rev, changes: x.changes, prev: x.s.hist}
		sum := mixInt(offset, x.rev)
		if r.prev != nil {
			sum = mixInt(sum, int64(r.prev.sum))
		}
		for _, c := range x.changes {
			ch := kvHash(c.before) ^ kvHash(c.after)
			n.kvSum ^= ch
			sum = mixInt(mixBytes(sum, []byte(c.key)), int64(ch))
		}
		r.sum = sum
		n.hist = r
	}
	return n
}

func find(kvs []*mvccpb.KeyValue, key []byte) (int, bool) {
	return slices.BinarySearchFunc(kvs, key, func(kv *mvccpb.KeyValue, k []byte) int { return bytes.Compare(kv.Key, k) })
}

func (x *exec) get(key []byte) *mvccpb.KeyValue {
	if i, ok := find(x.kvs, key); ok {
		return x.kvs[i]
	}
	return nil
}

// set writes key (kv nil deletes it) in the working copy and notes the
// change, keeping the value from before the operation.
func (x *exec) set(key []byte, kv *mvccpb.KeyValue) {
	if !x.copied {
		x.kvs, x.copied = slices.Clone(x.kvs), true
	}
	i, found := find(x.kvs, key)
	var before *mvccpb.KeyValue
	switch {
	case found && kv == nil:
		before = x.kvs[i]
		x.kvs = slices.Delete(x.kvs, i, i+1)
	case found:
		before = x.kvs[i]
		x.kvs[i] = kv
	case kv != nil:
		x.kvs = slices.Insert(x.kvs, i, kv)
	}
	x.wrote = true
	for j := range x.changes {
		if x.changes[j].key == string(key) {
			x.changes[j].after = kv
			return
		}
	}
	x.changes = append(x.changes, change{key: string(key), before: before, after: kv})
}

// alive returns the keys in etcd's [key, end) from kvs: end empty means
// key alone, "\x00" means every key from key on.
func alive(kvs []*mvccpb.KeyValue, key, end []byte) []*mvccpb.KeyValue {
	if len(end) == 0 {
		if i, ok := find(kvs, key); ok {
			return kvs[i : i+1]
		}
		return nil
	}
	lo, _ := find(kvs, key)
	if len(end) == 1 && end[0] == 0 {
		return kvs[lo:]
	}
	hi, _ := find(kvs, end)
	if hi < lo {
		return nil
	}
	return kvs[lo:hi]
}

// at returns the keys alive at revision rev, undoing newer writes.
func (s *state) at(rev int64) []*mvccpb.KeyValue {
	if s.hist == nil || s.hist.rev <= rev {
		return s.kvs
	}
	kvs := slices.Clone(s.kvs)
	for r := s.hist; r != nil && r.rev > rev; r = r.prev {
		for _, c := range r.changes {
			i, found := find(kvs, []byte(c.key))
			switch {
			case found && c.before == nil:
				kvs = slices.Delete(kvs, i, i+1)
			case found:
				kvs[i] = c.before
			case c.before != nil:
				kvs = slices.Insert(kvs, i, c.before)
			}
		}
	}
	return kvs
}

func (x *exec) leaseLive(id int64) bool {
	_, ok := slices.BinarySearch(x.leases, id)
	return ok
}

// precheck fails a request the way etcd does before running it: puts on
// the branch taken must name a live lease and, with ignore_value or
// ignore_lease, an existing key.
func (x *exec) precheck(op *pb.RequestOp) errKind {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestPut:
		p := tv.RequestPut
		if p.Lease != 0 && !p.IgnoreLease && !x.leaseLive(p.Lease) {
			return errLeaseNotFound
		}
		if (p.IgnoreValue || p.IgnoreLease) && x.get(p.Key) == nil {
			return errKeyNotFound
		}
	case *pb.RequestOp_RequestTxn:
		ops := tv.RequestTxn.Success
		if !x.compares(tv.RequestTxn) {
			ops = tv.RequestTxn.Failure
		}
		for _, o := range ops {
			if k := x.precheck(o); k != errNone {
				return k
			}
		}
	}
	return errNone
}

func (x *exec) request(op *pb.RequestOp) (*pb.ResponseOp, errKind) {
	switch tv := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		r, k := x.rangeOp(tv.RequestRange)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: r}}, k
	case *pb.RequestOp_RequestPut:
		r := x.put(tv.RequestPut)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: r}}, errNone
	case *pb.RequestOp_RequestDeleteRange:
		r := x.deleteRange(tv.RequestDeleteRange)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: r}}, errNone
	case *pb.RequestOp_RequestTxn:
		path := x.comparePath(tv.RequestTxn, nil)
		r, k := x.txn(tv.RequestTxn, &path)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: r}}, k
	}
	return nil, errOther
}

func (x *exec) rangeOp(r *pb.RangeRequest) (*pb.RangeResponse, errKind) {
	src := x.kvs
	if r.Revision > 0 {
		switch {
		case r.Revision < x.compact:
			return nil, errCompacted
		case r.Revision > x.rev:
			return nil, errFutureRev
		}
		// Reads the store as of the revision, without this txn's writes.
		src = x.s.at(r.Revision)
		x.readAt = max(x.readAt, r.Revision)
	}
	return x.shape(r, alive(src, r.Key, r.RangeEnd)), errNone
}

// shape applies etcd's count, filters, sort, limit and keys_only. Count
// is the number of keys in the range, before filters and limit.
func (x *exec) shape(r *pb.RangeRequest, kvs []*mvccpb.KeyValue) *pb.RangeResponse {
	resp := &pb.RangeResponse{Count: int64(len(kvs))}
	if r.CountOnly {
		return resp
	}
	kvs = slices.DeleteFunc(slices.Clone(kvs), func(kv *mvccpb.KeyValue) bool {
		return (r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision) ||
			(r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision) ||
			(r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision) ||
			(r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision)
	})
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order != pb.RangeRequest_NONE {
		slices.SortStableFunc(kvs, func(a, b *mvccpb.KeyValue) int {
			c := compareTarget(r.SortTarget, a, b)
			if order == pb.RangeRequest_DESCEND {
				c = -c
			}
			return c
		})
	}
	if r.KeysOnly {
		for i, kv := range kvs {
			kvs[i] = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version} // etcd drops the lease too
		}
	}
	full := kvs
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs, resp.More = kvs[:r.Limit], true
	}
	resp.Kvs = kvs
	if r.SortTarget != pb.RangeRequest_KEY {
		if x.ranges == nil {
			x.ranges = map[*pb.RangeResponse]rangeInfo{}
		}
		x.ranges[resp] = rangeInfo{req: r, full: full}
	}
	return resp
}

func compareTarget(t pb.RangeRequest_SortTarget, a, b *mvccpb.KeyValue) int {
	switch t {
	case pb.RangeRequest_VERSION:
		return cmpInt(a.Version, b.Version)
	case pb.RangeRequest_CREATE:
		return cmpInt(a.CreateRevision, b.CreateRevision)
	case pb.RangeRequest_MOD:
		return cmpInt(a.ModRevision, b.ModRevision)
	case pb.RangeRequest_VALUE:
		return bytes.Compare(a.Value, b.Value)
	}
	return bytes.Compare(a.Key, b.Key)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (x *exec) put(p *pb.PutRequest) *pb.PutResponse {
	prev := x.get(p.Key)
	kv := &mvccpb.KeyValue{Key: bytes.Clone(p.Key), Value: p.Value, CreateRevision: x.rev, ModRevision: x.rev, Version: 1, Lease: p.Lease}
	if prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
		if p.IgnoreValue {
			kv.Value = prev.Value
		}
		if p.IgnoreLease {
			kv.Lease = prev.Lease
		}
	}
	x.set(p.Key, kv)
	resp := &pb.PutResponse{}
	if p.PrevKv {
		resp.PrevKv = prev
	}
	return resp
}

func (x *exec) deleteRange(d *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	resp := &pb.DeleteRangeResponse{}
	for _, kv := range slices.Clone(alive(x.kvs, d.Key, d.RangeEnd)) {
		x.set(kv.Key, nil)
		resp.Deleted++
		if d.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, kv)
		}
	}
	return resp
}

// comparePath evaluates the compares of t and of the nested txns on the
// branch taken, all before any operation runs, as etcd does.
func (x *exec) comparePath(t *pb.TxnRequest, path []bool) []bool {
	ok := x.compares(t)
	path = append(path, ok)
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	for _, op := range ops {
		if nt := op.GetRequestTxn(); nt != nil {
			path = x.comparePath(nt, path)
		}
	}
	return path
}

func (x *exec) compares(t *pb.TxnRequest) bool {
	for _, c := range t.Compare {
		if !x.compare(c) {
			return false
		}
	}
	return true
}

func (x *exec) compare(c *pb.Compare) bool {
	kvs := alive(x.kvs, c.Key, c.RangeEnd)
	if len(kvs) == 0 {
		// A missing key has zero revisions, version and lease, and no value.
		return c.Target != pb.Compare_VALUE && compareKV(c, &mvccpb.KeyValue{})
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var res int
	switch c.Target {
	case pb.Compare_VALUE:
		res = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		res = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		res = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		res = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		res = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return res == 0
	case pb.Compare_NOT_EQUAL:
		return res != 0
	case pb.Compare_GREATER:
		return res > 0
	case pb.Compare_LESS:
		return res < 0
	}
	return false
}

// txn runs the branch path[0] chose; nested txns consume the rest.
func (x *exec) txn(t *pb.TxnRequest, path *[]bool) (*pb.TxnResponse, errKind) {
	ok := (*path)[0]
	*path = (*path)[1:]
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		var (
			r *pb.ResponseOp
			k errKind
		)
		if nt := op.GetRequestTxn(); nt != nil {
			var tr *pb.TxnResponse
			tr, k = x.txn(nt, path)
			r = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}}
		} else {
			r, k = x.request(op)
		}
		if k != errNone {
			return nil, k
		}
		resp.Responses = append(resp.Responses, r)
	}
	return resp, errNone
}

// MaxLeaseTTL is etcd's largest lease TTL in seconds: a grant above it is
// refused before its ID is looked at.
const MaxLeaseTTL = 9_000_000_000

func (x *exec) grant(g *pb.LeaseGrantRequest, out *Output) (Output, errKind) {
	if g.TTL > MaxLeaseTTL {
		return Output{}, errLeaseTTLTooLarge
	}
	if g.ID != 0 && x.leaseLive(g.ID) {
		return Output{}, errLeaseExist
	}
	id := g.ID
	if out != nil && out.Grant != nil {
		if g.ID != 0 && out.Grant.ID != g.ID {
			return Output{}, errOther
		}
		id = out.Grant.ID
	}
	if id == 0 {
		// An unknown grant of a server-chosen ID: nobody can use it.
		return Output{Grant: &pb.LeaseGrantResponse{}}, errNone
	}
	if x.leaseLive(id) {
		return Output{}, errOther
	}
	i, _ := slices.BinarySearch(x.leases, id)
	x.leases = slices.Insert(slices.Clone(x.leases), i, id)
	return Output{Grant: &pb.LeaseGrantResponse{ID: id, TTL: g.TTL}}, errNone
}

// revoke deletes the lease and, in the same revision, its keys.
func (x *exec) revoke(id int64) (Output, errKind) {
	i, ok := slices.BinarySearch(x.leases, id)
	if !ok {
		return Output{}, errLeaseNotFound
	}
	x.leases = slices.Delete(slices.Clone(x.leases), i, i+1)
	for _, kv := range slices.Clone(x.kvs) {
		if kv.Lease == id {
			x.set(kv.Key, nil)
		}
	}
	return Output{Revoke: &pb.LeaseRevokeResponse{}}, errNone
}

// sameOutput compares the expected outcome with the observed one,
// ignoring headers (the step checked the top revision) and lease TTLs
// (servers may raise them to a minimum).
func (x *exec) sameOutput(exp, got Output) bool {
	switch {
	case exp.KV != nil:
		return got.KV != nil && x.sameResponse(exp.KV, got.KV)
	case exp.Grant != nil:
		return got.Grant != nil && (exp.Grant.ID == 0 || got.Grant.ID == exp.Grant.ID)
	case exp.Revoke != nil:
		return got.Revoke != nil
	case exp.Compact != nil:
		return got.Compact != nil
	}
	return false
}

func (x *exec) sameResponse(exp, got *pb.ResponseOp) bool {
	switch e := exp.GetResponse().(type) {
	case *pb.ResponseOp_ResponseRange:
		g := got.GetResponseRange()
		return g != nil && x.sameRange(e.ResponseRange, g)
	case *pb.ResponseOp_ResponsePut:
		g := got.GetResponsePut()
		return g != nil && kvEqual(e.ResponsePut.PrevKv, g.PrevKv)
	case *pb.ResponseOp_ResponseDeleteRange:
		g := got.GetResponseDeleteRange()
		return g != nil && g.Deleted == e.ResponseDeleteRange.Deleted && kvsEqual(e.ResponseDeleteRange.PrevKvs, g.PrevKvs)
	case *pb.ResponseOp_ResponseTxn:
		g := got.GetResponseTxn()
		et := e.ResponseTxn
		if g == nil || g.Succeeded != et.Succeeded || len(g.Responses) != len(et.Responses) {
			return false
		}
		for i := range et.Responses {
			if !x.sameResponse(et.Responses[i], g.Responses[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// sameRange compares range results. Under a non-key sort, keys that tie
// on the target may come in any order (and a limit may cut a tie
// anywhere), so only the target sequence is fixed.
func (x *exec) sameRange(e, g *pb.RangeResponse) bool {
	if e.Count != g.Count || e.More != g.More || len(e.Kvs) != len(g.Kvs) {
		return false
	}
	info, ok := x.ranges[e]
	if !ok {
		return kvsEqual(e.Kvs, g.Kvs)
	}
	byKey := make(map[string]*mvccpb.KeyValue, len(info.full))
	for _, kv := range info.full {
		byKey[string(kv.Key)] = kv
	}
	for i, kv := range g.Kvs {
		want, ok := byKey[string(kv.Key)]
		if !ok || !kvEqual(want, kv) || compareTarget(info.req.SortTarget, kv, e.Kvs[i]) != 0 {
			return false
		}
		delete(byKey, string(kv.Key)) // each key once
	}
	return true
}

func kvEqual(a, b *mvccpb.KeyValue) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || (bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) &&
		a.CreateRevision == b.CreateRevision && a.ModRevision == b.ModRevision &&
		a.Version == b.Version && a.Lease == b.Lease)
}

func kvsEqual(a, b []*mvccpb.KeyValue) bool {
	return slices.EqualFunc(a, b, kvEqual)
}

func (s *state) equal(o *state) bool {
	if s == o {
		return true
	}
	if s.rev != o.rev || s.compact != o.compact || s.kvSum != o.kvSum ||
		!slices.Equal(s.leases, o.leases) || !kvsEqual(s.kvs, o.kvs) {
		return false
	}
	// Reads at a past revision see the history: it must match too.
	a, b := s.hist, o.hist
	for a != b {
		if a == nil || b == nil || a.rev != b.rev || a.sum != b.sum ||
			!slices.EqualFunc(a.changes, b.changes, func(p, q change) bool {
				return p.key == q.key && kvEqual(p.before, q.before) && kvEqual(p.after, q.after)
			}) {
			return false
		}
		a, b = a.prev, b.prev
	}
	return true
}

func (s *state) hash() uint64 {
	h := mixInt(mixInt(offset, s.rev), s.compact)
	h = mixInt(h, int64(s.kvSum))
	for _, id := range s.leases {
		h = mixInt(h, id)
	}
	if s.hist != nil {
		h = mixInt(h, int64(s.hist.sum))
	}
	return h
}

// FNV-1a: hashes only pick candidates for Equal, so collisions cost time,
// never correctness.
const (
	offset = 14695981039346656037
	prime  = 1099511628211
)

func mixBytes(h uint64, b []byte) uint64 {
	h = mixInt(h, int64(len(b)))
	for _, c := range b {
		h = (h ^ uint64(c)) * prime
	}
	return h
}

func mixInt(h uint64, v int64) uint64 {
	for i := 0; i < 64; i += 8 {
		h = (h ^ uint64(byte(v>>i))) * prime
	}
	return h
}

func kvHash(kv *mvccpb.KeyValue) uint64 {
	if kv == nil {
		return 0
	}
	h := mixBytes(mixBytes(offset, kv.Key), kv.Value)
	for _, v := range []int64{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease} {
		h = mixInt(h, v)
	}
	return h
}
