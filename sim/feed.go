package sim

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
)

// A node's watch hub is fed by a feed (driver/feed.go): on the leader
// the driver's own, on a follower a stream from the leader's node over
// the simulated network, as the server's Follow peer stream. Like a client's
// watch stream it is FIFO and loses nothing while it lasts; a partition,
// a crash of either end or the leader stepping down ends it.

// feedSub is a feed served by a leader node to a node's hub.
type feedSub struct {
	from, to *node // the leader serving it, the node it feeds
	toEpoch  int   // the incarnation of to that asked for it
	f        *driver.Feed
	ws       *driver.WatchStream
	lastAt   time.Duration // delivery time of the last message (FIFO)
	flushing bool
	over     bool
}

// Follow opens f (driver.Transport).
func (t simTransport) Follow(f *driver.Feed) {
	n := t.n
	l := n.w.nodeAt(f.Addr)
	if l == nil {
		f.End(core.ErrNotLeader)
		return
	}
	epoch := n.epoch
	n.w.send(n, l, "follow", func() { l.serveFeed(n, epoch, f) })
}

// serveFeed opens on this leader the feed of node to.
func (n *node) serveFeed(to *node, toEpoch int, f *driver.Feed) {
	fs := &feedSub{from: n, to: to, toEpoch: toEpoch, f: f, lastAt: n.w.now}
	fs.ws = n.drv.NewFeedStream(f.From, driver.WatchConfig{
		Limit: n.w.plan.WatchQueue, FragmentBytes: watchFragmentBytes,
		Header:  func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} },
		Queued:  func() { n.flushFeed(fs) },
		Stopped: func() { n.flushFeed(fs) },
	})
	n.feedProgress(fs)
	n.flushFeed(fs)
}

// feedProgress has the feed say its revision now and then.
func (n *node) feedProgress(fs *feedSub) {
	n.on(driver.FeedProgressEvery, "feed-progress", func() {
		if !fs.over {
			fs.ws.NotifyProgress()
			n.feedProgress(fs)
		}
	})
}

// flushFeed carries what the feed holds to the node it feeds, in order,
// after a network delay. It runs with the driver's lock
// held (WatchConfig.Queued): it only schedules.
func (n *node) flushFeed(fs *feedSub) {
	if fs.flushing || fs.over {
		return
	}
	fs.flushing = true
	d := max(fs.lastAt, n.w.now+n.w.between(0, n.w.plan.NetDelay)) - n.w.now
	fs.lastAt = n.w.now + d
	epoch := n.epoch
	n.w.after(d, "feed", func() {
		fs.flushing = false
		to := fs.to
		select {
		case <-fs.f.Done():
			n.endFeed(fs, epoch, nil) // the node no longer wants it
			return
		default:
		}
		switch {
		case n.epoch != epoch || to.epoch != fs.toEpoch || !to.up:
			n.endFeed(fs, epoch, nil) // an end crashed: the stream is gone
			return
		case n.isolated || to.isolated:
			n.endFeed(fs, epoch, core.ErrTimeout)
			return
		}
		rs, err := fs.ws.Next(context.Background(), n.w.eng)
		if err != nil {
			n.w.checkWellFormed(n, "previous values' read", err)
			n.w.after(n.latency()+time.Millisecond, "feed-retry", func() { n.flushFeed(fs) })
			return
		}
		if len(rs) > 0 && !fs.f.Got(rs) {
			n.endFeed(fs, epoch, nil)
			return
		}
		select {
		case <-fs.ws.Done():
			// It stopped leading: what it had queued went first.
			n.endFeed(fs, epoch, driver.ErrLeaderChanged)
		default:
		}
	})
}

// endFeed closes the leader's end of a feed and, given err, tells the
// node it fed that it broke.
func (n *node) endFeed(fs *feedSub, epoch int, err error) {
	if fs.over {
		return
	}
	fs.over = true
	if n.epoch == epoch {
		fs.ws.Close()
	}
	if err != nil && fs.to.epoch == fs.toEpoch && fs.to.up {
		n.w.fault("feed-cut", "%s's feed from %s ends: %v", fs.to.id(), n.id(), err)
		fs.f.End(err)
	}
}
