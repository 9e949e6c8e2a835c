package core_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/linearizability"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// make test runs at least 1,000 cases of each rapid property unless
	// -rapid.checks says otherwise.
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set && !testing.Short() {
		_ = flag.Set("rapid.checks", "1000")
	}
	os.Exit(m.Run())
}

var testKeys = []string{"a", "b", "c", "d", "e"}

// flight is a work item between its engine transaction's begin and commit.
type flight struct {
	w   *core.Work
	txn storage.Txn
	eff *core.Effects
}

// harness drives a core.Node over memkv with rapid choosing every
// interleaving and fault, and checks it against the sequential model.
type harness struct {
	t        *rapid.T
	ctx      context.Context
	eng      *memkv.Engine
	node     *core.Node
	model    *linearizability.Sequential
	now      time.Duration
	queue    []*core.Work // handed out, not begun
	flying   []*flight    // begun and evaluated, not committed
	reqs     map[core.RequestID]*pb.RequestOp
	answers  map[core.RequestID]int
	compacts map[core.RequestID]int64
	leaseOps map[core.RequestID]*core.LeaseOp
	granted  []int64        // leases whose grant was answered
	revoked  map[int64]bool // leases whose revoke was asked for or ran
	gone     map[int64]bool // leases whose revoke committed
	renewals map[core.RequestID]int64
	leaseNow time.Duration
	nextID   core.RequestID
	lastRev  int64
	watches  []*watchLog
}

type watchLog struct {
	w        core.Watch
	events   []*mvccpb.Event
	lastRev  int64
	canceled bool
}

func (h *harness) drain() {
	if err := h.node.Invariants(); err != nil {
		h.t.Fatalf("invariants: %v", err)
	}
	rd := h.node.Ready()
	h.queue = append(h.queue, rd.Work...)
	wasGone := maps.Clone(h.gone)
	for _, r := range rd.Responses {
		if op, ok := h.leaseOps[r.ID]; (ok && op.Revoke || r.ID == 0) && r.Err == nil {
			h.gone[r.Lease] = true
		}
	}
	for _, r := range rd.Responses {
		if lease, ok := h.renewals[r.ID]; ok {
			h.renewed(r, lease, wasGone)
			continue
		}
		if r.ID != 0 {
			h.answers[r.ID]++
		}
		if h.answers[r.ID] > 1 {
			h.t.Fatalf("request %d answered twice", r.ID)
		}
		req := h.reqs[r.ID]
		if op, ok := h.leaseOps[r.ID]; ok || r.ID == 0 {
			h.leaseResponse(r, op)
			continue
		}
		if rev, ok := h.compacts[r.ID]; ok {
			if r.Err == nil {
				h.model.Apply(linearizability.Input{Compact: &pb.CompactionRequest{Revision: rev}}, r.Rev)
			}
			continue
		}
		if r.Err == core.ErrRetriesExhausted {
			continue
		}
		if r.Rev == 0 && r.Err == core.ErrLeaseNotFound && h.usesRevokedLease(req) {
			continue
		}
		h.released(r)
		want := h.model.Apply(linearizability.Input{KV: req}, r.Rev)
		if want.Wrote != r.Wrote {
			h.t.Fatalf("req%d %s at r%d: wrote=%v, model says %v", r.ID, core.DescribeRequest(req), r.Rev, r.Wrote, want.Wrote)
		}
		if !want.SameError(r.Err) {
			h.t.Fatalf("req%d %s at r%d: err %v, model says %+v", r.ID, core.DescribeRequest(req), r.Rev, r.Err, want)
		}
		if r.Err == nil && !want.Same(linearizability.Output{KV: r.Response}) {
			h.t.Fatalf("req%d %s at r%d:\n got %v\nwant %v", r.ID, core.DescribeRequest(req), r.Rev, r.Response, want.Out.KV)
		}
	}
	for _, wr := range rd.WatchResponses {
		// As a driver does before it sends the response.
		if err := driver.ReadPrev(h.ctx, h.eng, &wr); err != nil {
			h.t.Fatalf("watch%d: reading previous values: %v", wr.ID, err)
		}
		for _, l := range h.watches {
			if l.w.ID != wr.ID {
				continue
			}
			if l.canceled {
				h.t.Fatalf("watch%d: response after cancel", wr.ID)
			}
			if wr.Canceled {
				l.canceled = true
				continue
			}
			if wr.Revision < l.lastRev {
				h.t.Fatalf("watch%d: revision went back from %d to %d", wr.ID, l.lastRev, wr.Revision)
			}
			l.lastRev = wr.Revision
			l.events = append(l.events, wr.Events...)
		}
	}
	if h.node.Committed() < h.lastRev {
		h.t.Fatalf("response at r%d released with C=%d", h.lastRev, h.node.Committed())
	}
}

