package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
)

// watchStream is one client Watch stream: local watch IDs mapped to the
// node's, and the driver's bounded outbox of responses to send (a
// watcher that falls too far behind is cut off there).
type watchStream struct {
	s      *Server
	out    *driver.Outbox[*watchOut]
	local  map[int64]core.WatchID // stream ID → node ID
	remote map[core.WatchID]int64
	nextID int64
	// notify lists the node IDs of watches created with progress_notify.
	notify map[core.WatchID]bool
	// fragment lists those created with fragment set.
	fragment map[core.WatchID]bool
	// stopped closes when this instance stops leading: the stream ends
	// and the client resumes elsewhere.
	stopped  chan struct{}
	stopOnce sync.Once
}

// stop ends the stream because leadership moved.
func (ws *watchStream) stop() { ws.stopOnce.Do(func() { close(ws.stopped) }) }

// watchOut is a response queued on a stream, with what the sender does
// to it first: read the previous values its events lack (core's
// WatchResponse.Unread), and split it for a watch created with fragment.
type watchOut struct {
	r        *pb.WatchResponse
	unread   []int
	fragment bool
}

// enqueue adds a response; called with s.mu held so order is the node's.
func (ws *watchStream) enqueue(r *pb.WatchResponse) { ws.out.Push(&watchOut{r: r}) }

// deliver converts a node watch response; called with s.mu held.
func (ws *watchStream) deliver(n *core.Node, wr core.WatchResponse) {
	id, ok := ws.remote[wr.ID]
	if !ok {
		return
	}
	r := &pb.WatchResponse{Header: ws.s.header(n.Committed()), WatchId: id, Events: wr.Events}
	if !ws.out.Admit(n, wr) {
		ws.forget(wr.ID)
		ws.s.metrics.axon.slowWatchers.Inc()
		ws.enqueue(&pb.WatchResponse{Header: r.Header, WatchId: id, Canceled: true, CancelReason: ws.out.SlowReason()})
		return
	}
	if wr.Requested {
		// The answer to RequestProgress is the stream's, not a watch's.
		r.Header, r.WatchId = ws.s.header(wr.Revision), -1
	}
	if wr.Canceled {
		// As etcd: a watch canceled because its start revision was
		// compacted says so by CompactRevision alone, with no reason.
		r.Canceled, r.CompactRevision = true, wr.CompactRevision
		ws.forget(wr.ID)
		if wr.CompactRevision > 0 {
			// Rare, and a client must then list again: worth a line
			// (a watch resumed after a leader's death below a compaction
			// is one way; kube/README.md, "Open divergence").
			ws.s.log.Info("watch canceled: the history it asked for is compacted",
				"watch", id, "synced_to", wr.Revision, "compact_revision", wr.CompactRevision)
		}
	}
	ws.out.Push(&watchOut{r: r, unread: wr.Unread, fragment: ws.fragment[wr.ID] && len(r.Events) > 1})
}

