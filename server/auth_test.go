package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/etcdtest"
	"github.com/axon-kv/axon/internal/testpki"
	"github.com/axon-kv/axon/server"
	badgerkv "github.com/axon-kv/axon/storage/badger"
	"github.com/axon-kv/axon/storage/tikv"
)

// authTTL is the token TTL both sides run with: short, so a token
// expires within the test.
const authTTL = 3 * time.Second

// authConfig is Axon's auth configuration in these tests: etcd's flags
// as the embedded etcd gets them.
var authConfig = server.AuthConfig{TokenTTL: authTTL, BcryptCost: bcrypt.MinCost}

func etcdWithAuth(cfg *embed.Config) {
	cfg.AuthTokenTTL = uint(authTTL / time.Second)
	cfg.BcryptCost = uint(bcrypt.MinCost)
}

// outcome renders a call's error as the client sees it: its gRPC code
// and message, or ok with what follows.
func outcome(err error, ok ...any) string {
	if err != nil {
		st := status.Convert(err)
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return strings.TrimSpace(fmt.Sprint(append([]any{"ok"}, ok...)...))
}

// as gives a call the token tok ("" for none).
func as(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "token", tok)
}

// authScript is what `etcdctl user/role/auth ...` and a client with each
// kind of identity send, over conn; it returns one line per call.
type authScript struct {
	ctx  context.Context
	conn *grpc.ClientConn
	// certConn, with clients over mutual TLS, has a certificate whose
	// CommonName is alice (conn's names no user).
	certConn *grpc.ClientConn
	out      []string
	sleep    func(time.Duration)
	t        *testing.T
	last     time.Time
}

func (s *authScript) note(step, res string) {
	if d := time.Since(s.last); d > time.Second && s.t != nil {
		s.t.Logf("slow: %s took %v", step, d)
	}
	s.last = time.Now()
	s.out = append(s.out, step+" -> "+res)
}

func (s *authScript) auth() pb.AuthClient   { return pb.NewAuthClient(s.conn) }
func (s *authScript) kv() pb.KVClient       { return pb.NewKVClient(s.conn) }
func (s *authScript) lease() pb.LeaseClient { return pb.NewLeaseClient(s.conn) }

// login authenticates and returns the token ("" on failure).
func (s *authScript) login(user, pw string) string {
	r, err := s.auth().Authenticate(s.ctx, &pb.AuthenticateRequest{Name: user, Password: pw})
	if err != nil {
		return ""
	}
	return r.Token
}

func perm(t authpb.Permission_Type, key, end string) *authpb.Permission {
	p := &authpb.Permission{PermType: t, Key: []byte(key)}
	if end != "" {
		p.RangeEnd = []byte(end)
	}
	return p
}