func (h *harness) faultFree() { h.eng.SetInjector(memkv.Static(memkv.Fault{})) }

// begin starts the engine transaction of a queued work item and
// evaluates it (catch-up and read-only outcomes finish at once).
func (h *harness) begin(i int) {
	w := h.queue[i]
	h.queue = append(h.queue[:i], h.queue[i+1:]...)
	h.faultFree()
	if w.Kind == core.WorkCatchUp {
		evs, last, err := driver.CatchUp(h.ctx, h.eng, w, 3)
		h.node.Done(w, core.Result{Events: evs, Last: last, Err: err})
		return
	}
	txn, err := h.eng.Begin(h.ctx)
	if err != nil {
		h.t.Fatalf("begin: %v", err)
	}
	eff, err := driver.Apply(txn, w, h.node)
	if err != nil {
		h.t.Fatalf("evaluate %s: %v", core.DescribeWork(w), err)
	}
	if out, done := driver.Settled(eff, nil); done {
		txn.Rollback()
		h.node.Done(w, core.Result{Effects: eff, Outcome: out})
		return
	}
	h.flying = append(h.flying, &flight{w: w, txn: txn, eff: eff})
}

var faultKinds = []memkv.FaultKind{
	memkv.FaultNone, memkv.FaultNone, memkv.FaultNone, memkv.FaultNone,
	memkv.FaultError, memkv.FaultUnavailable,
	memkv.FaultUncertainNotApplied, memkv.FaultUncertainApplied, memkv.FaultUncertainAppliedLater,
}

// commit commits a flying transaction with the given fault.
func (h *harness) commit(i int, f memkv.Fault) {
	fl := h.flying[i]
	h.flying = append(h.flying[:i], h.flying[i+1:]...)
	h.eng.SetInjector(memkv.Static(f))
	err := fl.txn.Commit(h.ctx)
	h.faultFree()
	h.node.Done(fl.w, core.Result{Effects: fl.eff, Outcome: driver.Outcome(err)})
}

func (h *harness) propose(req *pb.RequestOp) {
	h.nextID++
	h.reqs[h.nextID] = req
	h.node.Propose(h.nextID, req)
}

func (h *harness) read(req *pb.RangeRequest) {
	h.faultFree()
	txn, err := h.eng.Begin(h.ctx)
	if err != nil {
		h.t.Fatalf("begin: %v", err)
	}
	defer txn.Rollback()
	c := h.node.Committed()
	rd := storage.NewReader(txn)
	got, err := core.Range(rd, req, c, h.node.Compacted())
	rev := req.Revision
	if rev == 0 {
		rev = c
	}
	switch {
	case rev > c:
		if err != core.ErrFutureRev {
			h.t.Fatalf("range at r%d > C=%d: err %v", rev, c, err)
		}
		return
	case rev < h.model.Compacted():
		if err != core.ErrCompacted {
			h.t.Fatalf("range at r%d < compact %d: err %v", rev, h.model.Compacted(), err)
		}
		return
	case err != nil:
		h.t.Fatalf("range: %v", err)
	}
	want, ok := h.model.Range(req, c)
	if !ok {
		h.t.Fatalf("range %q..%q at r%d (C=%d): the model refuses it", req.Key, req.RangeEnd, rev, c)
	}
	want.Header = &pb.ResponseHeader{Revision: c}
	if !proto.Equal(got, want) {
		h.t.Fatalf("range %q..%q at r%d (C=%d):\n got %v\nwant %v", req.Key, req.RangeEnd, rev, c, got, want)
	}
	if core.Pageable(req) {
		h.readPages(rd, req, c, got)
	}
}

