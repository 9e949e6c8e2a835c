package sim

import (
	"maps"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core/auth"
)

// authAdminShare is the share of the admin's changes that manage users,
// roles and auth itself (authAdminChange) rather than grant and revoke.
const authAdminShare = 0.3

// authAdminChange draws one of the admin's rarer changes: a role or a
// user deleted (a deleted role leaves every user that had it) or added
// again (half the users with a password), now and then one that exists,
// an empty name or root; auth disabled (every request allowed) or
// enabled again; a password changed; a permission of an invalid range;
// the root role taken from root or given back (allowed while auth is
// off, and then enabling fails until it is back); a role granted that is
// not there. Many are refused, with etcd's errors, which the checker
// holds to its model. An add names, seven times in ten, a role or user
// the admin deleted, as an operator puts back what it took away.
func (c *client) authAdminChange() auth.Change {
	w := c.w
	role := authRoles[w.rng.IntN(len(authRoles))]
	user := authUsers[w.rng.IntN(len(authUsers))]
	goneRoles, goneUsers := c.authGone()
	none := &authpb.UserAddOptions{NoPassword: true}
	switch w.rng.IntN(20) {
	case 0, 1:
		if w.chance(0.125) {
			role = "root"
		}
		return &pb.AuthRoleDeleteRequest{Role: role}
	case 2, 3, 4:
		switch {
		case len(goneRoles) > 0 && w.chance(0.7):
			role = goneRoles[w.rng.IntN(len(goneRoles))]
		case w.chance(0.125):
			role = ""
		}
		return &pb.AuthRoleAddRequest{Name: role}
	case 5, 6:
		if w.chance(0.25) {
			user = authRoot
		}
		return &pb.AuthUserDeleteRequest{Name: user}
	case 7, 8, 9:
		switch {
		case len(goneUsers) > 0 && w.chance(0.7):
			user = goneUsers[w.rng.IntN(len(goneUsers))]
		case w.chance(0.25):
			user = authRoot
		case w.chance(0.1):
			user = ""
		}
		if w.chance(0.5) {
			return &pb.AuthUserAddRequest{Name: user, HashedPassword: "$2a$10$sim"}
		}
		return &pb.AuthUserAddRequest{Name: user, Options: none}
	case 10:
		return &pb.AuthDisableRequest{}
	case 11, 12, 13, 14:
		return &pb.AuthEnableRequest{}
	case 15:
		if w.chance(0.25) {
			user = "nobody"
		}
		return &pb.AuthUserChangePasswordRequest{Name: user, HashedPassword: "$2a$10$sim"}
	case 16:
		if w.chance(0.5) {
			return grantPerm(role, permKey{key: "/e/b", end: "/e/a"}, authpb.READ)
		}
		return grantPerm(role, permKey{end: "/e0"}, authpb.READ)
	case 17:
		return &pb.AuthUserRevokeRoleRequest{Name: authRoot, Role: "root"}
	case 18:
		return &pb.AuthUserGrantRoleRequest{User: authRoot, Role: "root"}
	}
	if w.chance(0.5) {
		user = "nobody"
	}
	return &pb.AuthUserGrantRoleRequest{User: user, Role: "r4"}
}

// authGone lists the roles and users the admin's deletes may have taken
// away (acknowledged, or of unknown outcome) and no acknowledged add of
// its has put back, in name order.
func (c *client) authGone() (roles, users []string) {
	gone := map[string]bool{}
	for _, cl := range c.w.hist.calls {
		if cl.client != c || cl.in.kind != opAuth || cl.status == failed || cl.status == answered && cl.err != nil {
			continue
		}
		if cl.status != answered && !isAuthDelete(cl.in.auth) {
			continue
		}
		switch r := cl.in.auth.(type) {
		case *pb.AuthRoleDeleteRequest:
			gone["r/"+r.Role] = true
		case *pb.AuthRoleAddRequest:
			delete(gone, "r/"+r.Name)
		case *pb.AuthUserDeleteRequest:
			gone["u/"+r.Name] = true
		case *pb.AuthUserAddRequest:
			delete(gone, "u/"+r.Name)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(gone)) {
		if name, ok := strings.CutPrefix(k, "r/"); ok {
			roles = append(roles, name)
		} else {
			users = append(users, strings.TrimPrefix(k, "u/"))
		}
	}
	return roles, users
}

func isAuthDelete(ch auth.Change) bool {
	switch ch.(type) {
	case *pb.AuthRoleDeleteRequest, *pb.AuthUserDeleteRequest:
		return true
	}
	return false
}
