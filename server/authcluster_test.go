package server_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/server"
	"github.com/axon-kv/axon/storage/memkv"
)

// authCluster is three instances over one engine with root and alice set
// up and auth on; conns[i] reaches instance i.
type authCluster struct {
	c     *testCluster
	conns []*grpc.ClientConn
	root  context.Context // a context carrying root's token
}

func startAuthCluster(t *testing.T) *authCluster {
	t.Helper()
	c := newCluster(t, memkv.New(), 3)
	c.tweak = func(cfg *server.Config) { cfg.Auth = server.AuthConfig{TokenTTL: time.Hour, BcryptCost: 4} }
	c.startAll()
	ac := &authCluster{c: c}
	for _, in := range c.ins {
		conn, err := grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ac.conns = append(ac.conns, conn)
	}
	setUpAlice(t, ctxT(t), pb.NewAuthClient(ac.conns[0]), nil)
	ac.root = ac.login(t, 1, "root", "rootpw")
	return ac
}

// login authenticates through instance i and returns a context with the
// token.
func (ac *authCluster) login(t *testing.T, i int, user, pw string) context.Context {
	t.Helper()
	r, err := pb.NewAuthClient(ac.conns[i]).Authenticate(ctxT(t), &pb.AuthenticateRequest{Name: user, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	return metadata.AppendToOutgoingContext(ctxT(t), "token", r.Token)
}

func readK() *pb.AuthRoleGrantPermissionRequest {
	return &pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: readwrite("k", "")}
}

// TestAForwardingMarkerOrIdentityFromAClientGainsNothing sends, to the
// leader and to a follower, what instances send each other when they
// forward (the marker, a user name in headers of Axon's, a token
// header with a forged value): nothing lets a call past a check it
// would fail without them.
func TestAForwardingMarkerOrIdentityFromAClientGainsNothing(t *testing.T) {
	ac := startAuthCluster(t)
	l := ac.c.awaitLeader()
	ctx := ctxT(t)
	forged := [][]string{
		{"axon-forwarded", "1"},
		{"axon-forwarded", "1", "axon-user", "root", "axon-auth-revision", "99"},
		{"axon-forwarded", "1", "token", "root"},
		{"axon-forwarded", "1", "authorization", "Bearer root"},
	}
	for _, i := range []int{l, (l + 1) % 3} {
		kv := pb.NewKVClient(ac.conns[i])
		for _, md := range forged {
			mctx := metadata.AppendToOutgoingContext(ctx, md...)
			if _, err := kv.Range(mctx, &pb.RangeRequest{Key: []byte("k")}); err == nil {
				t.Errorf("instance %d: a range with %v succeeded", i, md)
			}
			if _, err := kv.Put(mctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err == nil {
				t.Errorf("instance %d: a put with %v succeeded", i, md)
			}
			if _, err := pb.NewAuthClient(ac.conns[i]).UserList(mctx, &pb.AuthUserListRequest{}); err == nil {
				t.Errorf("instance %d: a user list with %v succeeded", i, md)
			}
			if _, err := pb.NewMaintenanceClient(ac.conns[i]).HashKV(mctx, &pb.HashKVRequest{}); err == nil {
				t.Errorf("instance %d: hash kv with %v succeeded", i, md)
			}
		}
		// alice's own token with the marker still gets alice's rights.
		alice := metadata.AppendToOutgoingContext(ac.login(t, i, "alice", "alicepw"), "axon-forwarded", "1", "axon-user", "root")
		if _, err := kv.Range(alice, &pb.RangeRequest{Key: []byte("k")}); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
			t.Errorf("instance %d: alice with the marker: %v, want permission denied", i, err)
		}
	}
}

// TestARevokeIsSeenByEveryInstanceAtOnce changes a permission through
// each instance in turn and checks, right after the change is
// acknowledged, a read and a write through every instance.
func TestARevokeIsSeenByEveryInstanceAtOnce(t *testing.T) {
	ac := startAuthCluster(t)
	alice := ac.login(t, 2, "alice", "alicepw")
	for round := range 6 {
		via := pb.NewAuthClient(ac.conns[round%3])
		granted := round%2 == 0
		var err error
		if granted {
			_, err = via.RoleGrantPermission(ac.root, readK())
		} else {
			_, err = via.RoleRevokePermission(ac.root, &pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("k")})
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, conn := range ac.conns {
			kv := pb.NewKVClient(conn)
			_, rerr := kv.Range(alice, &pb.RangeRequest{Key: []byte("k")})
			_, serr := kv.Range(alice, &pb.RangeRequest{Key: []byte("k"), Serializable: true})
			_, werr := kv.Put(alice, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			werrWatch := watchK(alice, conn)
			for what, err := range map[string]error{"read": rerr, "serializable read": serr, "write": werr, "watch": werrWatch} {
				if granted && err != nil {
					t.Errorf("round %d, instance %d: %s after the grant: %v", round, i, what, err)
				}
				if !granted && !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
					t.Errorf("round %d, instance %d: %s after the revoke: %v, want permission denied", round, i, what, err)
				}
			}
		}
	}
}

// watchK creates a watch of k through conn and returns etcd's refusal
// as an error (rpctypes.ErrGRPCPermissionDenied), nil if it was created.
// Every instance serves watches itself, so each checks the permission.
func watchK(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		return err
	}
	r, err := stream.Recv()
	switch {
	case err != nil:
		return err
	case r.Canceled && r.CancelReason == rpctypes.ErrGRPCPermissionDenied.Error():
		return rpctypes.ErrGRPCPermissionDenied
	case r.Canceled || !r.Created:
		return errors.New("watch: " + r.String())
	}
	return nil
}