// readPages reads a pageable range in pages of sizes rapid picks and
// checks that they are the range's answer: key-values in order, and the
// header, count and more on the last page alone.
func (h *harness) readPages(rd core.Reader, req *pb.RangeRequest, c int64, want *pb.RangeResponse) {
	pages, err := core.NewRangePages(rd, req, c, h.node.Compacted())
	if err != nil {
		h.t.Fatalf("range %q..%q in pages: %v", req.Key, req.RangeEnd, err)
	}
	got := &pb.RangeResponse{}
	for {
		page, done, err := pages.Next(rapid.IntRange(1, 3).Draw(h.t, "page"), nil)
		if err != nil {
			h.t.Fatalf("range %q..%q in pages: %v", req.Key, req.RangeEnd, err)
		}
		if !done && (page.Header != nil || page.Count != 0 || page.More || len(page.Kvs) == 0) {
			h.t.Fatalf("range %q..%q: a page before the last is %v", req.Key, req.RangeEnd, page)
		}
		proto.Merge(got, page)
		if done {
			break
		}
	}
	if !proto.Equal(got, want) {
		h.t.Fatalf("range %q..%q in pages:\n got %v\nwant %v", req.Key, req.RangeEnd, got, want)
	}
}

// settle runs every outstanding work item without faults until the node
// is idle, letting delayed transactions land.
func (h *harness) settle() {
	for i := 0; ; i++ {
		if i > 10000 {
			h.t.Fatalf("no progress: %d queued, %d flying, %d in flight", len(h.queue), len(h.flying), h.node.InFlight())
		}
		switch {
		case len(h.flying) > 0:
			h.commit(0, memkv.Fault{})
		case len(h.queue) > 0:
			h.begin(0)
		case h.eng.Pending() > 0:
			h.now += time.Second
			h.eng.SetNow(h.now)
		default:
			h.drain()
			if len(h.queue) == 0 {
				return
			}
		}
		h.drain()
	}
}

func genKey(t *rapid.T, label string) []byte {
	return []byte(rapid.SampledFrom(testKeys).Draw(t, label))
}

func genValue(t *rapid.T) []byte {
	return []byte(fmt.Sprintf("v%d", rapid.IntRange(0, 9).Draw(t, "value")))
}

// genSpan draws a single key, a range or a prefix-like open range.
func genSpan(t *rapid.T) (key, end []byte) {
	key = genKey(t, "key")
	switch rapid.IntRange(0, 3).Draw(t, "span") {
	case 0:
		return key, []byte{0}
	case 1:
		return key, genKey(t, "end")
	}
	return key, nil
}

func genRequest(t *rapid.T, h *harness, depth int) *pb.RequestOp {
	switch rapid.IntRange(0, 4).Draw(t, "kind") {
	case 0, 1:
		p := &pb.PutRequest{Key: genKey(t, "key"), Value: genValue(t), PrevKv: rapid.Bool().Draw(t, "prevkv")}
		if len(h.granted) > 0 && rapid.IntRange(0, 2).Draw(t, "leased") == 0 {
			p.Lease = rapid.SampledFrom(h.granted).Draw(t, "lease")
		}
		if rapid.IntRange(0, 9).Draw(t, "ignore") == 0 {
			p.Value, p.IgnoreValue = nil, true
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}}
	case 2:
		key, end := genSpan(t)
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key, RangeEnd: end, PrevKv: rapid.Bool().Draw(t, "prevkv")}}}
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: genTxn(t, depth)}}
}

