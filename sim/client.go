package sim

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/linearizability"
)

type opKind uint8

const (
	opWrite opKind = iota + 1 // Put, DeleteRange or Txn
	opRange
	opGrant
	opRevoke
	opKeepAlive
	opCompact
	opAuth // a change of the auth store (the admin's)
	opAlarm
	opTimeToLive
	opLeases
)

// input is what a client asked.
type input struct {
	kind  opKind
	write *pb.RequestOp
	rng   *pb.RangeRequest
	ttl   int64
	lease int64
	rev   int64
	// counter marks the read and the Txn of a hot-counter CAS loop.
	counter bool
	auth    auth.Change
	alarm   *alarmChange
	// keys: a time-to-live asks for the lease's keys (leaseapi.go).
	keys bool
	// physical: a compaction answers once the old versions are gone.
	physical bool
}

type callStatus uint8

const (
	pending  callStatus = iota
	answered            // the client got an answer (possibly an etcd error)
	failed              // definitely not applied (never proposed)
	unknown             // timed out: may or may not have applied
)

// call is one client operation, recorded for the checks.
type call struct {
	id         int
	client     *client
	in         input
	start, end time.Duration
	done       bool
	status     callStatus
	resp       *pb.ResponseOp
	rev        int64
	wrote      bool // a leader released it as a write at rev
	lease      leaseReply
	err        error
	attempts   []attempt     // engine commits that may have applied it
	patched    *attempt      // the attempt the engine shows applied
	released   time.Duration // when a leader released its answer
	viaLeader  bool          // it entered the cluster at the leader
	user       string        // who it runs as, in a world with auth on
	// readBy, readFrom and readTo: for a range, the node incarnation
	// that served it, when it started to (before it chose its revision)
	// and when it answered.
	readBy           string
	readFrom, readTo time.Duration
	// answeredBy and answeredAt: the node incarnation that answered the
	// call without error (the one the client sent it to), and when.
	answeredBy string
	answeredAt time.Duration
	// query is a time-to-live's or lease list's answer.
	query *leaseQuery
}

// attempt is one revision a call was committed at (maybe uncertainly).
type attempt struct {
	rev   int64
	term  int64
	eff   *core.Effects
	lease leaseReply // a grant's lease
	// readAt places an attempt that took no revision (rev 0) in the
	// revision order: the commit point when it committed.
	readAt int64
	// by bounds when it took effect: its commit call, plus the longest a
	// delayed apply may take.
	by time.Duration
}

type clientKind uint8

const (
	kubeClient clientKind = iota
	etcdClient
)

// client issues one operation at a time, Kubernetes- or etcd-like.
type client struct {
	w       *World
	idx     int
	kind    clientKind
	cur     *call
	modRevs map[string]int64 // last mod revision seen per key (CAS)
	leases  []int64
	watch   *clientWatch
	watches []*clientWatch
	list    *listState
	counter *counterLoop
	watcher bool
	// resuming: the stream being opened resumes one that broke.
	resuming bool
	user     string // who its calls run as, in a world with auth on
	admin    bool   // it changes the auth store among its traffic
	final    bool   // the post-heal liveness operation is out
	// compacted is a compact revision this client's compaction stored:
	// its next call reads everything at it, while the sweep runs.
	compacted int64
	// raised are the members whose NOSPACE alarm this client raised and
	// has not surely disarmed (alarm.go).
	raised []uint64
}

type listState struct {
	rev  int64
	next []byte
}

// counterLoop is a hot-counter increment in Kubernetes' GuaranteedUpdate
// shape: read the key, then Txn If ModRevision(k)==m Then Put(k, v+1) Else
// Get(k); after a failed compare go again from the Else read, after an
// abandoned or failed call from a fresh read.
type counterLoop struct {
	key   string
	read  bool // mod and val are known
	mod   int64
	val   int64
	tries int
}

// counterTries bounds one increment's rounds, as GuaranteedUpdate's
// callers bound theirs.
const counterTries = 8

