package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/auth"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/internal/testpki"
	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/memkv"
)

// jwtSetup is a signing method and its key in files, and the
// --auth-token both sides get.
type jwtSetup struct {
	method jwt.SigningMethod
	key    *testpki.SigningKey
	spec   string
}

func newJWTSetup(t *testing.T, alg string, verifyOnly bool) *jwtSetup {
	t.Helper()
	family := alg
	if strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS") {
		family = alg[:2]
	}
	k := testpki.NewSigningKey(t, t.TempDir(), family)
	spec := fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=%s,ttl=10m", k.PubFile, k.PrivFile, alg)
	if verifyOnly {
		spec = fmt.Sprintf("jwt,pub-key=%s,sign-method=%s", k.PubFile, alg)
	}
	return &jwtSetup{method: jwt.GetSigningMethod(alg), key: k, spec: spec}
}

// axonConfig is the auth configuration Axon runs with.
func (j *jwtSetup) axonConfig(t *testing.T) server.AuthConfig {
	t.Helper()
	tok, err := server.ParseAuthToken(j.spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := authConfig
	cfg.Token = tok
	return cfg
}

func (j *jwtSetup) etcdConfig(cfg *embed.Config) {
	etcdWithAuth(cfg)
	cfg.AuthToken = j.spec
}

// sign makes a token as etcd's would be, with claims of the test's.
func (j *jwtSetup) sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(j.method, claims).SignedString(j.key.Private)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// jwtChanges is changes for JWTs, whose claims are the test's to forge:
// tokens the test signs, expired, forged and odd ones, and what auth
// changes do to tokens given out (etcd's JWTs outlive a password change
// and a disabling, and then stand for an old revision).
func (s *authScript) jwtChanges(j *jwtSetup) {
	ctx, a := s.ctx, s.auth()
	root := as(ctx, s.login("root", "rootpw"))
	alice := as(ctx, s.login("alice", "alicepw"))
	st, err := a.AuthStatus(root, &pb.AuthStatusRequest{})
	if err != nil {
		s.note("auth status", outcome(err))
		return
	}
	rev := float64(st.AuthRevision)
	hour := time.Now().Add(time.Hour).Unix()
	other := newJWTSetup(s.t, j.method.Alg(), false)
	pubPEM, err := os.ReadFile(j.key.PubFile)
	if err != nil {
		s.t.Fatal(err)
	}
	hmacWithPub, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"username": "root", "revision": rev, "exp": hour}).SignedString(pubPEM)
	if err != nil {
		s.t.Fatal(err)
	}
	unsigned, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"username": "root", "revision": rev, "exp": hour}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  string
	}{
		{"a token the test signed for alice", j.sign(s.t, jwt.MapClaims{"username": "alice", "revision": rev, "exp": hour})},
		{"a token that expired a minute ago", j.sign(s.t, jwt.MapClaims{"username": "alice", "revision": rev, "exp": time.Now().Add(-time.Minute).Unix()})},
		{"a token signed with another key", other.sign(s.t, jwt.MapClaims{"username": "root", "revision": rev, "exp": hour})},
		{"HS256 keyed with the public key", hmacWithPub},
		{"alg none", unsigned},
		{"a token without a username", j.sign(s.t, jwt.MapClaims{"revision": rev, "exp": hour})},
		{"a revision that is a string", j.sign(s.t, jwt.MapClaims{"username": "root", "revision": "1", "exp": hour})},
		{"a token without exp", j.sign(s.t, jwt.MapClaims{"username": "alice", "revision": rev})},
		{"a user that does not exist", j.sign(s.t, jwt.MapClaims{"username": "mallory", "revision": rev, "exp": hour})},
		{"revision 0", j.sign(s.t, jwt.MapClaims{"username": "root", "revision": 0, "exp": hour})},
		{"a revision ahead of the store", j.sign(s.t, jwt.MapClaims{"username": "alice", "revision": rev + 100, "exp": hour})},
		{"a tampered payload", tamper(j.sign(s.t, jwt.MapClaims{"username": "alice", "revision": rev, "exp": hour}))},
	} {
		_, err := s.kv().Range(as(ctx, tc.tok), rng("k1", ""))
		s.note(tc.name+": range k1", outcome(err))
		_, err = a.UserList(as(ctx, tc.tok), &pb.AuthUserListRequest{})
		s.note(tc.name+": user list", outcome(err))
		_, err = s.kv().Put(as(ctx, tc.tok), &pb.PutRequest{Key: []byte("a1"), Value: []byte("j")})
		s.note(tc.name+": put a1", outcome(err))
		_, err = s.kv().Txn(as(ctx, tc.tok), &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: rng("a1", "")}}}})
		s.note(tc.name+": txn of a range", outcome(err))
	}
	_, err = s.kv().Range(alice, rng("k1", ""))
	s.note("alice reads k1", outcome(err))
	_, err = a.UserChangePassword(root, &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "alicepw2"})
	s.note("root changes alice's password", outcome(err))
	_, err = s.kv().Range(alice, rng("k1", ""))
	s.note("alice's old token reads k1", outcome(err))
	_, err = s.kv().Put(alice, &pb.PutRequest{Key: []byte("a1"), Value: []byte("x")})
	s.note("alice's old token puts a1", outcome(err))
	s.note("alice's old token watches", s.watch(alice, "a", "c"))
	_, err = a.UserGet(alice, &pb.AuthUserGetRequest{Name: "alice"})
	s.note("alice's old token gets alice", outcome(err))
	_, err = s.kv().Range(as(ctx, s.login("alice", "alicepw2")), rng("k1", ""))
	s.note("alice's new token reads k1", outcome(err))
	_, err = a.UserList(root, &pb.AuthUserListRequest{})
	s.note("root's token from before the change lists users", outcome(err))
	_, err = a.AuthDisable(root, &pb.AuthDisableRequest{})
	s.note("root's token from before the change disables auth", outcome(err))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable", outcome(err))
	_, err = a.UserList(root, &pb.AuthUserListRequest{})
	s.note("root's token from before the disable lists users", outcome(err))
	_, err = s.kv().Range(root, rng("k1", ""))
	s.note("root's token from before the disable reads k1", outcome(err))
	_, err = s.kv().Range(as(ctx, s.login("root", "rootpw")), rng("k1", ""))
	s.note("root's new token reads k1", outcome(err))
}

