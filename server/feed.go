package server

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/driver"
)

// followPath is the peer stream that carries the leader's revisions to a
// member's hub (driver/feed.go): one WatchCreateRequest (its start
// revision) from the member, then WatchResponses from the leader.
const followPath = "/" + peerService + "/Follow"

var followDesc = grpc.StreamDesc{StreamName: "Follow", ServerStreams: true, Handler: followHandler}

func followHandler(srv any, ss grpc.ServerStream) error {
	req := &pb.WatchCreateRequest{}
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	return srv.(peerServer).serveFollow(req.StartRevision, ss)
}

// errFeedOver stops a feed the driver no longer wants.
var errFeedOver = errors.New("axon: watch feed no longer wanted")

// feedConfig configures the feed streams this instance serves as leader.
func (s *Server) feedConfig() driver.WatchConfig {
	return driver.WatchConfig{Limit: s.cfg.WatchQueue, FragmentBytes: s.cfg.MaxRequestBytes,
		Header: func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }}
}

// serveFollow serves another instance's feed from this leader's node.
func (s *Server) serveFollow(from int64, ss grpc.ServerStream) error {
	if s.peers.refuseFollow.Load() {
		return status.Error(codes.Unimplemented, "unknown method Follow for service "+peerService)
	}
	ws := s.drv.NewFeedStream(from, s.feedConfig())
	defer ws.Close()
	return s.pump(ss.Context(), ws, driver.FeedProgressEvery, nil, func(rs []*pb.WatchResponse) error {
		for _, r := range rs {
			if len(r.Events) > 0 {
				s.metrics.axon.feedEventsSent.Add(float64(len(r.Events)))
			}
			if err := ss.SendMsg(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// Follow opens a feed into this instance's hub from the leader, over the
// peer stream (driver.Transport; the driver feeds a leader's hub
// itself).
func (t peerTransport) Follow(f *driver.Feed) {
	s := t.s
	s.bg.work.Add(1)
	go func() {
		defer s.bg.work.Done()
		ctx, cancel := context.WithCancel(s.ctx)
		defer cancel()
		go func() {
			select {
			case <-f.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := s.followLeader(ctx, f); !errors.Is(err, errFeedOver) {
			f.End(err)
		}
	}()
}

// followLeader feeds the hub from the leader at f.Addr.
func (s *Server) followLeader(ctx context.Context, f *driver.Feed) error {
	cc, err := s.peers.conn(f.Addr)
	if err != nil {
		return err
	}
	stream, err := cc.NewStream(ctx, &followDesc, followPath)
	if err != nil {
		return err
	}
	if err := stream.SendMsg(&pb.WatchCreateRequest{StartRevision: f.From}); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for first := true; ; first = false {
		r := &pb.WatchResponse{}
		if err := stream.RecvMsg(r); err != nil {
			if first && status.Code(err) == codes.Unimplemented {
				// A leader of an older binary, in a rolling upgrade:
				// ask again now and then, not every RetryEvery.
				s.peers.noFollow.Store(&f.Addr)
				// Watches on the hub would get nothing: their clients
				// resume, and are relayed (relayWatches).
				s.drv.EndWatchStreams()
				select {
				case <-time.After(driver.FeedSilence):
				case <-ctx.Done():
				}
			}
			return err
		}
		if first {
			s.peers.noFollow.Store(nil)
		}
		if !f.Got([]*pb.WatchResponse{r}) {
			return errFeedOver
		}
	}
}

// relayWatches says whether this instance must relay a client's watch
// stream to the leader: it follows one that serves no feed (a binary
// from before every instance served watches, during a rolling upgrade),
// so its own hub gets nothing. Until its hub is anchored (just started)
// it waits, at most FeedSilence, to learn which.
func (s *Server) relayWatches(ctx context.Context) bool {
	deadline := time.Now().Add(driver.FeedSilence)
	for {
		if addr := s.peers.noFollow.Load(); addr != nil && !s.Leading() {
			if leader, ok := s.drv.LeaderOf(); ok && leader == *addr {
				return true
			}
		}
		if s.drv.Anchored() || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pump sends ws's responses as they come, and its progress every
// interval (0: never), until ctx ends, the stream stops (errStreamMoved),
// stop yields an error or send fails: in one goroutine, as a stream's
// goroutines are what thousands of idle watch clients cost.
func (s *Server) pump(ctx context.Context, ws *driver.WatchStream, every time.Duration, stop <-chan error, send func([]*pb.WatchResponse) error) error {
	var progress <-chan time.Time
	if every > 0 {
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
		case err := <-stop:
			return err
		case <-ws.Done():
			return errStreamMoved
		case <-ctx.Done():
			return ctx.Err()
		}
		rs, err := s.nextWatch(ctx, ws)
		if err != nil {
			return err
		}
		if err := send(rs); err != nil {
			return err
		}
	}
}

// nextWatch takes ws's responses, ready to send, trying again while the
// engine cannot read the previous values they owe: the stream waits
// (and, should it fall too far behind, its watchers are cut off as
// slow), it never sends an event without its prev_kv.
func (s *Server) nextWatch(ctx context.Context, ws *driver.WatchStream) ([]*pb.WatchResponse, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rctx, cancel := context.WithTimeout(ctx, s.mcfg.EngineDeadline)
		rs, err := ws.Next(rctx, s.eng)
		cancel()
		if err == nil {
			return rs, nil
		}
		s.log.Warn("reading watch events' previous values", "err", err, "retry-in", wait)
		select {
		case <-time.After(wait):
		case <-ws.Done():
			return nil, errStreamMoved
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
