package server

import (
	"context"
	"errors"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
)

type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

func (w watchServer) Watch(stream pb.Watch_WatchServer) error {
	if !w.s.Leading() {
		return w.s.proxyWatch(stream)
	}
	s := w.s
	ws := s.drv.NewWatchStream(driver.WatchConfig{Limit: s.cfg.WatchQueue, FragmentBytes: s.cfg.MaxRequestBytes,
		Header: s.header, Slow: func(int64) { s.metrics.axon.slowWatchers.Inc() }})
	defer ws.Close()
	// The handler's goroutine sends, so that a stream costs two
	// goroutines, not three. Once the handler returns, gRPC cancels the
	// stream and the receiver's Recv returns.
	received := make(chan error, 1)
	go func() { received <- w.recv(stream, ws) }()
	return w.send(stream, ws, received)
}

// recv handles the client's requests on a stream.
func (w watchServer) recv(stream pb.Watch_WatchServer, ws *driver.WatchStream) error {
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
			ws.Create(u.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			ws.Cancel(u.CancelRequest.WatchId)
		case *pb.WatchRequest_ProgressRequest:
			ws.RequestProgress()
		}
	}
}

// send sends ws's responses, and its progress notifications when they
// are due, until the receiver ends (received): in one goroutine, as a
// stream's goroutines are what thousands of idle watch clients cost.
func (w watchServer) send(stream pb.Watch_WatchServer, ws *driver.WatchStream, received <-chan error) error {
	var progress <-chan time.Time
	if every := w.s.cfg.ProgressNotifyInterval; every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		progress = t.C
	}
	for {
		select {
		case <-progress:
			ws.NotifyProgress()
			continue
		case <-ws.Ready():
		case err := <-received:
			return err
		case <-ws.Done():
			return errStreamMoved
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		rs, err := w.next(stream.Context(), ws)
		if err != nil {
			return err
		}
		for _, r := range rs {
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

// next takes ws's responses, ready to send, trying again while the
// engine cannot read the previous values they owe: the stream waits
// (and, should it fall too far behind, its watchers are cut off as
// slow), it never sends an event without its prev_kv.
func (w watchServer) next(ctx context.Context, ws *driver.WatchStream) ([]*pb.WatchResponse, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rctx, cancel := context.WithTimeout(ctx, w.s.mcfg.EngineDeadline)
		rs, err := ws.Next(rctx, w.s.eng)
		cancel()
		if err == nil {
			return rs, nil
		}
		w.s.log.Warn("reading watch events' previous values", "err", err, "retry-in", wait)
		select {
		case <-time.After(wait):
		case <-ws.Done():
			return nil, errStreamMoved
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// permitted is etcd's check at a watch's creation: read on its range. A
// watch that may not be is canceled at once, as etcd's, with the reason
// of the refusal; nothing checks it again later (nor does etcd).
func (w watchServer) permitted(ctx context.Context, ws *driver.WatchStream, c *pb.WatchCreateRequest) bool {
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
	ws.Refuse(reason)
	return false
}
