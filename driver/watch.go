package driver

import (
	"context"
	"maps"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
)

// WatchConfig configures a watch stream.
type WatchConfig struct {
	// Limit bounds the responses the stream holds unsent (Outbox; 0:
	// DefaultOutboxLimit).
	Limit int
	// FragmentBytes is the size past which a response of a watch created
	// with fragment set is split (etcd's --max-request-bytes; 0: never).
	FragmentBytes int
	// Header makes a response's header at a revision; called with the
	// driver's lock held.
	Header func(rev int64) *pb.ResponseHeader
	// Slow, if set, learns of a watch cut off for being slow (the
	// client's watch ID); called with the driver's lock held.
	Slow func(id int64)
	// Queued, if set, runs after each response is queued, with the
	// driver's lock held; it should only wake the sender (a host that
	// cannot wait on Ready).
	Queued func()
	// Stopped, if set, runs once when the stream stops because this
	// member stopped leading, with the driver's lock held; it should
	// only wake the host, which also sees Done closed.
	Stopped func()
}

// WatchStream is one client Watch stream served by this member: the
// watches created on it, the IDs its client knows them by, and the
// bounded outbox of responses in etcd's wire form, in the node's order.
// The host decodes the client's requests into Create, Cancel and
// RequestProgress, and sends what Next returns; everything between is
// here, so the server and the simulator run the same stream.
//
// Create, Cancel, RequestProgress, NotifyProgress, Refuse and Close may
// be called from any goroutine; Next by one sender at a time.
type WatchStream struct {
	d   *Driver
	cfg WatchConfig
	// feed: a member's feed, on this leader's node (NewFeedStream); else
	// a client's stream, on this member's hub.
	feed bool
	out  *Outbox[*watchOut]
	// Guarded by the driver's lock:
	local    map[int64]core.WatchID // client ID → node ID
	remote   map[core.WatchID]int64
	nextID   int64
	notify   map[core.WatchID]bool // created with progress_notify
	fragment map[core.WatchID]bool // created with fragment
	stopped  bool
	closed   bool // Close ran: what waited for the hub does nothing
	done     chan struct{}
	// taken holds what Next took from out and could not ready yet (the
	// previous values' read failed): it goes first next time.
	taken []*watchOut
	// told and quiet are a feed's: the revision and compact revision
	// its last response said, and the progress ticks since.
	told  [2]int64
	quiet int
	// floor is the lowest header revision a client stream may still
	// send: the highest it sent, or a resumed watch's start - 1.
	floor int64
}

// header is the header of a response at rev. A client stream's never go
// back: a hub behind what its client already saw (a watch resumed here
// from another instance) says that instead. Called with the driver's
// lock held.
func (ws *WatchStream) header(rev int64) *pb.ResponseHeader {
	if !ws.feed {
		rev = max(rev, ws.floor)
		ws.floor = rev
	}
	return ws.cfg.Header(rev)
}

// feedKeepAlive is how many progress ticks a feed with nothing new lets
// pass before it speaks anyway, so that its member does not take it for
// broken (FeedSilence).
const feedKeepAlive = int(FeedSilence / FeedProgressEvery / 4)

// feedProgressDue says whether a feed's progress at rev is worth sending:
// its revision or compact revision moved since its last response (the
// revisions without events), or it has been quiet long enough. Called
// with the driver's lock held.
func (ws *WatchStream) feedProgressDue(rev, compacted int64) bool {
	ws.quiet++
	if [2]int64{rev, compacted} == ws.told && ws.quiet < feedKeepAlive {
		return false
	}
	ws.told, ws.quiet = [2]int64{rev, compacted}, 0
	return true
}

// watchOut is a queued response, with what Next does to it first: read
// the previous values its events lack (core's WatchResponse.Unread), and
// split it for a watch created with fragment.
type watchOut struct {
	r        *pb.WatchResponse
	unread   []int
	fragment bool
}

// NewWatchStream opens a client's watch stream on this member's hub: it
// goes on whoever leads.
func (d *Driver) NewWatchStream(cfg WatchConfig) *WatchStream { return d.newWatchStream(cfg, false) }

