package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage/memkv"
)

// fakeClock is virtual time whose timers fire when the test moves it.
type fakeClock struct {
	now    time.Duration
	timers []timer
	asked  []time.Duration // every AfterFunc delay, in order
}

type timer struct {
	at time.Duration
	f  func()
}

func (c *fakeClock) Now() time.Duration { return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) {
	c.asked = append(c.asked, d)
	c.timers = append(c.timers, timer{c.now + d, f})
}

// advance moves time by d and fires the timers due.
func (c *fakeClock) advance(d time.Duration) {
	c.now += d
	for len(c.timers) > 0 {
		due := -1
		for i, t := range c.timers {
			if t.at <= c.now {
				due = i
				break
			}
		}
		if due < 0 {
			return
		}
		t := c.timers[due]
		c.timers = append(c.timers[:due], c.timers[due+1:]...)
		t.f()
	}
}

// queueExec holds work until the test runs it against a memkv engine;
// failPuts makes that many request commits fail as not applied, and
// uncertainPuts that many commit yet report an uncertain outcome.
type queueExec struct {
	eng           *memkv.Engine
	queue         []*core.Work
	failPuts      int
	uncertainPuts int
}

func (e *queueExec) Exec(_ *driver.Driver, w *core.Work) { e.queue = append(e.queue, w) }

// drain runs queued work, and the work that yields, until none is left
// or keep says to hold the rest.
func (e *queueExec) drain(t *testing.T, d *driver.Driver, keep func(*core.Work) bool) {
	t.Helper()
	for len(e.queue) > 0 {
		w := e.queue[0]
		if keep != nil && keep(w) {
			return
		}
		e.queue = e.queue[1:]
		ctx := context.Background()
		switch w.Kind {
		case core.WorkRecover:
			st, err := driver.Recover(ctx, e.eng)
			d.Done(w, driver.Result{State: st, Err: err})
		case core.WorkCatchUp:
			evs, last, err := driver.CatchUp(ctx, e.eng, w, 16)
			d.Done(w, driver.Result{Events: evs, Last: last, Err: err})
		default:
			if w.Kind == core.WorkRequest && e.failPuts > 0 {
				e.failPuts--
				d.Done(w, driver.Result{Outcome: core.NotApplied})
				continue
			}
			eff, out, _ := driver.Run(ctx, e.eng, w, d)
			if w.Kind == core.WorkRequest && out == core.Committed && e.uncertainPuts > 0 {
				e.uncertainPuts--
				out = core.Uncertain
			}
			d.Done(w, driver.Result{Effects: eff, Outcome: out})
		}
	}
}

// newLeader starts a driver of a member alone on its engine and runs its work
// until it leads.
func newLeader(t *testing.T) (*driver.Driver, *fakeClock, *queueExec, *core.Member) {
	return newLeaderWith(t, nil)
}

// newLeaderWith is newLeader with a config edited by edit (if not nil).
func newLeaderWith(t *testing.T, edit func(*driver.Config)) (*driver.Driver, *fakeClock, *queueExec, *core.Member) {
	t.Helper()
	clock := &fakeClock{now: time.Hour}
	ex := &queueExec{eng: memkv.New()}
	m := core.NewMember(core.MemberConfig{ID: "a.1", Addr: "a"})
	cfg := driver.Config{Member: m, Clock: clock, Exec: ex}
	if edit != nil {
		edit(&cfg)
	}
	d := driver.New(cfg)
	for i := 0; i < 10 && !d.Step(nil, nil); i++ {
		ex.drain(t, d, nil)
	}
	if !d.Step(nil, nil) {
		t.Fatalf("not leading: %s", core.DescribeMember(m))
	}
	return d, clock, ex, m
}

func put(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}}}
}

// propose proposes a put of key; *got is set when it is answered.
func propose(t *testing.T, d *driver.Driver, key string, got **core.Response) {
	t.Helper()
	if d.Write(put(key), func(r core.Response) { *got = &r }) == 0 {
		t.Fatal("a leader refused a proposal")
	}
}

func TestProposeIsAnsweredOnceTheWorkIsDone(t *testing.T) {
	d, _, ex, _ := newLeader(t)
	var got *core.Response
	propose(t, d, "/k", &got)
	if got != nil {
		t.Fatalf("answered before its work ran: %+v", got)
	}
	ex.drain(t, d, nil)
	if got == nil || got.Err != nil || got.Rev < 2 {
		t.Fatalf("answer: %+v", got)
	}
}