// tamper changes a character of a token's payload.
func tamper(tok string) string {
	b := []byte(tok)
	i := strings.IndexByte(tok, '.') + 5
	b[i] ^= 1
	return string(b)
}

// runJWTScript is runAuthScript for JWTs: jwtChanges instead of changes
// (which waits out a simple token's TTL).
func runJWTScript(t *testing.T, addr string, j *jwtSetup) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &authScript{ctx: ctx, conn: conn, sleep: time.Sleep, t: t, last: time.Now()}
	s.manage()
	s.reads("after auth enable", s.login("root", "rootpw"))
	s.runMatrix()
	s.jwtChanges(j)
	return s.out
}

// TestAuthJWTAsEtcd runs the script, the matrix and the JWT changes on
// etcd and on Axon (one instance; a follower of three over mock TiKV)
// with --auth-token jwt and the same key files.
func TestAuthJWTAsEtcd(t *testing.T) {
	for _, alg := range []string{"RS256", "ES256"} {
		t.Run(alg, func(t *testing.T) {
			j := newJWTSetup(t, alg, false)
			want := runJWTScript(t, etcdtest.StartWith(t, j.etcdConfig).Host, j)
			t.Run("one instance", func(t *testing.T) {
				_, cli := startServer(t, server.Config{Core: core.Config{RingSize: 64}, MemberID: 1, ClusterID: 2, Name: "auth", Auth: j.axonConfig(t)})
				compareTranscripts(t, want, runJWTScript(t, cli.Endpoints()[0], j))
			})
			t.Run("through a follower", func(t *testing.T) {
				compareTranscripts(t, want, runJWTScript(t, authFollower(t, j.axonConfig(t)), j))
			})
		})
	}
}

