package sim

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

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

// watchFragmentBytes is where the simulated streams split a response of a
// watch created with fragment: small, so that most such responses of
// several events are split.
const watchFragmentBytes = 160

// createWatch opens a client's watch stream on this node, with cw's
// watch and the companions that share it: every node serves watches,
// from its hub.
func (n *node) createWatch(c *client, cw *clientWatch, more []*clientWatch) {
	n.nextWatch++
	sub := &watchSub{id: n.nextWatch, c: c, cw: cw, node: n, lastAt: n.w.now}
	sub.ws = n.drv.NewWatchStream(driver.WatchConfig{
		Limit: n.w.plan.WatchQueue, FragmentBytes: watchFragmentBytes,
		Header: func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} },
		Slow: func(int64) {
			n.w.fault("slow-watcher", "%s cuts c%d's watch off at r%d: %d responses unsent", n.name, c.idx, cw.lastRev, sub.ws.Pending())
		},
		Queued: func() { n.flush(sub) },
	})
	n.subs[sub.id] = sub
	notify := false
	for _, x := range append([]*clientWatch{cw}, more...) {
		x.node, x.nodeEpoch, x.id = n, n.epoch, sub.id
		x.openedBy, x.openedAt = n.id(), n.w.now
		sub.cws = append(sub.cws, x)
		sub.creating = append(sub.creating, x)
		sub.ws.Create(x.spec.createRequest())
		notify = notify || x.spec.ProgressNotify
	}
	if cw.spec.ProgressAtOnce {
		sub.ws.RequestProgress()
	}
	if notify {
		n.notifyProgress(sub)
	}
}

// notifyProgress has the stream send its progress_notify watches their
// progress now and then, as the server's sender does every
// --experimental-watch-progress-notify-interval (here far shorter).
func (n *node) notifyProgress(sub *watchSub) {
	n.on(n.w.between(20*time.Millisecond, 300*time.Millisecond), "progress-notify", func() {
		if n.subs[sub.id] != sub {
			return
		}
		sub.ws.NotifyProgress()
		n.notifyProgress(sub)
	})
}

// flush sends what the stream holds, in order, after a network delay; a
// client that has stopped reading takes nothing until it reads again, so
// meanwhile the stream's outbox fills. It runs with the driver's lock
// held (WatchConfig.Queued): it only schedules.
func (n *node) flush(sub *watchSub) {
	if sub.flushing {
		return
	}
	sub.flushing = true
	d := n.w.streamDelay(sub)
	if until := sub.cw.stalledUntil; until > n.w.now+d {
		d, sub.lastAt = until-n.w.now, until
	}
	epoch := n.epoch
	n.w.after(d, "watch-event", func() {
		sub.flushing = false
		switch {
		case n.epoch != epoch || n.subs[sub.id] != sub:
			return // the node crashed, or stopped serving the stream
		case sub.cw.ended || n.isolated:
			// The client has gone, or the connection to it broke: the
			// stream closes, and its watches with it.
			delete(n.subs, sub.id)
			sub.ws.Close()
			sub.c.watchBroken(sub.cw)
			sub.endCompanions()
			return
		case sub.cw.stalledUntil > n.w.now:
			n.flush(sub)
			return
		}
		// As the server's sender: the driver reads the previous values
		// the events lack, from the engine, before they go.
		rs, err := sub.ws.Next(context.Background(), n.w.eng)
		if err != nil {
			n.w.checkWellFormed(n, "previous values' read", err)
			n.w.note("%s: watch of c%d waits for previous values: %v", n.name, sub.c.idx, err)
			n.w.after(n.latency()+time.Millisecond, "watch-retry", func() { n.flush(sub) })
			return
		}
		for _, r := range rs {
			sub.deliver(r)
		}
	})
}

// requestProgress asks the stream for etcd's RequestProgress answer,
// which comes in stream order with the watch's events.
func (n *node) requestProgress(id core.WatchID) {
	if sub := n.subs[id]; sub != nil {
		sub.ws.RequestProgress()
	}
}