func (d *Driver) newWatchStream(cfg WatchConfig, feed bool) *WatchStream {
	return &WatchStream{d: d, cfg: cfg, feed: feed, out: NewOutbox[*watchOut](cfg.Limit),
		local: map[int64]core.WatchID{}, remote: map[core.WatchID]int64{},
		notify: map[core.WatchID]bool{}, fragment: map[core.WatchID]bool{}, done: make(chan struct{})}
}

// registry is where a stream's watches live: the leader's node for a
// feed, the member's hub for a client's stream.
type registry interface {
	AddWatch(core.Watch) error
	CancelWatch(core.WatchID) bool
	Progress(ids ...core.WatchID) (int64, bool)
	RequestProgress(ids ...core.WatchID) bool
	Committed() int64
	Compacted() int64
}

// step runs f against the stream's registry, in a driver step: a feed's
// only while this member leads (else the stream stops), a client
// stream's once the hub is anchored. It reports whether f ran or will.
func (ws *WatchStream) step(f func(r registry)) bool {
	d := ws.d
	if !ws.feed {
		d.Step(func(*core.Member) {
			d.onHub(func(h *core.Hub) {
				if !ws.closed {
					f(h)
				}
			})
		}, nil)
		return true
	}
	led := d.Step(nil, func(n *core.Node) { f(n) })
	if !led {
		d.mu.Lock()
		ws.stop()
		d.mu.Unlock()
	}
	return led
}

// index is the driver's map of the stream's watches by ID.
func (ws *WatchStream) index() map[core.WatchID]*WatchStream {
	if ws.feed {
		if ws.d.watches == nil {
			ws.d.watches = map[core.WatchID]*WatchStream{}
		}
		return ws.d.watches
	}
	if ws.d.hubWatches == nil {
		ws.d.hubWatches = map[core.WatchID]*WatchStream{}
	}
	return ws.d.hubWatches
}

// Ready receives a value once responses are queued.
func (ws *WatchStream) Ready() <-chan struct{} { return ws.out.Ready() }

// Done closes when a feed stream stops because this member stopped
// leading (a client's stream never stops so).
func (ws *WatchStream) Done() <-chan struct{} { return ws.done }

// Pending is how many responses wait to be sent.
func (ws *WatchStream) Pending() int { return ws.out.Len() + len(ws.taken) }

// Create creates a watch, as etcd's watch server does: the client's ID
// or the next free one, refused (created and canceled at once, with
// etcd's reason) if the ID is taken, the key empty or the start
// revision compacted. It reports false if the stream is a feed and this
// member does not lead; then the stream stops.
func (ws *WatchStream) Create(c *pb.WatchCreateRequest) bool {
	return ws.step(func(n registry) {
		id := c.WatchId
		if id == 0 || id == -1 {
			for {
				id = ws.nextID
				ws.nextID++
				if _, used := ws.local[id]; !used {
					break
				}
			}
		}
		if c.StartRevision > 0 {
			// A watch resumed here starts after what its client saw, on
			// whichever instance: no header goes back below that.
			ws.floor = max(ws.floor, c.StartRevision-1)
		}
		hdr := ws.header(n.Committed())
		if _, used := ws.local[id]; used || len(c.Key) == 0 {
			reason := "mvcc: watcher already exists"
			if len(c.Key) == 0 {
				reason = core.ErrEmptyKey.Error()
			}
			ws.push(&pb.WatchResponse{Header: hdr, WatchId: id, Created: true, Canceled: true, CancelReason: reason})
			return
		}
		d := ws.d
		d.nextWatch++
		gid := d.nextWatch
		ws.local[id], ws.remote[gid] = gid, id
		if c.ProgressNotify {
			ws.notify[gid] = true
		}
		if c.Fragment {
			ws.fragment[gid] = true
		}
		ws.index()[gid] = ws
		ws.push(&pb.WatchResponse{Header: hdr, WatchId: id, Created: true})
		watch := core.Watch{ID: gid, Key: c.Key, End: c.RangeEnd, StartRev: c.StartRevision, PrevKV: c.PrevKv}
		for _, f := range c.Filters {
			switch f {
			case pb.WatchCreateRequest_NOPUT:
				watch.NoPut = true
			case pb.WatchCreateRequest_NODELETE:
				watch.NoDelete = true
			}
		}
		if err := n.AddWatch(watch); err != nil {
			ws.forget(gid)
			ws.push(&pb.WatchResponse{Header: hdr, WatchId: id, Canceled: true, CancelReason: err.Error()})
		}
	})
}

