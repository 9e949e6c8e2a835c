package linearizability

import (
	"fmt"
	"math"
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
// explains the error. Passing proves the history linearizable: the order
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
		// The write first, then what only read, by return time: an op
		// that returned later may have taken effect later (a lease's
		// expiry runs from its grant to its revoke), and a failed op's
		// window then holds the states before it.
		sort.SliceStable(group, func(i, j int) bool {
			if group[i].writer != group[j].writer {
				return group[i].writer
			}
			return group[i].op.Return < group[j].op.Return
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
// real-time window that gives the same error.
func explainFailures(ops []*ordered, states []*state, failed []*ordered) error {
	// retPrefixMax[i]: the latest witness position among ops[:i] sorted
	// by return time; callSuffixMin likewise by call time.
	byRet := make([]int, len(ops))
	byCall := make([]int, len(ops))
	for i := range ops {
		byRet[i], byCall[i] = i, i
	}
	sort.Slice(byRet, func(a, b int) bool { return ops[byRet[a]].op.Return < ops[byRet[b]].op.Return })
	sort.Slice(byCall, func(a, b int) bool { return ops[byCall[a]].op.Call < ops[byCall[b]].op.Call })
	prefixMax := make([]int, len(ops)+1)
	prefixMax[0] = -1
	for i, p := range byRet {
		prefixMax[i+1] = max(prefixMax[i], p)
	}
	suffixMin := make([]int, len(ops)+1)
	suffixMin[len(ops)] = len(ops)
	for i := len(ops) - 1; i >= 0; i-- {
		suffixMin[i] = min(suffixMin[i+1], byCall[i])
	}
	for _, f := range failed {
		// After every op that returned before f was called...
		k := sort.Search(len(byRet), func(i int) bool { return ops[byRet[i]].op.Return >= f.op.Call })
		lo := prefixMax[k] + 1
		// ...and before every op called after f returned.
		j := sort.Search(len(byCall), func(i int) bool { return ops[byCall[i]].op.Call > f.op.Return })
		hi := suffixMin[j]
		explained := false
		for i := lo; i <= hi && i < len(states) && !explained; i++ {
			explained, _ = step(states[i], f.in, f.out)
		}
		if !explained {
			return fmt.Errorf("%s (called at %d, returned at %d) fits no state in its window", describeOp(f.in, f.out), f.op.Call, f.op.Return)
		}
	}
	return nil
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
