package server

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
)

type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

func (w watchServer) Watch(stream pb.Watch_WatchServer) error {
	s := w.s
	if s.relayWatches(stream.Context()) {
		return s.proxyWatch(stream)
	}
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
// are due, until the receiver ends (received).
func (w watchServer) send(stream pb.Watch_WatchServer, ws *driver.WatchStream, received <-chan error) error {
	return w.s.pump(stream.Context(), ws, w.s.cfg.ProgressNotifyInterval, received, func(rs []*pb.WatchResponse) error {
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
		return nil
	})
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
	err := w.s.authorizeHere(ctx, func(st *auth.Store, id auth.Identity) error {
		return st.Check(id, key, c.RangeEnd, false)
	})
	if err == nil {
		return true
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
