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
// when the answer was. A streamed read (RangeStream) gives back each
// chunk's share the same way as the chunk goes out, so it holds about
// one chunk rather than its whole answer.
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
	// queued is the part of held that is encoded chunks queued on the
	// connection, each given back as it is written (chunkQueued).
	queued int64
	done   bool
	// sent is where its answer's last message ends among the bytes
	// queued on its connection (0: nothing queued yet), and bytes what
	// its messages there add up to; set by the stats handler, which sees
	// the call's events in order.
	sent, bytes int64
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

// ended keeps of what a holds only its encoded answer, once its call has
// ended: the key-values the answer was built from are garbage.
func (a *readAllowance) ended() {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.giveBack(a.held - a.queued - (a.held-a.queued)/readCopies)
}

// chunkQueued says a chunk of a streamed answer, for which core reported
// n bytes, is encoded and queued on the connection: its key-values are
// garbage, and its message is held until written (chunkWritten).
func (a *readAllowance) chunkQueued(n int64) {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if a.done {
		return
	}
	a.giveBack(n * (readCopies - 1))
	a.queued += min(n, a.held)
}

// chunkWritten gives back a queued chunk of n bytes: the connection has
// written it.
func (a *readAllowance) chunkWritten(n int64) {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if a.done {
		return
	}
	n = min(n, a.queued)
	a.queued -= n
	a.giveBack(n)
}

// giveBack gives back n of the bytes a holds; called with the budget's
// lock held. A read left holding nothing is no longer among those holding
// memory: a stream between chunks, perhaps waiting on a slow client,
// must not stay the oldest that every other read waits behind. It comes
// back as the youngest when it next holds.
func (a *readAllowance) giveBack(n int64) {
	b := a.b
	if a.done || a.id == 0 {
		return
	}
	n = max(min(n, a.held), 0)
	a.held -= n
	a.queued = min(a.queued, a.held)
	b.used -= n
	b.inUse.Set(float64(b.used))
	if a.held == 0 {
		if i := slices.Index(b.holding, a.id); i >= 0 {
			b.holding = slices.Delete(b.holding, i, i+1)
		}
		a.id = 0
	}
	close(b.freed)
	b.freed = make(chan struct{})
}

// release gives back what a holds; later calls do nothing.
func (a *readAllowance) release() {
	if a == nil {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.giveBack(a.held)
	a.done = true
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

// chunkMemory is a streamed read's allowance, chunk by chunk: it counts
// what core holds for the chunk being read, so that the chunk's share can
// be given back once it is sent.
type chunkMemory struct {
	a    *readAllowance
	ctx  context.Context
	conn *countingConn // nil: a connection that does not count
	held int64         // reported for the chunk being read
}

// chunkMemoryFor is memoryFor for a streamed read; nil without a budget.
func chunkMemoryFor(ctx context.Context) *chunkMemory {
	a, _ := ctx.Value(readAllowanceKey{}).(*readAllowance)
	if a == nil {
		return nil
	}
	return &chunkMemory{a: a, ctx: ctx, conn: connOf(ctx)}
}

// allowance is m as core takes it: a nil m is no bound.
func (m *chunkMemory) allowance() core.Allowance {
	if m == nil {
		return nil
	}
	return m
}

func (m *chunkMemory) Hold(n int) error {
	m.held += int64(n)
	return m.a.hold(m.ctx, n)
}

// sent gives back the share of the chunk just sent: gRPC has encoded it
// and queued it on the connection (the stats handler set a.sent, where it
// ends there), so its key-values are garbage at once and the message once
// the connection has written it.
func (m *chunkMemory) sent() {
	if m == nil || m.held == 0 {
		return
	}
	n := m.held
	m.held = 0
	m.a.chunkQueued(n)
	if m.conn == nil {
		m.a.chunkWritten(n)
		return
	}
	m.conn.whenWritten(dueBack{a: m.a, sent: m.a.sent, n: n})
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
			a.bytes += int64(s.WireLength)
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
		if s.Error != nil {
			// A call that failed after it sent (a stream whose client
			// canceled it): gRPC drops what of it is still queued, so
			// the connection will not write up to a.sent for it.
			c.dropped(a)
			a.release()
			return
		}
		a.ended()
		c.whenWritten(dueBack{a: a, sent: a.sent})
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
	waiting []dueBack // answers and chunks not yet written, by sent
	closed  bool
	nwait   atomic.Int32
}

// dueBack is a read's share to give back once its connection has written
// up to sent: a chunk of n bytes of a streamed answer, or, with n 0, all
// the read holds (its call has ended).
type dueBack struct {
	a    *readAllowance
	sent int64
	n    int64
}

func (d dueBack) give() {
	if d.n == 0 {
		d.a.release()
		return
	}
	d.a.chunkWritten(d.n)
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

// whenWritten gives back d once the connection has written up to d.sent;
// at once if it has.
func (c *countingConn) whenWritten(d dueBack) {
	c.mu.Lock()
	if c.closed || c.written.Load() >= d.sent {
		c.mu.Unlock()
		d.give()
		return
	}
	i, _ := slices.BinarySearchFunc(c.waiting, d.sent, func(w dueBack, sent int64) int {
		return int(min(max(w.sent-sent, -1), 1))
	})
	c.waiting = slices.Insert(c.waiting, i, d)
	c.nwait.Add(1)
	c.mu.Unlock()
	// A write may have passed d.sent before d was listed.
	c.releaseUpTo(c.written.Load())
}

// dropped forgets the bytes of a's messages that the connection will not
// write: gRPC drops what a failed call still had queued, and the shares
// due after them would otherwise wait for bytes that never come (for
// ever, if the connection then goes quiet). Which of the unwritten bytes
// up to a.sent were a's and which another call's is not known here: all
// are taken as a's (up to what a queued), so a share due after them may
// come back that much early.
func (c *countingConn) dropped(a *readAllowance) {
	c.mu.Lock()
	w := c.written.Load()
	lost := min(a.sent-w, a.bytes)
	if lost <= 0 {
		c.mu.Unlock()
		return
	}
	c.queued.Add(-lost)
	for i := range c.waiting {
		if c.waiting[i].sent > a.sent {
			c.waiting[i].sent -= lost
		} else if c.waiting[i].sent > w {
			c.waiting[i].sent = w
		}
	}
	c.mu.Unlock()
	c.releaseUpTo(w)
}

// releaseUpTo gives back the shares written by offset w.
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
	for _, d := range done {
		d.give()
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
