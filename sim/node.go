package sim

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage/memkv"
)

// node is one simulated Axon instance: a core.Member driven in virtual
// time, with a clock of its own, that a crash wipes.
type node struct {
	w             *World
	idx           int
	name          string
	incarnation   int
	member        *core.Member
	drv           *driver.Driver
	offset        time.Duration // clock offset from true virtual time
	up            bool
	crashed       time.Duration // when it last crashed
	pausedUntil   time.Duration
	isolated      bool
	epoch         int                      // bumped by a crash: stale callbacks are dropped
	lastCommitted int64                    // the commit point when it last led
	calls         map[core.RequestID]*call // every call proposed here, for ground truth
	nextWatch     core.WatchID
	subs          map[core.WatchID]*watchSub
}

// watchSub is a client's watch stream served by this node while it
// leads: the driver's stream, as the server's Watch handler has one.
type watchSub struct {
	id   core.WatchID // the node's name for the stream
	c    *client
	cw   *clientWatch // the client's own watch, first on the stream
	node *node
	ws   *driver.WatchStream
	// cws are the stream's watches, cw first, then its companions
	// (sim/streams.go); creating, those whose created response has
	// not come yet, in order.
	cws, creating []*clientWatch
	lastAt        time.Duration // delivery time of the last message (FIFO stream)
	// flushing says a send of what the stream holds is scheduled.
	flushing bool
}

func newNode(w *World, idx int) *node {
	n := &node{w: w, idx: idx, name: fmt.Sprintf("n%d", idx)}
	n.start()
	return n
}

func (n *node) id() string { return fmt.Sprintf("%s.%d", n.name, n.incarnation) }

// clock is the node's wall clock: true time plus its offset.
func (n *node) clock() time.Duration { return wallEpoch + n.w.now + n.offset }

// wallEpoch puts the nodes' clocks where a server's are (nanoseconds
// since 1970, here November 2026), so that a deadline computed from one
// overflows here as it would there: a lease of etcd's longest TTL (9e9 s)
// did.
const wallEpoch = 1_795_000_000 * time.Second

func (n *node) start() {
	n.incarnation++
	n.up = true
	n.epoch++
	n.calls = map[core.RequestID]*call{}
	n.subs = map[core.WatchID]*watchSub{}
	n.member = core.NewMember(core.MemberConfig{
		ID: n.id(), Addr: n.name, Lease: leaseDuration, RenewEvery: renewEvery,
		MaxDrift: maxDrift, EngineDeadline: engineDeadline, Exclusive: n.w.cfg.Exclusive,
		Node: core.Config{RingSize: 64, RingBytes: n.w.plan.RingBytes, CatchUpBatch: n.w.plan.CatchUpBatch, MaxAttempts: cmp.Or(n.w.plan.MaxAttempts, 64), SweepBatch: 4, RevisionBatch: n.w.plan.RevisionBatch, MaxPending: n.w.plan.MaxPending, Testing: n.w.cfg.CoreKnobs},
	})
	n.drv = driver.New(driver.Config{Member: n.member, Clock: simClock{n}, Exec: simExec{n}, Transport: simTransport{n}, Binary: "sim",
		AuthSecret: func() ([]byte, error) { return []byte("sim secret"), nil }, KeyCacheBytes: n.w.plan.KeyCacheBytes,
		Testing: n.w.cfg.Knobs, Hooks: driver.Hooks{
			Check: func(m *core.Member) {
				if nd := m.Node(); nd != nil {
					n.w.checkTermLedOnce(n.id(), m.Term(), nd)
					n.lastCommitted = nd.Committed()
					if err := nd.Invariants(); err != nil && n.w.violation == nil {
						n.w.violation = fmt.Errorf("%s invariant: %w", n.id(), err)
					}
					n.checkCompacted(nd)
				}
				if h := n.drv.Hub(); h != nil {
					if err := h.Invariants(); err != nil && n.w.violation == nil {
						n.w.violation = fmt.Errorf("%s hub invariant: %w", n.id(), err)
					}
				}
			},
			Unclaimed: func(r core.Response) {
				if r.ID == 0 && r.Lease != 0 && r.Err == nil {
					n.w.expiries = append(n.w.expiries, expiry{lease: r.Lease, rev: r.Rev, at: n.w.now, wrote: r.Wrote})
				}
			},
			RoleChanged: func(m *core.Member) {
				n.w.note("%s role %s term=%d", n.id(), m.Role(), m.Term())
			},
			HandedOff: func(rec *core.ElectionRecord) {
				// Tell the successor at once rather than let it notice.
				if to := n.w.nodeAt(rec.Addr); to != nil {
					n.w.send(n, to, "transfer", func() { to.drv.Step(func(m *core.Member) { m.Refresh() }, nil) })
				}
			},
		}})
	n.w.note("%s start", n.id())
	n.tick()
}

