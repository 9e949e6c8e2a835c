package driver

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/axon-kv/axon/core"
)

// Transport carries what instances ask each other beyond forwarded
// calls.
type Transport interface {
	// ReadIndex asks the leader at addr for its commit point (its
	// ReadPoint) and calls done exactly once, with an error if the
	// answer does not come.
	ReadIndex(addr string, done func(rev int64, err error))
	// Follow opens f, a feed of the revisions of the leader at f.Addr
	// from f.From (its NewFeedStream), hands what it receives to f.Got in
	// order and calls f.End once if it ends; it stops once f.Done
	// closes.
	Follow(f *Feed)
}

// Answer is how a call ended where it ran.
type Answer struct {
	// Rev is the leader's commit point the answer carries (its header
	// revision; 0: none). Once the call succeeds the member learns it:
	// a serializable read here afterwards sees at least what the client
	// was answered.
	Rev int64
	Err error
}

// defaultRefused: errors that say a call was not applied where it went.
func defaultRefused(err error) bool {
	return errors.Is(err, core.ErrNotLeader) || errors.Is(err, core.ErrNoLeader)
}

// Action is what the host does next with a call that must run on the
// leader.
type Action int

const (
	// RunLocal: run the call on this member; it answers
	// core.ErrNotLeader if the member does not lead.
	RunLocal Action = iota + 1
	// SendToLeader: send the call to the leader at Move.Addr.
	SendToLeader
	// WaitForLeader: wait for a leader change (AwaitLeader), then ask
	// Start again.
	WaitForLeader
	// Finished: the call ended; Move.Err is its answer.
	Finished
)

// Move is the next thing the host does with a call (Attempt.Start,
// Attempt.Next).
type Move struct {
	Action Action
	Addr   string // SendToLeader: where the leader listens
	Err    error  // Finished: the call's answer
}

// Attempt decides where one call runs, as the leader comes and goes. It
// only decides: the host runs the call, sends it or waits, and reports
// back through Next, so no host code runs inside the driver. A call
// refused before it was applied (leadership moving, leader unreachable)
// runs again once the leader changes, so a leader change is invisible to
// clients when it can be; an answer that may hide an applied call (a
// timeout, a broken connection) is passed on, never retried. Past the
// failover wait the call ends with core.ErrNoLeader. An Attempt is used
// by one caller at a time.
type Attempt struct {
	d         *Driver
	forwarded bool
	deadline  time.Duration
	sent      bool // the last step sent the call to the leader
}

// Begin starts a call that must run on the leader. A forwarded call came
// from another instance: it is not sent on (the sender tries again with a
// fresh view of the leader).
func (d *Driver) Begin(forwarded bool) *Attempt {
	a := d.begin(forwarded)
	return &a
}

func (d *Driver) begin(forwarded bool) Attempt {
	return Attempt{d: d, forwarded: forwarded, deadline: d.cfg.Clock.Now() + d.failoverWait()}
}

// Start is the first move, and the move after a wait for a leader: run
// the call here (the member, ticked, may lead by now).
func (a *Attempt) Start() Move {
	a.sent = false
	return Move{Action: RunLocal}
}

// Next takes the answer of the last move and says what to do next.
// alive says whether the caller still waits: a refused call nobody waits
// for ends with its refusal rather than being tried again.
func (a *Attempt) Next(prev Answer, alive bool) Move {
	d, sent, err := a.d, a.sent, prev.Err
	a.sent = false
	refused := d.refused(err) || (err != nil && d.cfg.Testing.RetryUnknownOutcome)
	switch {
	case !refused:
		if err == nil {
			d.learn(prev.Rev)
		}
		return Move{Action: Finished, Err: err}
	case sent || !errors.Is(err, core.ErrNotLeader):
		return a.again(err, alive)
	case a.forwarded:
		return Move{Action: Finished, Err: core.ErrNotLeader}
	}
	addr, ok := d.leaderAddr()
	if !ok {
		return a.again(err, alive)
	}
	a.sent = true
	return Move{Action: SendToLeader, Addr: addr}
}