func (l *counterLoop) input() input {
	if !l.read {
		return input{kind: opRange, rng: &pb.RangeRequest{Key: []byte(l.key)}, counter: true}
	}
	v := []byte(strconv.FormatInt(l.val+1, 10))
	return input{kind: opWrite, counter: true, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
		Compare: []*pb.Compare{modCompare(l.key, l.mod)}, Success: []*pb.RequestOp{putOp(l.key, v, 0)}, Failure: []*pb.RequestOp{getOp(l.key)}}}}}
}

// counterValue reads a counter from a range result: its mod revision
// and number (0 if absent or not a number: any client may write a hot key).
func counterValue(kvs []*mvccpb.KeyValue) (mod, val int64) {
	if len(kvs) == 0 {
		return 0, 0
	}
	return kvs[0].ModRevision, counterNumber(kvs[0].Value)
}

func counterNumber(v []byte) int64 {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// learnCounter moves the counter loop on after one of its calls ended.
func (c *client) learnCounter(cl *call) {
	l := c.counter
	if l == nil || !cl.in.counter {
		return
	}
	switch {
	case cl.status != answered || cl.err != nil:
		l.read = false
		l.tries++
	case cl.in.kind == opRange:
		l.read = true
		l.mod, l.val = counterValue(cl.resp.GetResponseRange().GetKvs())
	case cl.resp.GetResponseTxn().GetSucceeded():
		c.counter = nil
		return
	default: // go again from the Else read
		rs := cl.resp.GetResponseTxn().GetResponses()
		l.read = len(rs) == 1 && rs[0].GetResponseRange() != nil
		if l.read {
			l.mod, l.val = counterValue(rs[0].GetResponseRange().Kvs)
		}
		l.tries++
	}
	if l.tries >= counterTries {
		c.counter = nil
	}
}

// clientWatch is one watch stream as the client saw it.
type clientWatch struct {
	spec      watchSpec
	node      *node
	nodeEpoch int
	id        core.WatchID
	got       []linearizability.Received
	frag      []*mvccpb.Event // the events of fragments not yet whole
	lastRev   int64
	created   bool
	ended     bool
	// stalledUntil: the client reads nothing from the stream before it.
	stalledUntil time.Duration
	// openedBy and openedAt: the node incarnation the create reached,
	// and when.
	openedBy string
	openedAt time.Duration
	// A companion shares another watch's stream (sim/streams.go): wid
	// is its ID there (-1 until created); dupOf, the companion whose ID
	// its create reuses, and wantRefused, that one was live when the
	// create was answered; cancelAfter, when the client cancels it
	// after its creation (-1: never).
	companion   bool
	wid         int64
	dupOf       *clientWatch
	wantRefused bool
	cancelAfter time.Duration
}

type watchSpec struct {
	Key, End                                          []byte
	StartRev                                          int64
	PrevKV, NoPut, NoDelete, Fragment, ProgressNotify bool
	// WatchID is the ID the client picks (0: the stream's choice).
	WatchID int64
	// ProgressAtOnce: the client asks for progress (RequestProgress)
	// right behind the create, on the same stream, as a watch cache
	// that wants its first bookmark does.
	ProgressAtOnce bool
}

func (c *client) keyspace() []string {
	if c.kind == kubeClient {
		return []string{"/registry/pods/a", "/registry/pods/b", "/registry/pods/c", "/registry/pods/d"}
	}
	return []string{"/e/a", "/e/b", "/e/c", "/registry/pods/a"}
}

// pickKey draws a key: a hot one with the plan's hot share.
func (c *client) pickKey() string {
	if hot := c.w.plan.HotKeys; len(hot) > 0 && c.w.chance(c.w.plan.HotShare) {
		return hot[c.w.rng.IntN(len(hot))]
	}
	ks := c.keyspace()
	return ks[c.w.rng.IntN(len(ks))]
}

// value is a new value to write. One in four is long (past any
// tombstone record, and past badger's value threshold), so that the
// engine may leave it unread where a caller needs only short values
// (storage.IterOptions.Short); it takes no extra draw of the seed's.
func (c *client) value() []byte {
	n := c.w.rng.IntN(1000)
	v := []byte(fmt.Sprintf("c%d-%d", c.idx, n))
	if n%4 == 0 {
		v = append(v, bytes.Repeat([]byte{'.'}, 64+n%256)...)
	}
	return v
}

func putOp(k string, v []byte, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: v, Lease: lease}}}
}

