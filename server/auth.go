package server

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
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
		c.TokenTTL = DefaultAuthTokenTTL
	}
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	return c
}

// authState is what the server keeps for auth beyond the driver's copy
// of the store (driver.LookAuth says when checks may use it).
type authState struct {
	cfg    AuthConfig
	tokens *authTokens
	// peerSecret seals calls to other instances (instance.go);
	// badProofAt is when a bad proof was last logged.
	peerSecret peerSecret
	badProofAt atomic.Int64
	// dummy is compared against when Authenticate finds no password to
	// compare with, so a failed attempt costs bcrypt's time either way.
	dummy     []byte
	dummyOnce sync.Once
}

// authView returns the auth store a request is checked against. led says
// the caller leads (its snapshot is the leader's); rd, when not nil, is
// the request's engine snapshot.
func (s *Server) authView(ctx context.Context, rd core.Reader, led bool) (*auth.Store, error) {
	return s.drv.AuthView(rd, led, func() (core.Reader, func(), error) {
		txn, err := s.eng.Begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		return storage.NewReader(txn), txn.Rollback, nil
	})
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
// from another instance, by the user its proof vouches for; else, with
// --client-cert-auth, by its client certificate's CommonName (never on a
// call from an instance, whose certificate is the instance's, and so
// never on a peer listener, which serves nothing else); else nobody.
// With auth off nobody; a bad token is ErrAuthInvalidToken.
func (s *Server) identify(ctx context.Context, st *auth.Store) (auth.Identity, error) {
	if !st.Enabled {
		return auth.Identity{}, nil
	}
	if tok, ok := tokenOf(ctx); ok {
		return s.auth.tokens.resolve(st, tok, forwarded(ctx))
	}
	if p, ok := fromInstance(ctx); ok {
		if p.User != "" {
			return auth.Identity{User: p.User, Revision: st.Revision}, nil
		}
		return auth.Identity{}, nil
	}
	if s.cfg.ClientCertAuth {
		if cn := certUser(ctx); cn != "" {
			return auth.Identity{User: cn, Revision: st.Revision}, nil
		}
	}
	return auth.Identity{}, nil
}

// certVouch is the user a forward of a client's call vouches for: the
// CommonName of its client certificate under --client-cert-auth with
// auth on; "" for none.
func (s *Server) certVouch(ctx context.Context) string {
	if !s.cfg.ClientCertAuth || forwarded(ctx) {
		return ""
	}
	cn := certUser(ctx)
	if cn == "" {
		return ""
	}
	st, err := s.authView(ctx, nil, false)
	if err != nil || !st.Enabled {
		return ""
	}
	return cn
}

// authCheck decides whether a call may run, given the store and who it
// runs as.
type authCheck func(st *auth.Store, id auth.Identity) error

// authorize resolves the caller of ctx and runs check (see authView for
// rd and led). With auth off everything may run.
func (s *Server) authorize(ctx context.Context, rd core.Reader, led bool, check authCheck) error {
	st, err := s.authView(ctx, rd, led)
	if err != nil {
		return err
	}
	return s.checkCaller(ctx, st, check)
}

// checkCaller runs check for the caller of ctx against st: with auth off
// everything may run.
func (s *Server) checkCaller(ctx context.Context, st *auth.Store, check authCheck) error {
	if !st.Enabled {
		return nil
	}
	id, err := s.identify(ctx, st)
	if err != nil {
		return err
	}
	return check(st, id)
}

// checker is checkCaller as a function of the store.
func (s *Server) checker(ctx context.Context, check authCheck) func(*auth.Store) error {
	return func(st *auth.Store) error { return s.checkCaller(ctx, st, check) }
}

// authorizeLeader checks a call on the leader (driver.AuthorizeLeader):
// core.ErrNotLeader if this instance does not lead, so that the driver
// sends the call to the leader instead.
func (s *Server) authorizeLeader(ctx context.Context, check authCheck) error {
	if st := s.drv.LookAuth(true).Trusted(); st != nil {
		// The leader's copy, trusted: no closures on the write path.
		return s.checkCaller(ctx, st, check)
	}
	var err error
	s.drv.AuthorizeLeader(func(loaded func(core.Reader, func(), error)) {
		txn, err := s.eng.Begin(ctx)
		if err != nil {
			loaded(nil, nil, err)
			return
		}
		loaded(storage.NewReader(txn), txn.Rollback, nil)
	}, s.checker(ctx, check), func(e error) { err = e })
	return err
}

// authorizeHere checks a call on this instance, leading or not: a
// follower checks it against the auth store of a serializable read's
// snapshot, as its reads are checked.
func (s *Server) authorizeHere(ctx context.Context, check authCheck) error {
	err := s.authorizeLeader(ctx, check)
	if !errors.Is(err, core.ErrNotLeader) {
		return err
	}
	snap, err := s.readSnapshot(ctx, true)
	if err != nil {
		return err
	}
	defer snap.Txn.Rollback()
	return s.drv.Authorize(snap.Auth, storage.NewReader(snap.Txn), s.checker(ctx, check))
}

// Checks that etcd makes of calls other than key ranges.
var (
	// tokenValid: a given token must be valid (etcd checks it for every
	// proposal, compaction included).
	tokenValid authCheck = func(*auth.Store, auth.Identity) error { return nil }
	// someUser: etcd's requireAuthInfo.
	someUser authCheck = func(_ *auth.Store, id auth.Identity) error {
		if id.Revision == 0 {
			return auth.ErrAuthUserEmpty
		}
		return nil
	}
	// admin: the root role.
	admin authCheck = func(st *auth.Store, id auth.Identity) error { return st.CheckAdmin(id) }
)

// changeAuth applies a change to the auth store on the leader
// (driver.ChangeAuth): the caller of ctx must be allowed to by the
// stored store (the root role, once auth is on).
func (s *Server) changeAuth(ctx context.Context, ch auth.Change) error {
	done := make(chan error, 1)
	s.drv.ChangeAuth(driver.AuthChange{
		Change: ch,
		Admit: func(st *auth.Store) error {
			id, err := s.identify(ctx, st)
			if err != nil {
				return err
			}
			return st.CheckAdmin(id)
		},
		Engine: authEngine{s: s, ctx: ctx},
	}, func(next *auth.Store, err error) {
		if next != nil {
			s.log.Info("auth store changed", "change", authChangeName(ch), "auth_revision", next.Revision)
		}
		done <- err
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err() // it may still apply, as a write may
	case <-s.ctx.Done():
		return core.ErrStopped
	}
}

// authEngine runs an auth change's transaction for the call of ctx.
type authEngine struct {
	s   *Server
	ctx context.Context
}

func (e authEngine) Update(fn func(core.Reader) ([]core.Write, error), done func(error)) {
	// As a write: land within the engine deadline or not at all, so a
	// new leader's first read of the store sees it (docs/design.md,
	// "Leadership").
	ctx, cancel := context.WithTimeout(e.ctx, e.s.mcfg.EngineDeadline/2)
	defer cancel()
	done(driver.Update(ctx, e.s.eng, fn))
}

// authChangeName names a change for the log: never its fields, which may
// hold a password.
func authChangeName(ch auth.Change) string {
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
	if errors.Is(err, auth.ErrAuthNotEnabled) {
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
		return "", cmp.Or(err, auth.ErrAuthFailed)
	}
	return s.auth.tokens.issue(st, name)
}
