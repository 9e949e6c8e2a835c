package server

import (
	"context"
	"crypto/tls"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"

	"github.com/axon-kv/axon/core"
)

// readCopies is how many copies of an answer's bytes a read holds at its
// peak: the key-values core builds, and the message gRPC encodes from
// them before the first are garbage.
const readCopies = 2

// readBudget bounds the memory the answers of reads in flight hold: a
// Kubernetes relist storm (16 apiservers listing 100,000 objects at once)
// would otherwise build 16 answers at once and drive the server out of
// its memory. A read reports what it copies as it goes (core.Allowance);
// while the reads in flight hold more than the budget it waits before
// copying more, except the oldest read holding memory, which always goes
// on: reads finish one by one instead of deadlocking on each other's
// halves, and each at most a batch past the budget. One answer larger
// than the whole budget still runs, as the oldest.
//
// A read holds its bytes until its answer has left the process: gRPC
// ends the call once the encoded answer is queued on the connection, and
// a client that reads slowly (or sixteen lists on one connection) would
// otherwise let those queues grow past any budget. The connection counts
// the bytes it writes (countingCreds), and the read's share is given
// back once the connection has written as much as had been queued on it
// when the answer was.
type readBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	next    uint64
	holding []uint64 // ids of the reads holding memory, oldest first
	// freed is closed (and replaced) whenever memory is given back.
	freed chan struct{}

	inUse prometheus.Gauge
	waits prometheus.Counter
}

// newReadBudget returns a budget of limit bytes registered on reg; nil
// (no bound) if limit ≤ 0.
func newReadBudget(limit int64, reg prometheus.Registerer) *readBudget {
	if limit <= 0 {
		return nil
	}
	b := &readBudget{
		limit: limit,
		freed: make(chan struct{}),
		inUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "axon_read_memory_bytes",
			Help: "Bytes the answers of reads in flight hold, as counted against the read memory budget.",
		}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "axon_read_memory_waits_total",
			Help: "Reads that waited for the read memory budget before copying more of their answer.",
		}),
	}
	limitGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "axon_read_memory_limit_bytes",
		Help: "The read memory budget: what the answers of reads in flight may hold before new reads wait.",
	})
	limitGauge.Set(float64(limit))
	reg.MustRegister(b.inUse, b.waits, limitGauge)
	return b
}

// readAllowance is one read's share of a readBudget.
type readAllowance struct {
	b    *readBudget
	id   uint64 // 0 until it first holds
	held int64
	done bool
	// sent is where its answer's last message ends among the bytes
	// queued on its connection (0: nothing queued yet); set by the stats
	// handler, which sees the call's events in order.
	sent int64
}

// hold adds n bytes to what a holds and waits, unless a is the oldest
// read holding memory, while the reads in flight hold more than the
// budget.
func (a *readAllowance) hold(ctx context.Context, n int) error {
	b := a.b
	b.mu.Lock()
	if a.done {
		b.mu.Unlock()
		return context.Canceled
	}
	if a.id == 0 {
		b.next++
		a.id = b.next
		b.holding = append(b.holding, a.id)
	}
	add := int64(n) * readCopies
	a.held += add
	b.used += add
	b.inUse.Set(float64(b.used))
	for waited := false; b.used > b.limit && b.holding[0] != a.id; waited = true {
		if !waited {
			b.waits.Inc()
		}
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
	b.mu.Unlock()
	return nil
}

// shrink keeps a part of what a holds (once its answer is encoded the
// key-values it was built from are garbage).
func (a *readAllowance) shrink(keep int64) {
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.done || keep >= a.held {
		return
	}
	b.used -= a.held - keep
	a.held = keep
	b.inUse.Set(float64(b.used))
	close(b.freed)
	b.freed = make(chan struct{})
}

// release gives back what a holds; later calls do nothing.
func (a *readAllowance) release() {
	if a == nil {
		return
	}
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.done {
		return
	}
	a.done = true
	if a.id == 0 {
		return
	}
	b.used -= a.held
	a.held = 0
	b.inUse.Set(float64(b.used))
	if i := slices.Index(b.holding, a.id); i >= 0 {
		b.holding = slices.Delete(b.holding, i, i+1)
	}
	close(b.freed)
	b.freed = make(chan struct{})
}

// boundAllowance is a readAllowance bound to its request's context, as
// core.Allowance.
type boundAllowance struct {
	a   *readAllowance
	ctx context.Context
}

func (m boundAllowance) Hold(n int) error { return m.a.hold(m.ctx, n) }

// readAllowanceKey is the context key of a Range call's allowance.
type readAllowanceKey struct{}

// memoryFor returns the allowance the stats handler gave ctx's call, for
// core; nil (unbounded) without a budget or for a call the handler did
// not see.
func memoryFor(ctx context.Context) core.Allowance {
	a, _ := ctx.Value(readAllowanceKey{}).(*readAllowance)
	if a == nil {
		return nil
	}
	return boundAllowance{a: a, ctx: ctx}
}

// budgeted names the methods whose answers a readBudget bounds.
var budgeted = map[string]bool{
	"/" + pb.KV_ServiceDesc.ServiceName + "/Range":       true,
	"/" + pb.KV_ServiceDesc.ServiceName + "/RangeStream": true,
}

// readStats is the stats handler that gives each Range call its
// allowance and takes it back once gRPC has written the answer: the
// encoded answer outlives the handler.
type readStats struct{ b *readBudget }

func (h readStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if !budgeted[info.FullMethodName] {
		return ctx
	}
	return context.WithValue(ctx, readAllowanceKey{}, &readAllowance{b: h.b})
}

func (h readStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.OutPayload:
		// Every message sent on the connection counts, whatever its call.
		c := connOf(ctx)
		if c == nil {
			return
		}
		end := c.queued.Add(int64(s.WireLength))
		if a, _ := ctx.Value(readAllowanceKey{}).(*readAllowance); a != nil {
			a.sent = end
		}
	case *stats.End:
		a, _ := ctx.Value(readAllowanceKey{}).(*readAllowance)
		if a == nil {
			return
		}
		c := connOf(ctx)
		if c == nil || a.sent == 0 {
			a.release()
			return
		}
		a.shrink(a.held / readCopies)
		c.releaseWhenSent(a)
	}
}