// manage is the management part: users, roles, permissions, enabling.
func (s *authScript) manage() {
	ctx, a := s.ctx, s.auth()
	for _, k := range []string{"k1", "a1", "b", "p/x", "z1"} {
		_, err := s.kv().Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")})
		s.note("put "+k, outcome(err))
	}
	// k1 hangs on lease 1001, a/l on 1002: alice may read k1 only, and
	// read and write under [a, c).
	for _, l := range []struct {
		id int64
		k  string
	}{{1001, "k1"}, {1002, "a/l"}} {
		id, k := l.id, l.k
		_, err := s.lease().LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 600})
		s.note(fmt.Sprint("grant ", id), outcome(err))
		_, err = s.kv().Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v"), Lease: id})
		s.note("put "+k+" with its lease", outcome(err))
	}
	_, err := a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable without root", outcome(err))
	_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
	s.note("user add root", outcome(err))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable without the root role", outcome(err))
	_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
	s.note("user grant-role root root", outcome(err))
	for _, u := range []*pb.AuthUserAddRequest{
		{Name: "alice", Password: "alicepw"}, {Name: "alice", Password: "x"}, {Name: ""},
		{Name: "bob", Options: &authpb.UserAddOptions{NoPassword: true}}, {Name: "carol", Password: "carolpw"},
	} {
		_, err = a.UserAdd(ctx, u)
		s.note(fmt.Sprintf("user add %q", u.Name), outcome(err))
	}
	for _, r := range []string{"r1", "r1", "", "r2"} {
		_, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: r})
		s.note(fmt.Sprintf("role add %q", r), outcome(err))
	}
	for _, g := range []struct {
		role string
		p    *authpb.Permission
	}{
		{"r1", perm(authpb.Permission_READ, "k1", "")},
		{"r1", perm(authpb.Permission_READWRITE, "a", "c")},
		{"r1", perm(authpb.Permission_WRITE, "p/", "p0")},
		{"r1", perm(authpb.Permission_READ, "z", "\x00")},
		{"r1", perm(authpb.Permission_READ, "b", "a")},
		{"r1", perm(authpb.Permission_READ, "", "")},
		{"r1", nil},
		{"nope", perm(authpb.Permission_READ, "k1", "")},
		{"r2", perm(authpb.Permission_READ, "q", "")},
		{"r2", perm(authpb.Permission_WRITE, "q", "")},
	} {
		_, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: g.role, Perm: g.p})
		s.note(fmt.Sprintf("role grant-permission %s %v", g.role, g.p), outcome(err))
	}
	for _, g := range [][2]string{{"alice", "r1"}, {"alice", "r1"}, {"alice", "nope"}, {"nobody", "r1"}, {"carol", "r2"}} {
		_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: g[0], Role: g[1]})
		s.note("user grant-role "+g[0]+" "+g[1], outcome(err))
	}
	_, err = a.RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: "r1", Key: []byte("q")})
	s.note("role revoke-permission r1 q", outcome(err))
	_, err = a.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: "carol", Role: "r1"})
	s.note("user revoke-role carol r1", outcome(err))
	_, err = a.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: "r2"})
	s.note("role delete r2", outcome(err))
	s.reads("before auth enable", "")
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable", outcome(err))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable again, no token", outcome(err))
	_, err = a.AuthEnable(as(ctx, s.login("root", "rootpw")), &pb.AuthEnableRequest{})
	s.note("auth enable again as root", outcome(err))
	for _, l := range [][2]string{{"root", "wrong"}, {"nobody", "x"}, {"bob", "x"}, {"alice", "alicepw"}} {
		_, err := a.Authenticate(ctx, &pb.AuthenticateRequest{Name: l[0], Password: l[1]})
		s.note("authenticate "+l[0], outcome(err))
	}
}

// reads renders the store as user/role get and list show it.
func (s *authScript) reads(when, tok string) {
	ctx, a := as(s.ctx, tok), s.auth()
	st, err := a.AuthStatus(ctx, &pb.AuthStatusRequest{})
	if err == nil {
		s.note(when+": auth status", outcome(nil, fmt.Sprintf(" enabled=%v revision=%d", st.Enabled, st.AuthRevision)))
	} else {
		s.note(when+": auth status", outcome(err))
	}
	ul, err := a.UserList(ctx, &pb.AuthUserListRequest{})
	s.note(when+": user list", outcome(err, " ", ul.GetUsers()))
	rl, err := a.RoleList(ctx, &pb.AuthRoleListRequest{})
	s.note(when+": role list", outcome(err, " ", rl.GetRoles()))
	for _, u := range []string{"root", "alice", "bob", "nobody"} {
		r, err := a.UserGet(ctx, &pb.AuthUserGetRequest{Name: u})
		s.note(when+": user get "+u, outcome(err, " ", r.GetRoles()))
	}
	for _, role := range []string{"root", "r1", "nope"} {
		r, err := a.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: role})
		var perms []string
		for _, p := range r.GetPerm() {
			perms = append(perms, fmt.Sprintf("%s[%q,%q)", p.PermType, p.Key, p.RangeEnd))
		}
		s.note(when+": role get "+role, outcome(err, " ", perms))
	}
}

