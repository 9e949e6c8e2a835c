package server_test

// The hot-counter regression test: many clients increment one key with a
// read then a compare-and-swap on its mod revision, as a Kubernetes
// controller updates an object, while short client deadlines and
// cancellations abandon Txns that the server goes on running. This load
// found a lost update: Badger's committer dropped a transaction's
// snapshot from its conflict tracking before checking the transaction's
// commit, so a prune in between forgot the write it conflicted with, and
// two Txns that compared the same mod revision both succeeded. With
// Badger pruning after every commit group, every run of this test caught
// it before the fix (at cdb8040; with the default of every 256 groups,
// none of 2 runs did).
//
// Since core latches a hot key, the leader runs these Txns one after
// another and they no longer race in the engine: the test now guards the
// whole path (latches, batching, abandoned requests) end to end, and
// storagetest's CASWithSnapshotChurn, run on Badger with PruneEvery 1,
// guards the engine's conflict check itself.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/faultload"
	"github.com/axon-kv/axon/linearizability"
	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
)

const (
	counterKey = "/counter"
	// counterLoadFor bounds each configuration's load. Without latches
	// on a hot key, throughput is a few increments a second and a load
	// may end before every client has made its increments; the checks
	// hold for whatever ran.
	counterLoadFor = 14 * time.Second
	// counterPorcupine is porcupine's budget per configuration; the
	// revision-order check runs in any case.
	counterPorcupine = 3 * time.Second
)

// counterLoad is the shape of one hot-counter load.
type counterLoad struct {
	clients    int
	increments int           // acknowledged increments each client makes
	timeout    time.Duration // each Get's and each Txn's deadline
	// cancelOneIn makes each client cancel one Txn in that many
	// (chosen at random) a few milliseconds after sending it, so that
	// some Txns are abandoned while the server still runs them, however
	// fast it answers; 0 cancels none.
	cancelOneIn int
}

func TestHotKeyCounter(t *testing.T) {
	cases := []struct {
		name string
		load counterLoad
	}{
		{"32 clients adding 3 each with 600ms deadlines lose no increment", counterLoad{32, 3, 600 * time.Millisecond, 0}},
		{"16 clients adding 5 each with 1s deadlines lose no increment", counterLoad{16, 5, time.Second, 0}},
		{"32 clients adding 3 each and cancelling one Txn in 3 lose no increment", counterLoad{32, 3, 600 * time.Millisecond, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCounter(t, tc.load)
			c.run()
			c.check()
		})
	}
}

// counterRun is one hot-counter load over one Badger-backed server.
type counterRun struct {
	t     *testing.T
	cli   *clientv3.Client
	eng   *badgerkv.Engine
	stop  func() // stops the server; the engine stays open
	shape counterLoad
	base  time.Time

	// hist holds the history and every Txn: its Resolve settles the
	// unanswered Txns from the engine.
	hist faultload.History

	mu       sync.Mutex
	acked    int            // Txns answered Succeeded
	unknown  int            // Txns answered with an error: outcome unknown
	timedOut int            // of which the client's deadline ran out
	canceled int            // of which the client cancelled
	errs     map[string]int // client errors by text, for the log
	short    int            // clients that did not finish in time
}

// startCounter runs an Axon server over Badger in a temp dir, as
// startServerIn does, but keeps the engine: the test stops the server
// before it reads the engine's ground truth, so that no abandoned Txn can
// land after it.
func startCounter(t *testing.T, shape counterLoad) *counterRun {
	t.Helper()
	// Pruning Badger's conflict state after every commit group (the
	// default is every 256) makes a commit still waiting for its conflict
	// check meet a prune as often as it can.
	eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{Logger: slog.New(slog.DiscardHandler), PruneEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	cfg := server.Config{Core: core.Config{RingSize: 1024}, MemberID: 1, ClusterID: 2, Name: "hot"}
	_, cli, stop := serveEngine(t, eng, cfg)
	return &counterRun{t: t, cli: cli, eng: eng, stop: stop, shape: shape, base: time.Now(),
		errs: map[string]int{}}
}

func (c *counterRun) now() int64 { return int64(time.Since(c.base)) }

// run runs the clients until each has made its increments or the load's
// time is up.
func (c *counterRun) run() {
	until := time.Now().Add(counterLoadFor)
	var wg sync.WaitGroup
	for i := range c.shape.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.client(i, until)
		}()
	}
	wg.Wait()
}

