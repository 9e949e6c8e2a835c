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
}

// Call is a request that must run on the leader.
type Call struct {
	// Local runs the call on this member and calls done with its
	// result, or with core.ErrNotLeader. It may block (the server's
	// handlers do) or answer later (the simulator's).
	Local func(done func(Answer))
	// Remote sends the call to the leader at addr and calls done with
	// its answer exactly once.
	Remote func(addr string, done func(Answer))
	// Forwarded: the call came from another instance; it is not sent on
	// (the sender retries with a fresh view of the leader).
	Forwarded bool
	// Alive says whether the caller still waits; a call nobody waits
	// for is not tried again. Nil: always.
	Alive func() bool
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

// Lead runs c on the leader: local when this member leads, otherwise sent
// to the leader this member believes in. A call refused before it was
// applied (leadership moving, leader unreachable) runs again once the
// leader changes, so a leader change is invisible to clients when it can
// be; an answer that may hide an applied call (a timeout, a broken
// connection) is passed on, never retried. Past the failover wait done
// gets core.ErrNoLeader.
func (d *Driver) Lead(c Call, done func(error)) {
	deadline := d.cfg.Clock.Now() + d.failoverWait()
	var try func()
	again := func(err error) {
		if c.Alive != nil && !c.Alive() {
			done(err)
			return
		}
		if d.cfg.Clock.Now() >= deadline {
			done(core.ErrNoLeader)
			return
		}
		d.awaitLeader(try)
	}
	answered := func(a Answer) {
		if a.Err == nil {
			d.learn(a.Rev)
		}
		done(a.Err)
	}
	try = func() {
		c.Local(func(a Answer) {
			err := a.Err
			switch {
			case !d.refused(err):
				answered(a)
			case !errors.Is(err, core.ErrNotLeader):
				again(err)
			case c.Forwarded:
				done(core.ErrNotLeader)
			default:
				addr, ok := d.leaderAddr()
				if !ok {
					again(err)
					return
				}
				c.Remote(addr, func(a Answer) {
					if d.refused(a.Err) {
						again(a.Err)
						return
					}
					answered(a)
				})
			}
		})
	}
	try()
}

// LeaderAddr calls done with the address of the leader once one other
// than this member is known; ok is false if this member leads, or none
// is known within the failover wait or while alive says so.
func (d *Driver) LeaderAddr(alive func() bool, done func(addr string, ok bool)) {
	var addr string
	d.Lead(Call{
		Local: func(done func(Answer)) {
			if d.Step(nil, nil) {
				done(Answer{}) // we lead
				return
			}
			var ok bool
			if addr, ok = d.leaderAddr(); !ok {
				done(Answer{Err: core.ErrNotLeader})
				return
			}
			done(Answer{})
		},
		Remote: func(a string, done func(Answer)) {
			addr = a
			done(Answer{})
		},
		Alive: alive,
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

// awaitLeader runs f once the leader this member knows changes, or after
// RetryEvery if it does not (a leader that was unreachable may be
// reachable again), and asks the member to read the election record now.
func (d *Driver) awaitLeader(f func()) {
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
	d.Lead(Call{
		Local: func(done func(Answer)) {
			c, _, ok := d.ReadPoint()
			if !ok {
				done(Answer{Err: core.ErrNotLeader})
				return
			}
			rev = c
			done(Answer{Rev: c})
		},
		Remote: func(addr string, done func(Answer)) {
			d.cfg.Transport.ReadIndex(addr, func(r int64, err error) {
				rev = r
				done(Answer{Rev: r, Err: err})
			})
		},
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
		if rev <= k || d.known.CompareAndSwap(k, rev) {
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
