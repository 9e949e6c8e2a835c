package server_test

// Multi-instance fault tests: three Axon instances over one
// engine serve a Kubernetes-like load from clients that know every
// endpoint, while the test kills the leader, moves leadership or cuts a
// follower off the leader. Every client call goes into a history that the
// linearizability checkers judge against the engine's ground truth, and
// every watch stream is checked for etcd's guarantees.
//
// Knobs: AXON_FAILOVER_KILLS (leader kills in TestFailoverKillLeader,
// default 3), AXON_FAILOVER_TRANSFERS (MoveLeader calls, default 5),
// AXON_FAILOVER_PORCUPINE (porcupine's time budget, default 8s; 0 skips
// it), AXON_FAILOVER_HTML (write porcupine's visualisation there when it
// finds a violation).

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
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/linearizability"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
	"github.com/axon-kv/axon/storage/tikv"
)

// newEngine returns the engine a fault test's instances share:
// client-go's in-process TiKV cluster (real 2PC, lock resolution and
// region routing), with the load's keys spread over several regions.
// Kills leave half-done commits whose locks stall the next requests past
// their deadlines; the mock survives that only because NewMock makes
// client-go see its store as live (else the engine wedges for good).
func newEngine(t testing.TB) storage.Engine {
	t.Helper()
	var sample [][]byte
	for _, k := range loadKeys {
		sample = append(sample, []byte(k))
	}
	eng, err := tikv.NewMock(tikv.MockOptions{Regions: 4, Layout: core.RegionSplits, Sample: sample})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

func TestFailoverKillLeader(t *testing.T) {
	killLeaders(t, startCluster(t, newEngine(t), 3), envInt(t, "AXON_FAILOVER_KILLS", 3))
}

// killLeaders kills the leader of c under load kills times, restarting
// each victim, and checks the history.
func killLeaders(t *testing.T, c *testCluster, kills int) {
	ld := startLoad(t, c)
	ld.awaitWrites(ld.now(), 150)
	for k := range kills {
		l := c.awaitLeader()
		victim := c.ins[l]
		at := ld.now()
		victim.stop() // kill -9: the engine stays
		ld.mark(at, "kill "+victim.name)
		nl := c.awaitLeader()
		t.Logf("kill %d: %s killed at %v, %s leads after %v", k+1, victim.name, time.Duration(at).Round(time.Millisecond),
			c.ins[nl].name, time.Duration(ld.now()-at).Round(time.Millisecond))
		c.start(l) // on a new port
		ld.setEndpoints(c.endpoints())
		ld.awaitWrites(ld.now(), 150)
	}
	res := ld.finish()
	res.logWindows(t, "leader kill")
	t.Logf("%d kills: %d client errors (%s); %d watch relists", kills, res.errors, res.describeErrors(), res.relists)
}

func TestFailoverMoveLeader(t *testing.T) {
	transfers := envInt(t, "AXON_FAILOVER_TRANSFERS", 5)
	c := startCluster(t, newEngine(t), 3)
	ld := startLoad(t, c)
	admin := c.client(c.endpoints()...)
	ld.awaitWrites(ld.now(), 150)
	for i := range transfers {
		l := c.awaitLeader()
		to := c.ins[(l+1+i%2)%3]
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		st, err := admin.Status(ctx, to.addr)
		if err != nil {
			cancel()
			t.Fatalf("status of %s: %v", to.name, err)
		}
		at := ld.now()
		_, err = admin.MoveLeader(ctx, st.Header.MemberId)
		cancel()
		if err != nil {
			t.Fatalf("move leader to %s: %v", to.name, err)
		}
		ld.mark(at, "move to "+to.name)
		if got := c.awaitLeader(); c.ins[got] != to {
			t.Fatalf("after moving to %s, %s leads", to.name, c.ins[got].name)
		}
		ld.awaitWrites(ld.now(), 150)
	}
	res := ld.finish()
	res.logWindows(t, "leader transfer")
	// A graceful transfer is invisible to clients: no failed call and
	// no watch that had to be listed again.
	if res.errors > 0 {
		t.Errorf("%d client-visible errors during graceful transfers: %s", res.errors, res.describeErrors())
	}
	if res.relists > 0 {
		t.Errorf("%d watches ended during graceful transfers and had to relist", res.relists)
	}
}

func TestFailoverPartitionFollower(t *testing.T) {
	c := startCluster(t, newEngine(t), 3)
	ld := startLoad(t, c)
	ld.awaitWrites(ld.now(), 150)
	for i := range 2 {
		l := c.awaitLeader()
		f := c.ins[(l+1+i)%3]
		at := ld.now()
		// Cut for 3s, longer than a follower waits for a leader
		// (failoverWait: 2.5s here), so both the waiting and the giving
		// up show.
		f.srv.DropPeerConnections(time.Minute)
		ld.mark(at, "cut "+f.name)
		ld.during(3 * time.Second)
		f.srv.DropPeerConnections(0)
		ld.awaitWrites(ld.now(), 150)
		// The healed follower serves writes again.
		if err := ld.put(c.client(f.addr), fmt.Sprintf("/healed/%d", i), f.name); err != nil {
			t.Fatalf("put through %s after healing: %v", f.name, err)
		}
		if got := c.awaitLeader(); got != l {
			t.Logf("leadership moved from %s to %s during the cut", c.ins[l].name, c.ins[got].name)
		}
	}
	// Flaps: a follower's connections to the leader drop again and
	// again, failing the calls it forwarded in flight (outcome unknown).
	l := c.awaitLeader()
	f := c.ins[(l+1)%3]
	ld.mark(ld.now(), "flaps of "+f.name)
	for range 40 {
		f.srv.DropPeerConnections(0)
		ld.during(25 * time.Millisecond)
	}
	ld.awaitWrites(ld.now(), 150)
	res := ld.finish()
	t.Logf("2 partitions and 40 flaps: %d client errors (%s); %d watch relists", res.errors, res.describeErrors(), res.relists)
}

// TestFailoverWatchProgressOrder is the regression test for a bug the
// partition test found: a progress notification (RequestProgress) could
// reach a watcher before the events of the revision it announced, when it
// was answered between a commit report and the delivery of that commit's
// events. clientv3 resumes a broken stream after the progress revision,
// so those events would be lost. memkv: it needs many commits per second.
func TestFailoverWatchProgressOrder(t *testing.T) {
	c := startCluster(t, memkv.New(), 1)
	cli := c.client(c.endpoints()...)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wch := cli.Watch(ctx, "/p/", clientv3.WithPrefix())
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = cli.Put(ctx, fmt.Sprintf("/p/k%d", i), "v")
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_ = cli.RequestProgress(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	var progress, events, notes int64
	for wr := range wch {
		if wr.IsProgressNotify() {
			progress = max(progress, wr.Header.Revision)
			notes++
			continue
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision <= progress {
				t.Fatalf("event r%d delivered after progress notification r%d", ev.Kv.ModRevision, progress)
			}
			events++
		}
	}
	if events == 0 || notes == 0 {
		t.Fatalf("%d events and %d progress notifications: the test did not run", events, notes)
	}
	t.Logf("%d events, %d progress notifications, none ahead", events, notes)
}

// The load.

// loadKeys are few so that writers contend on them.
var loadKeys = func() []string {
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

// Client numbers in the history.
const (
	writerBase  = 0
	readerBase  = 100
	watcherBase = 200
	finalClient = 300
)

type loadRun struct {
	t       *testing.T
	c       *testCluster
	base    time.Time
	until   time.Time // maxLoad
	rec     linearizability.Recorder
	clients []*clientv3.Client

	stopc    chan struct{} // writers and readers stop
	finalc   chan struct{} // watchers catch up to finalRev and stop
	finalRev int64         // set before finalc closes
	workers  sync.WaitGroup
	watchers sync.WaitGroup
	stopOnce sync.Once
	endOnce  sync.Once

	mu      sync.Mutex
	writes  []*writeRec
	acks    []span // successful write calls
	faults  []fault
	errs    map[string]int
	nerrs   int
	watches []*watchRec
	relists int
	stuck   []string     // watches that did not catch up
	extra   []int64      // revisions of the test's own writes
	streams atomic.Int64 // watch streams the clients opened
	applied int          // uncertain writes the engine shows applied
	dropped int          // uncertain writes it shows not applied
}

type span struct{ call, ret int64 }

type fault struct {
	at   int64
	what string
}

type writeKind uint8

const (
	create writeKind = iota
	update
	remove
)

// writeRec is one write call: a Kubernetes-style guarded txn.
type writeRec struct {
	id     linearizability.OpID
	kind   writeKind
	key    string
	value  string // unique per call: the engine shows whether it applied
	cmpRev int64  // the mod revision compared
	acked  bool
	resp   *pb.TxnResponse
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

func startLoad(t *testing.T, c *testCluster) *loadRun {
	t.Helper()
	l := &loadRun{t: t, c: c, base: time.Now(), stopc: make(chan struct{}), finalc: make(chan struct{}), errs: map[string]int{}}
	l.until = l.base.Add(maxLoad)
	t.Cleanup(l.stop)
	eps := c.endpoints()
	newClient := func() *clientv3.Client {
		// Count watch streams: more than one per watch means clientv3
		// resumed it on a new stream after the old one broke.
		countStreams := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method == "/etcdserverpb.Watch/Watch" {
				l.streams.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(countStreams)}})
		if err != nil {
			t.Fatal(err)
		}
		l.clients = append(l.clients, cli)
		return cli
	}
	// Each worker has its own client (like separate apiservers), so
	// watches get their own streams and calls spread over endpoints.
	for i := range nWriters {
		l.workers.Add(1)
		go l.writer(writerBase+i, newClient())
	}
	for i := range nReaders {
		l.workers.Add(1)
		go l.reader(readerBase+i, newClient())
	}
	for i := range nWatchers {
		l.watchers.Add(1)
		go l.listWatcher(watcherBase+i, newClient())
	}
	return l
}

// now is monotonic time since the load started, in nanoseconds.
func (l *loadRun) now() int64 { return int64(time.Since(l.base)) }

func (l *loadRun) running() bool {
	select {
	case <-l.stopc:
		return false
	default:
		return time.Now().Before(l.until)
	}
}

// pause spaces a worker's calls; false once the load stops.
func (l *loadRun) pause() bool {
	select {
	case <-l.stopc:
		return false
	case <-time.After(think):
		return l.running()
	}
}

func (l *loadRun) mark(at int64, what string) {
	l.mu.Lock()
	l.faults = append(l.faults, fault{at: at, what: what})
	l.mu.Unlock()
}

func (l *loadRun) setEndpoints(eps []string) {
	for _, cli := range l.clients {
		cli.SetEndpoints(eps...)
	}
}

func (l *loadRun) failed(what string, err error) {
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
func (l *loadRun) awaitWrites(since int64, n int) {
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
	var state []string
	for _, in := range l.c.ins {
		state = append(state, fmt.Sprintf("%s up=%v leading=%v", in.name, in.up, in.up && in.srv.Leading()))
	}
	l.mu.Lock()
	errs := result{errs: l.errs}.describeErrors()
	l.mu.Unlock()
	l.t.Fatalf("load made no progress: fewer than %d writes in 20s; instances: %s; client errors so far: %s", n, strings.Join(state, ", "), errs)
}

// during lets the load run through a fault for d.
func (l *loadRun) during(d time.Duration) {
	select {
	case <-time.After(d):
	case <-l.t.Context().Done():
	}
}

// modCmp is the guard of a Kubernetes write: the key's mod revision.
func modCmp(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

func (l *loadRun) writer(client int, cli *clientv3.Client) {
	defer l.workers.Done()
	rng := rand.New(rand.NewPCG(uint64(client), 6))
	known := map[string]int64{} // last mod revision seen per key (0: absent)
	for i := 0; i < maxOpsPerWorker && l.pause(); i++ {
		w := &writeRec{key: loadKeys[rng.IntN(len(loadKeys))], value: fmt.Sprintf("c%d-%d", client, i)}
		w.cmpRev = known[w.key]
		switch {
		case w.cmpRev == 0 || rng.IntN(10) == 0:
			w.kind, w.cmpRev = create, 0
		case rng.IntN(4) == 0:
			w.kind = remove
		default:
			w.kind = update
		}
		then := clientv3.OpPut(w.key, w.value)
		thenPB := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(w.key), Value: []byte(w.value)}}}
		if w.kind == remove {
			then = clientv3.OpDelete(w.key)
			thenPB = &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(w.key)}}}
		}
		cmp := modCmp(w.key, w.cmpRev)
		req := &pb.TxnRequest{
			Compare: []*pb.Compare{cmp},
			Success: []*pb.RequestOp{thenPB},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(w.key)}}}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		call := l.now()
		w.id = l.rec.Call(client, linearizability.TxnInput(req), call)
		resp, err := cli.Txn(ctx).If(clientv3.FromCompare(cmp)).Then(then).Else(clientv3.OpGet(w.key)).Commit()
		ret := l.now()
		cancel()
		l.mu.Lock()
		l.writes = append(l.writes, w)
		l.mu.Unlock()
		if err != nil {
			// Uncertain: resolved against the engine at the end (Patch
			// or Drop).
			l.rec.Unknown(w.id)
			l.failed("write", err)
			continue
		}
		tr := (*pb.TxnResponse)(resp)
		w.acked, w.resp = true, tr
		l.rec.Return(w.id, linearizability.TxnOutput(tr), ret)
		l.mu.Lock()
		l.acks = append(l.acks, span{call, ret})
		l.mu.Unlock()
		switch {
		case tr.Succeeded && w.kind == remove:
			known[w.key] = 0
		case tr.Succeeded:
			known[w.key] = tr.Header.Revision
		case len(tr.Responses) == 1 && tr.Responses[0].GetResponseRange() != nil:
			known[w.key] = 0
			for _, kv := range tr.Responses[0].GetResponseRange().Kvs {
				known[w.key] = kv.ModRevision
			}
		}
	}
}