// again is the step after a refusal.
func (a *Attempt) again(err error, alive bool) Move {
	switch {
	case !alive:
		return Move{Action: Finished, Err: err}
	case a.d.cfg.Clock.Now() >= a.deadline:
		return Move{Action: Finished, Err: core.ErrNoLeader}
	}
	return Move{Action: WaitForLeader}
}

// Lead runs a call that must run on the leader where an Attempt says,
// in callbacks, so that the server (on goroutines) and the simulator (in
// virtual time) run the same loop: run runs the call here (addr "") or
// at the leader listening at addr, and reports how it ended; a wait for
// another leader is AwaitLeader's. done gets the call's answer once.
// alive says whether the caller still waits (nil: always): a call whose
// caller left while it waited ends with the refusal that made it wait,
// and does not run again.
func (d *Driver) Lead(forwarded bool, alive func() bool, run func(addr string, done func(Answer)), done func(error)) {
	l := &leadCall{a: d.begin(forwarded), alive: alive, run: run, done: done}
	l.answered = l.answer // one closure for every answer of the call
	l.move(l.a.Start())
}

// leadCall is one call Lead runs, in one allocation: every write takes
// this path.
type leadCall struct {
	a        Attempt
	alive    func() bool
	run      func(string, func(Answer))
	done     func(error)
	answered func(Answer)
	refusal  error // the refusal that made the call wait
}

func (l *leadCall) waiting() bool { return l.alive == nil || l.alive() }

func (l *leadCall) answer(ans Answer) {
	l.refusal = ans.Err
	l.move(l.a.Next(ans, l.waiting()))
}

func (l *leadCall) move(m Move) {
	switch m.Action {
	case RunLocal, SendToLeader:
		l.run(m.Addr, l.answered)
	case WaitForLeader:
		l.a.d.AwaitLeader(func() {
			if !l.waiting() {
				l.done(l.refusal)
				return
			}
			l.move(l.a.Start())
		})
	default:
		l.done(m.Err)
	}
}

// LeaderAddr calls done with the address of the leader once one other
// than this member is known; ok is false if this member leads, or none
// is known within the failover wait or while alive says so.
func (d *Driver) LeaderAddr(alive func() bool, done func(addr string, ok bool)) {
	var addr string
	d.Lead(false, alive, func(at string, done func(Answer)) {
		var ok bool
		switch {
		case at != "": // the Attempt found it
			addr = at
		case d.Step(nil, nil): // we lead
		default:
			if addr, ok = d.leaderAddr(); !ok {
				done(Answer{Err: core.ErrNotLeader})
				return
			}
		}
		done(Answer{})
	}, func(err error) { done(addr, err == nil && addr != "") })
}

// failoverWait bounds how long a call waits for a leader: long enough
// for the worst-case takeover after a crash.
func (d *Driver) failoverWait() time.Duration {
	c := d.m.Config()
	return 2*c.Lease + c.EngineDeadline + 2*c.MaxDrift
}

// FailoverWait is how long calls wait for a leader.
func (d *Driver) FailoverWait() time.Duration { return d.failoverWait() }

func (d *Driver) refused(err error) bool {
	if err == nil {
		return false
	}
	if d.cfg.Refused != nil {
		return d.cfg.Refused(err)
	}
	return defaultRefused(err)
}

// leaderAddr is where the leader this member believes in listens, unless
// it is this member or unknown.
func (d *Driver) leaderAddr() (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, ok := d.m.Leader()
	if !ok || rec.Holder == d.m.Config().ID || rec.Addr == "" {
		return "", false
	}
	return rec.Addr, true
}

// LeaderOf is the address of the leader this member believes in, unless
// it is this member or unknown.
func (d *Driver) LeaderOf() (string, bool) { return d.leaderAddr() }

