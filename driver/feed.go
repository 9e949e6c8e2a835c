package driver

import (
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/axon-kv/axon/core"
)

// Every member serves its clients' watches from its own hub (core.Hub),
// fed by one stream of the leader's committed revisions: its feed. On the
// leader the feed is a watch on its own node, whose responses go to the
// hub in the step that made them (no stream, no goroutine between); on a
// follower it is the same watch on the leader's node, carried by the
// Transport. When the
// leader changes, the feed resumes from the hub's revision on the new
// one, and the members' watch streams go on: no client watch ends
// because a leader died.
//
// A feed is a WatchStream opened by NewFeedStream, with one watch of the
// whole keyspace with previous values, in etcd's wire form, but for three
// meanings of its own: a response's header revision is the revision the
// feed is synced to (not the leader's commit point); its CompactRevision
// is the leader's compact revision (not only on a cancellation); and a
// previous value the write did not read is not read for the feed either,
// but marked (core.FeedEvents), so that it is read only by the
// streams that want it. Its responses hold whole revisions once fragments
// are put together.

// FeedProgressEvery is how often a feed stream sends its revision when it
// is synced: the revisions with no events (a fenced one) reach the hubs,
// and with them progress notifications.
const FeedProgressEvery = 100 * time.Millisecond

// FeedSilence is how long a member waits without a word from its feed
// before it takes the feed as broken and opens another: a leader that
// vanished without closing the stream (a partition, a frozen process)
// would otherwise hold the hub, and every watch on it, until the next
// leader change. A live feed speaks every FeedProgressEvery.
const FeedSilence = 2 * time.Second

// Feed is one stream of the leader's revisions into this member's hub,
// opened by the Transport's host (Transport.Follow), which hands what it
// receives to Got and says once, by End, that it ended.
type Feed struct {
	d *Driver
	// Addr is the leader's ("" for this member's own feed, which the
	// driver serves itself: watch).
	Addr string
	// watch is the local feed's watch on this member's node.
	watch core.WatchID
	// From is the first revision wanted; 0: from the leader's commit
	// point (the hub is not anchored yet).
	From  int64
	term  int64
	done  chan struct{}
	heard time.Duration // when it last spoke, on the member's clock
	// frags holds the events of a response received in fragments.
	frags []*mvccpb.Event
}

// Done closes when the driver no longer wants the feed: the host stops
// it (and need not call End).
func (f *Feed) Done() <-chan struct{} { return f.done }

// Got hands the hub what the feed received, in order. It reports whether
// the feed goes on; when false the host stops it.
func (f *Feed) Got(rs []*pb.WatchResponse) bool {
	var more bool
	f.d.Step(func(*core.Member) { more = f.d.feedGot(f, rs) }, nil)
	return more
}

// End says the feed ended (err: why, for the log); it resumes from the
// hub's revision, on whichever member leads then.
func (f *Feed) End(err error) {
	f.d.Step(func(*core.Member) {
		if f.d.feed == f {
			if err != nil && f.d.cfg.Log != nil {
				f.d.cfg.Log.Debug("watch feed ended", "leader", f.Addr, "err", err)
			}
			f.d.dropFeed(true)
		}
	}, nil)
}

// NewFeedStream opens, on the leader, the feed of a member whose hub is
// synced to from-1 (from 0: not anchored, from the commit point). If this
// member does not lead the stream is stopped at once (Done).
func (d *Driver) NewFeedStream(from int64, cfg WatchConfig) *WatchStream {
	ws := d.newWatchStream(cfg, true)
	ws.Create(&pb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: from,
		PrevKv: true, ProgressNotify: true, Fragment: cfg.FragmentBytes > 0})
	return ws
}

// Anchored reports whether the member's hub is anchored: its first feed
// has spoken.
func (d *Driver) Anchored() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hub != nil
}

// Hub is the member's watch hub, nil until its first feed anchored it;
// read it with the lock held (the simulator's checks).
func (d *Driver) Hub() *core.Hub { return d.hub }

// LearnCompacted tells the hub of a compaction the leader answered,
// before its client hears of it: a watch created here afterwards from
// below it is canceled, as in etcd, whatever the feed has brought yet.
func (d *Driver) LearnCompacted(rev int64) {
	if d.cfg.Testing.CompactionsLearnedLate {
		return
	}
	d.Step(func(*core.Member) { d.onHub(func(h *core.Hub) { h.Compact(rev) }) }, nil)
}

// onHub runs f against the hub, or once the first feed anchors it. Called
// with the lock held.
func (d *Driver) onHub(f func(h *core.Hub)) {
	if d.hub == nil {
		d.hubWaiting = append(d.hubWaiting, f)
		return
	}
	f(d.hub)
}

// feedGot takes a feed's responses into the hub. Called with the lock.
func (d *Driver) feedGot(f *Feed, rs []*pb.WatchResponse) bool {
	if d.feed != f {
		return false
	}
	f.heard = d.cfg.Clock.Now()
	for _, r := range rs {
		rev := r.GetHeader().GetRevision()
		switch {
		case r.Canceled:
			d.feedCanceled(r.CompactRevision)
			return false
		case r.Created:
			if d.hub == nil {
				d.anchor(rev, r.CompactRevision)
			}
		case d.hub == nil:
		case r.Fragment:
			f.frags = append(f.frags, r.Events...)
		default:
			evs := r.Events
			if len(f.frags) > 0 {
				evs = append(f.frags, evs...)
				f.frags = nil
			}
			d.hub.Publish(evs, rev, r.CompactRevision)
			d.learn(rev)
		}
	}
	return true
}