// read is a plain read, serializable on SerializableShare of them.
func (c *client) read(r *pb.RangeRequest) input {
	r.Serializable = c.w.chance(c.w.plan.SerializableShare)
	return input{kind: opRange, rng: r}
}

func getOp(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func modCompare(k string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// etcdRanges are the ranges the etcd clients read and delete, shaped
// against their keys (/e/a, /e/b, /e/c, /e/hot) and one another so that
// latches meet in every shape: a range over a point, a point at a range's
// first key and one at its (excluded) end, two ranges that overlap from
// either side, one inside another. None is a single key, nor reaches
// past /e/'s prefix; under auth, several span permissions that touch
// (sim/auth.go).
var etcdRanges = [][2]string{
	{"/e/", "/e0"},
	{"/e/a", "/e/c"},
	{"/e/b", "/e0"},
	{"/e/", "/e/b"},
	{"/e/a", "/e/b\x00"},
	{"/e/b", "/e/hot"},
}

// etcdRange draws one of etcdRanges, the whole prefix half the time,
// and on two in five of them etcd's options besides (rangeOptions).
func (c *client) etcdRange() *pb.RangeRequest {
	r := etcdRanges[0]
	if c.w.chance(0.5) {
		r = etcdRanges[c.w.rng.IntN(len(etcdRanges))]
	}
	rr := &pb.RangeRequest{Key: []byte(r[0]), RangeEnd: []byte(r[1])}
	if c.w.chance(0.4) {
		c.rangeOptions(rr)
	}
	return rr
}

// rangeOptions draws what etcdctl's get offers: a sort by any target in
// any order (NONE with a target other than the key sorts ascending), a
// limit, one of count only or a revision filter at a revision the
// client saw one of its keys at, and a revision to read at (readRevision).
func (c *client) rangeOptions(r *pb.RangeRequest) {
	w := c.w
	r.SortTarget = pb.RangeRequest_SortTarget(w.rng.IntN(5))
	r.SortOrder = pb.RangeRequest_SortOrder(w.rng.IntN(3))
	if w.chance(0.5) {
		r.Limit = 1 + w.rng.Int64N(3)
	}
	seen := c.modRevs[c.pickKey()]
	switch w.rng.IntN(6) {
	case 0:
		r.CountOnly = true
	case 1:
		r.MinModRevision = seen
	case 2:
		r.MaxModRevision = seen
	case 3:
		r.MinCreateRevision = seen
	case 4:
		r.MaxCreateRevision = seen
	}
	if w.chance(0.35) {
		r.Revision = c.readRevision()
	}
}

// nestedTxn draws a txn whose branches read and write the same few keys
// in any order, with txns nested in them (to depth 2) and compares on
// those keys: etcd evaluates every compare of the tree against the store
// before the txn, and runs a branch's operations in order, each read
// seeing the writes before it. A key is written (put or deleted) once in
// the whole tree, as etcd refuses a txn that writes a key twice on one
// path.
func (c *client) nestedTxn(depth int, written map[string]bool) *pb.TxnRequest {
	w := c.w
	branch := func() []*pb.RequestOp {
		var ops []*pb.RequestOp
		for range 1 + w.rng.IntN(3) {
			k := c.pickKey()
			r := w.rng.IntN(6)
			if (r == 0 || r == 1) && written[k] {
				r = 2 // written already on some path: read it instead
			}
			switch {
			case r == 0:
				written[k] = true
				ops = append(ops, putOp(k, c.value(), 0))
			case r == 1:
				written[k] = true
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), PrevKv: w.chance(0.5)}}})
			case r == 2:
				op := getOp(k)
				if w.chance(0.25) {
					c.rangeOptions(op.GetRequestRange())
				}
				ops = append(ops, op)
			case r == 3:
				rr := c.etcdRange()
				rr.KeysOnly = w.chance(0.5)
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: rr}})
			case depth < 2:
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: c.nestedTxn(depth+1, written)}})
			default:
				ops = append(ops, getOp(k))
			}
		}
		return ops
	}
	return &pb.TxnRequest{Compare: []*pb.Compare{c.compare()}, Success: branch(), Failure: branch()}
}