// TestLosingTheLeadAnswersWaiters: a request whose work is still out when
// the leader's lease runs out is answered ErrLeaderChanged (its outcome
// is unknown), not left waiting; the role change reaches the hook after.
func TestLosingTheLeadAnswersWaiters(t *testing.T) {
	d, clock, _, m := newLeader(t)
	var got *core.Response
	propose(t, d, "/k", &got)
	// No work runs: no renewal lands, and the lease runs out.
	clock.advance(m.Config().Lease + m.Config().MaxDrift + time.Second)
	if d.Step(nil, nil) {
		t.Fatalf("still leading: %s", core.DescribeMember(m))
	}
	if got == nil || got.Err != driver.ErrLeaderChanged {
		t.Fatalf("the waiting request got %+v, want ErrLeaderChanged", got)
	}
	if id := d.Write(put("b"), func(core.Response) { t.Fatal("answered") }); id != 0 {
		t.Fatal("a member that does not lead took a proposal")
	}
}

// TestRetriesBackOff: work retried after a failed commit is started
// after Backoff(attempt), on the driver's clock.
func TestRetriesBackOff(t *testing.T) {
	d, clock, ex, _ := newLeader(t)
	ex.failPuts = 2
	clock.asked = nil
	var got *core.Response
	propose(t, d, "/k", &got)
	ex.drain(t, d, nil)
	if got != nil {
		t.Fatalf("answered while its retry waits: %+v", got)
	}
	if len(clock.asked) != 1 || clock.asked[0] != driver.Backoff(1) {
		t.Fatalf("timers asked: %v, want [%v]", clock.asked, driver.Backoff(1))
	}
	clock.advance(driver.Backoff(1))
	ex.drain(t, d, nil)
	clock.advance(driver.Backoff(2))
	ex.drain(t, d, nil)
	if got == nil || got.Err != nil {
		t.Fatalf("answer after two failed commits: %+v", got)
	}
	if len(clock.asked) < 2 || clock.asked[1] != driver.Backoff(2) {
		t.Fatalf("timers asked: %v, want %v second", clock.asked, driver.Backoff(2))
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{0, 0}, {1, 5 * time.Millisecond}, {10, 50 * time.Millisecond}, {1000, time.Second}} {
		if got := driver.Backoff(tc.attempt); got != tc.want {
			t.Errorf("Backoff(%d) = %v, want %v", tc.attempt, got, tc.want)
		}
	}
}

// TestRetryAfterTheLeaseIsNotRun: a retry waiting out its backoff when
// the lease runs out is dropped, never started: a successor may already
// deal the revision it carries (simulator seed 1079 found this).
func TestRetryAfterTheLeaseIsNotRun(t *testing.T) {
	d, clock, ex, m := newLeader(t)
	ex.failPuts = 1
	var got *core.Response
	propose(t, d, "/k", &got)
	ex.drain(t, d, nil)
	if len(clock.timers) != 1 {
		t.Fatalf("want the retry's backoff timer, have %d timers", len(clock.timers))
	}
	// The node pauses past its lease; the backoff fires late.
	clock.now += m.Config().Lease + m.Config().MaxDrift + time.Second
	clock.advance(0)
	if len(ex.queue) != 0 {
		t.Fatalf("a retry of a lost lease was started: %s", core.DescribeWork(ex.queue[0]))
	}
	if got == nil || got.Err != driver.ErrLeaderChanged {
		t.Fatalf("the request got %+v, want ErrLeaderChanged", got)
	}
}

// TestTransferEndsWhenTheSuccessorHolds: Transfer drains, writes the
// successor's record and answers once this member follows it, woken by
// the leader change (the fake clock only moves when the test says).
func TestTransferEndsWhenTheSuccessorHolds(t *testing.T) {
	d, clock, ex, m := newLeader(t)
	var got error
	answered := false
	d.Transfer("b.1", "b", func(err error) { got, answered = err, true })
	for i := 0; i < 10 && !answered; i++ {
		ex.drain(t, d, nil)
		clock.advance(20 * time.Millisecond)
	}
	if !answered || got != nil {
		t.Fatalf("transfer answered=%v err=%v: %s", answered, got, core.DescribeMember(m))
	}
	if rec, ok := m.Leader(); !ok || rec.Holder != "b.1" || m.Role() != core.Follower {
		t.Fatalf("after the transfer: %s, leader %+v", core.DescribeMember(m), rec)
	}
}