// crash loses everything in memory; in-flight engine work is abandoned.
func (n *node) crash() {
	n.w.note("%s crash", n.id())
	n.up, n.crashed = false, n.w.now
	n.epoch++
	for _, id := range n.subIDs() {
		n.subs[id].c.watchBroken(n.subs[id].cw)
		n.subs[id].endCompanions()
	}
	n.subs = map[core.WatchID]*watchSub{}
}

// restart starts the node again if it is still down.
func (n *node) restart() {
	if !n.up {
		n.start()
	}
}

// subIDs lists the node's watches in order: map order must never leak
// into the run, or a seed would not replay.
func (n *node) subIDs() []core.WatchID {
	ids := make([]core.WatchID, 0, len(n.subs))
	for id := range n.subs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// on schedules fn on this node: dropped if the node crashed meanwhile,
// postponed while it is paused.
func (n *node) on(d time.Duration, what string, fn func()) {
	epoch := n.epoch
	var run func()
	run = func() {
		if n.epoch != epoch || !n.up {
			return
		}
		if n.w.now < n.pausedUntil {
			n.w.after(n.pausedUntil-n.w.now, what, run)
			return
		}
		// The member sees the clock before anything else happens: a
		// leader whose lease ran out (say, during a pause) must step
		// down before it hands out more engine work.
		n.member.Tick(n.clock())
		fn()
	}
	n.w.after(d, what, run)
}

func (n *node) tick() {
	n.on(tickEvery, "tick", func() {
		n.process()
		n.tick()
	})
}

// process acts on everything the member asks for.
func (n *node) process() { n.drv.Step(nil, nil) }

// simClock is a node's clock, with its drift, and timers on it that a
// crash cancels.
type simClock struct{ n *node }

func (c simClock) Now() time.Duration { return c.n.clock() }

func (c simClock) AfterFunc(d time.Duration, f func()) { c.n.on(d, "backoff", f) }

// simExec runs work against the faulty engine in virtual time.
type simExec struct{ n *node }

// Exec runs w for the driver that handed it out, as the server's
// executor does.
func (e simExec) Exec(d *driver.Driver, w *core.Work) { e.n.runWork(d, w) }

func (n *node) latency() time.Duration { return n.w.between(0, n.w.plan.EngineLatency) }

// runWork executes one work item through the driver's Job, as the
// server's executor does: begin, read or evaluate and buffer writes now
// (the snapshot), commit after the engine's latency, report after the
// commit's. A commit later than half the engine deadline after begin is
// refused: the deadline is what makes leader changes safe.
func (n *node) runWork(d *driver.Driver, wk *core.Work) {
	ctx := context.Background()
	began := n.clock()
	var slow time.Duration
	if wk.Kind == core.WorkCompact && n.w.transferOnCompact {
		// The deferred transfer fault: hand over while this compaction
		// is being stored, and slowly (within the engine deadline).
		n.w.transferOnCompact = false
		slow = n.w.between(0, engineDeadline/2-n.w.plan.EngineLatency)
		n.w.after(0, "transfer", n.transferAway)
	}
	j := d.StartWork(ctx, nodeEngine{n.w}, wk)
	if j.Txn() == nil {
		n.on(n.latency(), "work failed", func() { n.finish(d, wk, j.Result) })
		return
	}
	mtx := memTxn(j.Txn())
	if j.Done {
		what := "work read-only"
		switch wk.Kind {
		case core.WorkCatchUp:
			what = "catchup"
		case core.WorkRecover:
			what = "recovered"
			n.w.checkWellFormed(n, "recovery", j.Result.Err)
			if j.Result.Err != nil {
				n.w.note("%s recover failed: %v", n.id(), j.Result.Err)
			}
		}
		n.on(mtx.Delay(), what, func() { n.finish(d, wk, j.Result) })
		return
	}
	n.on(mtx.Delay()+slow, "commit", func() {
		if n.clock()-began > engineDeadline/2 {
			n.finish(d, wk, j.Abort(fmt.Errorf("engine deadline passed")))
			return
		}
		before := mtx.Delay()
		r := j.Commit(ctx)
		eff, out := r.Effects, r.Outcome
		if wk.Kind == core.WorkRequest && wk.ID == 0 && wk.Lease != nil && out != core.NotApplied {
			a := attempt{rev: wk.Rev, term: wk.Term, lease: leaseReply{id: wk.Lease.ID}, by: n.w.now + n.w.plan.Engine.MaxApplyAfter}
			if wk.Rev == 0 {
				// It took no revision: place it at the commit point of
				// the node that handed it out (it may have stepped down
				// since; no successor starts before this lands).
				a.readAt = n.lastCommitted
			}
			n.w.expiryAttempts = append(n.w.expiryAttempts, a)
			if out == core.Committed {
				n.w.expired = append(n.w.expired, expired{lease: wk.Lease.ID, at: n.w.now, by: n.id()})
			}
		}
		if wk.Kind == core.WorkRequest && wk.Lease != nil && wk.Lease.Revoke && out != core.NotApplied {
			n.w.revokes = append(n.w.revokes, expired{lease: wk.Lease.ID, at: n.w.now, by: n.id()})
		}
		if out != core.NotApplied {
			n.recordAttempts(wk, eff)
		}
		if out == core.Uncertain && n.w.cfg.Exclusive && n.w.plan.CrashEvery > 0 && n.w.chance(0.5) {
			// The process dies with its commit in flight.
			n.w.crashNode("crash in commit", n)
			return
		}
		n.on(mtx.Delay()-before, "committed", func() { n.finish(d, wk, r) })
	})
}

// recordAttempts notes, for ground truth, the revisions at which a commit
// that may have applied carried each client call.
func (n *node) recordAttempts(wk *core.Work, eff *core.Effects) {
	switch wk.Kind {
	case core.WorkBatch:
		for i, sub := range wk.Batch {
			if eff != nil && i < len(eff.Batch) {
				n.recordAttempts(sub, eff.Batch[i])
			}
		}
	case core.WorkRequest:
		// Work never dealt changed no key: no revision tells whether it
		// applied, and nothing but a lease record depends on it.
		if c := n.calls[wk.ID]; c != nil && wk.Rev != 0 {
			a := attempt{rev: wk.Rev, term: wk.Term, eff: eff, by: n.w.now + n.w.plan.Engine.MaxApplyAfter}
			if wk.Lease != nil {
				a.lease = leaseReply{id: wk.Lease.ID, ttl: wk.Lease.TTL}
			}
			c.attempts = append(c.attempts, a)
		}
	}
}

// describeWork is core.DescribeWork for the trace: an election's
// deadline, on its node's clock, less that clock's wall-clock epoch (so
// near the world's time, off by the node's clock offset).
func describeWork(wk *core.Work) string {
	if wk.Kind == core.WorkElect && wk.Elect != nil && !wk.Elect.Observe {
		c, e := *wk, *wk.Elect
		e.Next.Deadline -= wallEpoch
		c.Elect = &e
		return core.DescribeWork(&c)
	}
	return core.DescribeWork(wk)
}

func (n *node) finish(d *driver.Driver, wk *core.Work, r driver.Result) {
	if wk.Kind != core.WorkSweep && wk.Kind != core.WorkCatchUp && wk.Kind != core.WorkRecover {
		n.w.note("%s %s -> %v %v", n.id(), describeWork(wk), r.Outcome, errText(r.Err))
	}
	// A catch-up may meet history a compaction's sweep is taking (core
	// cancels its watch as compacted); a recovery was checked already.
	if r.Err != nil && wk.Kind != core.WorkRecover && wk.Kind != core.WorkCatchUp {
		n.w.checkWellFormed(n, describeWork(wk), r.Err)
	}
	d.Done(wk, r)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// transferAway hands the lead to another node, if it is up.
func (n *node) transferAway() {
	to := n.w.nodes[(n.idx+1+n.w.rng.IntN(len(n.w.nodes)-1))%len(n.w.nodes)]
	if to.up {
		n.transfer(to)
	}
}

// transfer hands the lead to node to through the driver, as the server's
// MoveLeader does.
func (n *node) transfer(to *node) {
	now, refused, epoch := true, false, n.epoch
	n.drv.Transfer(to.id(), to.name, func(err error) {
		if now {
			refused = err != nil // not leading any more
			return
		}
		if n.epoch == epoch {
			n.w.note("%s transfer to %s: %v", n.id(), to.id(), errText(err))
		}
	})
	now = false
	if !refused {
		n.w.fault("transfer", "%s -> %s", n.id(), to.id())
	}
}

// answer is what a node replies to a call.
type answer struct {
	resp  *pb.ResponseOp
	lease leaseReply
	rev   int64
	query *leaseQuery
}

// handle serves a client call that reached this node and replies.
func (n *node) handle(c *call) {
	n.serve(c, false, func(a answer, err error) { n.reply(c, a, err) })
}

// serve runs a call through the driver: a range at a read index, the rest
// on the leader, where the driver's Attempt says (forwarded calls come
// from another node and are not sent on). It is the server's lead in
// callbacks: the simulator's IO answers later, in virtual time.
func (n *node) serve(c *call, forwarded bool, reply func(answer, error)) {
	if c.done {
		return
	}
	if c.in.kind == opRange && !forwarded {
		n.rangeRead(c, reply)
		return
	}
	var got answer
	n.drv.Lead(forwarded, func() bool { return !c.done }, func(addr string, done func(driver.Answer)) {
		answered := func(err error) { done(driver.Answer{Rev: got.rev, Err: err}) }
		if addr == "" {
			n.local(c, &got, answered)
			return
		}
		n.forward(c, addr, &got, answered)
	}, func(err error) {
		if err == nil && c.in.kind == opCompact {
			// As the server: the hub hears of it before the client.
			n.drv.LearnCompacted(c.in.rev)
		}
		reply(got, err)
	})
}

// local runs a call on this node through the driver's typed requests:
// core.ErrNotLeader if it does not lead.
func (n *node) local(c *call, got *answer, done func(error)) {
	if n.member.Node() == nil {
		done(core.ErrNotLeader)
		return
	}
	submit := func(start func(answer func(core.Response)) core.RequestID) {
		if !n.propose(c, start, func(a answer, err error) {
			*got = a
			done(err)
		}) {
			done(core.ErrNotLeader)
		}
	}
	// checked submits once the call passes the auth check.
	checked := func(start func(answer func(core.Response)) core.RequestID) {
		n.authorizeLeader(c, func(err error) {
			if err != nil {
				done(err)
				return
			}
			submit(start)
		})
	}
	d := n.drv
	switch c.in.kind {
	case opWrite:
		checked(func(a func(core.Response)) core.RequestID { return d.Write(c.in.write, a) })
	case opGrant:
		submit(func(a func(core.Response)) core.RequestID { return d.Grant(c.in.lease, c.in.ttl, a) })
	case opRevoke:
		checked(func(a func(core.Response)) core.RequestID { return d.Revoke(c.in.lease, a) })
	case opCompact:
		checked(func(a func(core.Response)) core.RequestID {
			if !c.in.physical {
				return d.Compact(c.in.rev, a)
			}
			return d.Compact(c.in.rev, func(r core.Response) { n.awaitSweep(c, r, a) })
		})
	case opKeepAlive:
		submit(func(a func(core.Response)) core.RequestID { return d.KeepAlive(c.in.lease, a) })
	case opAuth:
		n.changeAuth(c, done)
	case opAlarm:
		submit(func(a func(core.Response)) core.RequestID { return d.SetAlarm(c.in.alarm.member, c.in.alarm.raise, a) })
	case opTimeToLive, opLeases:
		n.leaseQuery(c, got, done)
	}
}

// forward sends a call to the leader at addr.
func (n *node) forward(c *call, addr string, got *answer, done func(error)) {
	to := n.w.nodeAt(addr)
	if to == nil {
		done(core.ErrNotLeader)
		return
	}
	n.w.call(n, to, "forward", func(reply func(answer, error)) { to.serve(c, true, reply) }, func(a answer, err error) {
		*got = a
		done(err)
	})
}

// propose starts a call through one of the driver's typed requests
// (start returns its request ID, 0 if the node does not lead); its answer
// comes to answered (ErrLeaderChanged, an unknown outcome, if the lead is
// lost). It reports whether the node leads; if not, answered is never
// called.
func (n *node) propose(c *call, start func(answer func(core.Response)) core.RequestID, answered func(answer, error)) bool {
	id := start(func(r core.Response) {
		// Only an answer that it applied releases it: a refusal
		// (ErrNotLeader while handing over) sends it on to the next leader.
		if r.Err == nil {
			if c.released == 0 {
				c.released = n.w.now
			}
			c.wrote = r.Wrote
		}
		answered(answer{resp: r.Response, lease: leaseReply{id: r.Lease, ttl: r.LeaseTTL}, rev: r.Rev}, r.Err)
	})
	if id != 0 {
		n.calls[id] = c // for ground truth: the work item carries the ID
	}
	return id != 0
}

// readPoint is the driver's ReadPoint, checked against the truth: a
// member serves reads at its own commit point only while the election
// record in the engine still names it in its term. Once it names another
// (a handover landed, even if its writer has not heard), the successor
// may acknowledge writes this member's reads would not see.
func (n *node) readPoint() (rev, compacted int64, ok bool) {
	rev, compacted, ok = n.drv.ReadPoint()
	if !ok || n.w.violation != nil {
		return rev, compacted, ok
	}
	v, found := n.w.eng.Peek(core.MetaKey(core.MetaLeader))
	var rec *core.ElectionRecord
	if found {
		rec, _ = core.DecodeElectionRecord(v)
	}
	if rec == nil || rec.Holder != n.id() || rec.Term != n.member.Term() {
		n.w.violation = fmt.Errorf("%s serves reads at r%d in term %d, but the election record is %+v", n.id(), rev, n.member.Term(), rec)
	}
	return rev, compacted, ok
}

// checkCompacted holds a leading node's compact revision against the
// truth: the engine's stored one may be ahead only by a compaction this
// node is storing. Ahead by more, another leader's compaction landed after
// this one recovered, and it serves history the sweep has taken.
func (n *node) checkCompacted(nd *core.Node) {
	v, found := n.w.eng.Peek(core.MetaKey(core.MetaCompact))
	if !found || len(v) != 8 || n.w.violation != nil {
		return
	}
	if stored := int64(binary.BigEndian.Uint64(v)); stored > max(nd.Compacted(), nd.Compacting()) {
		n.w.violation = fmt.Errorf("%s leads with compact revision r%d (storing r%d), but the engine holds r%d", n.id(), nd.Compacted(), nd.Compacting(), stored)
	}
}

// rangeRead serves a range at this node's read point if it serves reads,
// else at a read index from the leader.
func (n *node) rangeRead(c *call, done func(answer, error)) {
	c.readBy, c.readFrom = n.id(), n.w.now
	served := done
	done = func(a answer, err error) {
		c.readTo = n.w.now
		served(a, err)
	}
	if rev, compacted, ok := n.readPoint(); ok {
		n.read(c, rev, compacted, done)
		return
	}
	if rev := n.drv.FollowerPoint(c.in.rng.Serializable); rev > 0 {
		n.followerRead(c, rev, done)
		return
	}
	n.drv.ReadIndex(func(rev int64, err error) {
		if err != nil {
			done(answer{}, err)
			return
		}
		n.followerRead(c, rev, done)
	})
}

// followerRead reads at commit point rev on a follower, which may stall
// first (a GC pause, a busy engine): writes, compactions and sweeps pass
// its point meanwhile.
func (n *node) followerRead(c *call, rev int64, done func(answer, error)) {
	if n.w.chance(n.w.plan.SlowReadShare) {
		d := n.w.between(50*time.Millisecond, time.Second)
		n.w.fault("slow-read", "%s reads at r%d after %v", n.name, rev, d)
		n.on(d, "slow read", func() { n.read(c, rev, -1, done) })
		return
	}
	n.read(c, rev, -1, done)
}

// read serves a range at a commit point; compacted < 0 reads the compact
// revision from the engine (a follower's). The snapshot begins now; on a
// leader that must load the auth store, the rest may stall (authStall).
func (n *node) read(c *call, rev, compacted int64, done func(answer, error)) {
	led := compacted >= 0
	// As the server's range: the driver looks at the auth store, then
	// begins the snapshot (and reads a follower's compact revision).
	r, err := n.drv.BeginRead(context.Background(), n.w.eng, rev, compacted, led)
	if err != nil {
		n.w.checkWellFormed(n, "range", err)
		n.on(n.latency(), "read failed", func() { done(answer{}, err) })
		return
	}
	serve := func() {
		var resp *pb.RangeResponse
		ahead, err := driver.Reader(r.Txn, core.RangeLookahead(c.in.rng, rev))
		if err == nil {
			err = n.authorizeRead(c, r.Auth, ahead)
		}
		if err == nil {
			resp, err = n.rangeAnswer(ahead, c.in.rng, rev, r.Compacted)
		}
		r.Txn.Rollback()
		n.w.checkWellFormed(n, "range", err)
		d := r.Txn.(*memkv.Txn).Delay()
		n.on(d, "read", func() {
			var op *pb.ResponseOp
			if resp != nil {
				op = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: resp}}
			}
			done(answer{resp: op, rev: rev}, err)
		})
	}
	if stall := n.authStall(r.Auth, led); stall > 0 {
		n.on(stall, "slow auth read", serve)
		return
	}
	serve()
}