// compare draws a compare on one of the client's keys: its version,
// create or mod revision against a small number or the revision the
// client last saw it at, or its value; or its lease, or a compare over a
// range (widenCompare).
func (c *client) compare() *pb.Compare {
	w := c.w
	k := c.pickKey()
	cmp := &pb.Compare{Key: []byte(k), Result: pb.Compare_CompareResult(w.rng.IntN(4))}
	switch w.rng.IntN(4) {
	case 0:
		cmp.Target, cmp.TargetUnion = pb.Compare_VERSION, &pb.Compare_Version{Version: int64(w.rng.IntN(3))}
	case 1:
		cmp.Target, cmp.TargetUnion = pb.Compare_CREATE, &pb.Compare_CreateRevision{CreateRevision: c.modRevs[k]}
	case 2:
		cmp.Target, cmp.TargetUnion = pb.Compare_MOD, &pb.Compare_ModRevision{ModRevision: c.modRevs[k]}
	default:
		cmp.Target, cmp.TargetUnion = pb.Compare_VALUE, &pb.Compare_Value{Value: c.value()}
	}
	c.widenCompare(cmp)
	return cmp
}

// next draws the client's next operation.
func (c *client) next() input {
	w := c.w
	if c.list != nil {
		return input{kind: opRange, rng: &pb.RangeRequest{Key: c.list.next, RangeEnd: []byte("/registry/pods0"), Limit: 2, Revision: c.list.rev}}
	}
	if rev := c.compacted; rev > 0 {
		c.compacted = 0
		return input{kind: opRange, rng: &pb.RangeRequest{Key: []byte("/"), RangeEnd: []byte("0"), Revision: rev}}
	}
	if c.admin && w.chance(w.plan.AuthShare) {
		return c.authChange()
	}
	if c.idx == 1 && w.plan.AlarmShare > 0 {
		if in, ok := c.alarmTurn(); ok {
			return in
		}
	}
	if hot := w.plan.HotKeys; c.counter == nil && len(hot) > 0 && w.chance(w.plan.HotShare/2) {
		c.counter = &counterLoop{key: hot[w.rng.IntN(len(hot))]}
	}
	if c.counter != nil {
		return c.counter.input()
	}
	if c.kind == kubeClient {
		k := c.pickKey()
		switch w.rng.IntN(6) {
		case 0: // create
			return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
				Compare: []*pb.Compare{modCompare(k, 0)}, Success: []*pb.RequestOp{putOp(k, c.value(), 0)}, Failure: []*pb.RequestOp{getOp(k)}}}}}
		case 1, 2: // guaranteed update
			return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
				Compare: []*pb.Compare{modCompare(k, c.modRevs[k])}, Success: []*pb.RequestOp{putOp(k, c.value(), 0)}, Failure: []*pb.RequestOp{getOp(k)}}}}}
		case 3: // conditional delete
			del := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k)}}}
			return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
				Compare: []*pb.Compare{modCompare(k, c.modRevs[k])}, Success: []*pb.RequestOp{del}, Failure: []*pb.RequestOp{getOp(k)}}}}}
		case 4:
			return input{kind: opRange, rng: &pb.RangeRequest{Key: []byte(k)}}
		default: // paginated list: first page
			c.list = &listState{next: []byte("/registry/pods/")}
			return input{kind: opRange, rng: &pb.RangeRequest{Key: c.list.next, RangeEnd: []byte("/registry/pods0"), Limit: 2}}
		}
	}
	if w.plan.InvalidShare > 0 && w.chance(w.plan.InvalidShare) {
		return c.invalidRequest()
	}
	switch w.rng.IntN(10) {
	case 0, 1, 2:
		var lease int64
		if len(c.leases) > 0 && w.chance(0.3) {
			lease = c.leases[w.rng.IntN(len(c.leases))]
		}
		op := putOp(c.pickKey(), c.value(), lease)
		// etcdctl put --ignore-value / --ignore-lease: the key keeps its
		// value or its lease (and must exist).
		if p := op.GetRequestPut(); w.chance(0.15) {
			p.IgnoreValue, p.Value = true, nil
		} else if w.chance(0.15) {
			p.IgnoreLease, p.Lease = true, 0
		}
		return input{kind: opWrite, write: op}
	case 3:
		k := c.pickKey()
		d := &pb.DeleteRangeRequest{Key: []byte(k), PrevKv: true}
		if w.chance(0.3) {
			r := c.etcdRange()
			d = &pb.DeleteRangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, PrevKv: true}
		}
		return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}}
	case 4: // multi-key txn with a value compare
		if w.chance(0.5) {
			return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: c.nestedTxn(0, map[string]bool{})}}}
		}
		a, b := c.pickKey(), c.pickKey()
		then := []*pb.RequestOp{putOp(a, c.value(), 0)}
		if b != a {
			then = append(then, putOp(b, c.value(), 0))
		}
		cmp := &pb.Compare{Key: []byte(a), Target: pb.Compare_VERSION, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_Version{Version: int64(w.rng.IntN(4))}}
		if w.chance(0.5) {
			cmp = c.compare()
		}
		return input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Compare: []*pb.Compare{cmp}, Success: then, Failure: []*pb.RequestOp{getOp(a), getOp(b)}}}}}
	case 5:
		if w.chance(0.3) {
			return c.guardedRead()
		}
		return c.read(c.etcdRange())
	case 6:
		if w.chance(0.4) {
			return c.leaseAPI()
		}
		ttl := int64(2 + w.rng.IntN(4))
		if w.chance(0.05) {
			ttl = core.MaxLeaseTTL // etcd's longest: it must outlive the run
		}
		return input{kind: opGrant, ttl: ttl}
	case 7:
		if len(w.leasePool) > 0 && w.chance(0.3) {
			return input{kind: opKeepAlive, lease: w.leasePool[w.rng.IntN(len(w.leasePool))]}
		}
		if len(c.leases) > 0 {
			return input{kind: opKeepAlive, lease: c.leases[w.rng.IntN(len(c.leases))]}
		}
		return c.read(&pb.RangeRequest{Key: []byte(c.pickKey())})
	case 8:
		if len(c.leases) > 0 && w.chance(0.5) {
			i := w.rng.IntN(len(c.leases))
			l := c.leases[i]
			c.leases = append(c.leases[:i], c.leases[i+1:]...)
			return input{kind: opRevoke, lease: l}
		}
		return c.read(&pb.RangeRequest{Key: []byte(c.pickKey())})
	}
	return input{kind: opCompact, rev: -1} // revision chosen at send time
}

