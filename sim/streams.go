package sim

import (
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Watches that share a stream. clientv3 puts every watch made with one
// context on one gRPC stream, and kube-apiserver's watch caches share
// theirs: a RequestProgress answer (watch ID -1) then speaks for every
// watch on the stream, a client's cancel ends one watch and not its
// neighbours, and responses are told apart by watch ID alone. One stream
// in three the sim opens carries one or two companions besides its
// client's own watch: on part of its keys or past them, often from an
// older revision (so that they catch up while the first is synced),
// with filters and options of their own, some with an ID the client
// picks (one in five of those a taken one, which etcd refuses), and half
// canceled by the client after a while.

// companionShare is the share of streams that carry companions;
// resumedCompanionShare, of those that resume a broken one.
const (
	companionShare        = 0.35
	resumedCompanionShare = 0.8
)

// companionID is the first watch ID a client picks for a companion:
// far above those the stream hands out itself (0, 1, 2...).
const companionID = 100

// watchRanges are the companions' key ranges beside their client's
// prefix: one key, part of the prefix, and everything from a key on
// (past the prefix).
var watchRanges = map[clientKind][][2]string{
	etcdClient: {{"/e/a", ""}, {"/e/hot", ""}, {"/e/a", "/e/c"}, {"/e/b", "/e0"}, {"/e/b", "\x00"}},
	kubeClient: {{"/registry/pods/a", ""}, {"/registry/pods/b", "/registry/pods/d"}, {"/registry/pods/c", "\x00"}},
}

// companions draws the watches that share cw's stream (none, mostly).
func (c *client) companions(cw *clientWatch) []*clientWatch {
	w := c.w
	share := companionShare
	if c.resuming {
		share = resumedCompanionShare
	}
	if !w.chance(share) {
		return nil
	}
	var out []*clientWatch
	for i := range 1 + w.rng.IntN(2) {
		spec := watchSpec{Key: cw.spec.Key, End: cw.spec.End, StartRev: cw.spec.StartRev,
			PrevKV: w.chance(0.5), Fragment: w.chance(0.3), ProgressNotify: w.chance(0.5)}
		if rs := watchRanges[c.kind]; w.chance(0.7) {
			r := rs[w.rng.IntN(len(rs))]
			spec.Key, spec.End = []byte(r[0]), []byte(r[1])
		}
		if spec.StartRev > 1 && w.chance(0.6) {
			spec.StartRev = max(1, spec.StartRev-1-w.rng.Int64N(64))
		}
		switch w.rng.IntN(4) {
		case 0:
			spec.NoPut = true
		case 1:
			spec.NoDelete = true
		}
		m := &clientWatch{spec: spec, lastRev: spec.StartRev - 1, companion: true, wid: -1}
		switch {
		case i > 0 && out[0].spec.WatchID != 0 && w.chance(0.2):
			m.spec.WatchID, m.dupOf = out[0].spec.WatchID, out[0]
		case w.chance(0.5):
			m.spec.WatchID = companionID + int64(i)
		}
		m.cancelAfter = -1
		if w.chance(0.5) {
			m.cancelAfter = w.between(20*time.Millisecond, time.Second)
		}
		out = append(out, m)
	}
	return out
}

// createRequest is the create of the watch spec describes.
func (s watchSpec) createRequest() *pb.WatchCreateRequest {
	req := &pb.WatchCreateRequest{Key: s.Key, RangeEnd: s.End, StartRevision: s.StartRev, WatchId: s.WatchID,
		PrevKv: s.PrevKV, Fragment: s.Fragment, ProgressNotify: s.ProgressNotify}
	if s.NoPut {
		req.Filters = append(req.Filters, pb.WatchCreateRequest_NOPUT)
	}
	if s.NoDelete {
		req.Filters = append(req.Filters, pb.WatchCreateRequest_NODELETE)
	}
	return req
}

// deliver hands a response of the stream to the watch it is for, as
// clientv3 does: a created response to the oldest create not yet
// answered, one of watch ID -1 (a RequestProgress answer) to every live
// watch of the stream, any other to the watch of its ID. A companion
// keeps what comes after its cancel, for the checker to refuse.
func (sub *watchSub) deliver(r *pb.WatchResponse) {
	c := sub.c
	if r.Created && len(sub.creating) > 0 {
		cw := sub.creating[0]
		sub.creating = sub.creating[1:]
		cw.wid = r.WatchId
		// The stream ended the watch whose ID the create reuses before
		// it took the create (its cancel came first): the ID was free.
		cw.wantRefused = cw.dupOf != nil && cw.dupOf.created && !cw.dupOf.ended
		c.watchResponse(cw, r)
		if cw.companion && cw.created {
			c.companionCreated(sub, cw)
		}
		return
	}
	if r.WatchId == -1 {
		for _, cw := range sub.cws {
			if cw.created && !cw.ended {
				c.watchResponse(cw, r)
			}
		}
		return
	}
	var to *clientWatch
	for _, cw := range sub.cws {
		if cw.wid == r.WatchId && cw.created && (to == nil || to.ended) {
			to = cw
		}
	}
	switch {
	case to == nil:
		c.w.note("c%d: a watch response for unknown watch %d dropped", c.idx, r.WatchId)
	case to.ended && to.companion:
		to.got = append(to.got, received(r))
	default:
		c.watchResponse(to, r)
	}
}

// companionCreated schedules the client's cancel of a companion.
func (c *client) companionCreated(sub *watchSub, cw *clientWatch) {
	if cw.cancelAfter < 0 {
		return
	}
	n, epoch := sub.node, sub.node.epoch
	c.w.after(cw.cancelAfter, "watch-cancel", func() {
		if cw.ended || c.w.stopped {
			return
		}
		c.w.note("c%d cancels its watch %d via %s", c.idx, cw.wid, n.name)
		c.w.sendToNode(c, n, "watch-cancel", func() {
			if n.epoch == epoch && n.subs[sub.id] == sub {
				sub.ws.Cancel(cw.wid)
			}
		})
	})
}

// endCompanions ends the companions of a stream that closed.
func (sub *watchSub) endCompanions() {
	for _, cw := range sub.cws {
		if cw.companion {
			cw.ended = true
		}
	}
}

// checkRefusedCreates: a create with a watch ID the stream already uses
// is refused (created and canceled at once, as etcd's "watcher already
// exists"), and nothing else comes for it.
func checkRefusedCreates(cw *clientWatch) error {
	if !cw.wantRefused || len(cw.got) == 0 {
		return nil
	}
	if r := cw.got[0]; !r.Canceled {
		return fmt.Errorf("a create with watch ID %d, already in use on its stream, was not refused", cw.spec.WatchID)
	}
	return nil
}