// Cancel cancels the client's watch id, acknowledged in stream order; an
// unknown ID is ignored, as etcd does.
func (ws *WatchStream) Cancel(id int64) {
	ws.step(func(n registry) {
		gid, ok := ws.local[id]
		if !ok {
			return
		}
		if ws.d.cfg.Testing.CancelKeepsWatch {
			ws.push(&pb.WatchResponse{Header: ws.header(n.Committed()), WatchId: id, Canceled: true})
			return
		}
		n.CancelWatch(gid)
		ws.forget(gid)
		ws.push(&pb.WatchResponse{Header: ws.header(n.Committed()), WatchId: id, Canceled: true})
	})
}

// RequestProgress answers etcd's RequestProgress: at once if the stream
// has no watches, else through the node once every watch of the stream
// is synced, so it never runs ahead of their events.
func (ws *WatchStream) RequestProgress() {
	ws.step(func(n registry) {
		ids := slices.Sorted(maps.Keys(ws.remote))
		if ws.d.cfg.Testing.ProgressFirstWatchOnly && len(ids) > 1 {
			ids = ids[:1]
		}
		if !n.RequestProgress(ids...) {
			ws.push(&pb.WatchResponse{Header: ws.header(n.Committed()), WatchId: -1})
		}
	})
}

// NotifyProgress sends each progress_notify watch that is synced an
// empty response at its revision, as etcd does every
// --experimental-watch-progress-notify-interval.
func (ws *WatchStream) NotifyProgress() {
	ws.d.mu.Lock()
	anchored := ws.feed || ws.d.hub != nil
	ws.d.mu.Unlock()
	if !anchored {
		return // nothing to say yet: the watches wait for the hub
	}
	ws.step(func(n registry) {
		for _, gid := range slices.Sorted(maps.Keys(ws.notify)) {
			rev, ok := n.Progress(gid)
			if ws.d.cfg.Testing.ProgressAtCommitted {
				rev, ok = ws.d.committed(), true
			}
			if ok && ws.feed && !ws.feedProgressDue(rev, n.Compacted()) {
				continue
			}
			if ok && !ws.feed && rev < ws.floor && !ws.d.cfg.Testing.ProgressAtFloor {
				// The hub is behind what the stream's client saw (a
				// watch resumed here from another instance): raised to
				// that, the header would claim revisions this watch
				// has not got. The next tick speaks.
				continue
			}
			if ok {
				r := &pb.WatchResponse{Header: ws.header(rev), WatchId: ws.remote[gid]}
				if ws.feed {
					r.CompactRevision = n.Compacted()
				}
				ws.push(r)
			}
		}
	})
}

// Refuse answers a create the host refused before Create (its auth
// check): created and canceled at once with reason, as etcd's watch ID
// -1.
func (ws *WatchStream) Refuse(reason string) {
	ws.d.mu.Lock()
	defer ws.d.mu.Unlock()
	rev := ws.d.Known()
	if h := ws.d.hub; h != nil {
		rev = h.Committed()
	}
	ws.push(&pb.WatchResponse{Header: ws.header(rev), WatchId: -1, Created: true, Canceled: true, CancelReason: reason})
}

// Close cancels the stream's watches: the client has gone.
func (ws *WatchStream) Close() {
	d := ws.d
	d.Step(func(*core.Member) {
		ws.closed = true
		var r registry
		switch n := d.m.Node(); {
		case !ws.feed && d.hub != nil:
			r = d.hub
		case ws.feed && n != nil:
			r = n
		}
		for _, gid := range slices.Sorted(maps.Keys(ws.remote)) {
			if r != nil {
				r.CancelWatch(gid)
			}
			ws.forget(gid)
		}
	}, nil)
}