func (c *client) targetNode() *node {
	return c.w.nodes[c.w.rng.IntN(len(c.w.nodes))]
}

// issue starts the client's next operation, if the budget allows.
func (c *client) issue() {
	w := c.w
	if w.stopped || c.cur != nil {
		return
	}
	if w.hist.issued >= w.cfg.Ops && !w.healed {
		return
	}
	if w.healed {
		if c.final {
			return
		}
		if in, ok := c.alarmTurn(); ok {
			c.send(in) // its alarms go before its final write
			return
		}
		c.final = true
		// With one of its keys: every key must take writes again once
		// the faults heal (a latch a request left behind blocks one).
		k := fmt.Sprintf("/final/c%d", c.idx)
		ks := c.keyspace()
		then := []*pb.RequestOp{putOp(k, []byte("done"), 0), putOp(ks[c.idx%len(ks)], []byte("done"), 0)}
		c.send(input{kind: opWrite, write: &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then}}}})
		return
	}
	in := c.next()
	if in.kind == opCompact {
		in.rev = max(1, w.hist.maxSeenRev-int64(w.rng.IntN(20)))
		if w.chance(0.1) {
			// Past the newest revision seen, often past the store's:
			// etcd refuses it as a future revision.
			in.rev = w.hist.maxSeenRev + 1 + int64(w.rng.IntN(8))
		}
		in.physical = w.chance(0.3) // etcdctl compact --physical
	}
	c.send(in)
}

