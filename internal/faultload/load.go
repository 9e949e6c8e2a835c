package faultload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/linearizability"
	"github.com/axon-kv/axon/storage"
)

// Keys are the load's keys: few, so that writers contend on them.
var Keys = func() []string {
	ks := make([]string, 12)
	for i := range ks {
		ks[i] = fmt.Sprintf("/registry/pods/p%02d", i)
	}
	return ks
}()

const (
	listFrom  = "/registry/pods/"
	listEnd   = "/registry/pods0"
	pageLimit = 3
	finalKey  = "/registry/pods/zz-final"
)

// Load shape and bounds.
const (
	nWriters, nReaders, nWatchers = 4, 2, 2
	think                         = 2 * time.Millisecond  // pause between a worker's calls
	maxOpsPerWorker               = 20000                 // hard bound on each worker's loop
	maxLoad                       = 150 * time.Second     // hard bound on the load's life
	opTimeout                     = 10 * time.Second      // a client call's deadline
	progressEvery                 = 50 * time.Millisecond // RequestProgress, like the apiserver
	catchUp                       = 15 * time.Second      // watches reach the final write within
)

// Client numbers in the history; FinalClient is the test's own calls'.
const (
	writerBase  = 0
	readerBase  = 100
	watcherBase = 200
	FinalClient = 300
)

// Cluster is what a load needs of the instances it runs against.
type Cluster interface {
	// Endpoints are the client endpoints of the instances that are up.
	Endpoints() []string
	// Describe says which instances are up and which leads, for a
	// failure's message.
	Describe() string
}

// Load is a Kubernetes-shaped load on a cluster: writers that create,
// update and delete a few contended keys with guarded txns, readers,
// and list-watchers that list in pages and watch from the list's
// revision with prev_kv, relisting when a watch ends. Every call goes
// into its History.
type Load struct {
	History
	t       *testing.T
	c       Cluster
	base    time.Time
	until   time.Time          // maxLoad
	clients []*clientv3.Client // of every endpoint (SetEndpoints)
	pinned  []*clientv3.Client // of one endpoint each
	// pinnedOpens holds, per pinned client, when it opened a Watch
	// stream that the instance took (Now's clock).
	pinnedOpens [][]int64

	stopc    chan struct{} // writers and readers stop
	finalc   chan struct{} // watchers catch up to finalRev and stop
	finalRev int64         // set before finalc closes
	workers  sync.WaitGroup
	watchers sync.WaitGroup
	stopOnce sync.Once
	endOnce  sync.Once

	mu      sync.Mutex
	acks    []span // successful write calls
	faults  []fault
	errs    map[string]int
	nerrs   int
	watches []*watchRec
	relists int
	stuck   []string     // watches that did not catch up
	streams atomic.Int64 // watch streams the clients opened
}

type span struct{ call, ret int64 }

type fault struct {
	at   int64
	what string
}

// WriteKind is what a Write does when its guard holds.
type WriteKind uint8

// The kinds of a Kubernetes write.
const (
	Create WriteKind = iota
	Update
	Remove
)

// Write is one write call: a Kubernetes-style guarded txn.
type Write struct {
	ID     linearizability.OpID
	Kind   WriteKind
	Key    string
	Value  string // unique per call: the engine shows whether it applied
	CmpRev int64  // the mod revision compared
	Acked  bool   // answered; Resp is the answer
	Resp   *pb.TxnResponse
}

// watchRec is one watch as the client saw it, from creation until it
// ended (then the worker lists again) or the load stopped.
type watchRec struct {
	client int
	spec   linearizability.WatchSpec
	got    []linearizability.Received
	seen   int64 // highest revision covered by events or progress
	ended  string
}

// Option changes a load's shape.
type Option func(*options)

type options struct{ pinned bool }

// PinWatchers adds one list-watcher per endpoint whose client knows that
// endpoint alone, so that every instance serves watches, and a watch of a
// killed instance resumes there once it is back: for instances that come
// back at the same address.
func PinWatchers() Option { return func(o *options) { o.pinned = true } }

