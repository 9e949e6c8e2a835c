package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/internal/memlimit"
	"github.com/axon-kv/axon/internal/urls"
	"github.com/axon-kv/axon/storage"
)

// Config configures a Server.
type Config struct {
	Core core.Config
	// UpgradeData lets New upgrade a store of an older format in place
	// (axon serve --upgrade-data); without it such a store is refused.
	UpgradeData bool
	// Name identifies this instance in MemberList (default DefaultName);
	// MemberID defaults to a hash of it, so every instance of a cluster
	// needs its own name.
	MemberID  uint64
	ClusterID uint64
	Name      string
	// ProgressNotifyInterval is how often watches created with
	// progress_notify get a progress notification (etcd's
	// --experimental-watch-progress-notify-interval; default
	// DefaultProgressNotifyInterval).
	ProgressNotifyInterval time.Duration
	// AutoCompaction is etcd's --auto-compaction-mode/-retention.
	AutoCompaction AutoCompaction
	// TickInterval is how often the member's clock moves on its own
	// (renewals, campaigns, lease expiry); it also moves before every
	// request (default DefaultTickInterval).
	TickInterval time.Duration
	// ClientURLs are advertised in MemberList; without PeerURLs, the
	// first one's host:port is where other instances forward to this one.
	ClientURLs []string
	// PeerURLs, when set, are where other instances reach this one
	// (etcd's --initial-advertise-peer-urls): a listener of its own,
	// typically with peer TLS. The first one's host:port is used.
	PeerURLs []string
	// PeerTLS is how this instance dials the others (forwarding, read
	// index, proxied streams, handover); nil dials in plaintext.
	PeerTLS *tls.Config
	// MaxRequestBytes bounds a write request's size (etcd's
	// --max-request-bytes; default DefaultMaxRequestBytes).
	MaxRequestBytes int
	// KeepAlive is the gRPC keepalive policy; zero fields take
	// DefaultKeepAlive's.
	KeepAlive KeepAlive
	// MaxConcurrentStreams bounds the gRPC streams of one client
	// connection (etcd's --max-concurrent-streams; 0: no bound, as etcd).
	MaxConcurrentStreams uint32
	// WatchQueue bounds the responses a Watch stream holds unsent; a
	// watcher whose next response finds it full is canceled as too slow
	// (0: driver.DefaultOutboxLimit).
	WatchQueue int
	// MaxInflight bounds the KV and Lease requests (unary calls)
	// this instance serves at once; past it they are answered "too many
	// requests" (0: DefaultMaxInflight; negative: no bound).
	MaxInflight int
	// ReadMemory bounds the bytes the answers of reads in flight hold: past
	// it a list waits before copying more of its answer (0: no bound).
	ReadMemory int64
	// KeyCache bounds the leader's cache of key metadata, in bytes
	// (driver.Config.KeyCacheBytes; 0: a 32nd of MemoryBudget, at most
	// 256 MiB, or 64 MiB without a budget; negative: none).
	KeyCache int64
	// Quota is etcd's --quota-backend-bytes and a floor of free disk
	// space; past either the NOSPACE alarm is raised.
	Quota Quota
	// Metrics is etcd's --metrics: MetricsBasic (default) or
	// MetricsExtensive (adds gRPC latency histograms).
	Metrics string
	// SlowTraceDir, when set, keeps the last seconds of the Go execution
	// trace in memory and writes them there when a client's unary call
	// takes longer than SlowTraceAfter (0: etcd's 100ms apply warning).
	SlowTraceDir   string
	SlowTraceAfter time.Duration
	// MemoryBudget is the memory budget in force (0: none), reported in
	// metrics.
	MemoryBudget int64
	// Leadership timing (docs/design.md, "Leadership"); zero values
	// take core's defaults.
	Lease, RenewEvery, MaxDrift, EngineDeadline time.Duration
	// Exclusive says the engine is this instance's alone (Badger locks
	// its directory): it leads at once instead of waiting out the
	// lease a previous incarnation left in the election record.
	Exclusive bool
	// Auth is etcd's auth flags (--auth-token-ttl, --bcrypt-cost).
	Auth AuthConfig
	// ClientCertAuth is etcd's --client-cert-auth: with auth on, a call
	// without a token runs as its client certificate's CommonName.
	ClientCertAuth bool
	Logger         *slog.Logger
}