// change is one grant or revoke as the client saw it.
type change struct {
	grant        bool
	start, acked time.Time
}

// TestConcurrentGrantsAndRevokesNeverHonourARevokedPermission runs
// grants and revokes through random instances while readers read
// through random instances, then checks every read against the changes:
// one that started after a revoke was acknowledged, with no grant begun
// before it ended, must be denied, and the other way round.
func TestConcurrentGrantsAndRevokesNeverHonourARevokedPermission(t *testing.T) {
	ac := startAuthCluster(t)
	alice := ac.login(t, 0, "alice", "alicepw")
	var changes []change
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		for i := range 40 {
			c := change{grant: i%2 == 0, start: time.Now()}
			via := pb.NewAuthClient(ac.conns[rand.IntN(3)])
			var err error
			if c.grant {
				_, err = via.RoleGrantPermission(ac.root, readK())
			} else {
				_, err = via.RoleRevokePermission(ac.root, &pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("k")})
			}
			if err != nil {
				t.Errorf("change %d: %v", i, err)
				return
			}
			c.acked = time.Now()
			changes = append(changes, c)
			time.Sleep(3 * time.Millisecond) // room for calls between changes
		}
	}()
	type read struct {
		start, end time.Time
		err        error
		what       string
		via        int
	}
	var (
		mu    sync.Mutex
		reads []read
		wg    sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := read{start: time.Now(), via: rand.IntN(3), what: "range"}
				kv := pb.NewKVClient(ac.conns[r.via])
				if rand.IntN(2) == 0 {
					_, r.err = kv.Range(alice, &pb.RangeRequest{Key: []byte("k")})
				} else {
					r.what = "put"
					_, r.err = kv.Put(alice, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
				}
				r.end = time.Now()
				if r.err != nil && !errors.Is(r.err, rpctypes.ErrGRPCPermissionDenied) {
					t.Errorf("a call failed otherwise: %v", status.Convert(r.err).Message())
				}
				mu.Lock()
				reads = append(reads, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	checked := 0
	for _, r := range reads {
		// The state the call must see: the last change acknowledged
		// before it started, unless another began before it ended.
		var last *change
		racing := false
		for i := range changes {
			c := &changes[i]
			if c.acked.Before(r.start) {
				last = c
			} else if c.start.Before(r.end) {
				racing = true
			}
		}
		if last == nil || racing {
			continue
		}
		checked++
		if allowed := r.err == nil; allowed != last.grant {
			t.Errorf("a %s through instance %d in [%v, %v] allowed=%v after a change (grant=%v) acknowledged at %v",
				r.what, r.via, r.start.Format(time.StampMicro), r.end.Format(time.StampMicro), allowed, last.grant, last.acked.Format(time.StampMicro))
		}
	}
	if checked < 20 {
		t.Errorf("only %d of %d calls fell between changes; the test saw too little", checked, len(reads))
	}
	t.Logf("%d calls, %d checked against %d changes", len(reads), checked, len(changes))
}