// Next takes what is queued and readies it to send, oldest first: the
// previous values its events lack read in one engine snapshot, and the
// responses of watches created with fragment split. If the read fails it
// returns the error and keeps what it took, which the next call returns
// before anything queued later; the host waits a little and calls again
// (meanwhile a watcher that falls too far behind is cut off as slow). It
// never returns an event without the prev_kv it owes.
func (ws *WatchStream) Next(ctx context.Context, eng storage.Engine) ([]*pb.WatchResponse, error) {
	ws.taken = append(ws.taken, ws.out.Take()...)
	if err := ws.readPrev(ctx, eng); err != nil {
		return nil, err
	}
	msgs := ws.taken
	ws.taken = nil
	out := make([]*pb.WatchResponse, 0, len(msgs))
	for _, m := range msgs {
		if m.fragment {
			out = append(out, Fragments(m.r, ws.cfg.FragmentBytes)...)
			continue
		}
		out = append(out, m.r)
	}
	return out, nil
}

// readPrev reads the previous values the taken responses' events lack.
func (ws *WatchStream) readPrev(ctx context.Context, eng storage.Engine) error {
	var wrs []*core.WatchResponse
	for _, m := range ws.taken {
		if ws.d.cfg.Testing.SkipPrevReads {
			m.unread = nil
		}
		if len(m.unread) > 0 {
			wrs = append(wrs, &core.WatchResponse{Events: m.r.Events, Unread: m.unread})
		}
	}
	if len(wrs) == 0 {
		return nil
	}
	if err := ReadPrev(ws.d.beginCtx(ctx), eng, wrs...); err != nil {
		return err
	}
	i := 0
	for _, m := range ws.taken {
		if len(m.unread) > 0 {
			m.r.Events, m.unread = wrs[i].Events, nil
			i++
		}
	}
	return nil
}

// push queues a response that comes from no node watch response.
// Called with the driver's lock held.
func (ws *WatchStream) push(r *pb.WatchResponse) { ws.queue(&watchOut{r: r}) }

// queue queues m. Called with the driver's lock held.
func (ws *WatchStream) queue(m *watchOut) {
	ws.out.Push(m)
	if ws.cfg.Queued != nil {
		ws.cfg.Queued()
	}
}

// deliver queues a node watch response of one of the stream's watches,
// or, if the client has let too many pile up, cuts the watch off in its
// place. Called with the driver's lock held, from ready, so responses
// keep the node's order.
func (ws *WatchStream) deliver(n registry, wr core.WatchResponse) {
	id, ok := ws.remote[wr.ID]
	if !ok {
		return
	}
	if wr.Requested && !ws.feed && wr.Revision < ws.floor && !ws.d.cfg.Testing.ProgressAtFloor {
		// The answer to RequestProgress speaks for every watch of the
		// stream: raised to what the client saw (NotifyProgress), it
		// would claim revisions some have not got. Asked again, it
		// comes once the hub gets there.
		n.RequestProgress(slices.Sorted(maps.Keys(ws.remote))...)
		return
	}
	r := &pb.WatchResponse{Header: ws.header(n.Committed()), WatchId: id, Events: wr.Events}
	if ws.feed {
		// The feed's own meanings (feed.go): the revision it is synced
		// to, and the compact revision.
		r.Header, r.CompactRevision = ws.cfg.Header(wr.Revision), n.Compacted()
		ws.told, ws.quiet = [2]int64{wr.Revision, r.CompactRevision}, 0
	}
	if !ws.out.Admit(n, wr) {
		ws.forget(wr.ID)
		if ws.cfg.Slow != nil {
			ws.cfg.Slow(id)
		}
		ws.push(&pb.WatchResponse{Header: r.Header, WatchId: id, Canceled: true, CancelReason: ws.out.SlowReason()})
		return
	}
	if wr.Requested {
		// The answer to RequestProgress is the stream's, not a watch's.
		r.Header, r.WatchId = ws.header(wr.Revision), -1
	}
	if wr.Canceled {
		// As etcd: a watch canceled because its start revision was
		// compacted says so by CompactRevision alone, with no reason.
		r.Canceled, r.CompactRevision = true, wr.CompactRevision
		ws.forget(wr.ID)
		if wr.CompactRevision > 0 && ws.d.cfg.Log != nil {
			// Rare, and a client must then list again: worth a line
			// (a watch resumed below a compaction after a long absence is
			// one way; kube/README.md, "Fixed divergence: after a leader
			// kill ...").
			ws.d.cfg.Log.Info("watch canceled: the history it asked for is compacted",
				"watch", id, "synced_to", wr.Revision, "compact_revision", wr.CompactRevision)
		}
	}
	out := &watchOut{r: r, unread: wr.Unread, fragment: ws.fragment[wr.ID] && len(r.Events) > 1}
	if ws.feed && len(wr.Unread) > 0 {
		// A feed leaves previous values to the hubs, which read them
		// where a watcher wants them (no watcher: no read).
		r.Events, out.unread = core.FeedEvents(wr), nil
	}
	ws.queue(out)
}