// AwaitLeader calls f once the leader this member knows changes, or
// after RetryEvery if it does not (a leader that was unreachable may be
// reachable again), and asks the member to read the election record now.
// f runs once, on the clock and never with the driver's lock held; it
// should only wake the caller (a callback, a channel closed), which then
// asks its Attempt for the next step.
func (d *Driver) AwaitLeader(f func()) {
	var once sync.Once
	d.mu.Lock()
	d.nextWaiter++
	id := d.nextWaiter
	fire := func() {
		once.Do(func() {
			d.mu.Lock()
			delete(d.leaderWaiters, id) // a timer fired first: forget it
			d.mu.Unlock()
			f()
		})
	}
	if d.leaderWaiters == nil {
		d.leaderWaiters = map[uint64]func(){}
	}
	d.leaderWaiters[id] = fire
	d.mu.Unlock()
	d.Step(func(m *core.Member) { m.Refresh() }, nil)
	d.cfg.Clock.AfterFunc(d.retryEvery(), fire)
}

func (d *Driver) retryEvery() time.Duration {
	if d.cfg.RetryEvery > 0 {
		return d.cfg.RetryEvery
	}
	return 20 * time.Millisecond
}

// leaderChanged takes the waiters to wake if the leader this member knows
// is not the one it knew at the last step. Called with the lock.
func (d *Driver) leaderChanged() []func() {
	rec, ok := d.m.Leader()
	now := leaderSeen{holder: rec.Holder, term: rec.Term, known: ok}
	if now == d.seen {
		return nil
	}
	d.seen = now
	// In the order they came: the simulator replays by seed.
	w := make([]func(), 0, len(d.leaderWaiters))
	for _, id := range slices.Sorted(maps.Keys(d.leaderWaiters)) {
		w = append(w, d.leaderWaiters[id])
	}
	clear(d.leaderWaiters)
	return w
}

type leaderSeen struct {
	holder string
	term   int64
	known  bool
}

// ReadPoint returns the commit point and compact revision when this
// member may serve reads at them itself: it leads and is not handing
// over (core.Member.Serving).
func (d *Driver) ReadPoint() (c, compacted int64, ok bool) {
	d.Step(nil, func(n *core.Node) {
		if d.m.Serving() {
			c, compacted, ok = n.Committed(), n.Compacted(), true
		}
	})
	if ok && !d.cfg.Testing.ReadPointUnlearned {
		// A read served here at c: once this member follows, its
		// serializable reads (FollowerPoint) must not go below it.
		d.learn(c)
	}
	return c, compacted, ok
}

// ReadIndex calls done with a commit point at least as new as every
// write acknowledged anywhere before the call: this member's own when it
// serves reads, else the leader's. Follower calls are batched: one round
// trip to the leader answers every call that arrived before it was sent.
func (d *Driver) ReadIndex(done func(rev int64, err error)) {
	d.mu.Lock()
	d.readWaiting = append(d.readWaiting, done)
	if d.readBusy {
		d.mu.Unlock()
		return
	}
	d.readBusy = true
	d.mu.Unlock()
	d.readRound()
}

func (d *Driver) readRound() {
	d.mu.Lock()
	batch := d.readWaiting
	d.readWaiting = nil
	if len(batch) == 0 {
		d.readBusy = false
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	var rev int64
	d.Lead(false, nil, func(addr string, done func(Answer)) {
		if addr != "" {
			d.cfg.Transport.ReadIndex(addr, func(r int64, err error) {
				rev = r
				done(Answer{Rev: r, Err: err})
			})
			return
		}
		c, _, ok := d.ReadPoint()
		if !ok {
			done(Answer{Err: core.ErrNotLeader})
			return
		}
		rev = c
		done(Answer{Rev: c})
	}, func(err error) {
		for _, f := range batch {
			f(rev, err)
		}
		d.readRound()
	})
}

// learn notes a commit point seen in an answer from the leader.
func (d *Driver) learn(rev int64) {
	for {
		k := d.known.Load()
		if (rev <= k && !d.cfg.Testing.LearnGoesBack) || rev == k || d.known.CompareAndSwap(k, rev) {
			return
		}
	}
}

// Known is the newest commit point this member learned from the leader.
func (d *Driver) Known() int64 { return d.known.Load() }

// FollowerPoint is where a follower reads without asking the leader: a
// serializable read, as in etcd, at the newest commit point it learned.
// 0 means ask the leader for a read index (a linearizable read, or
// nothing learned yet).
func (d *Driver) FollowerPoint(serializable bool) int64 {
	if !serializable {
		return 0
	}
	return d.Known()
}