// fragments splits a watch response larger than limit into parts of at
// most limit bytes (or one event each), all but the last marked Fragment,
// as etcd does for watches created with fragment set.
func fragments(r *pb.WatchResponse, limit int) []*pb.WatchResponse {
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

// forget drops a watch from the stream and the server; called with s.mu
// held.
func (ws *watchStream) forget(id core.WatchID) {
	delete(ws.local, ws.remote[id])
	delete(ws.remote, id)
	delete(ws.notify, id)
	delete(ws.fragment, id)
	delete(ws.s.watches, id)
}

// notifyProgress sends each progress_notify watch of ws that is synced an
// empty response at the current revision, as etcd does every
// --experimental-watch-progress-notify-interval.
func (w watchServer) notifyProgress(ws *watchStream) {
	w.s.step(func(n *core.Node) {
		for gid := range ws.notify {
			if rev, ok := n.Progress(gid); ok {
				ws.enqueue(&pb.WatchResponse{Header: w.s.header(rev), WatchId: ws.remote[gid]})
			}
		}
	})
}

type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

func (w watchServer) Watch(stream pb.Watch_WatchServer) error {
	if !w.s.Leading() {
		return w.s.proxyWatch(stream)
	}
	ws := &watchStream{s: w.s, out: driver.NewOutbox[*watchOut](w.s.cfg.WatchQueue), local: map[int64]core.WatchID{}, remote: map[core.WatchID]int64{},
		notify: map[core.WatchID]bool{}, fragment: map[core.WatchID]bool{}, stopped: make(chan struct{})}
	defer w.s.step(func(n *core.Node) {
		for id := range ws.remote {
			n.CancelWatch(id)
			delete(w.s.watches, id)
		}
	})
	// The handler's goroutine sends, so that a stream costs two
	// goroutines, not three. Once the handler returns, gRPC cancels the
	// stream and the receiver's Recv returns.
	received := make(chan error, 1)
	go func() { received <- w.recv(stream, ws) }()
	return w.send(stream, ws, received)
}

// recv handles the client's requests on a stream.
func (w watchServer) recv(stream pb.Watch_WatchServer, ws *watchStream) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// A client that closes its side still gets its events, as
			// from etcd (the JSON gateway closes it after the request).
			<-stream.Context().Done()
			return stream.Context().Err()
		}
		if err != nil {
			return err
		}
		switch u := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if !w.permitted(stream.Context(), ws, u.CreateRequest) {
				continue
			}
			w.create(ws, u.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			w.cancelWatch(ws, u.CancelRequest.WatchId)
		case *pb.WatchRequest_ProgressRequest:
			w.progress(ws)
		}
	}
}

// send sends ws's responses, and its progress notifications when they
// are due, until the receiver ends (received): in one goroutine, as a
// stream's goroutines are what thousands of idle watch clients cost.
func (w watchServer) send(stream pb.Watch_WatchServer, ws *watchStream, received <-chan error) error {
	var progress <-chan time.Time
	if every := w.s.cfg.ProgressNotifyInterval; every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		progress = t.C
	}
	for {
		select {
		case <-progress:
			w.notifyProgress(ws)
			continue
		case <-ws.out.Ready():
		case err := <-received:
			return err
		case <-ws.stopped:
			return errStreamMoved
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		msgs := ws.out.Take()
		if err := w.readPrev(stream.Context(), ws, msgs); err != nil {
			return err
		}
		for _, m := range msgs {
			parts := []*pb.WatchResponse{m.r}
			if m.fragment {
				parts = fragments(m.r, w.s.cfg.MaxRequestBytes)
			}
			for _, r := range parts {
				// Counted before Send so a client that has the events
				// never sees a lower count.
				if len(r.Events) > 0 {
					w.s.metrics.etcd.eventsSent.Add(float64(len(r.Events)))
				}
				if err := stream.Send(r); err != nil {
					return err
				}
			}
		}
	}
}