func (readStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (readStats) HandleConn(context.Context, stats.ConnStats)                       {}

// countingConn is a client connection that counts the bytes it has
// written, to give back the read budget of answers once they are sent.
type countingConn struct {
	net.Conn
	written atomic.Int64
	queued  atomic.Int64 // bytes of the messages gRPC queued on it

	mu      sync.Mutex
	waiting []*readAllowance // answers not yet written, by sent
	closed  bool
	nwait   atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	w := c.written.Add(int64(n))
	if c.nwait.Load() > 0 {
		c.releaseUpTo(w)
	}
	return n, err
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.releaseUpTo(math.MaxInt64)
	return err
}

// releaseWhenSent gives back a's share once the connection has written
// up to a.sent; at once if it has.
func (c *countingConn) releaseWhenSent(a *readAllowance) {
	c.mu.Lock()
	if c.closed || c.written.Load() >= a.sent {
		c.mu.Unlock()
		a.release()
		return
	}
	i, _ := slices.BinarySearchFunc(c.waiting, a.sent, func(w *readAllowance, sent int64) int {
		return int(min(max(w.sent-sent, -1), 1))
	})
	c.waiting = slices.Insert(c.waiting, i, a)
	c.nwait.Add(1)
	c.mu.Unlock()
	// A write may have passed a.sent before a was listed.
	c.releaseUpTo(c.written.Load())
}

// releaseUpTo gives back the shares of the answers written by offset w.
func (c *countingConn) releaseUpTo(w int64) {
	c.mu.Lock()
	n := 0
	for n < len(c.waiting) && c.waiting[n].sent <= w {
		n++
	}
	done := slices.Clone(c.waiting[:n])
	c.waiting = slices.Delete(c.waiting, 0, n)
	c.nwait.Add(int32(-n))
	c.mu.Unlock()
	for _, a := range done {
		a.release()
	}
}

// countingInfo is the AuthInfo countingCreds give a connection: no
// security of their own (a listener's TLS is below them), and the
// connection's counts.
type countingInfo struct {
	credentials.CommonAuthInfo
	conn *countingConn
	// tls is the TLS state of the connection a listener ended, if any
	// (terminatedTLS).
	tls *tls.ConnectionState
}

func (countingInfo) AuthType() string { return "insecure" }

// connOf returns the counting connection a call came on, or nil.
func connOf(ctx context.Context) *countingConn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, _ := p.AuthInfo.(countingInfo)
	return info.conn
}

// countingCreds are server transport credentials that add nothing to the
// connection (TLS, when configured, is the listener's) but count what it
// writes.
type countingCreds struct{}

func (countingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c := &countingConn{Conn: raw}
	return c, countingInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, conn: c}, nil
}

func (countingCreds) ClientHandshake(_ context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return raw, countingInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (countingCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}
func (countingCreds) Clone() credentials.TransportCredentials { return countingCreds{} }
func (countingCreds) OverrideServerName(string) error         { return nil }