func (c *client) send(in input) {
	w := c.w
	cl := w.hist.add(c, in, w.now)
	cl.user = c.user
	if c.final && c.user != "" {
		cl.user = authRoot // liveness needs the final write through
	}
	c.cur = cl
	n := c.targetNode()
	cl.viaLeader = n.up && n.member.Role() == core.Leader
	w.sendToNode(c, n, "request", func() { n.handle(cl) })
	timeout := clientTimeout
	if !c.final {
		if w.chance(w.plan.CancelShare) {
			w.after(w.between(0, w.plan.NetDelay), "cancel", func() { c.giveUp(cl, "cancel") })
		}
		if w.chance(w.plan.TimeoutShare) {
			timeout = w.plan.Timeout
		}
	}
	w.after(timeout, "timeout", func() { c.giveUp(cl, "timeout") })
}

// giveUp abandons a call (why: "timeout" or "cancel") that may still
// apply; check.go learns from the engine whether it did.
func (c *client) giveUp(cl *call, why string) {
	if cl.done {
		return
	}
	cl.done, cl.status, cl.end = true, unknown, c.w.now
	via := "follower"
	if cl.viaLeader {
		via = "leader"
	}
	c.w.fault(why, "c%d op%d via %s", c.idx, cl.id, via)
	c.learnCounter(cl)
	c.cur = nil
	c.think(cl)
}

// think waits before the next call: an admin whose change failed (not
// refused) waits up to the plan's AdminBackoff, as an operator would.
func (c *client) think(cl *call) {
	d := c.w.between(0, 20*time.Millisecond)
	if cl.in.kind == opAuth && cl.status == unknown && c.w.plan.AdminBackoff > 0 {
		d = c.w.between(c.w.plan.AdminBackoff/2, c.w.plan.AdminBackoff)
	}
	c.w.after(d, "think", c.issue)
}

// answered records a call's reply.
func (c *client) answered(cl *call, resp *pb.ResponseOp, lr leaseReply, rev int64, err error) {
	w := c.w
	if cl.done {
		return
	}
	cl.done, cl.end, cl.resp, cl.rev, cl.lease, cl.err = true, w.now, resp, rev, lr, err
	switch err {
	case core.ErrNoLeader, core.ErrNotLeader, core.ErrRetriesExhausted:
		cl.status = failed
	case driver.ErrLeaderChanged, core.ErrTimeout:
		cl.status = unknown // it may yet be applied
	default:
		cl.status = answered
		if err != nil && cl.in.kind == opRange && !isEtcdError(err) && !isAuthError(err) {
			cl.status = failed // the engine failed the read
		}
		if err != nil && cl.in.kind == opAuth && !isAuthError(err) {
			cl.status = unknown // the engine failed the commit: it may land
		}
	}
	w.note("c%d op%d answered r%d err=%v", c.idx, cl.id, rev, err)
	if rev > w.hist.maxSeenRev {
		w.hist.maxSeenRev = rev
	}
	c.learn(cl)
	c.learnCounter(cl)
	c.learnAlarm(cl)
	c.cur = nil
	c.think(cl)
}

func isEtcdError(err error) bool {
	return err == core.ErrCompacted || err == core.ErrFutureRev || err == core.ErrLeaseNotFound || err == core.ErrKeyNotFound
}

// learn keeps what later operations need: mod revisions, leases, pages.
func (c *client) learn(cl *call) {
	if cl.status != answered || cl.err != nil {
		if cl.in.kind == opRange {
			c.list = nil
		}
		return
	}
	switch cl.in.kind {
	case opGrant:
		c.leases = append(c.leases, cl.lease.id)
		c.w.leasePool = append(c.w.leasePool, cl.lease.id)
	case opRange:
		r := cl.resp.GetResponseRange()
		for _, kv := range r.Kvs {
			c.modRevs[string(kv.Key)] = kv.ModRevision
		}
		if c.list != nil {
			if r.More && len(r.Kvs) > 0 {
				if c.list.rev == 0 {
					c.list.rev = r.Header.Revision
				}
				c.list.next = append([]byte(string(r.Kvs[len(r.Kvs)-1].Key)), 0)
			} else {
				if c.watcher && c.watch == nil {
					c.startWatch(r.Header.Revision + 1)
				}
				c.list = nil
			}
		} else if c.watcher && c.watch == nil && cl.in.rng.RangeEnd != nil {
			c.startWatch(r.Header.Revision + 1)
		}
	case opWrite:
		c.learnTxn(cl.in.write, cl.resp)
	case opCompact:
		c.compacted = cl.in.rev
		c.probeCompaction(cl)
	}
}