// TestRetriesLeaveNoWaiters: a call refused again and again while the
// leader stays the same retries on its timer and leaves nothing behind
// (a long-lived follower cut off from its leader must not grow).
func TestRetriesLeaveNoWaiters(t *testing.T) {
	d, clock, _, _ := newLeader(t)
	tries := 0
	var got error
	d.Lead(false, func() bool { return tries < 5 }, func(_ string, done func(driver.Answer)) { tries++; done(driver.Answer{Err: core.ErrNoLeader}) },
		func(err error) { got = err })
	for i := 0; i < 10 && got == nil; i++ {
		clock.advance(20 * time.Millisecond)
	}
	if tries != 5 || got == nil {
		t.Fatalf("tries=%d answer=%v", tries, got)
	}
	if n := driver.Waiting(d); n != 0 {
		t.Fatalf("%d calls still wait for a leader change", n)
	}
}

// TestFollowerPoint: a serializable read reads at the newest commit point
// learned, which only moves forward; a linearizable one, or one before
// anything was learned, asks for a read index (0).
func TestFollowerPoint(t *testing.T) {
	d := driver.New(driver.Config{Member: core.NewMember(core.MemberConfig{ID: "b.1", Addr: "b"}), Clock: &fakeClock{now: time.Hour}, Exec: &queueExec{eng: memkv.New()}})
	if got := d.FollowerPoint(true); got != 0 {
		t.Fatalf("serializable point before learning: r%d, want 0", got)
	}
	driver.Learn(d, 7)
	driver.Learn(d, 5) // an older answer arriving late
	if got := d.FollowerPoint(true); got != 7 {
		t.Fatalf("serializable point: r%d, want r7", got)
	}
	if got := d.FollowerPoint(false); got != 0 {
		t.Fatalf("linearizable point: r%d, want 0 (ask for a read index)", got)
	}
}

// TestLeadLearnsAnsweredRevisions: the commit point a successful call
// was answered with is learned (a serializable read here afterwards sees
// the caller's write); a failed call's is not.
func TestLeadLearnsAnsweredRevisions(t *testing.T) {
	d, _, _, _ := newLeader(t)
	lead := func(a driver.Answer) error {
		var got error
		d.Lead(false, nil, func(_ string, done func(driver.Answer)) { done(a) }, func(err error) { got = err })
		return got
	}
	if err := lead(driver.Answer{Rev: 9}); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("etcdserver: request timed out")
	if err := lead(driver.Answer{Rev: 12, Err: failed}); !errors.Is(err, failed) {
		t.Fatalf("failed call answered %v, want %v", err, failed)
	}
	if got := d.FollowerPoint(true); got != 9 {
		t.Fatalf("serializable point: r%d, want r9 (the successful call's)", got)
	}
}

// TestReadPointIsLearned: a leader learns the commit point it serves
// reads at, so its serializable reads once it follows do not go below
// them, as an etcd member's local reads never go back (simulator seed
// 2690: a leader served a read at r108, which only a lease expiry had
// written, stepped down, and served a serializable read at r107).
func TestReadPointIsLearned(t *testing.T) {
	d, _, ex, _ := newLeader(t)
	var got *core.Response
	propose(t, d, "/k", &got)
	ex.drain(t, d, nil)
	// The write's answer is not taken through Lead: nothing learned it.
	c, _, ok := d.ReadPoint()
	if !ok || c < 2 {
		t.Fatalf("read point r%d %v, want a leader's", c, ok)
	}
	if k := d.Known(); k != c {
		t.Fatalf("known r%d after serving reads at r%d", k, c)
	}
}

// TestLeaderIgnoresAnElectionResultItDidNotAskFor: the result of an
// election op the member is not waiting for (one delivered twice, or a
// crashed predecessor's campaign reported to its successor) changes
// nothing; acted on, it stepped a leader down while the record still
// named it, and the leader came back in the same term without knowing
// what its first node had committed (simulator seed 237548).
func TestLeaderIgnoresAnElectionResultItDidNotAskFor(t *testing.T) {
	d, _, _, m := newLeader(t)
	rec, ok := m.Leader()
	if !ok {
		t.Fatal("no record")
	}
	stale := &core.ElectionRecord{Holder: "ghost", Term: rec.Term - 1}
	foreign := &core.Work{Kind: core.WorkElect, Elect: &core.ElectOp{Expect: stale, Next: core.ElectionRecord{Holder: "ghost", Term: rec.Term}}}
	d.Done(foreign, driver.Result{Effects: &core.Effects{Record: &rec}, Outcome: core.Committed})
	if !d.Step(nil, nil) {
		t.Fatalf("a leader stepped down over a campaign it never made: %s", core.DescribeMember(m))
	}
}