// client increments the counter: a fresh Get, then a Txn that puts the
// value plus one if the key's mod revision is still the one it read,
// until increments Txns succeeded. A Txn that failed its compare, or got
// an error, is tried again from a fresh Get.
func (c *counterRun) client(id int, until time.Time) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	done := 0
	for attempt := 0; done < c.shape.increments; attempt++ {
		if !time.Now().Before(until) {
			c.mu.Lock()
			c.short++
			c.mu.Unlock()
			return
		}
		n, mod, ok := c.get(id)
		if !ok {
			continue
		}
		// Values are unique, so the engine shows which Txn applied; the
		// count is the number before the space.
		w := &faultload.Write{Kind: faultload.Update, Key: counterKey, Value: fmt.Sprintf("%d c%d.%d", n+1, id, attempt), CmpRev: mod}
		if mod == 0 {
			w.Kind = faultload.Create
		}
		var cancelAfter time.Duration
		if c.shape.cancelOneIn > 0 && rng.IntN(c.shape.cancelOneIn) == 0 {
			cancelAfter = time.Duration(1+rng.IntN(5)) * time.Millisecond
		}
		if c.txn(id, w, cancelAfter) {
			done++
		}
	}
}

// get reads the counter: its count and mod revision (0, 0 before the
// first increment).
func (c *counterRun) get(id int) (n, mod int64, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.shape.timeout)
	defer cancel()
	op := c.hist.Rec.Call(id, linearizability.RangeInput(&pb.RangeRequest{Key: []byte(counterKey)}), c.now())
	resp, err := c.cli.Get(ctx, counterKey)
	if err != nil {
		c.hist.Rec.Unknown(op)
		c.failed("get", err)
		return 0, 0, false
	}
	c.hist.Rec.Return(op, linearizability.RangeOutput((*pb.RangeResponse)(resp)), c.now())
	if len(resp.Kvs) == 0 {
		return 0, 0, true
	}
	return count(c.t, resp.Kvs[0].Value), resp.Kvs[0].ModRevision, true
}

// txn runs one compare-and-swap, cancelled after cancelAfter if that is
// not 0, and reports whether it succeeded.
func (c *counterRun) txn(id int, w *faultload.Write, cancelAfter time.Duration) bool {
	cmp := faultload.ModCmp(w.Key, w.CmpRev)
	put := &pb.PutRequest{Key: []byte(w.Key), Value: []byte(w.Value)}
	req := &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put}}}}
	// The deadline, or the cancellation, cancels the call at the server
	// too; the request may still be running there, and may land after
	// the client's next Get.
	ctx, cancel := context.WithTimeout(context.Background(), c.shape.timeout)
	defer cancel()
	if cancelAfter > 0 {
		defer time.AfterFunc(cancelAfter, cancel).Stop()
	}
	w.ID = c.hist.Rec.Call(id, linearizability.TxnInput(req), c.now())
	resp, err := c.cli.Txn(ctx).If(clientv3.FromCompare(cmp)).Then(clientv3.OpPut(w.Key, w.Value)).Commit()
	ret := c.now()
	c.hist.AddWrite(w)
	if err != nil {
		c.hist.Rec.Unknown(w.ID)
		c.failed("txn", err)
		c.mu.Lock()
		c.unknown++
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			c.timedOut++
		case errors.Is(err, context.Canceled):
			c.canceled++
		}
		c.mu.Unlock()
		return false
	}
	tr := (*pb.TxnResponse)(resp)
	w.Acked, w.Resp = true, tr
	c.hist.Rec.Return(w.ID, linearizability.TxnOutput(tr), ret)
	if tr.Succeeded {
		c.mu.Lock()
		c.acked++
		c.mu.Unlock()
	}
	return tr.Succeeded
}

// failed counts a client error. Every error leaves the call's outcome
// unknown to the client: Txns are settled from the engine at the end, and
// count in the upper bound of the final value. The errors this load may
// see are its own deadline or cancellation (context.DeadlineExceeded,
// context.Canceled; the server learns of both as a cancellation), the
// server's deadline ("etcdserver: request timed out"), and Unavailable:
// core answers "request retried too often" after dealing a contended
// request again and again, which core says never applied, but
// Unavailable also carries an engine commit whose outcome is unknown, and
// the client cannot tell them apart. Any other error fails the test.
func (c *counterRun) failed(what string, err error) {
	c.mu.Lock()
	c.errs[what+": "+errorClass(err)]++
	c.mu.Unlock()
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, rpctypes.ErrTimeout):
	case status.Code(err) == codes.Unavailable:
	default:
		c.t.Errorf("%s: unexpected error %v", what, err)
	}
}

// errorClass is an error's text without what varies between calls.
func errorClass(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "badger: commit at"); i >= 0 {
		msg = msg[:i] + "badger: commit at …"
	}
	return msg
}