// readPrev reads the previous values the events of msgs lack, as etcd's
// send loop reads them, in one engine snapshot, trying again while the
// engine cannot answer: the stream waits (and, should it fall too far
// behind, its watchers are cut off as slow), it never sends an event
// without the prev_kv it owes.
func (w watchServer) readPrev(ctx context.Context, ws *watchStream, msgs []*watchOut) error {
	var wrs []*core.WatchResponse
	for _, m := range msgs {
		if len(m.unread) > 0 {
			wrs = append(wrs, &core.WatchResponse{Events: m.r.Events, Unread: m.unread})
		}
	}
	if len(wrs) == 0 {
		return nil
	}
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rctx, cancel := context.WithTimeout(ctx, w.s.mcfg.EngineDeadline)
		err := driver.ReadPrev(rctx, w.s.eng, wrs...)
		cancel()
		if err == nil {
			break
		}
		w.s.log.Warn("reading watch events' previous values", "err", err, "retry-in", wait)
		select {
		case <-time.After(wait):
		case <-ws.stopped:
			return errStreamMoved
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	i := 0
	for _, m := range msgs {
		if len(m.unread) > 0 {
			m.r.Events, m.unread = wrs[i].Events, nil
			i++
		}
	}
	return nil
}

func (w watchServer) create(ws *watchStream, c *pb.WatchCreateRequest) {
	led := w.s.step(func(n *core.Node) {
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
		hdr := w.s.header(n.Committed())
		if _, used := ws.local[id]; used || len(c.Key) == 0 {
			reason := "mvcc: watcher already exists"
			if len(c.Key) == 0 {
				reason = core.ErrEmptyKey.Error()
			}
			ws.enqueue(&pb.WatchResponse{Header: hdr, WatchId: id, Created: true, Canceled: true, CancelReason: reason})
			return
		}
		w.s.nextW++
		gid := w.s.nextW
		ws.local[id], ws.remote[gid] = gid, id
		if c.ProgressNotify {
			ws.notify[gid] = true
		}
		if c.Fragment {
			ws.fragment[gid] = true
		}
		w.s.watches[gid] = ws
		ws.enqueue(&pb.WatchResponse{Header: hdr, WatchId: id, Created: true})
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
			delete(w.s.watches, gid)
			ws.enqueue(&pb.WatchResponse{Header: hdr, WatchId: id, Canceled: true, CancelReason: err.Error()})
		}
	})
	if !led {
		ws.stop()
	}
}

func (w watchServer) cancelWatch(ws *watchStream, id int64) {
	w.s.step(func(n *core.Node) {
		gid, ok := ws.local[id]
		if !ok {
			return
		}
		n.CancelWatch(gid)
		ws.forget(gid)
		delete(w.s.watches, gid)
		ws.enqueue(&pb.WatchResponse{Header: w.s.header(n.Committed()), WatchId: id, Canceled: true})
	})
}

// progress answers RequestProgress: at once if the stream has no
// watches, else through the node once every watch of the stream is
// synced (deliver sends it), so it never runs ahead of their events.
func (w watchServer) progress(ws *watchStream) {
	w.s.step(func(n *core.Node) {
		ids := make([]core.WatchID, 0, len(ws.remote))
		for id := range ws.remote {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if !n.RequestProgress(ids...) {
			ws.enqueue(&pb.WatchResponse{Header: w.s.header(n.Committed()), WatchId: -1})
		}
	})
}

// permitted is etcd's check at a watch's creation: read on its range. A
// watch that may not be is canceled at once, as etcd's, with the reason
// of the refusal; nothing checks it again later (nor does etcd).
func (w watchServer) permitted(ctx context.Context, ws *watchStream, c *pb.WatchCreateRequest) bool {
	if c == nil {
		return false
	}
	key := c.Key
	if len(key) == 0 {
		key = []byte{0} // etcd's smallest key, for an empty one
	}
	err := w.s.authorizeLeader(ctx, func(st *auth.Store, id auth.Identity) error {
		return st.Check(id, key, c.RangeEnd, false)
	})
	if err == nil || errors.Is(err, core.ErrNotLeader) {
		return true // not leading: create ends the stream, the client resumes
	}
	// etcd's reason is the whole text of its gRPC error.
	reason := rpctypes.ErrGRPCPermissionDenied.Error()
	switch {
	case errors.Is(err, auth.ErrAuthInvalidToken), errors.Is(err, auth.ErrAuthOldRevision), errors.Is(err, auth.ErrAuthUserEmpty):
		reason = toGRPC(err).Error()
	case !errors.Is(err, auth.ErrAuthPermissionDenied):
		w.s.log.Warn("watch permission check", "err", err)
	}
	ws.enqueue(&pb.WatchResponse{Header: w.s.header(w.s.committed()), WatchId: -1, Created: true, Canceled: true, CancelReason: reason})
	return false
}
