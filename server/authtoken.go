package server

import (
	"cmp"
	"container/list"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core/auth"
)

// defaultTrackedTokens bounds the simple tokens an instance keeps the
// last use of (some 200 bytes each).
const defaultTrackedTokens = 1 << 16

// touchEvery is how stale a token's recorded last use may get before a
// use records it again: etcd's TTL resolution, and it keeps the busy
// path to a read lock.
const touchEvery = time.Second

// authTokens issues and resolves the tokens --auth-token names.
//
// A simple token carries the expiry TTL after Authenticate; as etcd resets
// a simple token's TTL at each use, this instance records when it last
// saw each token used (uses) and keeps one used within the TTL alive past
// that expiry. etcd's members each keep such a table of their own, so do
// Axon's instances: a token kept alive by its use on one instance is
// still judged by its own expiry on another that has not seen it used. A
// call forwarded to the leader carries the token renewed (re-signed with
// the expiry this instance sees), and the leader judges a forwarded
// token by its signature alone, so it decides as this instance would.
type authTokens struct {
	kind string
	jwt  *jwtKeys
	ttl  time.Duration
	now  func() time.Time
	uses *tokenUses
	// seen is the store a simple token was last resolved against, whose
	// Secret renews tokens on their way to the leader without an engine
	// read.
	seen atomic.Pointer[auth.Store]
}

func newAuthTokens(cfg AuthConfig) *authTokens {
	t := &authTokens{kind: "simple", ttl: cfg.TokenTTL, now: cfg.Now}
	if cfg.Token != nil {
		t.kind, t.jwt = cfg.Token.kind, cfg.Token.jwt
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.kind == "simple" {
		t.uses = newTokenUses(cfg.TokenTTL, cmp.Or(cfg.TrackedTokens, defaultTrackedTokens))
	}
	return t
}

// issue returns a token for user, whose password was just checked in st.
func (t *authTokens) issue(st *auth.Store, user string) (string, error) {
	now := t.now()
	switch t.kind {
	case "jwt":
		tok, err := t.jwt.issue(user, st.Revision, now)
		if err != nil {
			// etcd answers an error it has no code for as Unknown.
			return "", status.Error(codes.Unknown, err.Error())
		}
		return tok, nil
	case "simple":
		nonce := make([]byte, 8)
		_, _ = rand.Read(nonce)
		return st.IssueToken(user, now.Add(t.ttl).UnixNano(), nonce), nil
	}
	return "", auth.ErrAuthFailed // etcd's nop provider
}

// resolve is who a token stands for in st (auth on), or
// ErrAuthInvalidToken. A simple token's use on a call from a client keeps
// it alive on this instance; a forwarded one is judged by its expiry.
func (t *authTokens) resolve(st *auth.Store, token string, forwarded bool) (auth.Identity, error) {
	now := t.now()
	switch t.kind {
	case "jwt":
		return t.jwt.resolve(token, now)
	case "simple":
	default:
		return auth.Identity{}, auth.ErrAuthInvalidToken
	}
	id, exp, err := st.ResolveToken(token)
	if err != nil {
		return auth.Identity{}, err
	}
	if t.seen.Load() != st {
		t.seen.Store(st)
	}
	alive := now.UnixNano() < exp
	if !forwarded {
		alive = t.uses.alive(token, exp, now.UnixNano())
	}
	if !alive {
		return auth.Identity{}, auth.ErrAuthInvalidToken
	}
	return id, nil
}

// forward returns the token a call carries as the leader should get it:
// a simple token alive here renewed to a TTL from now, after recording
// the use; anything else as it is (the leader finds a dead token dead
// too). store reads the current store when the last one seen will not do.
func (t *authTokens) forward(token string, store func() (*auth.Store, error)) string {
	if t.kind != "simple" {
		return token
	}
	st := t.seen.Load()
	exp, ok := expiryIn(st, token)
	if !ok {
		// The store last seen may be too old to know a fresh token.
		var err error
		if st, err = store(); err != nil {
			return token
		}
		t.seen.Store(st)
		if exp, ok = expiryIn(st, token); !ok {
			return token
		}
	}
	now := t.now().UnixNano()
	if !t.uses.alive(token, exp, now) {
		return token
	}
	if renewed, ok := st.RenewToken(token, now+int64(t.ttl)); ok {
		return renewed
	}
	return token
}

// expiryIn is the expiry a simple token carries, if st (auth on) deems
// it genuine and not void.
func expiryIn(st *auth.Store, token string) (int64, bool) {
	if st == nil || !st.Enabled {
		return 0, false
	}
	_, exp, err := st.ResolveToken(token)
	return exp, err == nil
}

// tokenUses is when simple tokens were last used on this instance. It
// holds at most max tokens: past that the least recently used is dropped
// and lives only to the expiry it carries.
type tokenUses struct {
	ttl int64
	max int

	mu      sync.RWMutex
	byToken map[string]*list.Element
	order   list.List // of *tokenUse, the most recently used first
}

type tokenUse struct {
	token string
	last  atomic.Int64 // Unix nanoseconds
}

func newTokenUses(ttl time.Duration, limit int) *tokenUses {
	return &tokenUses{ttl: int64(ttl), max: limit, byToken: map[string]*list.Element{}}
}

// alive reports whether a token whose own expiry is exp is alive at now:
// before exp, or used here within the TTL. A live token's use is
// recorded.
func (u *tokenUses) alive(token string, exp, now int64) bool {
	u.mu.RLock()
	e := u.byToken[token]
	last := int64(0)
	if e != nil {
		last = e.Value.(*tokenUse).last.Load()
	}
	u.mu.RUnlock()
	if now >= exp && (e == nil || now >= last+u.ttl) {
		return false
	}
	if e == nil || now-last >= int64(touchEvery) {
		u.touch(token, now)
	}
	return true
}

func (u *tokenUses) touch(token string, now int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e := u.byToken[token]; e != nil {
		if use := e.Value.(*tokenUse); now > use.last.Load() {
			use.last.Store(now)
		}
		u.order.MoveToFront(e)
		return
	}
	// Drop the uses that no longer keep a token alive, then, if still
	// full, the least recent.
	for b := u.order.Back(); b != nil && (u.order.Len() >= u.max || now >= b.Value.(*tokenUse).last.Load()+u.ttl); b = u.order.Back() {
		delete(u.byToken, b.Value.(*tokenUse).token)
		u.order.Remove(b)
	}
	use := &tokenUse{token: token}
	use.last.Store(now)
	u.byToken[token] = u.order.PushFront(use)
}
