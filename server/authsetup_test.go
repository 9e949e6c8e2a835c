package server_test

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// setUpAlice is what an operator does before `auth enable` in the auth
// tests: root (rootpw) with the root role, alice (alicepw) with role r
// holding perms, then the extra users given the root role (named after
// certificates) and auth on.
func setUpAlice(t testing.TB, ctx context.Context, a pb.AuthClient, perms []*authpb.Permission, roots ...string) {
	t.Helper()
	try := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	try(a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"}))
	try(a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}))
	for _, u := range roots {
		try(a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: u, Password: u}))
		try(a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: u, Role: "root"}))
	}
	try(a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"}))
	try(a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "r"}))
	for _, p := range perms {
		try(a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: p}))
	}
	try(a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "alice", Role: "r"}))
	try(a.AuthEnable(ctx, &pb.AuthEnableRequest{}))
}

// readwrite is a permission on one key or a range.
func readwrite(key, end string) *authpb.Permission {
	p := &authpb.Permission{PermType: authpb.Permission_READWRITE, Key: []byte(key)}
	if end != "" {
		p.RangeEnd = []byte(end)
	}
	return p
}
