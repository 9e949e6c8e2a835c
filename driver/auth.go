package driver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
)

// authState is this member's copy of the auth store and when a check
// may use it without reading the engine.
//
// Every change runs on the leader, one at a time, in one engine
// transaction, and replaces the copy before it is answered. So the
// leader's copy is the store for as long as it leads, and checks there
// read no engine; gen, bumped at every change of role, voids a copy
// loaded in an earlier term, since another leader may have changed the
// store meanwhile (and, bumped when a change fails, a copy loaded from a
// snapshot that may predate it). Elsewhere a check reads MetaAuthSeq in
// the request's own engine snapshot (or a new one) and loads the store
// again when it moved: a change acknowledged before a request starts is
// seen by it on every instance.
type authState struct {
	gen atomic.Uint64
	cur atomic.Pointer[authCopy]
	// first is the planted StaleAuthReads' store: the one a follower
	// loaded first, which its checks then trust.
	first atomic.Pointer[auth.Store]
	// distrust (the member's clock) is when a change whose commit failed
	// has surely landed or never will (the engine deadline): until then
	// the leader's copy is not the store, and checks read the engine.
	distrust atomic.Int64

	mu      sync.Mutex // guards busy and queue
	busy    bool       // a change is running
	waiting []func()   // changes that wait for it, in arrival order
}

type authCopy struct {
	store *auth.Store
	gen   uint64
	// leader says the copy was loaded or written while leading in gen.
	leader bool
}

// AuthLook is what a check knew of the auth store before its engine
// snapshot began (LookAuth): the trusted copy, or what loading one from
// the snapshot may make of it.
type AuthLook struct {
	trusted *auth.Store
	cur     *authCopy
	gen     uint64
	led     bool
	// follower: the caller said it does not lead (StaleAuthReads).
	follower bool
}

// Trusted is the leader's copy of its term, the store itself, if the
// check may use it; nil: the check reads a snapshot (LoadAuth).
func (l AuthLook) Trusted() *auth.Store { return l.trusted }

// LookAuth starts a check of a request: led says the caller leads (the
// snapshot it reads, if any, is the leader's). Call it before the
// request's engine snapshot begins: a role change or a failed change
// after it voids what the snapshot shows for later checks.
func (d *Driver) LookAuth(led bool) AuthLook {
	a := &d.auth
	l := AuthLook{gen: a.gen.Load(), cur: a.cur.Load(), follower: !led}
	if led && d.authTrusted(l.cur) {
		l.trusted = l.cur.store
		return l
	}
	l.led = led && d.cfg.Clock.Now() >= time.Duration(a.distrust.Load())
	return l
}

// LoadAuth returns the store a check looked at with l sees in rd, an
// engine snapshot begun after LookAuth: the copy if rd holds its
// counter, else the store rd holds. The store becomes this member's copy
// unless it has a newer one.
func (d *Driver) LoadAuth(l AuthLook, rd core.Reader) (*auth.Store, error) {
	if l.trusted != nil {
		return l.trusted, nil
	}
	if d.cfg.Testing.StaleAuthReads && l.follower {
		if st := d.auth.first.Load(); st != nil {
			return st, nil
		}
	}
	seq, err := auth.ReadAuthSeq(rd)
	if err != nil {
		return nil, err
	}
	var st *auth.Store
	if l.cur != nil && l.cur.store.Seq == seq {
		st = l.cur.store
	} else if st, err = auth.ReadAuth(rd); err != nil {
		return nil, err
	} else if st == nil {
		st = auth.NewStore(nil)
	}
	st.Testing = d.cfg.Testing.Auth
	d.keepAuth(&authCopy{store: st, gen: l.gen, leader: l.led})
	if d.cfg.Testing.StaleAuthReads && l.follower {
		d.auth.first.CompareAndSwap(nil, st)
	}
	return st, nil
}

// Authorize runs check against the store a check looked at with l sees
// in rd (LoadAuth): the read's own snapshot, begun after LookAuth.
func (d *Driver) Authorize(l AuthLook, rd core.Reader, check func(*auth.Store) error) error {
	st, err := d.LoadAuth(l, rd)
	if err != nil {
		return err
	}
	return check(st)
}

// AuthorizeLeader checks a call that runs on the leader: against the
// leader's copy of the store while it is trusted, else against the store
// in a new engine snapshot, which open begins and hands over (at once, or
// later: the simulator's engine takes time) with its release. done gets
// check's answer, or core.ErrNotLeader if this member does not lead, so
// that the call goes to the leader instead.
func (d *Driver) AuthorizeLeader(open func(func(rd core.Reader, release func(), err error)), check func(*auth.Store) error, done func(error)) {
	l := d.LookAuth(true)
	if st := l.Trusted(); st != nil {
		// A copy kept while leading, with no change of role since, says
		// this member leads: no need to ask it.
		done(check(st))
		return
	}
	if !d.Step(nil, nil) {
		done(core.ErrNotLeader)
		return
	}
	open(func(rd core.Reader, release func(), err error) {
		if err != nil {
			done(err)
			return
		}
		defer release()
		done(d.Authorize(l, rd, check))
	})
}