// identities are who the matrix runs as; each gives a fresh token.
type identity struct {
	name     string
	user, pw string
	bad      bool
}

var identities = []identity{
	{name: "no token"},
	{name: "bad token", bad: true},
	{name: "user without permission", user: "carol", pw: "carolpw"},
	{name: "user with permission", user: "alice", pw: "alicepw"},
	{name: "root", user: "root", pw: "rootpw"},
}

// call is one RPC of the matrix.
type call struct {
	name string
	run  func(s *authScript, ctx context.Context) string
}

func rng(key, end string) *pb.RangeRequest {
	return &pb.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)}
}

func txnOp(ops ...*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: ops}}}
}

func putOp(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte("w")}}}
}

var matrix = []call{
	{"range k1 (read)", func(s *authScript, ctx context.Context) string {
		r, err := s.kv().Range(ctx, rng("k1", ""))
		return outcome(err, " count=", r.GetCount())
	}},
	{"range [a, c) (readwrite)", func(s *authScript, ctx context.Context) string {
		r, err := s.kv().Range(ctx, rng("a", "c"))
		return outcome(err, " count=", r.GetCount())
	}},
	{"serializable range [a, b)", func(s *authScript, ctx context.Context) string {
		r := rng("a", "b")
		r.Serializable = true
		resp, err := s.kv().Range(ctx, r)
		return outcome(err, " count=", resp.GetCount())
	}},
	{"range prefix p/ (write only)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Range(ctx, rng("p/", "p0"))
		return outcome(err)
	}},
	{"range from z (read from key)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Range(ctx, rng("z", "\x00"))
		return outcome(err)
	}},
	{"range [a, d) (past the permission)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Range(ctx, rng("a", "d"))
		return outcome(err)
	}},
	{"range everything", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Range(ctx, rng("\x00", "\x00"))
		return outcome(err)
	}},
	{"range stream [a, c) (readwrite)", func(s *authScript, ctx context.Context) string {
		r, err := readRangeStream(ctx, s.kv(), rng("a", "c"))
		return outcome(err, " count=", r.GetCount())
	}},
	{"serializable range stream [a, b)", func(s *authScript, ctx context.Context) string {
		r := rng("a", "b")
		r.Serializable = true
		resp, err := readRangeStream(ctx, s.kv(), r)
		return outcome(err, " count=", resp.GetCount())
	}},
	{"range stream [a, d) (past the permission)", func(s *authScript, ctx context.Context) string {
		_, err := readRangeStream(ctx, s.kv(), rng("a", "d"))
		return outcome(err)
	}},
	{"put a1", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Put(ctx, &pb.PutRequest{Key: []byte("a1"), Value: []byte("w")})
		return outcome(err)
	}},
	{"put k1 (read only)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Put(ctx, &pb.PutRequest{Key: []byte("k1"), Value: []byte("w")})
		return outcome(err)
	}},
	{"put p/y with prev_kv (write only)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Put(ctx, &pb.PutRequest{Key: []byte("p/y"), Value: []byte("w"), PrevKv: true})
		return outcome(err)
	}},
	{"put p/y", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Put(ctx, &pb.PutRequest{Key: []byte("p/y"), Value: []byte("w")})
		return outcome(err)
	}},
	{"put a2 with lease 1001 (k1's)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Put(ctx, &pb.PutRequest{Key: []byte("a2"), Value: []byte("w"), Lease: 1001})
		return outcome(err)
	}},
	{"delete b", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("bb")})
		return outcome(err)
	}},
	{"delete prefix p/ with prev_kv", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0"), PrevKv: true})
		return outcome(err)
	}},
	{"txn compare k1, put a3", func(s *authScript, ctx context.Context) string {
		r, err := s.kv().Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("k1"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER}}, Success: []*pb.RequestOp{putOp("a3")}})
		return outcome(err, " succeeded=", r.GetSucceeded())
	}},
	{"txn compare p/x (write only)", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("p/x"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER}}})
		return outcome(err)
	}},
	{"txn with a nested put to k1 in else", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Txn(ctx, &pb.TxnRequest{Failure: []*pb.RequestOp{txnOp(putOp("a4"), txnOp(putOp("k1")))}})
		return outcome(err)
	}},
	{"compact", func(s *authScript, ctx context.Context) string {
		_, err := s.kv().Compact(ctx, &pb.CompactionRequest{Revision: 2})
		return outcome(err)
	}},
	{"watch k1", func(s *authScript, ctx context.Context) string { return s.watch(ctx, "k1", "") }},
	{"watch prefix p/", func(s *authScript, ctx context.Context) string { return s.watch(ctx, "p/", "p0") }},
	{"lease grant", func(s *authScript, ctx context.Context) string {
		_, err := s.lease().LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		return outcome(err)
	}},
	{"lease time-to-live 1001 with keys", func(s *authScript, ctx context.Context) string {
		r, err := s.lease().LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1001, Keys: true})
		return outcome(err, " keys=", len(r.GetKeys()))
	}},
	{"lease time-to-live 1002 without keys", func(s *authScript, ctx context.Context) string {
		_, err := s.lease().LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 1002})
		return outcome(err)
	}},
	{"lease leases", func(s *authScript, ctx context.Context) string {
		_, err := s.lease().LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		return outcome(err)
	}},
	{"lease keep-alive 1001 (k1's)", func(s *authScript, ctx context.Context) string { return s.keepAlive(ctx, 1001) }},
	{"lease keep-alive 1002", func(s *authScript, ctx context.Context) string { return s.keepAlive(ctx, 1002) }},
	{"lease revoke of a missing lease", func(s *authScript, ctx context.Context) string {
		_, err := s.lease().LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 999})
		return outcome(err)
	}},
	{"lease revoke 1001 (k1's)", func(s *authScript, ctx context.Context) string {
		_, err := s.lease().LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 1001})
		return outcome(err)
	}},
	{"status", func(s *authScript, ctx context.Context) string {
		_, err := pb.NewMaintenanceClient(s.conn).Status(ctx, &pb.StatusRequest{})
		return outcome(err)
	}},
	{"alarm list", func(s *authScript, ctx context.Context) string {
		_, err := pb.NewMaintenanceClient(s.conn).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		return outcome(err)
	}},
	{"alarm deactivate", func(s *authScript, ctx context.Context) string {
		_, err := pb.NewMaintenanceClient(s.conn).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, Alarm: pb.AlarmType_NOSPACE})
		return outcome(err)
	}},
	{"defragment", func(s *authScript, ctx context.Context) string {
		_, err := pb.NewMaintenanceClient(s.conn).Defragment(ctx, &pb.DefragmentRequest{})
		return outcome(err)
	}},
	{"hash", func(s *authScript, ctx context.Context) string {
		_, err := pb.NewMaintenanceClient(s.conn).Hash(ctx, &pb.HashRequest{})
		return outcome(err)
	}},
	{"hash kv", func(s *authScript, ctx context.Context) string {
		_, err := pb.NewMaintenanceClient(s.conn).HashKV(ctx, &pb.HashKVRequest{})
		return outcome(err)
	}},
	{"snapshot", func(s *authScript, ctx context.Context) string {
		st, err := pb.NewMaintenanceClient(s.conn).Snapshot(ctx, &pb.SnapshotRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		return outcome(err)
	}},
	{"auth status", func(s *authScript, ctx context.Context) string {
		_, err := s.auth().AuthStatus(ctx, &pb.AuthStatusRequest{})
		return outcome(err)
	}},
	{"user list", func(s *authScript, ctx context.Context) string {
		_, err := s.auth().UserList(ctx, &pb.AuthUserListRequest{})
		return outcome(err)
	}},
	{"user get alice", func(s *authScript, ctx context.Context) string {
		_, err := s.auth().UserGet(ctx, &pb.AuthUserGetRequest{Name: "alice"})
		return outcome(err)
	}},
	{"role get r1", func(s *authScript, ctx context.Context) string {
		_, err := s.auth().RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "r1"})
		return outcome(err)
	}},
	{"role add r9", func(s *authScript, ctx context.Context) string {
		_, err := s.auth().RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "r9"})
		return outcome(err)
	}},
}