// Defaults of Config, taken for zero fields.
const (
	DefaultName = "default" // etcd's --name
	// DefaultMaxRequestBytes is etcd's default --max-request-bytes.
	DefaultMaxRequestBytes = 1536 * 1024
	// DefaultProgressNotifyInterval is etcd's default
	// --experimental-watch-progress-notify-interval.
	DefaultProgressNotifyInterval = 10 * time.Minute
	DefaultTickInterval           = 100 * time.Millisecond
	// DefaultAuthTokenTTL is etcd's default --auth-token-ttl
	// (AuthConfig.TokenTTL).
	DefaultAuthTokenTTL = 300 * time.Second
)

// KeepAlive is etcd's gRPC keepalive policy. Without it grpc-go allows a
// client one ping per 5 minutes and answers more with GOAWAY
// "too_many_pings": kube-apiserver's etcd client pings every 30 s, so
// its connections, and every watch on them, would be dropped.
type KeepAlive struct {
	// MinTime is the shortest interval a client may ping at
	// (--grpc-keepalive-min-time).
	MinTime time.Duration
	// Interval is how often the server pings an idle client
	// (--grpc-keepalive-interval).
	Interval time.Duration
	// Timeout is how long the server waits for a ping's answer before it
	// closes the connection (--grpc-keepalive-timeout).
	Timeout time.Duration
}

// DefaultKeepAlive is etcd's keepalive policy, its flags' defaults.
func DefaultKeepAlive() KeepAlive {
	return KeepAlive{MinTime: 5 * time.Second, Interval: 2 * time.Hour, Timeout: 20 * time.Second}
}

// withDefaults fills in DefaultKeepAlive's fields for zero ones.
func (k KeepAlive) withDefaults() KeepAlive {
	d := DefaultKeepAlive()
	k.MinTime = cmp.Or(k.MinTime, d.MinTime)
	k.Interval = cmp.Or(k.Interval, d.Interval)
	k.Timeout = cmp.Or(k.Timeout, d.Timeout)
	return k
}

// errLeaderChanged answers calls that were in flight when this instance
// stopped leading: they may or may not have been applied.
var errLeaderChanged = driver.ErrLeaderChanged

// Server is the real-time driver of core: it serialises calls into one
// core.Member (and the Node it holds while leading), runs the engine work
// they hand out on goroutines, delivers responses and watch events, and
// sends what it cannot serve itself to the leader.
type Server struct {
	cfg Config
	eng storage.Engine
	log *slog.Logger
	id  string // this incarnation's name in the election record

	// drv drives the member; it owns it and its lock.
	drv *driver.Driver
	// mcfg is the member's configuration with defaults (only its Addr
	// changes later, and nothing here reads it).
	mcfg core.MemberConfig
	// urlsMu guards cfg.ClientURLs and cfg.PeerURLs, which are set once
	// the listeners are bound.
	urlsMu sync.Mutex

	metrics *metrics
	rpc     rpcGuards // what a client's call goes through
	auth    authState // tokens, peer proofs, the auth flags
	peers   *peers
	compact *compactor
	space   *space

	ctx    context.Context
	cancel context.CancelFunc
	bg     background
}

// rpcGuards are what a client's call goes through besides the driver.
type rpcGuards struct {
	admission *admission
	slow      *slowTracer // nil: no slow-request traces
	reads     *readBudget
	counts    counter
}

// background is what the server runs beside the calls: work items,
// timers, and the wake of awaitLeading; Close waits for all of it.
type background struct {
	work   sync.WaitGroup
	timers *timers
	jobs   chan func() // work items for idle exec workers
	// led wakes awaitLeading (one signal kept, none blocks): the member
	// became leader, or its election work ended.
	led chan struct{}
}