// TestAuthJWTVerifyOnlyAsEtcd: with a public key alone, Authenticate
// fails as etcd's does and tokens signed elsewhere with the private key
// are honoured.
func TestAuthJWTVerifyOnlyAsEtcd(t *testing.T) {
	j := newJWTSetup(t, "ES256", true)
	run := func(addr string) []string {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		s := &authScript{ctx: ctxT(t), conn: conn, t: t, last: time.Now()}
		setUpAlice(t, s.ctx, s.auth(), []*authpb.Permission{readwrite("k", "")})
		_, err = s.auth().Authenticate(s.ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
		s.note("authenticate", outcome(err))
		st, err := s.auth().AuthStatus(s.ctx, &pb.AuthStatusRequest{})
		s.note("auth status without a token", outcome(err))
		rev := uint64(0)
		if st != nil {
			rev = st.AuthRevision
		}
		tok := as(s.ctx, j.sign(t, jwt.MapClaims{"username": "alice", "revision": rev, "exp": time.Now().Add(time.Hour).Unix()}))
		_, err = s.kv().Put(tok, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		s.note("put k with a token signed elsewhere", outcome(err))
		_, err = s.kv().Range(tok, rng("k", ""))
		s.note("range k with it", outcome(err))
		return s.out
	}
	want := run(etcdtest.StartWith(t, j.etcdConfig).Host)
	_, cli := startServer(t, server.Config{MemberID: 1, ClusterID: 2, Name: "auth", Auth: j.axonConfig(t)})
	compareTranscripts(t, want, run(cli.Endpoints()[0]))
}

// TestAuthJWTFromAnyInstanceWorksOnEvery: instances given the same keys
// accept each other's tokens, directly and forwarded; one given the
// public key alone verifies them and issues none; clientv3 logs in
// again when a change of the store makes its token's revision old.
func TestAuthJWTFromAnyInstanceWorksOnEvery(t *testing.T) {
	j := newJWTSetup(t, "RS256", false)
	full := j.axonConfig(t)
	verify := full
	var err error
	if verify.Token, err = server.ParseAuthToken(fmt.Sprintf("jwt,pub-key=%s,sign-method=RS256", j.key.PubFile)); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, memkv.New(), 3)
	c.tweak = func(cfg *server.Config) {
		cfg.Auth = full
		if cfg.Name == "axon-2" {
			cfg.Auth = verify
		}
	}
	c.startAll()
	ctx := ctxT(t)
	var conns []*grpc.ClientConn
	for _, in := range c.ins {
		conn, err := grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	setUpAlice(t, ctx, pb.NewAuthClient(conns[0]), []*authpb.Permission{readwrite("k", "")})
	for i, from := range conns {
		r, err := pb.NewAuthClient(from).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
		if i == 2 {
			if got, want := outcome(err), "Unknown: "+server.ErrVerifyOnly.Error(); got != want {
				t.Errorf("authenticate on the verify-only instance: %s, want %s", got, want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("authenticate on instance %d: %v", i, err)
		}
		for k, on := range conns {
			_, err := pb.NewKVClient(on).Put(as(ctx, r.Token), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			if err != nil {
				t.Errorf("a token of instance %d puts through instance %d: %v", i, k, err)
			}
			if _, err := pb.NewKVClient(on).Range(as(ctx, r.Token), rng("k", "")); err != nil {
				t.Errorf("a token of instance %d reads through instance %d: %v", i, k, err)
			}
		}
	}
	// Through an instance that signs, other than the leader if it can.
	via := (c.awaitLeader() + 1) % 3
	if via == 2 {
		via = (via + 1) % 3
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.ins[via].addr}, Username: "alice", Password: "alicepw",
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := cli.Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}
	root := as(ctx, func() string {
		r, err := pb.NewAuthClient(conns[0]).Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "rootpw"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Token
	}())
	if _, err := pb.NewAuthClient(conns[1]).RoleAdd(root, &pb.AuthRoleAddRequest{Name: "another"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "2"); err != nil {
		t.Errorf("clientv3 after the auth revision moved: %v", err)
	}
}

// TestParseAuthTokenAsEtcd gives etcd's NewTokenProvider and
// ParseAuthToken the same --auth-token values: both take or refuse each,
// and Axon's error says etcd's.
func TestParseAuthTokenAsEtcd(t *testing.T) {
	dir := t.TempDir()
	rs := testpki.NewSigningKey(t, dir, "RS")
	es := testpki.NewSigningKey(t, dir, "ES256")
	ed := testpki.NewSigningKey(t, dir, "EdDSA")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherES := testpki.NewSigningKey(t, t.TempDir(), "ES256")
	for _, tc := range []struct {
		name, spec string
		verifyOnly bool
	}{
		{"simple", "simple", false},
		{"simple with options it ignores", "simple,foo=bar", false},
		{"an option without a value", "simple,foo", false},
		{"an unknown kind", "opaque", false},
		{"RS256 with both keys", "jwt,pub-key=" + rs.PubFile + ",priv-key=" + rs.PrivFile + ",sign-method=RS256", false},
		{"PS512 with the private key", "jwt,priv-key=" + rs.PrivFile + ",sign-method=PS512,ttl=1h", false},
		{"RS384 with the public key alone", "jwt,pub-key=" + rs.PubFile + ",sign-method=RS384", true},
		{"ES256 with both keys", "jwt,pub-key=" + es.PubFile + ",priv-key=" + es.PrivFile + ",sign-method=ES256", false},
		{"ES256 with the public key alone", "jwt,pub-key=" + es.PubFile + ",sign-method=ES256", true},
		{"EdDSA with both keys", "jwt,pub-key=" + ed.PubFile + ",priv-key=" + ed.PrivFile + ",sign-method=EdDSA", false},
		{"EdDSA with the public key alone", "jwt,pub-key=" + ed.PubFile + ",sign-method=EdDSA", true},
		{"HS256 with a secret file", "jwt,priv-key=" + garbage + ",sign-method=HS256", false},
		{"HS256 without one", "jwt,pub-key=" + garbage + ",sign-method=HS256", false},
		{"keys that do not match", "jwt,pub-key=" + otherES.PubFile + ",priv-key=" + es.PrivFile + ",sign-method=ES256", false},
		{"no key", "jwt,sign-method=RS256", false},
		{"no sign-method", "jwt,priv-key=" + rs.PrivFile, false},
		{"an unknown sign-method", "jwt,priv-key=" + rs.PrivFile + ",sign-method=XX256", false},
		{"sign-method none", "jwt,priv-key=" + rs.PrivFile + ",sign-method=none", false},
		{"an unreadable key file", "jwt,priv-key=" + filepath.Join(dir, "missing.pem") + ",sign-method=RS256", false},
		{"a file that is no key", "jwt,priv-key=" + garbage + ",sign-method=ES256", false},
		{"an RSA key for ES256", "jwt,priv-key=" + rs.PrivFile + ",sign-method=ES256", false},
		{"a bad ttl", "jwt,priv-key=" + rs.PrivFile + ",sign-method=RS256,ttl=soon", false},
		{"an option given twice", "jwt,priv-key=" + rs.PrivFile + ",priv-key=" + rs.PrivFile + ",sign-method=RS256", false},
		{"an unknown option", "jwt,priv-key=" + rs.PrivFile + ",sign-method=RS256,color=blue", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, etcdErr := auth.NewTokenProvider(zap.NewNop(), tc.spec, nil, time.Minute)
			tok, err := server.ParseAuthToken(tc.spec)
			switch {
			case (etcdErr == nil) != (err == nil):
				t.Fatalf("etcd: %v; Axon: %v", etcdErr, err)
			case err != nil && !strings.Contains(err.Error(), etcdErr.Error()):
				t.Errorf("Axon's error %q does not say etcd's %q", err, etcdErr)
			case err == nil && tok.VerifyOnly() != tc.verifyOnly:
				t.Errorf("verify only: %v, want %v", tok.VerifyOnly(), tc.verifyOnly)
			}
			if err != nil && !errors.Is(err, server.ErrInvalidAuthOpts) && !errors.Is(err, server.ErrMissingKey) && !errors.Is(err, server.ErrKeyMismatch) {
				t.Errorf("%v is none of etcd's option errors", err)
			}
		})
	}
}