// Start starts a load on c's endpoints, stopped when the test ends.
func Start(t *testing.T, c Cluster, opts ...Option) *Load {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	l := &Load{t: t, c: c, base: time.Now(), stopc: make(chan struct{}), finalc: make(chan struct{}), errs: map[string]int{}}
	l.until = l.base.Add(maxLoad)
	t.Cleanup(l.stop)
	newClient := func(eps []string, more ...grpc.DialOption) *clientv3.Client {
		// Count watch streams: more than one per watch means clientv3
		// resumed it on a new stream after the old one broke.
		countStreams := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method == "/etcdserverpb.Watch/Watch" {
				l.streams.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: append([]grpc.DialOption{grpc.WithChainStreamInterceptor(countStreams)}, more...)})
		if err != nil {
			t.Fatal(err)
		}
		return cli
	}
	all := func() *clientv3.Client {
		cli := newClient(c.Endpoints())
		l.clients = append(l.clients, cli)
		return cli
	}
	// Each worker has its own client (like separate apiservers), so
	// watches get their own streams and calls spread over endpoints.
	for i := range nWriters {
		l.workers.Add(1)
		go l.writer(writerBase+i, all())
	}
	for i := range nReaders {
		l.workers.Add(1)
		go l.reader(readerBase+i, all())
	}
	for i := range nWatchers {
		l.watchers.Add(1)
		go l.listWatcher(watcherBase+i, all())
	}
	if o.pinned {
		for i, ep := range c.Endpoints() {
			l.pinnedOpens = append(l.pinnedOpens, nil)
			opened := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				s, err := streamer(ctx, desc, cc, method, opts...)
				if err == nil && method == "/etcdserverpb.Watch/Watch" {
					l.mu.Lock()
					l.pinnedOpens[i] = append(l.pinnedOpens[i], l.Now())
					l.mu.Unlock()
				}
				return s, err
			}
			cli := newClient([]string{ep}, grpc.WithChainStreamInterceptor(opened))
			l.pinned = append(l.pinned, cli)
			l.watchers.Add(1)
			go l.listWatcher(watcherBase+nWatchers+i, cli)
		}
	}
	return l
}

// PinnedOpens reports, for each endpoint's pinned watcher (PinWatchers,
// in the order of Endpoints at Start), when its client opened a Watch
// stream the instance took, on Now's clock: a stream after the first is
// one that broke and was resumed.
func (l *Load) PinnedOpens() [][]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]int64, len(l.pinnedOpens))
	for i, o := range l.pinnedOpens {
		out[i] = slices.Clone(o)
	}
	return out
}

// Now is monotonic time since the load started, in nanoseconds.
func (l *Load) Now() int64 { return int64(time.Since(l.base)) }

func (l *Load) running() bool {
	select {
	case <-l.stopc:
		return false
	default:
		return time.Now().Before(l.until)
	}
}

// pause spaces a worker's calls; false once the load stops.
func (l *Load) pause() bool {
	select {
	case <-l.stopc:
		return false
	case <-time.After(think):
		return l.running()
	}
}

func (l *Load) Mark(at int64, what string) {
	l.mu.Lock()
	l.faults = append(l.faults, fault{at: at, what: what})
	l.mu.Unlock()
}

func (l *Load) SetEndpoints(eps []string) {
	for _, cli := range l.clients {
		cli.SetEndpoints(eps...)
	}
}

func (l *Load) failed(what string, err error) {
	msg := err.Error()
	if len(msg) > 90 {
		msg = msg[:90] + "…"
	}
	l.mu.Lock()
	l.errs[what+": "+msg]++
	l.nerrs++
	l.mu.Unlock()
}

// awaitWrites waits until n writes that were called after since have
// succeeded: the load makes progress.
func (l *Load) AwaitWrites(since int64, n int) {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		got := 0
		for _, a := range l.acks {
			if a.call >= since {
				got++
			}
		}
		l.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	errs := DescribeErrors(l.errs)
	l.mu.Unlock()
	l.t.Fatalf("load made no progress: fewer than %d writes in 20s; instances: %s; client errors so far: %s", n, l.c.Describe(), errs)
}

