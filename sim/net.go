package sim

import (
	"context"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
)

// idempotent lists the node-to-node messages a network may duplicate:
// Axon's RPCs run over gRPC streams, which never duplicate, but a client
// or proxy may repeat a read-index query or a transfer notice.
var idempotent = map[string]bool{"readindex": true, "readindex-reply": true, "transfer": true}

// send delivers fn as a message from node a to node b: delayed, maybe
// lost or (if idempotent) duplicated, never across a partition.
func (w *World) send(a, b *node, what string, fn func()) {
	if a.isolated || b.isolated || w.chance(w.plan.NetDrop) {
		w.note("drop %s %s->%s", what, a.name, b.name)
		return
	}
	copies := 1
	if idempotent[what] && w.chance(w.plan.NetDup) {
		w.fault("duplicate", "%s %s->%s", what, a.name, b.name)
		copies = 2
	}
	epoch := b.epoch
	for range copies {
		b.on(w.between(0, w.plan.NetDelay), what, func() {
			if b.epoch == epoch {
				fn()
			}
		})
	}
}

// rpcTimeout is how long a node waits for another's answer before it
// takes the call as broken off (its outcome unknown).
const rpcTimeout = time.Second

// call sends a request from node a to node b and calls done on a with
// b's answer, or with core.ErrTimeout if none comes within rpcTimeout (a
// lost request or answer: the request may have been served).
func (w *World) call(a, b *node, what string, serve func(reply func(answer, error)), done func(answer, error)) {
	over := false
	// An answer reaches the incarnation that asked, or nobody: its
	// connection died with it, as a crashed server's does.
	epoch := a.epoch
	finish := func(an answer, err error) {
		if !over && a.epoch == epoch {
			over = true
			done(an, err)
		}
	}
	a.on(rpcTimeout, what+"-timeout", func() { finish(answer{}, core.ErrTimeout) })
	w.send(a, b, what, func() {
		serve(func(an answer, err error) { w.send(b, a, what+"-reply", func() { finish(an, err) }) })
	})
}

// nodeAt is the node listening at addr (its name).
func (w *World) nodeAt(addr string) *node {
	for _, n := range w.nodes {
		if n.name == addr {
			return n
		}
	}
	return nil
}

// simTransport is a node's side of the simulated network between nodes.
type simTransport struct{ n *node }

func (t simTransport) ReadIndex(addr string, done func(int64, error)) {
	n := t.n
	to := n.w.nodeAt(addr)
	if to == nil {
		done(0, core.ErrNotLeader)
		return
	}
	n.w.call(n, to, "readindex", func(reply func(answer, error)) {
		rev, _, ok := to.readPoint()
		if !ok {
			reply(answer{}, core.ErrNotLeader)
			return
		}
		reply(answer{rev: rev}, nil)
	}, func(a answer, err error) { done(a.rev, err) })
}

// sendToClient delivers a node's answer to a client.
func (w *World) sendToClient(a *node, c *client, what string, fn func()) {
	if a.isolated || w.chance(w.plan.NetDrop) {
		w.note("drop %s %s->c%d", what, a.name, c.idx)
		return
	}
	w.after(w.between(0, w.plan.NetDelay), what, fn)
}

// sendToNode delivers a client's request to a node.
func (w *World) sendToNode(c *client, b *node, what string, fn func()) {
	if b.isolated || w.chance(w.plan.NetDrop) {
		w.note("drop %s c%d->%s", what, c.idx, b.name)
		return
	}
	b.on(w.between(0, w.plan.NetDelay), what, fn)
}

// streamDelay keeps a watch stream FIFO: a message never overtakes the
// previous one.
func (w *World) streamDelay(sub *watchSub) time.Duration {
	at := max(sub.lastAt, w.now+w.between(0, w.plan.NetDelay))
	sub.lastAt = at
	return at - w.now
}