// watch opens a watch and renders its first response.
func (s *authScript) watch(ctx context.Context, key, end string) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := pb.NewWatchClient(s.conn).Watch(ctx)
	if err != nil {
		return outcome(err)
	}
	if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte(key), RangeEnd: []byte(end)}}}); err != nil {
		return outcome(err)
	}
	r, err := w.Recv()
	if err != nil {
		return outcome(err)
	}
	return fmt.Sprintf("created=%v canceled=%v reason=%q", r.Created, r.Canceled, r.CancelReason)
}

// keepAlive sends one keepalive and renders the answer.
func (s *authScript) keepAlive(ctx context.Context, id int64) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k, err := s.lease().LeaseKeepAlive(ctx)
	if err != nil {
		return outcome(err)
	}
	if err := k.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil && !errors.Is(err, io.EOF) {
		return outcome(err)
	}
	r, err := k.Recv()
	return outcome(err, " ttl>0=", r.GetTTL() > 0)
}

// runMatrix sends every call as every identity.
func (s *authScript) runMatrix() {
	ids := identities
	if s.certConn != nil {
		ids = append(ids, identities[0])
		ids[len(ids)-1].name = "CN alice from a client certificate"
	}
	for _, id := range ids {
		if s.certConn != nil && id.name == ids[len(ids)-1].name {
			conn := s.conn
			s.conn = s.certConn
			defer func() { s.conn = conn }()
		}
		for _, c := range matrix {
			s.runAs(id, c)
		}
	}
}

