package linearizability

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// CheckRevisionOrder checks a history against the contract Axon is built
// on: revision order is the linearization order. Operations that carry a
// revision are ordered by it (a write at its revision; a read, or a write
// that changed nothing, after the write at its header revision, by call
// time), the model is stepped through that order, and the order must
// respect real time. An operation that failed with an error changes
// nothing, so it only needs one state within its real-time window that
// explains the error; failures that name a revoked lease must agree on
// when the revoke took effect, and a revoke that wrote nothing may take
// effect anywhere in its own window (revokeCut). Passing proves the history linearizable: the order
// is a witness. It runs in about O(n log n) where porcupine's search may
// not finish on long histories; failing means a violation, or a history
// linearizable only in an order its revisions contradict — for Axon a
// bug either way. Unknown (unpatched) operations are taken as never
// applied.
//
// Compaction is checked apart, by real time alone: it holds no place in
// the revision order (a read at an old revision may run concurrently
// with it either way). A compaction that finished before an operation
// started binds it; one that started before an operation ended may
// explain its ErrCompacted.
func CheckRevisionOrder(history []porcupine.Operation) error {
	if err := checkCompactions(history); err != nil {
		return err
	}
	var ops, failed []*ordered
	for i, op := range history {
		o := &ordered{op: op, index: i, in: op.Input.(Input), out: op.Output.(Output)}
		switch {
		case o.out.unknown, o.in.Compact != nil, classify(o.out.Err) == errCompacted:
			continue
		case o.out.Err != "":
			failed = append(failed, o)
			continue
		}
		o.rev = o.out.Revision()
		o.writer = changes(o.in, o.out)
		ops = append(ops, o)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].rev < ops[j].rev })
	states := make([]*state, 0, len(ops)+1) // states[i]: after ops[:i]
	st := &state{}
	states = append(states, st)
	for start := 0; start < len(ops); {
		end := start
		for end < len(ops) && ops[end].rev == ops[start].rev {
			end++
		}
		group := ops[start:end]
		// One request writes at a revision. A revoke writes only if its
		// lease still has keys and no key-value write took the revision
		// (a revoke answered there read the store after that write).
		kvWriter := false
		for _, o := range group {
			kvWriter = kvWriter || (o.in.Revoke == nil && o.writer)
		}
		for _, o := range group {
			if o.in.Revoke != nil {
				o.writer = !kvWriter && st.hasLeaseKeys(o.in.Revoke.ID)
			}
		}
		// The write first, then what only read, by call time; a revoke
		// that deleted nothing by its answer, the latest it may take
		// effect: an expiry is called when its lease's grant answered,
		// so by call time it could go before that grant at the same
		// revision. (Failures that name the lease may still place it
		// anywhere in its window: revokeCut.)
		at := func(o *ordered) int64 {
			if o.in.Revoke != nil && !o.writer {
				return o.op.Return
			}
			return o.op.Call
		}
		sort.SliceStable(group, func(i, j int) bool {
			if group[i].writer != group[j].writer {
				return group[i].writer
			}
			return at(group[i]) < at(group[j])
		})
		for _, o := range group {
			ok, next := step(st, o.in, o.out)
			if !ok {
				return fmt.Errorf("at revision %d, %s is not what a sequential store gives; store: %s", o.rev, describeOp(o.in, o.out), st.describe())
			}
			st = next
			states = append(states, st)
		}
		start = end
	}
	if err := realTime(ops); err != nil {
		return err
	}
	return explainFailures(ops, states, failed)
}