// rangeAnswer answers a range as the server does: as a Range, or, for
// three in ten that can be paged, as RangeStream does, page after page
// of 1–3 keys from one snapshot (core.RangePages), which the client puts
// together.
func (n *node) rangeAnswer(rd core.Reader, req *pb.RangeRequest, rev, compacted int64) (*pb.RangeResponse, error) {
	if !core.Pageable(req) || !n.w.chance(0.3) {
		return core.Range(rd, req, rev, compacted)
	}
	pages, err := core.NewRangePages(rd, req, rev, compacted)
	if err != nil {
		return nil, err
	}
	pages.Testing = n.w.cfg.CoreKnobs
	var kvs []*mvccpb.KeyValue
	for {
		resp, done, err := pages.Next(1+n.w.rng.IntN(3), nil)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, resp.Kvs...)
		if done {
			resp.Kvs = kvs
			return resp, nil
		}
	}
}

type leaseReply struct{ id, ttl int64 }

// reply sends a call's answer back to its client.
func (n *node) reply(c *call, a answer, err error) {
	if err == nil {
		c.answeredBy, c.answeredAt = n.id(), n.w.now
	}
	n.w.sendToClient(n, c.client, "reply", func() {
		if !c.done {
			c.query = a.query
		}
		c.client.answered(c, a.resp, a.lease, a.rev, err)
	})
}