// changes checks what auth changes do to tokens and permissions already
// given out.
func (s *authScript) changes() {
	ctx, a := s.ctx, s.auth()
	root := as(ctx, s.login("root", "rootpw"))
	alice := as(ctx, s.login("alice", "alicepw"))
	carol := as(ctx, s.login("carol", "carolpw"))
	_, err := s.kv().Range(alice, rng("k1", ""))
	s.note("alice reads k1", outcome(err))
	_, err = a.RoleRevokePermission(root, &pb.AuthRoleRevokePermissionRequest{Role: "r1", Key: []byte("k1")})
	s.note("root revokes r1's k1", outcome(err))
	_, err = s.kv().Range(alice, rng("k1", ""))
	s.note("alice's token, after the revoke, reads k1", outcome(err))
	_, err = a.RoleGrantPermission(root, &pb.AuthRoleGrantPermissionRequest{Name: "r1", Perm: perm(authpb.Permission_READ, "k1", "")})
	s.note("root grants it again", outcome(err))
	_, err = s.kv().Range(alice, rng("k1", ""))
	s.note("alice's token reads k1 again", outcome(err))
	_, err = a.UserChangePassword(root, &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "alicepw2"})
	s.note("root changes alice's password", outcome(err))
	_, err = s.kv().Range(alice, rng("k1", ""))
	s.note("alice's old token", outcome(err))
	_, err = a.UserDelete(root, &pb.AuthUserDeleteRequest{Name: "carol"})
	s.note("root deletes carol", outcome(err))
	_, err = s.kv().Range(carol, rng("k1", ""))
	s.note("carol's token", outcome(err))
	_, err = a.UserDelete(root, &pb.AuthUserDeleteRequest{Name: "root"})
	s.note("root deletes root", outcome(err))
	_, err = a.UserRevokeRole(root, &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"})
	s.note("root revokes root's root role", outcome(err))
	_, err = a.RoleDelete(root, &pb.AuthRoleDeleteRequest{Role: "r1"})
	s.note("root deletes r1", outcome(err))
	_, err = s.kv().Range(as(ctx, s.login("alice", "alicepw2")), rng("k1", ""))
	s.note("alice without r1 reads k1", outcome(err))
	s.reads("as root", s.login("root", "rootpw"))
	expired := s.login("root", "rootpw")
	_, err = a.AuthDisable(root, &pb.AuthDisableRequest{})
	s.note("auth disable", outcome(err))
	_, err = s.kv().Range(ctx, rng("k1", ""))
	s.note("range without a token, auth off", outcome(err))
	_, err = s.kv().Range(root, rng("k1", ""))
	s.note("range with a token, auth off", outcome(err))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable", outcome(err))
	_, err = s.kv().Range(root, rng("k1", ""))
	s.note("root's token from before the disable", outcome(err))
	_, err = s.kv().Range(as(ctx, expired), rng("k1", ""))
	s.note("a token from before the disable", outcome(err))
	expired = s.login("root", "rootpw")
	s.sleep(authTTL + 2500*time.Millisecond)
	_, err = s.kv().Range(as(ctx, expired), rng("k1", ""))
	s.note("an expired token", outcome(err))
	_, err = s.kv().Put(as(ctx, expired), &pb.PutRequest{Key: []byte("a1"), Value: []byte("x")})
	s.note("an expired token puts", outcome(err))
	s.note("an expired token watches", s.watch(as(ctx, expired), "a", "c"))
	_, err = pb.NewMaintenanceClient(s.conn).Status(as(ctx, expired), &pb.StatusRequest{})
	s.note("an expired token asks the status", outcome(err))
}