// checkCompactions checks compactions and ErrCompacted answers by real
// time: see CheckRevisionOrder.
func checkCompactions(history []porcupine.Operation) error {
	if err := checkFutureCompactions(history); err != nil {
		return err
	}
	type compaction struct {
		rev, call, ret int64
		done           bool  // acknowledged (else unknown)
		header         int64 // the store's revision when it took effect, if done
	}
	var cs []compaction
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Compact == nil || (out.Err != "" && !out.unknown) {
			continue
		}
		c := compaction{rev: in.Compact.Revision, call: op.Call, ret: op.Return, done: !out.unknown}
		if c.done && out.Compact != nil && out.Compact.Header != nil {
			c.header = out.Compact.Header.Revision
		}
		cs = append(cs, c)
	}
	// Compactions that both succeeded took effect lower revision first
	// (the other way round the later one fails): their headers, the
	// revisions they took effect at, must not say otherwise.
	for _, a := range cs {
		for _, b := range cs {
			if a.done && b.done && a.rev < b.rev && a.header > b.header && b.header > 0 {
				return fmt.Errorf("compaction to r%d answered at r%d, after the one to r%d answered at r%d: a compaction below one already in effect succeeded", a.rev, a.header, b.rev, b.header)
			}
		}
	}
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.unknown {
			continue
		}
		compacted := classify(out.Err) == errCompacted
		rev := readRevision(in, out)
		if rev <= 0 {
			if compacted && in.KV != nil {
				return fmt.Errorf("%s: it reads at no revision", describeOp(in, out))
			}
			continue
		}
		for _, c := range cs {
			if in.Compact != nil && c.call == op.Call && c.rev == rev {
				continue // itself
			}
			// A read at rev fails once compaction passed rev; a compaction
			// of rev fails once one reached it.
			binding := c.rev > rev || (in.Compact != nil && c.rev >= rev)
			if !binding {
				continue
			}
			if compacted && c.call < op.Return {
				compacted = false // explained
				break
			}
			if !compacted && out.Err == "" && c.done && c.ret < op.Call {
				return fmt.Errorf("%s succeeded though compaction to r%d finished before it started", describeOp(in, out), c.rev)
			}
		}
		if compacted {
			return fmt.Errorf("%s: no compaction that could have run explains it", describeOp(in, out))
		}
	}
	return nil
}

// checkFutureCompactions: a compaction succeeds only to a revision the
// store has reached, so not past the revision it answers at; and it
// fails as a future revision only past every revision the store had
// surely reached when it was called (one answered before).
func checkFutureCompactions(history []porcupine.Operation) error {
	byRet := make([]porcupine.Operation, 0, len(history))
	for _, op := range history {
		if out := op.Output.(Output); !out.unknown && out.Err == "" {
			byRet = append(byRet, op)
		}
	}
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
	reached := make([]int64, len(byRet)+1) // reached[i]: the highest revision among byRet[:i]
	for i, op := range byRet {
		reached[i+1] = max(reached[i], op.Output.(Output).Revision())
	}
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Compact == nil || out.unknown {
			continue
		}
		rev := in.Compact.Revision
		switch {
		case out.Err == "" && out.Revision() > 0 && rev > out.Revision():
			return fmt.Errorf("compaction to r%d succeeded at r%d: a future revision", rev, out.Revision())
		case classify(out.Err) == errFutureRev:
			k := sort.Search(len(byRet), func(i int) bool { return byRet[i].Return >= op.Call })
			if rev <= reached[k] {
				return fmt.Errorf("compaction to r%d failed as a future revision, but the store had answered at r%d before it was called", rev, reached[k])
			}
		}
	}
	return nil
}

// readRevision is the revision an operation reads at or compacts to, if
// it names one: for a txn, the lowest its ranges name, on the branches
// its answer took (on any branch if it failed).
func readRevision(in Input, out Output) int64 {
	switch {
	case in.Compact != nil:
		return in.Compact.Revision
	case in.KV != nil:
		if r := in.KV.GetRequestRange(); r != nil {
			return r.Revision
		}
		if t := in.KV.GetRequestTxn(); t != nil {
			var taken *pb.TxnResponse
			if out.Err == "" {
				taken = out.KV.GetResponseTxn()
			}
			return txnReadRevision(t, taken, out.Err == "")
		}
	}
	return 0
}