// New returns a server over eng. An Exclusive server has recovered and
// leads when New returns; others find or elect a leader in the
// background.
func New(cfg Config, eng storage.Engine) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProgressNotifyInterval == 0 {
		cfg.ProgressNotifyInterval = DefaultProgressNotifyInterval
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.MemberID == 0 {
		cfg.MemberID = memberID(cfg.Name)
	}
	if err := checkFormat(eng, cfg); err != nil {
		return nil, err
	}
	nonce := make([]byte, 4)
	_, _ = rand.Read(nonce)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, eng: eng, log: cfg.Logger, id: cfg.Name + "." + hex.EncodeToString(nonce),
		ctx: ctx, cancel: cancel,
	}
	s.bg.led = make(chan struct{}, 1)
	s.bg.timers = newTimers(&s.bg.work)
	s.auth.cfg = cfg.Auth.withDefaults()
	s.auth.tokens = newAuthTokens(s.auth.cfg)
	if t := cfg.Auth.Token; t != nil && len(t.unknown) > 0 {
		s.log.Warn("unknown JWT options", "keys", t.unknown)
	}
	member := core.NewMember(core.MemberConfig{
		ID: s.id, Addr: s.advertised(), Lease: cfg.Lease, RenewEvery: cfg.RenewEvery,
		MaxDrift: cfg.MaxDrift, EngineDeadline: cfg.EngineDeadline, Exclusive: cfg.Exclusive,
		LeaseTickEvery: 50 * time.Millisecond, Node: cfg.Core,
	})
	s.mcfg = member.Config()
	s.drv = driver.New(driver.Config{Member: member, Log: s.log, Clock: wallClock{s}, Exec: executor{s},
		Transport: peerTransport{s}, Refused: refused, Binary: BinaryVersion(), KeyCacheBytes: keyCache(cfg.KeyCache, cfg.MemoryBudget),
		AuthSecret: func() ([]byte, error) {
			secret := make([]byte, 32)
			_, err := rand.Read(secret)
			return secret, err
		},
		Hooks: driver.Hooks{
			RoleChanged: s.roleChanged,
			Unclaimed:   func(r core.Response) { s.metrics.etcd.unclaimed(r) },
			HandedOff:   func(rec *core.ElectionRecord) { go s.peers.nudge(rec.Addr) },
		}})
	s.metrics = newMetrics(s)
	s.rpc.admission = newAdmission(cfg.MaxInflight)
	if cfg.SlowTraceDir != "" {
		var err error
		if s.rpc.slow, err = newSlowTracer(cfg.SlowTraceDir, cmp.Or(cfg.SlowTraceAfter, slowApplyAfter), cfg.Logger); err != nil {
			cancel()
			return nil, err
		}
	}
	s.rpc.reads = newReadBudget(cfg.ReadMemory, s.metrics.reg)
	s.compact = &compactor{s: s}
	s.space = &space{q: cfg.Quota}
	if sz, ok := eng.(storage.Sizer); ok {
		s.space.size = sz.Size
	}
	s.peers = newPeers(s)
	s.bg.jobs = make(chan func())
	s.bg.work.Add(execWorkers)
	for range execWorkers {
		go s.execWorker()
	}
	s.bg.work.Add(2)
	go s.tick(cfg.TickInterval)
	go s.announce()
	if cfg.AutoCompaction.Mode != "" {
		s.bg.work.Add(1)
		go s.compact.auto(cfg.AutoCompaction)
	}
	if cfg.Exclusive {
		if err := s.awaitLeading(ctx, s.mcfg.EngineDeadline*5); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// memberID derives etcd's numeric member ID from an instance name.
func memberID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// awaitLeading waits until this instance leads (an exclusive engine's
// campaign and recovery), or fails after limit. It steps the member at
// each wake (wakeLeading): a member acts on the election record it read
// only at its next tick, and the clock's ticks are TickInterval apart.
func (s *Server) awaitLeading(ctx context.Context, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	for !s.drv.Leading() {
		select {
		case <-s.bg.led:
		case <-t.C:
			return fmt.Errorf("server: not leading after %v: %s", limit, s.drv.Status().Describe)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// wakeLeading wakes awaitLeading, if it waits.
func (s *Server) wakeLeading() {
	select {
	case s.bg.led <- struct{}{}:
	default: // a wake is pending already
	}
}

// Close stops running work and waits for it. Timers are stopped after
// s.ctx is canceled and before the wait: none is counted in s.bg.work once
// the wait has begun, and none fires after Close returns.
func (s *Server) Close() {
	s.cancel()
	s.peers.close()
	s.bg.timers.stop()
	s.bg.work.Wait()
	if s.rpc.slow != nil {
		s.rpc.slow.stop()
	}
}

// wallClock is the members' shared clock: wall time, since election
// records written by one instance are read against another's clock
// (their drift is bounded by MaxDrift).
type wallClock struct{ s *Server }

func (wallClock) Now() time.Duration { return time.Duration(time.Now().UnixNano()) }

// AfterFunc runs f after d unless the server closes first.
func (c wallClock) AfterFunc(d time.Duration, f func()) { c.s.bg.timers.after(d, f) }

// roleChanged acts on a change of leadership (the driver ends the watch
// streams of a lost lead); called with the driver's lock held.
func (s *Server) roleChanged(m *core.Member) {
	s.log.Info("role changed", "member", core.DescribeMember(m))
	s.metrics.roleChanges.Inc()
	if m.Node() != nil {
		s.wakeLeading()
	}
}

// Key cache bounds: a 32nd of the memory budget, at most maxKeyCache
// (about two million keys), or noBudgetKeyCache without a budget.
const (
	maxKeyCache      = 256 << 20
	noBudgetKeyCache = 64 << 20
)

// keyCache is the key cache's bound for the setting (negative: none) and
// the memory budget.
func keyCache(setting, budget int64) int64 {
	return memlimit.Share(setting, budget, 32, maxKeyCache, noBudgetKeyCache)
}

// executor runs work items on goroutines against the engine.
type executor struct{ s *Server }

func (e executor) Exec(d *driver.Driver, w *core.Work) {
	s := e.s
	s.bg.work.Add(1)
	job := func() {
		defer s.bg.work.Done()
		r := s.run(w)
		d.Done(w, r)
		if w.Kind == core.WorkElect && r.Err == nil {
			// The member acts on the record it read at its next tick:
			// awaitLeading ticks it now rather than a tick later.
			s.wakeLeading()
		}
	}
	select {
	case s.bg.jobs <- job: // an idle worker takes it
	default:
		go job()
	}
}

// execWorkers is how many goroutines wait for work items. Reused, their
// stacks stay grown, where a goroutine per item grows (copies) its stack
// in the engine's read path every time; past them an item gets a
// goroutine of its own.
const execWorkers = 256

// execWorker runs work items until the server closes.
func (s *Server) execWorker() {
	defer s.bg.work.Done()
	for {
		select {
		case job := <-s.bg.jobs:
			job()
		case <-s.ctx.Done():
			return
		}
	}
}

// run executes one work item. A commit must land within the engine
// deadline or not at all: that is what lets a new leader start safely
// (docs/design.md, "Leadership").
func (s *Server) run(w *core.Work) driver.Result {
	if w.Kind == core.WorkCatchUp || w.Kind == core.WorkRecover {
		return s.drv.StartWork(s.ctx, s.eng, w).Result // reads, with no deadline
	}
	began := time.Now()
	ctx := newLazyDeadline(s.ctx, began.Add(s.mcfg.EngineDeadline/2))
	defer ctx.stop()
	j := s.drv.StartWork(ctx, s.eng, w)
	r := j.Result
	if !j.Done {
		r = j.Commit(ctx)
	}
	s.metrics.observeRun(w, time.Since(began), r.Effects, r.Outcome)
	return r
}

// propose starts a request on the leader's node through the driver (one
// of its typed requests, which calls answer once and returns the
// request's ID, 0 if this instance does not lead) and waits for its
// answer; core.ErrNotLeader if this instance does not lead.
func (s *Server) propose(ctx context.Context, start func(answer func(core.Response)) core.RequestID) (core.Response, error) {
	ch := make(chan core.Response, 1)
	if start(func(r core.Response) { ch <- r }) == 0 {
		return core.Response{}, core.ErrNotLeader
	}
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
	s.urlsMu.Lock()
	s.cfg.ClientURLs = urls
	addr := s.advertised()
	s.urlsMu.Unlock()
	s.drv.SetAddr(addr)
	s.announceNow()
}

// announceNow writes this instance's presence now rather than at the
// next renewal.
func (s *Server) announceNow() {
	s.bg.work.Add(1)
	go func() {
		defer s.bg.work.Done()
		_ = s.writePresence(s.ctx, false)
	}()
}

// SetPeerURLs is SetClientURLs for the URLs other instances reach this
// one at.
func (s *Server) SetPeerURLs(urls []string) {
	s.urlsMu.Lock()
	s.cfg.PeerURLs = urls
	addr := s.advertised()
	s.urlsMu.Unlock()
	s.drv.SetAddr(addr)
	s.announceNow()
}

// advertised is the gRPC target other instances reach this one at.
func (s *Server) advertised() string {
	return peerAddr(s.cfg.PeerURLs, s.cfg.ClientURLs)
}

// peerAddr is the gRPC target (host:port, or unix:PATH) of the first
// peer URL, or else of the first client URL; "" if that URL does not
// parse (urls.Parse, etcd's rules).
func peerAddr(peerURLs, clientURLs []string) string {
	us := peerURLs
	if len(us) == 0 {
		us = clientURLs
	}
	if len(us) == 0 {
		return ""
	}
	u, err := urls.Parse(us[0])
	if err != nil {
		return ""
	}
	return u.Target()
}

// committed returns the commit point: the node's, or on a follower the
// last one learned from the leader.
func (s *Server) committed() int64 {
	s.drv.Leading() // ticked: a leader whose lease ran out has stepped down
	return s.drv.Committed()
}

// Leading reports whether this instance leads now.
func (s *Server) Leading() bool { return s.drv.Leading() }