// rootWhileDisabled checks what etcd protects of root only while auth is
// on: off, root may lose its role and be deleted, and enabling fails
// until both are back; a role deleted and added again is not given back
// to the users that had it.
func (s *authScript) rootWhileDisabled() {
	ctx, a := s.ctx, s.auth()
	root := as(ctx, s.login("root", "rootpw"))
	_, err := a.RoleDelete(root, &pb.AuthRoleDeleteRequest{Role: "root"})
	s.note("root deletes the root role", outcome(err))
	_, err = a.UserChangePassword(root, &pb.AuthUserChangePasswordRequest{Name: "nobody", Password: "x"})
	s.note("root changes nobody's password", outcome(err))
	_, err = a.AuthDisable(root, &pb.AuthDisableRequest{})
	s.note("auth disable", outcome(err))
	_, err = a.AuthDisable(ctx, &pb.AuthDisableRequest{})
	s.note("auth disable again", outcome(err))
	_, err = a.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: "root"})
	s.note("auth off: role delete root", outcome(err))
	_, err = a.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"})
	s.note("auth off: user revoke-role root root", outcome(err))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable, root without its role", outcome(err))
	_, err = a.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: "root"})
	s.note("auth off: user delete root", outcome(err))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable, no root", outcome(err))
	_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
	s.note("user add root", outcome(err))
	_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
	s.note("user grant-role root root", outcome(err))
	_, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "r1"})
	s.note("role add r1 again", outcome(err))
	r, err := a.UserGet(ctx, &pb.AuthUserGetRequest{Name: "alice"})
	s.note("user get alice", outcome(err, " ", r.GetRoles()))
	_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
	s.note("auth enable", outcome(err))
}

// runAuthScript runs the whole script against the server at addr, over
// a plain gRPC connection with etcd's generated stubs: clientv3's
// interceptors would retry some answers and hide them.
func runAuthScript(t *testing.T, addr string) []string {
	t.Helper()
	return runAuthScriptAs(t, addr, nil)
}

