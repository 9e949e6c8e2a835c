package server_test

import (
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/memkv"
)

// tokenClock is the tokens' clock in these tests, moved by hand.
type tokenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tokenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// at sets the clock to d after start.
func (c *tokenClock) at(start time.Time, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = start.Add(d)
}

func dialAll(t *testing.T, addrs ...string) []*grpc.ClientConn {
	t.Helper()
	var conns []*grpc.ClientConn
	for _, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	return conns
}

// tokenUse is a use of a token at a time after Authenticate, through an
// instance, and what it should get.
type tokenUse struct {
	at    time.Duration
	on    string // "follower", "other follower", "leader"
	write bool   // a put (a follower forwards it) or a range
	want  string
	why   string
}

// TestAuthSimpleTokenLivesATTLFromItsLastUse: as etcd's members, each
// instance keeps a simple token alive for a TTL from its last use there
// (a write it forwards included); another instance judges the token by
// the expiry it carries, TTL after Authenticate.
func TestAuthSimpleTokenLivesATTLFromItsLastUse(t *testing.T) {
	start := time.Now()
	clk := &tokenClock{t: start}
	c := newCluster(t, memkv.New(), 3)
	c.tweak = func(cfg *server.Config) {
		cfg.Auth = server.AuthConfig{TokenTTL: time.Minute, BcryptCost: 4, Now: clk.Now}
	}
	c.startAll()
	l := c.awaitLeader()
	conns := dialAll(t, c.ins[l].addr, c.ins[(l+1)%3].addr, c.ins[(l+2)%3].addr)
	on := map[string]*grpc.ClientConn{"leader": conns[0], "follower": conns[1], "other follower": conns[2]}
	ctx := ctxT(t)
	setUpAlice(t, ctx, pb.NewAuthClient(conns[1]), []*authpb.Permission{readwrite("k", "")})
	r, err := pb.NewAuthClient(conns[1]).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	if err != nil {
		t.Fatal(err)
	}
	ok, invalid := "ok", outcome(rpctypes.ErrGRPCInvalidAuthToken)
	for _, u := range []tokenUse{
		{50 * time.Second, "follower", false, ok, "within the TTL"},
		{50 * time.Second, "follower", true, ok, "within the TTL, forwarded"},
		{100 * time.Second, "follower", false, ok, "used there 50 s ago"},
		{100 * time.Second, "follower", true, ok, "used there 50 s ago, forwarded renewed"},
		{100 * time.Second, "other follower", false, invalid, "never used there: the TTL from Authenticate is over"},
		{100 * time.Second, "leader", false, invalid, "the leader saw it forwarded only"},
		{159 * time.Second, "follower", true, ok, "a forwarded write keeps it alive too"},
		{218 * time.Second, "follower", false, ok, "used there 59 s ago"},
		{279 * time.Second, "follower", false, invalid, "unused there for a TTL"},
		{279 * time.Second, "follower", true, invalid, "a dead token is not renewed on its way to the leader"},
	} {
		clk.at(start, u.at)
		kv := pb.NewKVClient(on[u.on])
		if u.write {
			_, err = kv.Put(as(ctx, r.Token), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		} else {
			_, err = kv.Range(as(ctx, r.Token), rng("k", ""))
		}
		if got := outcome(err); got != u.want {
			t.Errorf("at %v through the %s (write %v; %s): %s, want %s", u.at, u.on, u.write, u.why, got, u.want)
		}
	}
}

// TestAuthSimpleTokenUsesAreBounded: an instance keeping the last use of
// TrackedTokens tokens drops the least recently used one, which then
// lives to the expiry it carries.
func TestAuthSimpleTokenUsesAreBounded(t *testing.T) {
	start := time.Now()
	clk := &tokenClock{t: start}
	_, cli := startServer(t, server.Config{MemberID: 1, ClusterID: 2, Name: "auth",
		Auth: server.AuthConfig{TokenTTL: time.Minute, BcryptCost: 4, TrackedTokens: 2, Now: clk.Now}})
	conn := dialAll(t, cli.Endpoints()[0])[0]
	ctx := ctxT(t)
	setUpAlice(t, ctx, pb.NewAuthClient(conn), []*authpb.Permission{readwrite("k", "")})
	var toks []string
	for range 3 {
		r, err := pb.NewAuthClient(conn).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, r.Token)
	}
	use := func(i int) string {
		_, err := pb.NewKVClient(conn).Range(as(ctx, toks[i]), rng("k", ""))
		return outcome(err)
	}
	clk.at(start, 30*time.Second)
	for i := range toks {
		if got := use(i); got != "ok" {
			t.Fatalf("token %d within its TTL: %s", i, got)
		}
	}
	clk.at(start, 70*time.Second)
	for i, want := range []string{outcome(rpctypes.ErrGRPCInvalidAuthToken), "ok", "ok"} {
		if got := use(i); got != want {
			t.Errorf("token %d (%s): %s, want %s", i, []string{"dropped", "kept", "kept"}[i], got, want)
		}
	}
}