// genTxn draws Kubernetes-shaped txns (compare a key's mod revision or
// version, put it, else get it) and general ones.
func genTxn(t *rapid.T, depth int) *pb.TxnRequest {
	key := genKey(t, "txnkey")
	var cmp *pb.Compare
	switch rapid.IntRange(0, 3).Draw(t, "cmp") {
	case 0:
		cmp = &pb.Compare{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: int64(rapid.IntRange(0, 20).Draw(t, "modrev"))}}
	case 1:
		cmp = &pb.Compare{Key: key, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}
	case 2:
		cmp = &pb.Compare{Key: key, Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: genValue(t)}}
	default:
		k, end := genSpan(t)
		cmp = &pb.Compare{Key: k, RangeEnd: end, Target: pb.Compare_CREATE, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: int64(rapid.IntRange(0, 20).Draw(t, "createrev"))}}
	}
	get := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: genValue(t)}}}
	txn := &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{put}, Failure: []*pb.RequestOp{get}}
	if rapid.IntRange(0, 3).Draw(t, "extra") == 0 {
		other := genKey(t, "otherkey")
		if string(other) != string(key) {
			txn.Success = append(txn.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: other, Value: genValue(t)}}})
		}
		k, end := genSpan(t)
		txn.Failure = append(txn.Failure, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: k, RangeEnd: end}}})
	}
	if depth == 0 && rapid.IntRange(0, 5).Draw(t, "nested") == 0 {
		txn.Failure = append(txn.Failure, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: genTxn(t, depth+1)}})
	}
	if core.ValidateTxn(txn, 128) != nil {
		txn.Failure = txn.Failure[:1]
		txn.Success = txn.Success[:1]
	}
	return txn
}

func genRange(t *rapid.T, h *harness) *pb.RangeRequest {
	key, end := genSpan(t)
	req := &pb.RangeRequest{Key: key, RangeEnd: end, Limit: int64(rapid.IntRange(0, 3).Draw(t, "limit"))}
	switch rapid.IntRange(0, 5).Draw(t, "opt") {
	case 0:
		req.KeysOnly = true
	case 1:
		req.CountOnly = true
	case 2:
		req.SortOrder = pb.RangeRequest_DESCEND
	case 3:
		req.Revision = int64(rapid.IntRange(0, int(h.node.Committed())+2).Draw(t, "rev"))
	}
	return req
}

// TestNodeMatchesSequentialModel is the core's main property: with
// several writes in flight, completions in any order, and uncertain
// outcomes applied now, later or never, every response, read and watch
// event equals what a sequential etcd gives when the same writes are
// applied in revision order.
func TestNodeMatchesSequentialModel(t *testing.T) {
	rapid.Check(t, runModel)
}

func runModel(t *rapid.T) {
	h := &harness{
		t: t, ctx: context.Background(), eng: memkv.New(),
		node:  core.NewNode(core.Config{RingSize: rapid.IntRange(1, 8).Draw(t, "ring"), CatchUpBatch: 4}, core.State{}),
		model: linearizability.NewSequential(), reqs: map[core.RequestID]*pb.RequestOp{}, answers: map[core.RequestID]int{}, compacts: map[core.RequestID]int64{}, leaseOps: map[core.RequestID]*core.LeaseOp{}, revoked: map[int64]bool{}, gone: map[int64]bool{}, renewals: map[core.RequestID]int64{},
	}
	steps := rapid.IntRange(20, 150).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		switch rapid.IntRange(0, 10).Draw(t, "action") {
		case 0, 1, 2:
			h.propose(genRequest(t, h, 0))
		case 3, 4:
			if len(h.queue) > 0 {
				h.begin(rapid.IntRange(0, len(h.queue)-1).Draw(t, "which"))
			}
		case 5, 6:
			if len(h.flying) > 0 {
				f := memkv.Fault{Kind: rapid.SampledFrom(faultKinds).Draw(t, "fault"), ApplyAfter: time.Duration(rapid.IntRange(1, 3).Draw(t, "after")) * time.Second}
				h.commit(rapid.IntRange(0, len(h.flying)-1).Draw(t, "which"), f)
			}
		case 7:
			h.now += time.Second
			h.eng.SetNow(h.now)
		case 8:
			h.read(genRange(t, h))
		case 9:
			h.addWatchOrCompact(t)
		case 10:
			h.leaseAction(t)
		}
		h.drain()
	}
	h.settle()
	for id := core.RequestID(1); id <= h.nextID; id++ {
		if h.answers[id] != 1 {
			t.Fatalf("request %d (%s) answered %d times", id, core.DescribeRequest(h.reqs[id]), h.answers[id])
		}
	}
	h.read(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	h.checkWatches()
	h.checkRecordedEvents()
}