// forget drops a watch from the stream and the driver. Called with the
// driver's lock held.
func (ws *WatchStream) forget(gid core.WatchID) {
	delete(ws.local, ws.remote[gid])
	delete(ws.remote, gid)
	delete(ws.notify, gid)
	delete(ws.fragment, gid)
	delete(ws.index(), gid)
}

// stop ends the stream because this member does not lead. Called with
// the driver's lock held.
func (ws *WatchStream) stop() {
	if ws.stopped {
		return
	}
	ws.stopped = true
	for gid := range ws.remote {
		ws.forget(gid)
	}
	close(ws.done)
	if ws.cfg.Stopped != nil {
		ws.cfg.Stopped()
	}
}

// stopWatches stops every stream: the node that served their watches is
// gone. Called with the driver's lock held.
func (d *Driver) stopWatches() {
	seen := map[*WatchStream]bool{}
	// In watch order: the simulator replays by seed.
	for _, gid := range slices.Sorted(maps.Keys(d.watches)) {
		if ws := d.watches[gid]; ws != nil && !seen[ws] {
			seen[ws] = true
			ws.stop()
		}
	}
	clear(d.watches)
}

// EndWatchStreams stops every client stream on this member's hub, as a
// leader's feed streams stop when it loses the lead: the host ends them
// and their clients resume, here or elsewhere. For a hub that will get
// nothing (a leader that serves no feed) while the host relays new
// streams to the leader instead.
func (d *Driver) EndWatchStreams() {
	d.Step(func(*core.Member) {
		seen := map[*WatchStream]bool{}
		// In watch order: the simulator replays by seed.
		for _, gid := range slices.Sorted(maps.Keys(d.hubWatches)) {
			ws := d.hubWatches[gid]
			if ws == nil || seen[ws] {
				continue
			}
			seen[ws] = true
			for _, g := range slices.Sorted(maps.Keys(ws.remote)) {
				d.hub.CancelWatch(g)
			}
			ws.stop()
		}
	}, nil)
}

// WatchCounts reports the client watches this member serves and the
// streams they are on (feeds not counted).
func (d *Driver) WatchCounts() (watches, streams int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[*WatchStream]bool{}
	for _, ws := range d.hubWatches {
		seen[ws] = true
	}
	return len(d.hubWatches), len(seen)
}

// Fragments splits a watch response larger than limit into parts of at
// most limit bytes (or one event each), all but the last marked
// Fragment, as etcd does for watches created with fragment set.
func Fragments(r *pb.WatchResponse, limit int) []*pb.WatchResponse {
	if limit <= 0 || proto.Size(r) <= limit {
		return []*pb.WatchResponse{r}
	}
	var (
		parts []*pb.WatchResponse
		cur   = &pb.WatchResponse{Header: r.Header, WatchId: r.WatchId}
		size  int
	)
	for _, ev := range r.Events {
		n := proto.Size(ev)
		if len(cur.Events) > 0 && size+n > limit {
			cur.Fragment = true
			parts = append(parts, cur)
			cur, size = &pb.WatchResponse{Header: r.Header, WatchId: r.WatchId}, 0
		}
		cur.Events = append(cur.Events, ev)
		size += n
	}
	return append(parts, cur)
}
