package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/exec"
)

// AuthConfig is etcd's auth flags.
type AuthConfig struct {
	// Token is --auth-token (ParseAuthToken); nil is simple tokens.
	Token *AuthToken
	// TokenTTL is how long a simple token stays valid after Authenticate
	// and after each use (--auth-token-ttl; default 300s).
	TokenTTL time.Duration
	// TrackedTokens bounds the simple tokens an instance keeps the last
	// use of (0: 65536); see authTokens.
	TrackedTokens int
	// Now is the tokens' clock (nil: time.Now), for tests.
	Now func() time.Time
	// BcryptCost is the cost of password hashes (--bcrypt-cost; default
	// bcrypt.DefaultCost, as etcd).
	BcryptCost int
}

func (c AuthConfig) withDefaults() AuthConfig {
	if c.TokenTTL <= 0 {
		c.TokenTTL = 300 * time.Second
	}
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	return c
}

// authState is this instance's copy of the auth store.
//
// Every change runs on the leader (forwarded like a write), under mu, in
// one engine transaction, and replaces the copy before it is answered.
// So the leader's copy is the store for as long as it leads, and checks
// there (writes, leases, watches) read no engine; gen, bumped at every
// change of role, voids a copy loaded in an earlier term, since another
// leader may have changed the store meanwhile. Elsewhere a check reads
// MetaAuthSeq in the request's own engine snapshot (or a new one) and
// loads the store again when it moved: a change acknowledged before a
// request starts is seen by it on every instance.
type authState struct {
	cfg AuthConfig
	mu  sync.Mutex // serialises changes
	// dummy is compared against when Authenticate finds no password to
	// compare with, so a failed attempt costs bcrypt's time either way.
	dummy     []byte
	dummyOnce sync.Once
	gen       atomic.Uint64
	cur       atomic.Pointer[authCopy]
	// distrust (Unix nanoseconds) is when a change whose commit failed
	// has surely landed or never will (the engine deadline): until then
	// the leader's copy is not the store, and checks read the engine.
	distrust atomic.Int64
}

type authCopy struct {
	store *core.AuthStore
	gen   uint64
	// leader says the copy was loaded or written while leading in gen.
	leader bool
}

// authView returns the auth store a request is checked against. led says
// the caller leads (its snapshot is the leader's); rd, when not nil, is
// the request's engine snapshot.
func (s *Server) authView(ctx context.Context, rd core.Reader, led bool) (*core.AuthStore, error) {
	g := s.auth.gen.Load()
	cur := s.auth.cur.Load()
	if led && s.auth.trusted(cur) {
		return cur.store, nil
	}
	led = led && time.Now().UnixNano() >= s.auth.distrust.Load()
	if rd == nil {
		txn, err := s.eng.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer txn.Rollback()
		rd = storage.NewReader(txn)
	}
	seq, err := core.ReadAuthSeq(rd)
	if err != nil {
		return nil, err
	}
	st := (*core.AuthStore)(nil)
	if cur != nil && cur.store.Seq == seq {
		st = cur.store
	} else if st, err = core.ReadAuth(rd); err != nil {
		return nil, err
	} else if st == nil {
		st = core.NewAuthStore(nil)
	}
	s.auth.keep(&authCopy{store: st, gen: g, leader: led})
	return st, nil
}

// keep replaces the copy unless it is newer than c.
func (a *authState) keep(c *authCopy) {
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

// tokenOf returns the token a call carries: gRPC's "token" metadata, or
// the gateway's Authorization header.
func tokenOf(ctx context.Context) (string, bool) {
	for _, k := range []string{"token", "authorization"} {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			return strings.TrimPrefix(v[0], "Bearer "), true
		}
	}
	return "", false
}

// identify resolves who a call runs as against st: by its token; else,
// forwarded, by the user the forwarding instance vouched for; else, with
// --client-cert-auth, by its client certificate's CommonName (never on a
// forwarded call, whose certificate is the instance's); else nobody.
// With auth off nobody; a bad token is ErrAuthInvalidToken.
func (s *Server) identify(ctx context.Context, st *core.AuthStore) (core.AuthIdentity, error) {
	if !st.Enabled {
		return core.AuthIdentity{}, nil
	}
	if tok, ok := tokenOf(ctx); ok {
		return s.tokens.resolve(st, tok, forwarded(ctx))
	}
	now := time.Now().UnixNano()
	if forwarded(ctx) {
		if user, ok := st.Vouched(vouchedHeader(ctx), now); ok {
			return core.AuthIdentity{User: user, Revision: st.Revision}, nil
		}
		return core.AuthIdentity{}, nil
	}
	if s.cfg.ClientCertAuth {
		if cn := certUser(ctx); cn != "" {
			return core.AuthIdentity{User: cn, Revision: st.Revision}, nil
		}
	}
	return core.AuthIdentity{}, nil
}

// vouch returns what a forwarded call carries for the leader to know the
// caller by: its token, or the user its certificate names, vouched for
// until ttl from now (0: for good, for a stream).
func (s *Server) vouch(ctx context.Context, ttl time.Duration) []string {
	if tok, ok := tokenOf(ctx); ok {
		return []string{"token", s.tokens.forward(tok, func() (*core.AuthStore, error) { return s.authView(ctx, nil, false) })}
	}
	if !s.cfg.ClientCertAuth || forwarded(ctx) {
		return nil
	}
	cn := certUser(ctx)
	if cn == "" {
		return nil
	}
	st, err := s.authView(ctx, nil, false)
	if err != nil || !st.Enabled {
		return nil
	}
	exp := int64(0)
	if ttl > 0 {
		exp = time.Now().Add(ttl).UnixNano()
	}
	return []string{vouchKey, st.VouchUser(cn, exp)}
}

