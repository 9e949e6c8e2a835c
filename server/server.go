package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/exec"
)

// Config configures a Server.
type Config struct {
	Core core.Config
	// MemberID and Name identify this instance in headers and MemberList.
	MemberID  uint64
	ClusterID uint64
	Name      string
	// ProgressNotifyInterval is how often watches created with
	// progress_notify get a progress notification (etcd's
	// --experimental-watch-progress-notify-interval; default 10 minutes).
	ProgressNotifyInterval time.Duration
	// AutoCompaction is etcd's --auto-compaction-mode/-retention.
	AutoCompaction AutoCompaction
	// TickInterval is how often leases are checked for expiry.
	TickInterval time.Duration
	// ClientURLs are advertised in MemberList.
	ClientURLs []string
	// MaxRequestBytes bounds a write request's size (etcd's
	// --max-request-bytes; default 1.5 MiB).
	MaxRequestBytes int
	Logger          *slog.Logger
}

// DefaultMaxRequestBytes is etcd's default --max-request-bytes.
const DefaultMaxRequestBytes = 1536 * 1024

// Server is the real-time driver of core: it serialises calls into one
// core.Node, runs the engine work the node hands out on goroutines, and
// delivers responses and watch events.
type Server struct {
	cfg Config
	eng storage.Engine
	log *slog.Logger

	mu      sync.Mutex // guards node, waiters, streams and delivery order
	node    *core.Node
	nextID  core.RequestID
	waiters map[core.RequestID]chan core.Response
	watches map[core.WatchID]*watchStream
	nextW   core.WatchID

	metrics *metrics
	compact *compactor

	start  time.Time
	ctx    context.Context
	cancel context.CancelFunc
	work   sync.WaitGroup
}

// New recovers the node's state from eng and returns a server over it.
func New(cfg Config, eng storage.Engine) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProgressNotifyInterval == 0 {
		cfg.ProgressNotifyInterval = 10 * time.Minute
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 500 * time.Millisecond
	}
	txn, err := eng.Begin(context.Background())
	if err != nil {
		return nil, err
	}
	st, err := core.Recover(storage.NewReader(txn))
	txn.Rollback()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, eng: eng, log: cfg.Logger, node: core.NewNode(cfg.Core, st),
		waiters: map[core.RequestID]chan core.Response{}, watches: map[core.WatchID]*watchStream{},
		ctx: ctx, cancel: cancel, start: time.Now(),
	}
	s.metrics = newMetrics(s)
	s.compact = newCompactor(s)
	s.work.Add(2)
	go s.tick(cfg.TickInterval)
	go s.compact.run()
	if cfg.AutoCompaction.Mode != "" {
		s.work.Add(1)
		go s.compact.auto(cfg.AutoCompaction)
	}
	if st.Compacted > 1 {
		s.compact.swept(st.Compacted) // finish what a restart interrupted
	}
	s.log.Info("recovered", "revision", st.Committed, "compacted", st.Compacted)
	return s, nil
}

// Close stops running work and waits for it.
func (s *Server) Close() {
	s.cancel()
	s.work.Wait()
}

// step runs fn against the node under the lock and acts on its outputs.
func (s *Server) step(fn func(n *core.Node)) {
	s.mu.Lock()
	fn(s.node)
	rd := s.node.Ready()
	// Deliver under the lock so that outputs of successive steps reach
	// clients in the order the node produced them.
	for _, r := range rd.Responses {
		if ch := s.waiters[r.ID]; ch != nil {
			delete(s.waiters, r.ID)
			ch <- r
		}
	}
	for _, wr := range rd.WatchResponses {
		if ws := s.watches[wr.ID]; ws != nil {
			ws.deliver(wr)
		}
	}
	s.mu.Unlock()
	for _, w := range rd.Work {
		s.work.Add(1)
		go s.run(w)
	}
}

// backoff is how long to wait before attempt n of a work item.
func backoff(attempt int) time.Duration {
	if attempt == 0 {
		return 0
	}
	return min(time.Duration(attempt)*5*time.Millisecond, time.Second)
}

func (s *Server) run(w *core.Work) {
	defer s.work.Done()
	if d := backoff(w.Attempt); d > 0 {
		select {
		case <-time.After(d):
		case <-s.ctx.Done():
			return
		}
	}
	if w.Kind == core.WorkCatchUp {
		evs, last, err := exec.CatchUp(s.ctx, s.eng, w, s.node.Config().CatchUpBatch)
		s.step(func(n *core.Node) { n.CatchUpDone(w, evs, last, err) })
		return
	}
	began := time.Now()
	eff, out := exec.Run(s.ctx, s.eng, w)
	s.metrics.observeRun(time.Since(began), out)
	s.step(func(n *core.Node) { n.Report(w, eff, out) })
}

// propose sends a request through the node and waits for its answer.
func (s *Server) propose(ctx context.Context, submit func(n *core.Node, id core.RequestID)) (core.Response, error) {
	ch := make(chan core.Response, 1)
	s.step(func(n *core.Node) {
		s.nextID++
		s.waiters[s.nextID] = ch
		submit(n, s.nextID)
	})
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return core.Response{}, ctx.Err()
	case <-s.ctx.Done():
		return core.Response{}, core.ErrStopped
	}
}

// SetClientURLs sets the URLs MemberList advertises, for a server that
// learns its address only once it listens.
func (s *Server) SetClientURLs(urls []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.ClientURLs = urls
}

// committed returns the commit point.
func (s *Server) committed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node.Committed()
}

// snapshot returns an engine transaction that sees every committed
// revision, with the commit point and compact revision it covers.
func (s *Server) snapshot(ctx context.Context) (storage.Txn, int64, int64, error) {
	s.mu.Lock()
	c, compacted := s.node.Committed(), s.node.Compacted()
	s.mu.Unlock()
	txn, err := s.eng.Begin(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	return txn, c, compacted, nil
}