func (c *client) learnTxn(req *pb.RequestOp, resp *pb.ResponseOp) {
	t := resp.GetResponseTxn()
	if t == nil {
		return
	}
	treq := req.GetRequestTxn()
	ops := treq.Success
	if !t.Succeeded {
		ops = treq.Failure
	}
	for i, r := range t.Responses {
		if i >= len(ops) {
			break
		}
		switch {
		case r.GetResponsePut() != nil:
			c.modRevs[string(ops[i].GetRequestPut().Key)] = r.GetResponsePut().Header.Revision
		case r.GetResponseRange() != nil:
			k := string(ops[i].GetRequestRange().Key)
			c.modRevs[k] = 0
			for _, kv := range r.GetResponseRange().Kvs {
				c.modRevs[k] = kv.ModRevision
			}
		case r.GetResponseDeleteRange() != nil:
			c.modRevs[string(ops[i].GetRequestDeleteRange().Key)] = 0
		}
	}
}

// startWatch opens a prefix watch from rev, on any node. One in eight
// starts further back instead, as a client with an older revision does (a
// watch cache starting from its last list, `etcdctl watch --rev`): its
// node reads that history back from the engine in catch-up reads, and a
// start below the compaction is canceled as compacted.
// resumeWatch opens the client's stream again after it broke, from
// what it saw: as clientv3 resumes every watch of a stream at once, the
// new stream carries companions more often (sim/streams.go), and on a
// node behind the old one they meet the floor the resumed watch sets.
func (c *client) resumeWatch(rev int64) {
	c.resuming = true
	c.startWatch(rev)
	c.resuming = false
}

func (c *client) startWatch(rev int64) {
	if c.w.chance(0.125) {
		rev = max(1, rev-1-c.w.rng.Int64N(256))
	}
	n := c.targetNode()
	cw := c.openWatch(n, rev)
	c.watch = cw
	c.w.after(clientTimeout, "watch-timeout", func() {
		if !cw.created && !cw.ended {
			c.watchBroken(cw)
		}
	})
}

// openWatch sends a create of a prefix watch from rev to n.
func (c *client) openWatch(n *node, rev int64) *clientWatch {
	spec := watchSpec{Key: []byte("/registry/pods/"), End: []byte("/registry/pods0"), StartRev: rev, PrevKV: c.w.chance(0.7)}
	if c.kind == etcdClient {
		spec.Key, spec.End, spec.NoDelete = []byte("/e/"), []byte("/e0"), c.w.chance(0.2)
	}
	spec.Fragment, spec.ProgressNotify, spec.ProgressAtOnce = c.w.chance(0.3), c.w.chance(0.3), c.w.chance(0.3)
	if c.resuming && c.w.chance(0.5) {
		// A watch cache resumed elsewhere wants a bookmark at once.
		spec.ProgressAtOnce = true
	}
	cw := &clientWatch{spec: spec, lastRev: rev - 1, wid: -1}
	more := c.companions(cw)
	c.watches = append(append(c.watches, cw), more...)
	c.w.note("c%d watch from r%d via %s (%d more on the stream)", c.idx, rev, n.name, len(more))
	c.w.sendToNode(c, n, "watch", func() { n.createWatch(c, cw, more) })
	return cw
}