// runAuthScriptAs is runAuthScript with clients over mutual TLS when
// cert is not nil: cert(cn) is the TLS of a client named cn.
func runAuthScriptAs(t *testing.T, addr string, cert func(cn string) *tls.Config) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := func(cn string) *grpc.ClientConn {
		creds := insecure.NewCredentials()
		if cert != nil {
			creds = credentials.NewTLS(cert(cn))
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	s := &authScript{ctx: ctx, conn: dial("operator"), sleep: time.Sleep, t: t, last: time.Now()}
	if cert != nil {
		s.certConn = dial("alice")
	}
	s.manage()
	s.reads("after auth enable", s.login("root", "rootpw"))
	s.runMatrix()
	s.rootOnly()
	s.changes()
	s.rootWhileDisabled()
	return s.out
}

// rootOnly sends the calls etcd reserves for root and Axon does not
// implement as everyone but root: they are refused as etcd refuses them
// before anything is done (root itself would change etcd's membership).
func (s *authScript) rootOnly() {
	calls := []call{
		{"member add", func(s *authScript, ctx context.Context) string {
			_, err := pb.NewClusterClient(s.conn).MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}})
			return outcome(err)
		}},
		{"member remove", func(s *authScript, ctx context.Context) string {
			_, err := pb.NewClusterClient(s.conn).MemberRemove(ctx, &pb.MemberRemoveRequest{ID: 12345})
			return outcome(err)
		}},
		{"member update", func(s *authScript, ctx context.Context) string {
			_, err := pb.NewClusterClient(s.conn).MemberUpdate(ctx, &pb.MemberUpdateRequest{ID: 12345, PeerURLs: []string{"http://127.0.0.1:1"}})
			return outcome(err)
		}},
		{"member promote", func(s *authScript, ctx context.Context) string {
			_, err := pb.NewClusterClient(s.conn).MemberPromote(ctx, &pb.MemberPromoteRequest{ID: 12345})
			return outcome(err)
		}},
		{"downgrade validate", func(s *authScript, ctx context.Context) string {
			_, err := pb.NewMaintenanceClient(s.conn).Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: "3.6"})
			return outcome(err)
		}},
	}
	for _, id := range identities {
		if id.user == "root" {
			continue
		}
		for _, c := range calls {
			s.runAs(id, c)
		}
	}
}

// runAs sends c as id, with a fresh token, and notes the outcome.
func (s *authScript) runAs(id identity, c call) {
	tok := ""
	switch {
	case id.bad:
		tok = "not-a-token.1"
	case id.user != "":
		if tok = s.login(id.user, id.pw); tok == "" {
			s.note(id.name+": "+c.name, "login failed")
			return
		}
	}
	s.note(id.name+": "+c.name, c.run(s, as(s.ctx, tok)))
}

// compareTranscripts fails the test on every line that differs.
func compareTranscripts(t *testing.T, want, got []string) { etcdtest.Compare(t, want, got) }

var etcdAuthTranscript struct {
	lines []string
}

// etcdTranscript runs the script on a fresh embedded etcd 3.7.3.
func etcdTranscript(t *testing.T) []string {
	t.Helper()
	if etcdAuthTranscript.lines != nil {
		return etcdAuthTranscript.lines
	}
	u := etcdtest.StartWith(t, etcdWithAuth)
	etcdAuthTranscript.lines = runAuthScript(t, u.Host)
	return etcdAuthTranscript.lines
}

// TestAuthAsEtcdOnOneInstance runs the etcdctl-like script and the
// matrix of calls × identities on etcd and on one Axon over Badger.
func TestAuthAsEtcdOnOneInstance(t *testing.T) {
	want := etcdTranscript(t)
	_, cli := startServer(t, server.Config{Core: core.Config{RingSize: 64}, MemberID: 1, ClusterID: 2, Name: "auth", Auth: authConfig})
	compareTranscripts(t, want, runAuthScript(t, cli.Endpoints()[0]))
}

// TestAuthAsEtcdThroughAFollower is the same through a follower of three
// instances over one mock TiKV: the follower forwards writes, auth
// changes, leases and watches with the caller's token, and serves reads
// itself against the store in its snapshot.
func TestAuthAsEtcdThroughAFollower(t *testing.T) {
	want := etcdTranscript(t)
	compareTranscripts(t, want, runAuthScript(t, authFollower(t, authConfig)))
}