// checkRecordedEvents compares the events in the engine's revision
// records above the compact revision (what watchers catch up from) with
// the model's, read in rounds of core's default batch and of a few
// records of each shard.
func (h *harness) checkRecordedEvents() {
	h.faultFree()
	txn, err := h.eng.Begin(h.ctx)
	if err != nil {
		h.t.Fatalf("begin: %v", err)
	}
	defer txn.Rollback()
	from := h.model.Compacted() + 1
	var want []*mvccpb.Event
	for _, ev := range h.model.Events() {
		if ev.Rev >= from {
			want = append(want, ev.Event)
		}
	}
	for _, batch := range []int{0, 1, 2, 5} {
		got, _, err := core.RecordScan{Batch: batch}.ReadEvents(storage.NewReader(txn), from, h.node.Committed(), 0)
		if err != nil {
			h.t.Fatalf("reading events from r%d (batch %d): %v", from, batch, err)
		}
		if len(got) != len(want) {
			h.t.Fatalf("revision records hold %d events from r%d (batch %d), the model %d", len(got), from, batch, len(want))
		}
		for i := range want {
			if !proto.Equal(got[i].Event, want[i]) {
				h.t.Fatalf("recorded event %d (batch %d):\n got %v\nwant %v", i, batch, got[i].Event, want[i])
			}
		}
	}
}

func (h *harness) addWatchOrCompact(t *rapid.T) {
	c := h.node.Committed()
	if rapid.IntRange(0, 3).Draw(t, "compact?") == 0 {
		rev := int64(rapid.IntRange(0, int(c)).Draw(t, "compactrev"))
		h.nextID++
		h.compacts[h.nextID] = rev
		h.node.Compact(h.nextID, rev)
		return
	}
	key, end := genSpan(t)
	w := core.Watch{
		ID: core.WatchID(len(h.watches) + 1), Key: key, End: end,
		StartRev: int64(rapid.IntRange(0, int(c)+2).Draw(t, "start")),
		PrevKV:   rapid.Bool().Draw(t, "prevkv"), NoDelete: rapid.IntRange(0, 4).Draw(t, "nodelete") == 0,
	}
	if err := h.node.AddWatch(w); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if w.StartRev == 0 {
		w.StartRev = c + 1
	}
	h.watches = append(h.watches, &watchLog{w: w})
}

// leaseAction grants, revokes, keeps alive or lets time expire leases.
func (h *harness) leaseAction(t *rapid.T) {
	switch rapid.IntRange(0, 3).Draw(t, "leaseop") {
	case 0:
		h.nextID++
		h.leaseOps[h.nextID] = &core.LeaseOp{TTL: int64(rapid.IntRange(1, 5).Draw(t, "ttl"))}
		h.node.Grant(h.nextID, 0, h.leaseOps[h.nextID].TTL)
	case 1:
		if len(h.granted) == 0 {
			return
		}
		id := rapid.SampledFrom(h.granted).Draw(t, "revoke")
		h.nextID++
		h.leaseOps[h.nextID] = &core.LeaseOp{Revoke: true, ID: id}
		if !h.revoked[id] {
			h.revoked[id] = true
		}
		h.node.Revoke(h.nextID, id)
	case 2:
		if len(h.granted) > 0 {
			h.nextID++
			h.renewals[h.nextID] = rapid.SampledFrom(h.granted).Draw(t, "keepalive")
			h.node.KeepAlive(h.nextID, h.renewals[h.nextID], h.leaseNow)
		}
	default:
		h.leaseNow += time.Duration(rapid.IntRange(1, 3).Draw(t, "leasetime")) * time.Second
		live := map[int64]bool{}
		for _, id := range h.node.Leases() {
			live[id] = true
		}
		h.node.Tick(h.leaseNow)
		for id := range live { // a grant may expire before its answer is out
			if !slices.Contains(h.node.Leases(), id) {
				h.revoked[id] = true // expired
			}
		}
	}
}