// probeCompaction: after three in ten of its compactions, the client
// watches from below the compacted revision through the node that
// answered, as an operator checks that the history is gone; that node
// must cancel the watch (checkCompactedStart), before its feed has
// brought the compaction as well as after. The probe is a watch of its
// own: the client's stream goes on.
func (c *client) probeCompaction(cl *call) {
	if cl.in.rev < 2 || !c.w.chance(0.3) {
		return
	}
	for _, n := range c.w.nodes {
		if n.id() == cl.answeredBy {
			c.openWatch(n, 1+c.w.rng.Int64N(cl.in.rev-1))
			return
		}
	}
}

func (c *client) watchCreated(cw *clientWatch) {
	if cw.ended {
		return
	}
	cw.created = true
	if cw.companion {
		return // the stream's own watch asks for progress and stalls
	}
	c.progressLoop(cw)
	c.stallLoop(cw)
}

// stallLoop stops reading the watch stream now and then, for a while, as
// a client busy elsewhere (or a slow network) does.
func (c *client) stallLoop(cw *clientWatch) {
	every := c.w.plan.StallEvery
	if every == 0 {
		return
	}
	c.w.after(c.w.between(every/2, every*3/2), "stall", func() {
		if cw.ended || c.w.stopped {
			return
		}
		cw.stalledUntil = c.w.now + c.w.between(100*time.Millisecond, 2*time.Second)
		c.w.note("c%d stops reading its watch until %v", c.idx, cw.stalledUntil)
		c.stallLoop(cw)
	})
}

// progressLoop asks for progress now and then, like the apiserver.
func (c *client) progressLoop(cw *clientWatch) {
	c.w.after(c.w.between(200*time.Millisecond, time.Second), "progress", func() {
		if cw.ended || cw.node == nil || c.w.stopped {
			return
		}
		n, id, epoch := cw.node, cw.id, cw.nodeEpoch
		c.w.sendToNode(c, n, "progress", func() {
			if n.epoch == epoch {
				n.requestProgress(id)
			}
		})
		c.progressLoop(cw)
	})
}

// watchResponse takes a response from the watch stream, as clientv3
// does: fragments are put together first, a created one starts the
// watch, a canceled one ends it.
func (c *client) watchResponse(cw *clientWatch, r *pb.WatchResponse) {
	if cw.ended {
		return
	}
	if r.Fragment {
		cw.frag = append(cw.frag, r.Events...)
		return
	}
	events := r.Events
	if len(cw.frag) > 0 {
		events, cw.frag = append(cw.frag, r.Events...), nil
	}
	got := received(r)
	got.Events, got.Progress = events, got.Progress && len(events) == 0
	cw.got = append(cw.got, got)
	switch {
	case r.Canceled:
		c.watchBroken(cw)
		return
	case r.Created:
		c.watchCreated(cw)
	}
	for _, ev := range events {
		if ev.Kv.ModRevision > cw.lastRev {
			cw.lastRev = ev.Kv.ModRevision
		}
	}
	if rev := r.Header.GetRevision(); len(events) == 0 && !r.Created && rev > cw.lastRev {
		cw.lastRev = rev // a progress notification
	}
}

// received is a whole watch response as the checker takes it.
func received(r *pb.WatchResponse) linearizability.Received {
	return linearizability.Received{Events: r.Events, HeaderRev: r.Header.GetRevision(),
		Progress: len(r.Events) == 0 && !r.Created && !r.Canceled && r.CompactRevision == 0,
		Canceled: r.Canceled, CompactRevision: r.CompactRevision}
}

// watchBroken ends a stream; the client resumes from what it has seen.
// A companion's cancel ends that watch alone.
func (c *client) watchBroken(cw *clientWatch) {
	if cw.ended {
		return
	}
	cw.ended = true
	if cw.companion {
		return
	}
	c.w.note("c%d watch ended at r%d", c.idx, cw.lastRev)
	if c.watch == cw {
		c.watch = nil
		compacted := len(cw.got) > 0 && cw.got[len(cw.got)-1].CompactRevision > 0
		if !c.w.stopped && !compacted {
			c.w.after(c.w.between(10*time.Millisecond, 200*time.Millisecond), "rewatch", func() {
				if c.watch == nil && !c.w.stopped {
					c.resumeWatch(cw.lastRev + 1)
				}
			})
		}
	}
}