// authCheck decides whether a call may run, given the store and who it
// runs as.
type authCheck func(st *core.AuthStore, id core.AuthIdentity) error

// authorize resolves the caller of ctx and runs check (see authView for
// rd and led). With auth off everything may run.
func (s *Server) authorize(ctx context.Context, rd core.Reader, led bool, check authCheck) error {
	st, err := s.authView(ctx, rd, led)
	if err != nil || !st.Enabled {
		return err
	}
	id, err := s.identify(ctx, st)
	if err != nil {
		return err
	}
	return check(st, id)
}

// authorizeLeader is authorize on the leader, with the leader's copy of
// the store; core.ErrNotLeader if this instance does not lead, so that
// the driver sends the call to the leader instead.
func (s *Server) authorizeLeader(ctx context.Context, check authCheck) error {
	// A copy kept while leading, with no change of role since, says this
	// instance leads (a role change bumps gen as it happens): no need to
	// ask the member.
	if !s.auth.trusted(s.auth.cur.Load()) && !s.step(nil) {
		return core.ErrNotLeader
	}
	return s.authorize(ctx, nil, true, check)
}

// trusted reports whether cur is the leader's copy of this term: the
// store itself.
func (a *authState) trusted(cur *authCopy) bool {
	return cur != nil && cur.leader && cur.gen == a.gen.Load() && time.Now().UnixNano() >= a.distrust.Load()
}

// Checks that etcd makes of calls other than key ranges.
var (
	// tokenValid: a given token must be valid (etcd checks it for every
	// proposal, compaction included).
	tokenValid authCheck = func(*core.AuthStore, core.AuthIdentity) error { return nil }
	// someUser: etcd's requireAuthInfo.
	someUser authCheck = func(_ *core.AuthStore, id core.AuthIdentity) error {
		if id.Revision == 0 {
			return core.ErrAuthUserEmpty
		}
		return nil
	}
	// admin: the root role.
	admin authCheck = func(st *core.AuthStore, id core.AuthIdentity) error { return st.CheckAdmin(id) }
)

// leaseKeys returns the keys attached to a lease; on the leader.
func (s *Server) leaseKeys(lease int64) [][]byte {
	var keys [][]byte
	s.step(func(n *core.Node) {
		if info, err := n.TimeToLive(lease, s.clock()); err == nil {
			keys = info.Keys
		}
	})
	return keys
}

// changeAuth applies a change to the auth store on the leader: one
// engine transaction reads the stored store, checks that the caller of
// ctx may change it (the root role, once auth is on), applies ch to a
// copy and writes it back; then the copy becomes this instance's.
func (s *Server) changeAuth(ctx context.Context, ch core.AuthChange) error {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	if !s.step(nil) {
		return core.ErrNotLeader
	}
	g := s.auth.gen.Load()
	// As a write: land within the engine deadline or not at all, so a
	// new leader's first read of the store sees it (DESIGN §9).
	tctx, cancel := context.WithTimeout(ctx, s.mcfg.EngineDeadline/2)
	defer cancel()
	var next *core.AuthStore
	err := exec.Update(tctx, s.eng, func(rd core.Reader) ([]core.Write, error) {
		st, err := core.ReadAuth(rd)
		if err != nil {
			return nil, err
		}
		if st == nil {
			secret := make([]byte, 32)
			if _, err := rand.Read(secret); err != nil {
				return nil, err
			}
			st = core.NewAuthStore(secret)
		}
		if st.Enabled {
			id, err := s.identify(ctx, st)
			if err != nil {
				return nil, err
			}
			if err := st.CheckAdmin(id); err != nil {
				return nil, err
			}
		}
		st = st.Clone()
		changed, err := st.Apply(ch)
		if err != nil || !changed {
			return nil, err
		}
		next = st
		return core.AuthWrites(st, BinaryVersion()), nil
	})
	if err != nil && next != nil {
		// The commit failed, maybe uncertainly (it may land later): read
		// the engine until it surely has or never will.
		s.auth.distrust.Store(time.Now().Add(s.mcfg.EngineDeadline).UnixNano())
		s.auth.cur.Store(nil)
		return err
	}
	if err != nil || next == nil {
		return err
	}
	s.auth.keep(&authCopy{store: next, gen: g, leader: true})
	s.log.Info("auth store changed", "change", authChangeName(ch), "auth_revision", next.Revision)
	return nil
}

// authChangeName names a change for the log: never its fields, which may
// hold a password.
func authChangeName(ch core.AuthChange) string {
	name := string(ch.ProtoReflect().Descriptor().Name())
	return strings.TrimSuffix(strings.TrimPrefix(name, "Auth"), "Request")
}

// hashPassword hashes a password at the configured bcrypt cost.
func (s *Server) hashPassword(pw string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), s.auth.cfg.BcryptCost)
	return string(h), err
}

// authenticate checks a user's password and issues a token.
func (s *Server) authenticate(ctx context.Context, name, password string) (string, error) {
	st, err := s.authView(ctx, nil, false)
	if err != nil {
		return "", err
	}
	hash, err := st.Login(name)
	if errors.Is(err, core.ErrAuthNotEnabled) {
		return "", err
	}
	if err != nil {
		s.auth.dummyOnce.Do(func() {
			s.auth.dummy, _ = bcrypt.GenerateFromPassword([]byte("axon: no password here"), s.auth.cfg.BcryptCost)
		})
		hash = s.auth.dummy
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || err != nil {
		s.log.Info("authentication failed", "user", name)
		return "", cmp.Or(err, core.ErrAuthFailed)
	}
	return s.tokens.issue(st, name)
}