// anchor makes the hub, synced to rev, and runs what waited for it.
// Called with the lock.
func (d *Driver) anchor(rev, compacted int64) {
	d.hub = core.NewHub(d.m.Config().Node, rev, compacted)
	waiting := d.hubWaiting
	d.hubWaiting = nil
	for _, f := range waiting {
		f(d.hub)
		// What the hub answered f goes out before anything a later
		// waiting call's stream sends at once: a watch from below the
		// compaction is canceled before a progress answer of its stream.
		if !d.cfg.Testing.LateAnchorOutputs {
			d.hubReady()
		}
	}
}

// dropFeed forgets the feed; retry says it failed, so that the next one
// waits RetryEvery rather than start at once against the same leader.
// Called with the lock.
func (d *Driver) dropFeed(retry bool) {
	f := d.feed
	if f == nil {
		return
	}
	d.feed = nil
	if n := d.m.Node(); f.watch != 0 && n != nil {
		n.CancelWatch(f.watch)
	}
	close(f.done)
	if retry && !d.feedPaused {
		d.feedPaused = true
		d.cfg.Clock.AfterFunc(d.retryEvery(), func() {
			d.Step(func(*core.Member) { d.feedPaused = false }, nil)
		})
	}
}

// follow keeps one feed open to the member that leads, as this member
// knows it, and returns the call that opens a new one, to make once the
// lock is released. Called with the lock, from ready.
func (d *Driver) follow() func() {
	if d.cfg.Transport == nil {
		return nil
	}
	addr, term, ok := "", int64(0), false
	if d.m.Node() != nil {
		term, ok = d.m.Term(), true
	} else if rec, known := d.m.Leader(); known && rec.Holder != d.self && rec.Addr != "" {
		addr, term, ok = rec.Addr, rec.Term, true
	}
	if f := d.feed; f != nil && (!ok || f.Addr != addr || f.term != term) {
		d.dropFeed(false)
	}
	if d.feed != nil || !ok || d.feedPaused {
		return nil
	}
	from := int64(0)
	if d.hub != nil {
		from = d.hub.Committed() + 1
		if d.cfg.Testing.GapAtResume {
			from++
		}
	}
	f := &Feed{d: d, Addr: addr, From: from, term: term, done: make(chan struct{})}
	d.feed = f
	if addr == "" {
		d.followSelf(f)
		return nil
	}
	f.heard = d.cfg.Clock.Now()
	d.watchFeed(f)
	return func() { d.cfg.Transport.Follow(f) }
}

// watchFeed drops f, for another, once it has been silent for
// FeedSilence. Called with the lock.
func (d *Driver) watchFeed(f *Feed) {
	d.cfg.Clock.AfterFunc(FeedSilence/2, func() {
		d.Step(func(*core.Member) {
			if d.feed != f {
				return
			}
			if d.cfg.Clock.Now()-f.heard < FeedSilence {
				d.watchFeed(f)
				return
			}
			if d.cfg.Log != nil {
				d.cfg.Log.Warn("watch feed silent; opening another", "leader", f.Addr, "silent", FeedSilence)
			}
			d.dropFeed(true)
		}, nil)
	})
}

// followSelf feeds the hub from this leader's own node: a watch whose
// responses localGot hands to the hub in the same step. Called with the
// lock.
func (d *Driver) followSelf(f *Feed) {
	n := d.m.Node()
	if d.hub == nil {
		d.anchor(n.Committed(), n.Compacted())
		f.From = n.Committed() + 1
	}
	d.nextWatch++
	f.watch = d.nextWatch
	if err := n.AddWatch(core.Watch{ID: f.watch, Key: []byte{0}, End: []byte{0}, StartRev: f.From, PrevKV: true}); err != nil {
		f.watch = 0
		d.dropFeed(true) // cannot be: the ID is new and the key set
	}
}

// localGot takes a response of this leader's own feed into the hub; with
// no response, it syncs the hub to the commit point once the feed is
// (revisions without events). Called with the lock, from ready.
func (d *Driver) localGot(n *core.Node, wr *core.WatchResponse) {
	f := d.feed
	if f == nil || f.watch == 0 {
		return
	}
	switch {
	case wr == nil:
		if rev, ok := n.Progress(f.watch); ok {
			d.hub.Publish(nil, rev, n.Compacted())
		}
	case wr.Canceled:
		f.watch = 0 // gone from the node already
		d.feedCanceled(wr.CompactRevision)
	case len(wr.Events) > 0:
		d.hub.Publish(core.FeedEvents(*wr), wr.Revision, n.Compacted())
	}
}

// feedCanceled ends a feed the leader canceled: as too slow (it resumes),
// or with compacted set because the history the hub needs next is gone
// (its watches that needed it end as compacted, and it goes on from what
// is left). Called with the lock.
func (d *Driver) feedCanceled(compacted int64) {
	if compacted > 0 && d.hub != nil {
		d.hub.Restart(compacted)
	}
	d.dropFeed(true)
}

// hubReady takes the hub's outputs: its watch responses go to the
// streams, its catch-up work to hubWorkOut, which the step starts. Called
// with the lock.
func (d *Driver) hubReady() {
	if d.hub == nil {
		return
	}
	rd := d.hub.Ready()
	for _, wr := range rd.WatchResponses {
		if ws := d.hubWatches[wr.ID]; ws != nil {
			ws.deliver(d.hub, wr)
		}
	}
	for _, w := range rd.Work {
		if d.hubWork == nil {
			d.hubWork = map[*core.Work]bool{}
		}
		d.hubWork[w] = true
	}
	d.hubWorkOut = append(d.hubWorkOut, rd.Work...)
}