// txnReadRevision is the lowest revision a range of t names (0: none),
// on the branches resp took if known, else on any.
func txnReadRevision(t *pb.TxnRequest, resp *pb.TxnResponse, known bool) int64 {
	branches := [][]*pb.RequestOp{t.Success, t.Failure}
	if known {
		if resp == nil {
			return 0
		}
		branches = branches[:1]
		if !resp.Succeeded {
			branches = [][]*pb.RequestOp{t.Failure}
		}
	}
	low := int64(0)
	for _, ops := range branches {
		for i, op := range ops {
			rev := int64(0)
			switch {
			case op.GetRequestRange() != nil:
				rev = op.GetRequestRange().Revision
			case op.GetRequestTxn() != nil:
				var sub *pb.TxnResponse
				if known && i < len(resp.Responses) {
					sub = resp.Responses[i].GetResponseTxn()
				}
				rev = txnReadRevision(op.GetRequestTxn(), sub, known)
			}
			if rev > 0 && (low == 0 || rev < low) {
				low = rev
			}
		}
	}
	return low
}

type ordered struct {
	op     porcupine.Operation
	index  int
	in     Input
	out    Output
	rev    int64
	writer bool
}

// hasLeaseKeys reports whether any live key is attached to lease id.
func (s *state) hasLeaseKeys(id int64) bool {
	for _, kv := range s.kvs {
		if kv.Lease == id {
			return true
		}
	}
	return false
}

// explainFailures finds, for every failed operation, a state inside its
// real-time window that gives the same error. Failures that name a
// revoked lease must also agree on when the revoke took effect; and a
// revoke that wrote nothing (its lease had no keys) may take effect
// anywhere in its own window, not only where the witness put it: see
// revokeCut.
func explainFailures(ops []*ordered, states []*state, failed []*ordered) error {
	w := &witness{ops: ops, states: states, failed: failed}
	// retPrefixMax[i]: the latest witness position among ops[:i] sorted
	// by return time; callSuffixMin likewise by call time.
	w.byRet = make([]int, len(ops))
	w.byCall = make([]int, len(ops))
	for i := range ops {
		w.byRet[i], w.byCall[i] = i, i
	}
	sort.Slice(w.byRet, func(a, b int) bool { return ops[w.byRet[a]].op.Return < ops[w.byRet[b]].op.Return })
	sort.Slice(w.byCall, func(a, b int) bool { return ops[w.byCall[a]].op.Call < ops[w.byCall[b]].op.Call })
	w.prefixMax = make([]int, len(ops)+1)
	w.prefixMax[0] = -1
	for i, p := range w.byRet {
		w.prefixMax[i+1] = max(w.prefixMax[i], p)
	}
	w.suffixMin = make([]int, len(ops)+1)
	w.suffixMin[len(ops)] = len(ops)
	for i := len(ops) - 1; i >= 0; i-- {
		w.suffixMin[i] = min(w.suffixMin[i+1], w.byCall[i])
	}
	for _, f := range failed {
		lo, hi := w.window(f)
		explained := false
		for i := lo; i <= hi && i < len(states) && !explained; i++ {
			explained, _ = step(states[i], f.in, f.out)
		}
		for _, p := range w.revokesFor(f) {
			c := w.revokeCut(p)
			if !c.feasible() {
				r, a, b := ops[p], c.lastBefore, c.firstAfter
				return fmt.Errorf("%s (called at %d, returned at %d) fits only before lease %d's revoke (called at %d, returned at %d) took effect, %s (called at %d, returned at %d) only after it, yet the second returned before the first was called",
					describeOp(a.in, a.out), a.op.Call, a.op.Return, r.in.Revoke.ID, r.op.Call, r.op.Return, describeOp(b.in, b.out), b.op.Call, b.op.Return)
			}
			explained = explained || c.explains[f]
		}
		if !explained {
			return fmt.Errorf("%s (called at %d, returned at %d) fits no state in its window", describeOp(f.in, f.out), f.op.Call, f.op.Return)
		}
	}
	return nil
}