// createWatch registers a client's watch on the leader's node.
func (n *node) createWatch(c *client, cw *clientWatch, hops int) {
	nd := n.member.Node()
	if nd == nil {
		// A follower proxies the watch to the leader it learns from the
		// driver, as the server's proxyWatch does.
		refuse := func() { n.w.sendToClient(n, c, "watch-refused", func() { c.watchBroken(cw) }) }
		if hops >= 2 || n.isolated {
			refuse()
			return
		}
		epoch := n.epoch
		n.drv.LeaderAddr(func() bool { return !cw.ended && n.epoch == epoch }, func(addr string, ok bool) {
			l := n.w.nodeAt(addr)
			switch {
			case n.epoch != epoch:
			case ok && l != nil:
				n.w.send(n, l, "forward-watch", func() { l.createWatch(c, cw, hops+1) })
			case n.member.Node() != nil:
				n.createWatch(c, cw, hops+1) // it leads now
			default:
				refuse()
			}
		})
		return
	}
	n.nextWatch++
	id := n.nextWatch
	sub := &watchSub{c: c, cw: cw, lastAt: n.w.now, out: driver.NewOutbox[core.WatchResponse](n.w.plan.WatchQueue)}
	n.subs[id] = sub
	cw.node, cw.nodeEpoch, cw.id = n, n.epoch, id
	if err := nd.AddWatch(core.Watch{ID: id, Key: cw.spec.Key, End: cw.spec.End, StartRev: cw.spec.StartRev, PrevKV: cw.spec.PrevKV, NoDelete: cw.spec.NoDelete}); err != nil {
		delete(n.subs, id)
		n.w.sendToClient(n, c, "watch-refused", func() { c.watchBroken(cw) })
		return
	}
	n.w.after(n.w.streamDelay(sub), "watch-created", func() { c.watchCreated(cw) })
	n.process()
}

// deliverWatch queues a node watch response on its stream's outbox,
// which cuts the watcher off if its client has let too many pile up.
func (n *node) deliverWatch(nd *core.Node, wr core.WatchResponse) {
	sub := n.subs[wr.ID]
	if sub == nil {
		return
	}
	if n.isolated {
		delete(n.subs, wr.ID)
		nd.CancelWatch(wr.ID)
		n.w.after(0, "watch-broken", func() { sub.c.watchBroken(sub.cw) })
		return
	}
	switch {
	case !sub.out.Admit(nd, wr):
		n.w.fault("slow-watcher", "%s cuts c%d's watch off at r%d: %d responses unsent", n.name, sub.c.idx, sub.cw.lastRev, sub.out.Len())
		delete(n.subs, wr.ID)
		wr = core.WatchResponse{ID: wr.ID, Canceled: true, Revision: wr.Revision}
	case wr.Canceled:
		delete(n.subs, wr.ID)
	}
	sub.out.Push(wr)
	n.flush(sub)
}

// flush sends what the stream's outbox holds, in order, after a network
// delay; a client that has stopped reading takes nothing until it reads
// again, so meanwhile its outbox fills.
func (n *node) flush(sub *watchSub) {
	if sub.flushing {
		return
	}
	sub.flushing = true
	d := n.w.streamDelay(sub)
	if until := sub.cw.stalledUntil; until > n.w.now+d {
		d, sub.lastAt = until-n.w.now, until
	}
	n.w.after(d, "watch-event", func() {
		sub.flushing = false
		if sub.cw.stalledUntil > n.w.now {
			n.flush(sub)
			return
		}
		sub.taken = append(sub.taken, sub.out.Take()...)
		for len(sub.taken) > 0 {
			// As the server's sender: read the previous values the
			// events lack, from the engine, before sending.
			if n.w.cfg.Plants.SkipPrevReads {
				sub.taken[0].Unread = nil
			}
			if err := driver.ReadPrev(context.Background(), n.w.eng, &sub.taken[0]); err != nil {
				n.w.checkWellFormed(n, "previous values' read", err)
				n.w.note("%s: watch of c%d waits for previous values: %v", n.name, sub.c.idx, err)
				n.w.after(n.latency()+time.Millisecond, "watch-retry", func() { n.flush(sub) })
				return
			}
			wr := sub.taken[0]
			sub.taken = sub.taken[1:]
			sub.c.watchResponse(sub.cw, wr)
		}
	})
}

// requestProgress asks the node to answer a client's progress request
// once its watch is synced; the answer comes in stream order with the
// watch's events (deliverWatch).
func (n *node) requestProgress(id core.WatchID) {
	if n.subs[id] == nil {
		return
	}
	n.drv.Step(nil, func(nd *core.Node) { nd.RequestProgress(id) })
}