// count parses a counter value.
func count(t *testing.T, value []byte) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.SplitN(string(value), " ", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("counter value %q: %v", value, err)
	}
	return n
}

// check stops the server and judges the load: against the engine's
// applied events (the ground truth), and the history against the
// linearizability checkers.
func (c *counterRun) check() {
	t := c.t
	// A last linearizable read, in the history too.
	var final int64
	ok := false
	for range 5 {
		if final, _, ok = c.get(faultload.FinalClient); ok {
			break
		}
	}
	if !ok {
		t.Fatalf("final read failed: %v", c.errs)
	}
	c.stop()
	evs := faultload.CommittedEvents(t, c.eng)

	// No lost update: every applied put counts one more than the put
	// before it. Two Txns that compared the same mod revision and both
	// applied (acknowledged or not) write the same count. (The events'
	// prev_kv cannot show it: it is rebuilt from the versions stored.)
	var lost []string
	var prev *mvccpb.KeyValue
	var n int64
	for _, ev := range evs {
		if string(ev.Kv.Key) != counterKey || ev.Type != mvccpb.PUT {
			t.Fatalf("unexpected event r%d: %s", ev.Rev, core.DescribeEvent(ev))
		}
		got := count(t, ev.Kv.Value)
		if got != n+1 {
			lost = append(lost, fmt.Sprintf("the put at r%d wrote %q after r%d wrote %q", ev.Rev, ev.Kv.Value, prev.GetModRevision(), prev.GetValue()))
		}
		prev, n = ev.Kv, got
	}
	reportAll(t, "lost update in the engine", lost)
	// The same, as the clients saw it: no two acknowledged Txns compared
	// the same mod revision.
	lost = nil
	won := map[int64]*faultload.Write{}
	for _, w := range c.hist.Writes() {
		if !w.Acked || !w.Resp.Succeeded {
			continue
		}
		if other, ok := won[w.CmpRev]; ok {
			lost = append(lost, fmt.Sprintf("%s succeeded at r%d and %s at r%d",
				other.Describe(), other.Resp.Header.Revision, w.Describe(), w.Resp.Header.Revision))
		}
		won[w.CmpRev] = w
	}
	reportAll(t, "two acknowledged Txns compared the same mod revision", lost)
	// Uncertain Txns may have applied, so the count may only exceed the
	// acknowledged increments, never fall short of them.
	if n < int64(c.acked) || n > int64(c.acked+c.unknown) {
		t.Errorf("final count %d, want between %d acknowledged increments and %d (plus %d Txns with unknown outcome)",
			n, c.acked, c.acked+c.unknown, c.unknown)
	}
	if final > n || final < int64(c.acked) {
		t.Errorf("final read %d: the engine holds %d, clients saw %d increments acknowledged", final, n, c.acked)
	}

	if err := c.hist.Resolve(evs); err != nil {
		t.Fatalf("ground truth: %v", err)
	}
	ops := c.hist.Rec.Operations()
	if err := linearizability.CheckRevisionOrder(ops); err != nil {
		t.Errorf("history of %d operations is not linearizable: %v", len(ops), err)
	}
	verdict := "skipped"
	if budget := faultload.EnvDuration(t, "AXON_HOTKEY_PORCUPINE", counterPorcupine); budget > 0 {
		res, info := linearizability.Check(ops, budget)
		verdict = string(res)
		if res == porcupine.Illegal {
			t.Errorf("porcupine: history of %d operations is not linearizable", len(ops))
			if path := os.Getenv("AXON_HOTKEY_HTML"); path != "" {
				if err := linearizability.Visualize(info, path); err != nil {
					t.Logf("visualisation: %v", err)
				}
			}
		}
	}
	applied, dropped := c.hist.Uncertain()
	t.Logf("count %d: %d increments acknowledged, %d Txns unknown (%d timed out, %d cancelled; %d applied, %d not); %d clients out of time; %d operations, porcupine: %s; errors: %s",
		n, c.acked, c.unknown, c.timedOut, c.canceled, applied, dropped, c.short, len(ops), verdict, faultload.DescribeErrors(c.errs))
	if c.acked == 0 {
		t.Errorf("no increment acknowledged in %v: the load did not run", counterLoadFor)
	}
}

// reportAll reports the first few of a list of failures and how many
// there were.
func reportAll(t *testing.T, what string, failures []string) {
	t.Helper()
	const few = 3
	for i, f := range failures {
		if i == few {
			t.Errorf("%s: and %d more", what, len(failures)-few)
			break
		}
		t.Errorf("%s: %s", what, f)
	}
}