// during lets the load run through a fault for d.
func (l *Load) During(d time.Duration) {
	select {
	case <-time.After(d):
	case <-l.t.Context().Done():
	}
}

// ModCmp is the guard of a Kubernetes write: the key's mod revision.
func ModCmp(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

func (l *Load) writer(client int, cli *clientv3.Client) {
	defer l.workers.Done()
	rng := rand.New(rand.NewPCG(uint64(client), 6))
	known := map[string]int64{} // last mod revision seen per key (0: absent)
	for i := 0; i < maxOpsPerWorker && l.pause(); i++ {
		w := &Write{Key: Keys[rng.IntN(len(Keys))], Value: fmt.Sprintf("c%d-%d", client, i)}
		w.CmpRev = known[w.Key]
		switch {
		case w.CmpRev == 0 || rng.IntN(10) == 0:
			w.Kind, w.CmpRev = Create, 0
		case rng.IntN(4) == 0:
			w.Kind = Remove
		default:
			w.Kind = Update
		}
		then := clientv3.OpPut(w.Key, w.Value)
		thenPB := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(w.Key), Value: []byte(w.Value)}}}
		if w.Kind == Remove {
			then = clientv3.OpDelete(w.Key)
			thenPB = &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(w.Key)}}}
		}
		cmp := ModCmp(w.Key, w.CmpRev)
		req := &pb.TxnRequest{
			Compare: []*pb.Compare{cmp},
			Success: []*pb.RequestOp{thenPB},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(w.Key)}}}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		call := l.Now()
		w.ID = l.Rec.Call(client, linearizability.TxnInput(req), call)
		resp, err := cli.Txn(ctx).If(clientv3.FromCompare(cmp)).Then(then).Else(clientv3.OpGet(w.Key)).Commit()
		ret := l.Now()
		cancel()
		l.AddWrite(w)
		if err != nil {
			// Uncertain: resolved against the engine at the end (Patch
			// or Drop).
			l.Rec.Unknown(w.ID)
			l.failed("write", err)
			continue
		}
		tr := (*pb.TxnResponse)(resp)
		w.Acked, w.Resp = true, tr
		l.Rec.Return(w.ID, linearizability.TxnOutput(tr), ret)
		l.mu.Lock()
		l.acks = append(l.acks, span{call, ret})
		l.mu.Unlock()
		switch {
		case tr.Succeeded && w.Kind == Remove:
			known[w.Key] = 0
		case tr.Succeeded:
			known[w.Key] = tr.Header.Revision
		case len(tr.Responses) == 1 && tr.Responses[0].GetResponseRange() != nil:
			known[w.Key] = 0
			for _, kv := range tr.Responses[0].GetResponseRange().Kvs {
				known[w.Key] = kv.ModRevision
			}
		}
	}
}

func (l *Load) reader(client int, cli *clientv3.Client) {
	defer l.workers.Done()
	rng := rand.New(rand.NewPCG(uint64(client), 6))
	for i := 0; i < maxOpsPerWorker && l.pause(); i++ {
		k := Keys[rng.IntN(len(Keys))]
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		id := l.Rec.Call(client, linearizability.RangeInput(&pb.RangeRequest{Key: []byte(k)}), l.Now())
		resp, err := cli.Get(ctx, k)
		ret := l.Now()
		cancel()
		if err != nil {
			l.Rec.Unknown(id)
			l.failed("read", err)
			continue
		}
		l.Rec.Return(id, linearizability.RangeOutput((*pb.RangeResponse)(resp)), ret)
	}
}