// authFollower starts three instances with auth over one mock TiKV and
// returns the address of a follower.
func authFollower(t *testing.T, auth server.AuthConfig) string {
	t.Helper()
	eng, err := tikv.NewMock(tikv.MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	c := newCluster(t, eng, 3)
	c.tweak = func(cfg *server.Config) { cfg.Auth = auth }
	c.startAll()
	return c.ins[(c.awaitLeader()+1)%3].addr
}

// certPKI is a CA, a server certificate for 127.0.0.1 and client
// certificates by CommonName, in files for etcd's flags too.
type certPKI struct {
	ca                    *testpki.CA
	server                tls.Certificate
	caFile, cert, keyFile string
}

func newCertPKI(t *testing.T) *certPKI {
	t.Helper()
	ca := testpki.NewCA(t, "client-ca")
	certPEM, keyPEM := ca.IssueFor(t, "axon-server", 1)
	dir := t.TempDir()
	p := &certPKI{ca: ca, server: testpki.Pair(t, certPEM, keyPEM),
		caFile: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server-key.pem")}
	for f, b := range map[string][]byte{p.caFile: ca.CertPEM(), p.cert: certPEM, p.keyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// listen is the TLS of a client listener that requires certificates.
func (p *certPKI) listen() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: testpki.Pool(p.ca),
		ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
}

// client returns the TLS of a client named cn.
func (p *certPKI) client(t *testing.T) func(cn string) *tls.Config {
	return func(cn string) *tls.Config {
		certPEM, keyPEM := p.ca.IssueFor(t, cn, time.Now().UnixNano())
		return &tls.Config{Certificates: []tls.Certificate{testpki.Pair(t, certPEM, keyPEM)}, RootCAs: testpki.Pool(p.ca), MinVersion: tls.VersionTLS12}
	}
}

// TestAuthAsEtcdWithClientCertificates runs the script and the matrix
// with clients over mutual TLS and --client-cert-auth, one more identity
// being a certificate's CommonName, on etcd and on Axon (one instance,
// and a follower of three over mock TiKV, whose instances dial each
// other with a certificate of their own).
func TestAuthAsEtcdWithClientCertificates(t *testing.T) {
	p := newCertPKI(t)
	u := etcdtest.StartWith(t, func(cfg *embed.Config) {
		etcdWithAuth(cfg)
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: p.cert, KeyFile: p.keyFile, TrustedCAFile: p.caFile, ClientCertAuth: true}
		for _, urls := range [][]url.URL{cfg.ListenClientUrls, cfg.AdvertiseClientUrls} {
			urls[0].Scheme = "https"
		}
	})
	want := runAuthScriptAs(t, u.Host, p.client(t))
	t.Run("one instance", func(t *testing.T) {
		eng, err := badgerkv.Open(t.TempDir(), badgerkv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		srv, err := server.New(server.Config{Core: core.Config{RingSize: 64}, MemberID: 1, ClusterID: 2, Name: "auth-tls",
			Auth: authConfig, ClientCertAuth: true, Exclusive: true, Logger: slog.New(slog.DiscardHandler)}, eng)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer(srv.ServerOptions()...)
		srv.Register(g)
		go func() { _ = g.Serve(tls.NewListener(lis, p.listen())) }()
		t.Cleanup(g.Stop)
		compareTranscripts(t, want, runAuthScriptAs(t, lis.Addr().String(), p.client(t)))
	})
	t.Run("through a follower", func(t *testing.T) {
		eng, err := tikv.NewMock(tikv.MockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eng.Close() })
		c := newCluster(t, eng, 3)
		c.clientTLS = p.listen()
		c.tweak = func(cfg *server.Config) {
			cfg.Auth, cfg.ClientCertAuth = authConfig, true
			cfg.PeerTLS = p.client(t)("axon-peer")
		}
		c.startAll()
		l := c.awaitLeader()
		compareTranscripts(t, want, runAuthScriptAs(t, c.ins[(l+1)%3].addr, p.client(t)))
	})
}