// AuthView is LookAuth then LoadAuth in one go, for a caller whose
// engine reads block: rd is the request's snapshot, or nil for one from
// open (only if the copy is not trusted).
func (d *Driver) AuthView(rd core.Reader, led bool, open func() (core.Reader, func(), error)) (*auth.Store, error) {
	l := d.LookAuth(led)
	if st := l.Trusted(); st != nil {
		return st, nil
	}
	if rd == nil {
		r, release, err := open()
		if err != nil {
			return nil, err
		}
		defer release()
		rd = r
	}
	return d.LoadAuth(l, rd)
}

// AuthTrusted reports whether the member holds the leader's copy of the
// store of its current term; a role change voids it, so it also says
// the member leads, without asking it.
func (d *Driver) AuthTrusted() bool { return d.authTrusted(d.auth.cur.Load()) }

func (d *Driver) authTrusted(cur *authCopy) bool {
	a := &d.auth
	return cur != nil && cur.leader && cur.gen == a.gen.Load() && d.cfg.Clock.Now() >= time.Duration(a.distrust.Load())
}

// keepAuth replaces the copy unless it is newer than c.
func (d *Driver) keepAuth(c *authCopy) {
	a := &d.auth
	for {
		old := a.cur.Load()
		if old != nil && old.store.Seq > c.store.Seq {
			return
		}
		if a.cur.CompareAndSwap(old, c) {
			return
		}
	}
}

// AuthEngine runs the engine transaction of a change of the auth store.
type AuthEngine interface {
	// Update runs fn in a new engine transaction and commits the writes
	// it returns (none: nothing is committed). The commit lands within
	// half the engine deadline of the begin or not at all, as a write's
	// does, so that a new leader's first read of the store sees it.
	// done gets the error exactly once, before Update returns or later
	// (an executor that is stopped may drop it).
	Update(fn func(core.Reader) ([]core.Write, error), done func(error))
}

// AuthChange is one change of the auth store, to run on the leader.
type AuthChange struct {
	Change auth.Change
	// Admit refuses a caller that the stored store, once enabled, does
	// not let change it (the caller's identity is the server's business).
	Admit func(st *auth.Store) error
	// Engine runs the change's transaction.
	Engine AuthEngine
}

// ChangeAuth applies a change on the leader: one engine transaction
// reads the stored store, lets Admit refuse the caller, applies the
// change to a copy and writes it back; once committed the copy becomes
// this member's. Changes run one at a time, in arrival order. done gets
// the new store (nil: nothing changed), or core.ErrNotLeader if this
// member does not lead when the change's turn comes.
func (d *Driver) ChangeAuth(c AuthChange, done func(*auth.Store, error)) {
	a := &d.auth
	run := func() { d.changeAuth(c, done) }
	a.mu.Lock()
	if a.busy {
		a.waiting = append(a.waiting, run)
		a.mu.Unlock()
		return
	}
	a.busy = true
	a.mu.Unlock()
	run()
}

func (d *Driver) changeAuth(c AuthChange, done func(*auth.Store, error)) {
	finish := func(next *auth.Store, err error) {
		d.nextAuthChange()
		done(next, err)
	}
	if !d.Step(nil, nil) {
		finish(nil, core.ErrNotLeader)
		return
	}
	a := &d.auth
	g := a.gen.Load()
	var next *auth.Store
	c.Engine.Update(func(rd core.Reader) ([]core.Write, error) {
		next = nil
		st, err := auth.ReadAuth(rd)
		if err != nil {
			return nil, err
		}
		if st == nil {
			secret, err := d.cfg.AuthSecret()
			if err != nil {
				return nil, err
			}
			st = auth.NewStore(secret)
		}
		st.Testing = d.cfg.Testing.Auth
		if st.Enabled && c.Admit != nil {
			if err := c.Admit(st); err != nil {
				return nil, err
			}
		}
		st = st.Clone()
		changed, err := st.Apply(c.Change)
		if err != nil || !changed {
			return nil, err
		}
		next = st
		return auth.AuthWrites(st, d.cfg.Binary), nil
	}, func(err error) {
		switch {
		case err != nil && next != nil:
			// The commit failed, maybe uncertainly (it may land later):
			// read the engine until it surely has or never will. A check
			// that looked before now may load a snapshot without the
			// change after it: gen voids what it keeps.
			a.distrust.Store(int64(d.cfg.Clock.Now() + d.engineDeadline))
			if !d.cfg.Testing.KeepGenOnFailedAuth {
				a.gen.Add(1)
			}
			a.cur.Store(nil)
			next = nil
		case next != nil:
			d.keepAuth(&authCopy{store: next, gen: g, leader: true})
		}
		finish(next, err)
	})
}

// nextAuthChange starts the change waiting longest, on the clock (not in
// the finishing change's caller, which its own caller waits on).
func (d *Driver) nextAuthChange() {
	a := &d.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) == 0 {
		a.busy = false
		return
	}
	next := a.waiting[0]
	a.waiting = a.waiting[1:]
	d.cfg.Clock.AfterFunc(0, next)
}