func (l *loadRun) reader(client int, cli *clientv3.Client) {
	defer l.workers.Done()
	rng := rand.New(rand.NewPCG(uint64(client), 6))
	for i := 0; i < maxOpsPerWorker && l.pause(); i++ {
		k := loadKeys[rng.IntN(len(loadKeys))]
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		id := l.rec.Call(client, linearizability.RangeInput(&pb.RangeRequest{Key: []byte(k)}), l.now())
		resp, err := cli.Get(ctx, k)
		ret := l.now()
		cancel()
		if err != nil {
			l.rec.Unknown(id)
			l.failed("read", err)
			continue
		}
		l.rec.Return(id, linearizability.RangeOutput((*pb.RangeResponse)(resp)), ret)
	}
}

// list reads the prefix page by page at one revision, like the
// apiserver's paginated list, and returns that revision.
func (l *loadRun) list(client int, cli *clientv3.Client) (int64, bool) {
	from, rev := listFrom, int64(0)
	for range 100 {
		req := &pb.RangeRequest{Key: []byte(from), RangeEnd: []byte(listEnd), Limit: pageLimit, Revision: rev}
		opts := []clientv3.OpOption{clientv3.WithRange(listEnd), clientv3.WithLimit(pageLimit)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		id := l.rec.Call(client, linearizability.RangeInput(req), l.now())
		resp, err := cli.Get(ctx, from, opts...)
		ret := l.now()
		cancel()
		if err != nil {
			l.rec.Unknown(id)
			l.failed("list", err)
			return 0, false
		}
		l.rec.Return(id, linearizability.RangeOutput((*pb.RangeResponse)(resp)), ret)
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
func (l *loadRun) listWatcher(client int, cli *clientv3.Client) {
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
func (l *loadRun) final() bool {
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
func (l *loadRun) watch(client int, cli *clientv3.Client, start int64) bool {
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

func (l *loadRun) relisted() {
	l.mu.Lock()
	l.relists++
	l.mu.Unlock()
}

// stop ends the load without checking (cleanup after a failure): with
// finalRev 0 the watchers count as caught up at once.
func (l *loadRun) stop() {
	l.stopWorkers()
	l.endOnce.Do(func() {
		close(l.finalc)
		l.watchers.Wait()
		for _, cli := range l.clients {
			cli.Close()
		}
	})
}

func (l *loadRun) stopWorkers() {
	l.stopOnce.Do(func() {
		close(l.stopc)
		l.workers.Wait()
	})
}

// put is a plain write the test makes itself, recorded like the load's.
func (l *loadRun) put(cli *clientv3.Client, key, value string) error {
	ctx, cancel := context.WithTimeout(l.t.Context(), opTimeout)
	defer cancel()
	id := l.rec.Call(finalClient, linearizability.PutInput(&pb.PutRequest{Key: []byte(key), Value: []byte(value)}), l.now())
	resp, err := cli.Put(ctx, key, value)
	if err != nil {
		l.rec.Unknown(id)
		return err
	}
	l.rec.Return(id, linearizability.PutOutput((*pb.PutResponse)(resp)), l.now())
	l.mu.Lock()
	l.extra = append(l.extra, resp.Header.Revision)
	l.mu.Unlock()
	return nil
}

// result is what a finished load found.
type result struct {
	ops       int
	events    int
	errors    int
	errs      map[string]int
	relists   int
	windows   []window
	porcupine porcupine.CheckResult
}

// window is how long writes were unavailable around one fault.
type window struct {
	what string
	// gap is the longest time without a successful write, from the
	// fault until the next fault (or the end of the load).
	gap time.Duration
	// first is the time from the fault to the first success of a write
	// called after it.
	first time.Duration
}

// finish stops the load, writes a final key, lets the watches catch up
// with it, and checks everything.
func (l *loadRun) finish() result {
	t := l.t
	t.Helper()
	l.stopWorkers()
	end := l.now()
	// Liveness: a write succeeds after the faults.
	if err := l.put(l.clients[0], finalKey, "final"); err != nil {
		t.Fatalf("final write: %v", err)
	}
	l.finalRev = l.extra[len(l.extra)-1]
	l.endOnce.Do(func() {
		close(l.finalc)
		l.watchers.Wait()
		for _, cli := range l.clients {
			cli.Close()
		}
	})
	for _, s := range l.stuck {
		t.Errorf("watch did not catch up: %s", s)
	}

	evs := committedEvents(t, l.c.eng)
	if err := l.resolve(evs); err != nil {
		t.Fatalf("ground truth: %v", err)
	}
	res := result{events: len(evs), errors: l.nerrs, errs: l.errs, relists: l.relists, windows: l.windows(end)}
	ops := l.rec.Operations()
	res.ops = len(ops)
	if err := linearizability.CheckRevisionOrder(ops); err != nil {
		t.Errorf("history of %d operations is not linearizable: %v", len(ops), err)
	}
	res.porcupine = porcupine.Unknown
	if budget := envDuration(t, "AXON_FAILOVER_PORCUPINE", 8*time.Second); budget > 0 {
		began := time.Now()
		var info porcupine.LinearizationInfo
		res.porcupine, info = linearizability.Check(ops, budget)
		switch res.porcupine {
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
		len(ops), len(evs), l.finalRev, l.applied, l.dropped, len(l.watches), l.streams.Load())
	return res
}

// committedEvents reads every applied event from the engine: the ground
// truth the checks judge against.
func committedEvents(t *testing.T, eng storage.Engine) []core.Event {
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

// resolve settles every write that failed at the client from the
// engine's events (each put's value is unique; a delete is known by the
// mod revision it compared), and checks that every applied revision is
// explained by exactly one call and every acknowledged write applied.
func (l *loadRun) resolve(evs []core.Event) error {
	byRev := map[int64][]core.Event{}
	byValue := map[string]core.Event{}
	for _, ev := range evs {
		byRev[ev.Rev] = append(byRev[ev.Rev], ev)
		if ev.Type == mvccpb.PUT {
			v := string(ev.Kv.Value)
			if prev, ok := byValue[v]; ok {
				return fmt.Errorf("value %q applied twice: r%d and r%d", v, prev.Rev, ev.Rev)
			}
			byValue[v] = ev
		}
	}
	claimed := map[int64]string{}
	claim := func(rev int64, who string) error {
		if prev, ok := claimed[rev]; ok {
			return fmt.Errorf("revision r%d claimed by %s and %s", rev, prev, who)
		}
		claimed[rev] = who
		return nil
	}
	// The test's own writes and acknowledged writes first.
	for _, rev := range l.extra {
		if err := claim(rev, "a write of the test"); err != nil {
			return err
		}
	}
	for _, w := range l.writes {
		if !w.acked || !w.resp.Succeeded {
			continue
		}
		rev := w.resp.Header.Revision
		if err := claim(rev, w.describe()); err != nil {
			return err
		}
		if !w.appliedAt(byRev[rev]) {
			return fmt.Errorf("lost write: %s acknowledged at r%d, engine has %v", w.describe(), rev, describeEvents(byRev[rev]))
		}
	}
	patch := func(w *writeRec, rev int64) error {
		if err := claim(rev, w.describe()+" (uncertain)"); err != nil {
			return err
		}
		h := &pb.ResponseHeader{Revision: rev}
		sub := &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: h}}}
		if w.kind == remove {
			sub = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{Header: h, Deleted: 1}}}
		}
		l.rec.Patch(w.id, linearizability.TxnOutput(&pb.TxnResponse{Header: h, Succeeded: true, Responses: []*pb.ResponseOp{sub}}))
		l.applied++
		return nil
	}
	var deletes []*writeRec
	for _, w := range l.writes {
		switch {
		case w.acked:
		case w.kind == remove:
			deletes = append(deletes, w)
		default:
			if ev, ok := byValue[w.value]; ok {
				if err := patch(w, ev.Rev); err != nil {
					return err
				}
			} else {
				l.rec.Drop(w.id)
				l.dropped++
			}
		}
	}
	// An uncertain delete applied if the key's version it compared was
	// deleted by a revision nobody else claims. Two uncertain deletes of
	// the same version are the same request: either can take it.
	for _, w := range deletes {
		found := false
		for _, ev := range evs {
			if ev.Type == mvccpb.DELETE && string(ev.Kv.Key) == w.key && ev.PrevKv.GetModRevision() == w.cmpRev {
				if _, taken := claimed[ev.Rev]; !taken {
					if err := patch(w, ev.Rev); err != nil {
						return err
					}
					found = true
				}
				break
			}
		}
		if !found {
			l.rec.Drop(w.id)
			l.dropped++
		}
	}
	for _, ev := range evs {
		if _, ok := claimed[ev.Rev]; ok {
			continue
		}
		why := ""
		for _, w := range l.writes {
			if ev.Type == mvccpb.PUT && w.value == string(ev.Kv.Value) && w.acked {
				why = fmt.Sprintf(" (%s was answered: succeeded=%v at r%d)", w.describe(), w.resp.Succeeded, w.resp.Header.Revision)
			}
		}
		return fmt.Errorf("revision r%d applied but no call made it: %v%s", ev.Rev, describeEvents(byRev[ev.Rev]), why)
	}
	return nil
}

func (w *writeRec) describe() string {
	kind := [...]string{"create", "update", "delete"}[w.kind]
	return fmt.Sprintf("%s %s=%s if mod=r%d", kind, w.key, w.value, w.cmpRev)
}

// appliedAt reports whether the events of a revision are this write.
func (w *writeRec) appliedAt(evs []core.Event) bool {
	if len(evs) != 1 || string(evs[0].Kv.Key) != w.key {
		return false
	}
	if w.kind == remove {
		return evs[0].Type == mvccpb.DELETE
	}
	return evs[0].Type == mvccpb.PUT && string(evs[0].Kv.Value) == w.value
}

func describeEvents(evs []core.Event) string {
	var parts []string
	for _, ev := range evs {
		parts = append(parts, core.DescribeEvent(ev))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// windows measures write unavailability around each fault.
func (l *loadRun) windows(end int64) []window {
	acks := slices.Clone(l.acks)
	slices.SortFunc(acks, func(a, b span) int { return int(a.ret - b.ret) })
	var out []window
	for i, f := range l.faults {
		until := end
		if i+1 < len(l.faults) {
			until = l.faults[i+1].at
		}
		w := window{what: f.what, gap: -1, first: -1}
		prev := f.at
		for _, a := range acks {
			if a.ret <= f.at || a.ret > until {
				continue
			}
			w.gap = max(w.gap, time.Duration(a.ret-prev))
			prev = a.ret
			if w.first < 0 && a.call >= f.at {
				w.first = time.Duration(a.ret - f.at)
			}
		}
		if w.gap < 0 {
			w.gap = time.Duration(until - f.at)
		}
		out = append(out, w)
	}
	return out
}

func (r result) logWindows(t *testing.T, kind string) {
	t.Helper()
	if len(r.windows) == 0 {
		return
	}
	var gaps, firsts []time.Duration
	for _, w := range r.windows {
		t.Logf("  %s: writes unavailable %v (first new write after %v)", w.what, w.gap.Round(time.Millisecond), w.first.Round(time.Millisecond))
		gaps = append(gaps, w.gap)
		firsts = append(firsts, w.first)
	}
	med := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	t.Logf("%s write unavailability over %d: median %v, max %v (first new write: median %v, max %v)", kind, len(gaps),
		med(gaps).Round(time.Millisecond), slices.Max(gaps).Round(time.Millisecond),
		med(firsts).Round(time.Millisecond), slices.Max(firsts).Round(time.Millisecond))
}

func (r result) describeErrors() string {
	if len(r.errs) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(r.errs))
	for k := range r.errs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d× %s", r.errs[k], k))
	}
	return strings.Join(parts, "; ")
}

func envInt(t *testing.T, name string, def int) int {
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

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
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