// list reads the prefix page by page at one revision, like the
// apiserver's paginated list, and returns that revision.
func (l *Load) list(client int, cli *clientv3.Client) (int64, bool) {
	from, rev := listFrom, int64(0)
	for range 100 {
		req := &pb.RangeRequest{Key: []byte(from), RangeEnd: []byte(listEnd), Limit: pageLimit, Revision: rev}
		opts := []clientv3.OpOption{clientv3.WithRange(listEnd), clientv3.WithLimit(pageLimit)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		id := l.Rec.Call(client, linearizability.RangeInput(req), l.Now())
		resp, err := cli.Get(ctx, from, opts...)
		ret := l.Now()
		cancel()
		if err != nil {
			l.Rec.Unknown(id)
			l.failed("list", err)
			return 0, false
		}
		l.Rec.Return(id, linearizability.RangeOutput((*pb.RangeResponse)(resp)), ret)
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, true
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	l.t.Errorf("c%d: list did not end in 100 pages", client)
	return 0, false
}

// listWatcher lists, then watches from the list's revision + 1 with
// prev_kv; when its watch ends it lists again (a relist). After the
// load stops it follows its watch up to the final write.
func (l *Load) listWatcher(client int, cli *clientv3.Client) {
	defer l.watchers.Done()
	var giveUp time.Time // set once the final write is known
	for i := 0; i < maxOpsPerWorker; i++ {
		if l.final() && giveUp.IsZero() {
			giveUp = time.Now().Add(catchUp)
		}
		if !time.Now().Before(l.until) || (!giveUp.IsZero() && time.Now().After(giveUp)) {
			l.mu.Lock()
			l.stuck = append(l.stuck, fmt.Sprintf("c%d could not list and watch again", client))
			l.mu.Unlock()
			return
		}
		rev, ok := l.list(client, cli)
		if !ok {
			select {
			case <-l.finalc:
			case <-time.After(think):
			}
			continue
		}
		if l.final() && rev >= l.finalRev {
			return // the list itself covers the final write
		}
		if l.watch(client, cli, rev+1) {
			return
		}
	}
}

// final reports whether the final write is done (finalRev is set).
func (l *Load) final() bool {
	select {
	case <-l.finalc:
		return true
	default:
		return false
	}
}

// watch follows one watch; true when it caught up with the final write
// (or gave up on it), false when the watch ended and the worker must
// list again.
func (l *Load) watch(client int, cli *clientv3.Client, start int64) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &watchRec{client: client, seen: start - 1,
		spec: linearizability.WatchSpec{Key: []byte(listFrom), End: []byte(listEnd), StartRev: start, PrevKV: true}}
	l.mu.Lock()
	l.watches = append(l.watches, w)
	l.mu.Unlock()
	wch := cli.Watch(ctx, listFrom, clientv3.WithRange(listEnd), clientv3.WithRev(start), clientv3.WithPrevKV())
	progress := time.NewTicker(progressEvery)
	defer progress.Stop()
	giveUp := time.NewTimer(maxLoad)
	defer giveUp.Stop()
	finalc := l.finalc
	for {
		select {
		case <-finalc:
			finalc = nil
			if w.seen >= l.finalRev {
				return true
			}
			giveUp.Reset(catchUp)
		case <-giveUp.C:
			l.mu.Lock()
			l.stuck = append(l.stuck, fmt.Sprintf("c%d watch from r%d stuck at r%d (final write r%d)", client, start, w.seen, l.finalRev))
			l.mu.Unlock()
			return true
		case <-progress.C:
			_ = cli.RequestProgress(ctx)
		case resp, ok := <-wch:
			if !ok {
				w.ended = "channel closed"
				l.relisted()
				return false
			}
			r := linearizability.Received{Events: resp.Events, HeaderRev: resp.Header.Revision, Progress: resp.IsProgressNotify(),
				Canceled: resp.Canceled, CompactRevision: resp.CompactRevision}
			l.mu.Lock()
			w.got = append(w.got, r)
			l.mu.Unlock()
			if err := resp.Err(); err != nil || resp.Canceled {
				w.ended = fmt.Sprintf("canceled: %v %s", err, resp.CancelReason)
				l.failed("watch", fmt.Errorf("watch ended: %v (%s)", err, resp.CancelReason))
				l.relisted()
				return false
			}
			for _, ev := range resp.Events {
				w.seen = max(w.seen, ev.Kv.ModRevision)
			}
			if r.Progress {
				w.seen = max(w.seen, r.HeaderRev)
			}
			if finalc == nil && w.seen >= l.finalRev {
				return true
			}
		}
	}
}

func (l *Load) relisted() {
	l.mu.Lock()
	l.relists++
	l.mu.Unlock()
}

// stop ends the load without checking (cleanup after a failure): with
// finalRev 0 the watchers count as caught up at once.
func (l *Load) stop() {
	l.stopWorkers()
	l.endOnce.Do(func() {
		close(l.finalc)
		l.watchers.Wait()
		for _, cli := range slices.Concat(l.clients, l.pinned) {
			cli.Close()
		}
	})
}

func (l *Load) stopWorkers() {
	l.stopOnce.Do(func() {
		close(l.stopc)
		l.workers.Wait()
	})
}

// put is a plain write the test makes itself, recorded like the load's.
func (l *Load) Put(cli *clientv3.Client, key, value string) error {
	ctx, cancel := context.WithTimeout(l.t.Context(), opTimeout)
	defer cancel()
	id := l.Rec.Call(FinalClient, linearizability.PutInput(&pb.PutRequest{Key: []byte(key), Value: []byte(value)}), l.Now())
	resp, err := cli.Put(ctx, key, value)
	if err != nil {
		l.Rec.Unknown(id)
		return err
	}
	l.Rec.Return(id, linearizability.PutOutput((*pb.PutResponse)(resp)), l.Now())
	l.History.mu.Lock()
	l.extra = append(l.extra, resp.Header.Revision)
	l.History.mu.Unlock()
	return nil
}

// Result is what a finished load found.
type Result struct {
	Ops       int            // calls recorded
	Events    int            // events the engine holds
	Errors    int            // client calls that failed
	Errs      map[string]int // client errors by text
	Relists   int            // watches that ended and listed again
	Windows   []Window       // write unavailability around each fault
	Porcupine porcupine.CheckResult
}

// Window is how long writes were unavailable around one fault.
type Window struct {
	What string
	// Gap is the longest time without a successful write, from the
	// fault until the next fault (or the end of the load).
	Gap time.Duration
	// First is the time from the fault to the first success of a write
	// called after it.
	First time.Duration
}

// Finish stops the load, writes a final key, lets the watches catch up
// with it, and checks everything against the events eng holds: the
// engine the instances share, or a client of it.
func (l *Load) Finish(eng storage.Engine) Result {
	t := l.t
	t.Helper()
	l.stopWorkers()
	end := l.Now()
	// Liveness: a write succeeds after the faults.
	if err := l.Put(l.clients[0], finalKey, "final"); err != nil {
		t.Fatalf("final write: %v", err)
	}
	l.finalRev = l.extra[len(l.extra)-1]
	l.endOnce.Do(func() {
		close(l.finalc)
		l.watchers.Wait()
		for _, cli := range slices.Concat(l.clients, l.pinned) {
			cli.Close()
		}
	})
	for _, s := range l.stuck {
		t.Errorf("watch did not catch up: %s", s)
	}

	evs := CommittedEvents(t, eng)
	if err := l.Resolve(evs); err != nil {
		t.Fatalf("ground truth: %v", err)
	}
	res := Result{Events: len(evs), Errors: l.nerrs, Errs: l.errs, Relists: l.relists, Windows: l.windows(end)}
	ops := l.Rec.Operations()
	res.Ops = len(ops)
	if err := linearizability.CheckRevisionOrder(ops); err != nil {
		t.Errorf("history of %d operations is not linearizable: %v", len(ops), err)
	}
	res.Porcupine = porcupine.Unknown
	if budget := EnvDuration(t, "AXON_FAILOVER_PORCUPINE", 8*time.Second); budget > 0 {
		began := time.Now()
		var info porcupine.LinearizationInfo
		res.Porcupine, info = linearizability.Check(ops, budget)
		switch res.Porcupine {
		case porcupine.Illegal:
			t.Errorf("porcupine: history of %d operations is not linearizable", len(ops))
			if path := os.Getenv("AXON_FAILOVER_HTML"); path != "" {
				if err := linearizability.Visualize(info, path); err != nil {
					t.Logf("visualisation: %v", err)
				}
			}
		case porcupine.Unknown:
			t.Logf("porcupine gave up after %v on %d operations; the revision-order check stands", time.Since(began).Round(time.Millisecond), len(ops))
		default:
			t.Logf("porcupine: linearizable (%d operations, %v)", len(ops), time.Since(began).Round(time.Millisecond))
		}
	}
	committed := make([]linearizability.Event, len(evs))
	for i, ev := range evs {
		committed[i] = linearizability.Event{Rev: ev.Rev, Event: ev.Event}
	}
	for i, w := range l.watches {
		if err := linearizability.CheckWatch(committed, w.spec, w.got); err != nil {
			t.Errorf("watch %d (c%d from r%d, %d responses, ended: %q): %v", i, w.client, w.spec.StartRev, len(w.got), w.ended, err)
		}
	}
	t.Logf("%d operations, %d events, final revision r%d; uncertain writes: %d applied, %d not; %d watches on %d streams (clientv3 resumed the rest)",
		len(ops), len(evs), l.finalRev, l.History.applied, l.History.dropped, len(l.watches), l.streams.Load())
	return res
}

// CommittedEvents reads every applied event from the engine: the ground
// truth the checks judge against.
func CommittedEvents(t *testing.T, eng storage.Engine) []core.Event {
	t.Helper()
	txn, err := eng.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Rollback()
	rd := storage.NewReader(txn)
	st, err := core.Recover(rd)
	if err != nil {
		t.Fatal(err)
	}
	evs, _, err := core.ReadEvents(rd, 1, st.Committed, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// DescribeEvents is evs, readable.
func DescribeEvents(evs []core.Event) string {
	var parts []string
	for _, ev := range evs {
		parts = append(parts, core.DescribeEvent(ev))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// windows measures write unavailability around each fault.
func (l *Load) windows(end int64) []Window {
	acks := slices.Clone(l.acks)
	slices.SortFunc(acks, func(a, b span) int { return int(a.ret - b.ret) })
	var out []Window
	for i, f := range l.faults {
		until := end
		if i+1 < len(l.faults) {
			until = l.faults[i+1].at
		}
		w := Window{What: f.what, Gap: -1, First: -1}
		prev := f.at
		for _, a := range acks {
			if a.ret <= f.at || a.ret > until {
				continue
			}
			w.Gap = max(w.Gap, time.Duration(a.ret-prev))
			prev = a.ret
			if w.First < 0 && a.call >= f.at {
				w.First = time.Duration(a.ret - f.at)
			}
		}
		if w.Gap < 0 {
			w.Gap = time.Duration(until - f.at)
		}
		out = append(out, w)
	}
	return out
}

// LogWindows logs each window and their median and maximum.
func (r Result) LogWindows(t *testing.T, kind string) {
	t.Helper()
	if len(r.Windows) == 0 {
		return
	}
	var gaps, firsts []time.Duration
	for _, w := range r.Windows {
		t.Logf("  %s: writes unavailable %v (first new write after %v)", w.What, w.Gap.Round(time.Millisecond), w.First.Round(time.Millisecond))
		gaps = append(gaps, w.Gap)
		firsts = append(firsts, w.First)
	}
	med := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	t.Logf("%s write unavailability over %d: median %v, max %v (first new write: median %v, max %v)", kind, len(gaps),
		med(gaps).Round(time.Millisecond), slices.Max(gaps).Round(time.Millisecond),
		med(firsts).Round(time.Millisecond), slices.Max(firsts).Round(time.Millisecond))
}

// DescribeErrors lists client errors by text, the count of each.
func DescribeErrors(errs map[string]int) string {
	if len(errs) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d× %s", errs[k], k))
	}
	return strings.Join(parts, "; ")
}

// EnvInt is the count in the environment variable name, or def.
func EnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

// EnvDuration is the duration in the environment variable name, or def.
func EnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}