// witness is the revision order with its states, indexed for finding a
// failed operation's real-time window.
type witness struct {
	ops                  []*ordered
	states               []*state
	failed               []*ordered
	byRet, byCall        []int
	prefixMax, suffixMin []int

	// Built on first need: a failure that names a lease.
	revokes map[int64][]int      // lease: positions of its revokes
	naming  map[int64][]*ordered // lease: failed operations that name it
	cuts    map[int]*cut         // revoke position: where it can take effect
}

// window returns the states a failed operation may have seen: after
// every op that returned before it was called, and before every op
// called after it returned.
func (w *witness) window(f *ordered) (lo, hi int) {
	k := sort.Search(len(w.byRet), func(i int) bool { return w.ops[w.byRet[i]].op.Return >= f.op.Call })
	j := sort.Search(len(w.byCall), func(i int) bool { return w.ops[w.byCall[i]].op.Call > f.op.Return })
	return w.prefixMax[k] + 1, w.suffixMin[j]
}

// revokesFor returns the positions of the revokes of the leases f
// names whose windows overlap f's.
func (w *witness) revokesFor(f *ordered) []int {
	ids := leaseRefs(f.in)
	if len(ids) == 0 {
		return nil
	}
	if w.revokes == nil {
		w.revokes, w.naming, w.cuts = map[int64][]int{}, map[int64][]*ordered{}, map[int]*cut{}
		for p, o := range w.ops {
			if o.in.Revoke != nil {
				w.revokes[o.in.Revoke.ID] = append(w.revokes[o.in.Revoke.ID], p)
			}
		}
		for _, g := range w.failed {
			for _, id := range leaseRefs(g.in) {
				if len(w.revokes[id]) > 0 {
					w.naming[id] = append(w.naming[id], g)
				}
			}
		}
	}
	var ps []int
	for _, id := range ids {
		for _, p := range w.revokes[id] {
			if overlap(w.ops[p].op, f.op) {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

func overlap(a, b porcupine.Operation) bool { return a.Call <= b.Return && b.Call <= a.Return }

// cut is what the failed operations naming a revoked lease say about
// when the revoke took effect.
type cut struct {
	explains   map[*ordered]bool // failures that fit before or after it
	lastBefore *ordered          // of those that fit only before it, the last called
	firstAfter *ordered          // of those that fit only after it, the first returned
}

// feasible reports whether one moment of the revoke suits them all.
func (c *cut) feasible() bool {
	return c.lastBefore == nil || c.firstAfter == nil || c.lastBefore.op.Call <= c.firstAfter.op.Return
}

// revokeCut works out when the revoke at position p can have taken
// effect, for the failed operations that name its lease and overlap it.
// A revoke that wrote nothing only ended its lease, so it may move
// within its revision (after the write there, before the next) past
// reads as real time allows: states from lo to hi, counted in the order
// without the revoke, may have the lease or not. One that wrote stays
// where it is. A failure fits before the revoke if a state in its window
// that still has the lease explains it and it was called before the
// revoke returned; after it, likewise without the lease, if it returned
// after the revoke was called. The revoke took effect at one moment:
// after the call of every failure that fits only before it, before the
// return of every one that fits only after it.
func (w *witness) revokeCut(p int) *cut {
	if c := w.cuts[p]; c != nil {
		return c
	}
	r := w.ops[p]
	id := r.in.Revoke.ID
	grants := func(o *ordered) bool {
		return o.in.Grant != nil && (o.in.Grant.ID == id || o.out.Grant.GetID() == id)
	}
	movable := func(o *ordered) bool { return !r.writer && o.rev == r.rev && !o.writer && !grants(o) }
	// Without the revoke, ops[j] is at j below p and j-1 above it.
	lo := p
	for lo > 0 && movable(w.ops[lo-1]) && w.ops[lo-1].op.Return >= r.op.Call {
		lo--
	}
	hi := p
	for hi+1 < len(w.ops) && movable(w.ops[hi+1]) && w.ops[hi+1].op.Call <= r.op.Return {
		hi++
	}
	// The state at j with the lease still live, and ended.
	before := func(j int) *state {
		if j <= p {
			return w.states[j]
		}
		return w.states[j+1].withLease(id, true)
	}
	after := func(j int) *state {
		if j >= p {
			return w.states[j+1]
		}
		return w.states[j].withLease(id, false)
	}
	fits := func(g *ordered, at func(int) *state, from, to int) bool {
		for j := from; j <= to; j++ {
			if ok, _ := step(at(j), g.in, g.out); ok {
				return true
			}
		}
		return false
	}
	c := &cut{explains: map[*ordered]bool{}}
	for _, g := range w.naming[id] {
		if !overlap(r.op, g.op) {
			continue // wholly before or after it: no say
		}
		glo, ghi := w.window(g)
		ghi = min(ghi, len(w.states)-1)
		if glo > p {
			glo--
		}
		if ghi > p {
			ghi--
		}
		first := fits(g, before, glo, min(ghi, hi))
		second := fits(g, after, max(glo, lo), ghi)
		switch {
		case first && second:
		case first:
			if c.lastBefore == nil || g.op.Call > c.lastBefore.op.Call {
				c.lastBefore = g
			}
		case second:
			if c.firstAfter == nil || g.op.Return < c.firstAfter.op.Return {
				c.firstAfter = g
			}
		default:
			continue // no place explains it: it fails on its own
		}
		c.explains[g] = true
	}
	w.cuts[p] = c
	return c
}

// leaseRefs returns the leases whose liveness can decide in's outcome.
func leaseRefs(in Input) []int64 {
	switch {
	case in.Revoke != nil:
		return []int64{in.Revoke.ID}
	case in.Grant != nil && in.Grant.ID != 0:
		return []int64{in.Grant.ID}
	case in.KV != nil:
		var ids []int64
		var walk func(*pb.RequestOp)
		walk = func(op *pb.RequestOp) {
			switch tv := op.GetRequest().(type) {
			case *pb.RequestOp_RequestPut:
				if p := tv.RequestPut; p.Lease != 0 && !p.IgnoreLease {
					ids = append(ids, p.Lease)
				}
			case *pb.RequestOp_RequestTxn:
				for _, o := range tv.RequestTxn.Success {
					walk(o)
				}
				for _, o := range tv.RequestTxn.Failure {
					walk(o)
				}
			}
		}
		walk(in.KV)
		slices.Sort(ids)
		return slices.Compact(ids)
	}
	return nil
}

// withLease returns s with lease id live or not.
func (s *state) withLease(id int64, live bool) *state {
	i, found := slices.BinarySearch(s.leases, id)
	if found == live {
		return s
	}
	n := *s
	if live {
		n.leases = slices.Insert(slices.Clone(s.leases), i, id)
	} else {
		n.leases = slices.Delete(slices.Clone(s.leases), i, i+1)
	}
	return &n
}

// changes reports whether a response says the operation wrote.
func changes(in Input, out Output) bool {
	switch {
	case in.Grant != nil, in.Compact != nil:
		return false
	case in.Revoke != nil:
		return true
	}
	return Writes(out.KV)
}

// Writes reports whether a KV response says its request changed a key.
func Writes(r *pb.ResponseOp) bool {
	switch tv := r.GetResponse().(type) {
	case *pb.ResponseOp_ResponsePut:
		return true
	case *pb.ResponseOp_ResponseDeleteRange:
		return tv.ResponseDeleteRange.Deleted > 0
	case *pb.ResponseOp_ResponseTxn:
		for _, sub := range tv.ResponseTxn.Responses {
			if Writes(sub) {
				return true
			}
		}
	}
	return false
}

// realTime checks that no operation is ordered before one that returned
// before it was called.
func realTime(ops []*ordered) error {
	latest, at := -1, int64(math.MinInt64)
	for i, o := range ops {
		if o.op.Return < at {
			a := ops[latest]
			return fmt.Errorf("real time broken: %s (called at %d) is ordered before %s (returned at %d) by revisions %d and %d",
				describeOp(a.in, a.out), a.op.Call, describeOp(o.in, o.out), o.op.Return, a.rev, o.rev)
		}
		if o.op.Call > at {
			latest, at = i, o.op.Call
		}
	}
	return nil
}