func (h *harness) leaseResponse(r core.Response, op *core.LeaseOp) {
	switch {
	case op != nil && !op.Revoke:
		if r.Err != nil {
			h.t.Fatalf("grant: %v", r.Err)
		}
		h.granted = append(h.granted, r.Lease)
		h.model.Grant(r.Lease, op.TTL)
	case op != nil && r.Err == core.ErrLeaseNotFound:
		if !h.revoked[op.ID] {
			h.t.Fatalf("revoke of live lease %d: not found", op.ID)
		}
	case r.Err != nil:
		h.t.Fatalf("revoke of lease %d: %v", r.Lease, r.Err)
	default:
		h.released(r)
		want := h.model.Apply(linearizability.Input{Revoke: &pb.LeaseRevokeRequest{ID: r.Lease}}, r.Rev)
		if want.Wrote != r.Wrote {
			h.t.Fatalf("revoke of lease %d at r%d: wrote=%v, model says %v (%+v)", r.Lease, r.Rev, r.Wrote, want.Wrote, want)
		}
	}
}

// renewed checks a keepalive's answer: it renews a lease whose revoke had
// not committed, and says "not found" only once one has.
func (h *harness) renewed(r core.Response, lease int64, wasGone map[int64]bool) {
	h.answers[r.ID]++
	switch {
	case h.answers[r.ID] > 1:
		h.t.Fatalf("keepalive req%d answered twice", r.ID)
	case r.Err == nil && wasGone[lease]:
		h.t.Fatalf("keepalive req%d renewed lease %d after its revoke committed", r.ID, lease)
	case errors.Is(r.Err, core.ErrLeaseNotFound) && !h.gone[lease]:
		h.t.Fatalf("keepalive req%d: lease %d not found before any revoke of it committed", r.ID, lease)
	case r.Err != nil && !errors.Is(r.Err, core.ErrLeaseNotFound):
		h.t.Fatalf("keepalive req%d: %v", r.ID, r.Err)
	}
}

// released checks a response's place in the release order: a write's
// revision is above every one released before it; an answer that wrote
// nothing is read at the newest revision released, which is exactly the
// model's state when it is applied.
func (h *harness) released(r core.Response) {
	switch {
	case r.Wrote && r.Rev <= h.lastRev:
		h.t.Fatalf("write req%d at r%d released after r%d", r.ID, r.Rev, h.lastRev)
	case !r.Wrote && r.Rev < h.lastRev:
		h.t.Fatalf("answer to req%d at r%d released after r%d", r.ID, r.Rev, h.lastRev)
	}
	h.lastRev = r.Rev
}

func (h *harness) usesRevokedLease(req *pb.RequestOp) bool {
	if p := req.GetRequestPut(); p != nil {
		return p.Lease != 0 && h.revoked[p.Lease]
	}
	t := req.GetRequestTxn()
	for _, op := range append(slices.Clone(t.GetSuccess()), t.GetFailure()...) {
		if h.usesRevokedLease(op) {
			return true
		}
	}
	return false
}

// checkWatches compares each watch's stream with the model's history.
func (h *harness) checkWatches() {
	for _, l := range h.watches {
		if l.canceled {
			if l.w.StartRev >= h.model.Compacted() {
				h.t.Fatalf("watch%d from r%d canceled though compact is r%d", l.w.ID, l.w.StartRev, h.model.Compacted())
			}
			continue
		}
		var want []*mvccpb.Event
		for _, ev := range h.model.Events() {
			if ev.Rev < l.w.StartRev || !linearizability.InSpan(ev.Kv.Key, l.w.Key, l.w.End) || (l.w.NoDelete && ev.Type == mvccpb.DELETE) {
				continue
			}
			e := ev.Event
			if !l.w.PrevKV {
				e = &mvccpb.Event{Type: e.Type, Kv: e.Kv}
			}
			want = append(want, e)
		}
		if len(want) != len(l.events) {
			h.t.Fatalf("watch%d (%q..%q from r%d): got %d events, want %d\n got %v\nwant %v", l.w.ID, l.w.Key, l.w.End, l.w.StartRev, len(l.events), len(want), l.events, want)
		}
		for i := range want {
			if p := want[i].PrevKv; p != nil && l.events[i].PrevKv == nil && p.ModRevision < h.model.Compacted() {
				// As in etcd: a previous version compacted away before
				// the event was read from history is not sent.
				want[i] = &mvccpb.Event{Type: want[i].Type, Kv: want[i].Kv}
			}
			if !proto.Equal(want[i], l.events[i]) {
				h.t.Fatalf("watch%d event %d:\n got %v\nwant %v", l.w.ID, i, l.events[i], want[i])
			}
		}
	}
}
