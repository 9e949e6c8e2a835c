package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/driver"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// The auth world: root (the admin client's user), users that the other
// clients run as, roles the admin grants and revokes, and the key
// ranges its permissions name. They nest (points inside /e/, a range
// from the point /e/a) and touch (/e/a–/e/b, /e/b–/e/hot, the point
// /e/hot, /e/hot\x00–/e0 chain over the rest of /e/; the point
// /registry/pods/a and the range just after it), so that a request's
// range is often allowed only by the union of several permissions, of
// one role or of several: etcd merges a user's permissions before it
// checks one.
const authRoot = "root"

var (
	authUsers = []string{"u1", "u2", "u3"}
	authRoles = []string{"r1", "r2", "r3"}
	authPerms = []permKey{
		{key: "/e/", end: "/e0"},
		{key: "/registry/pods/", end: "/registry/pods0"},
		{key: "/e/a"},
		{key: "/registry/pods/a"},
		{key: "/e/hot"},
		{key: "/e/a", end: "/e/b"},
		{key: "/e/b", end: "/e/hot"},
		{key: "/e/hot\x00", end: "/e0"},
		{key: "/registry/pods/a\x00", end: "/registry/pods0"},
		// From a key on: past the prefixes, to every key.
		{key: "/e/c", end: "\x00"},
		{key: "/registry/pods/b", end: "\x00"},
	}
)

// permKey is a permission's range as etcd names it: a key, and an end
// that is empty for the key alone.
type permKey struct{ key, end string }

// authSetup is the store every auth world starts from, as changes.
func authSetup() []auth.Change {
	none := &authpb.UserAddOptions{NoPassword: true}
	chs := []auth.Change{
		&pb.AuthUserAddRequest{Name: authRoot, Options: none},
		&pb.AuthUserGrantRoleRequest{User: authRoot, Role: "root"},
	}
	for i, u := range authUsers {
		chs = append(chs,
			&pb.AuthRoleAddRequest{Name: authRoles[i]},
			&pb.AuthUserAddRequest{Name: u, Options: none},
			&pb.AuthUserGrantRoleRequest{User: u, Role: authRoles[i]})
	}
	return append(chs,
		grantPerm("r1", authPerms[0], authpb.READWRITE),
		grantPerm("r2", authPerms[1], authpb.READWRITE),
		grantPerm("r3", authPerms[2], authpb.READ),
		// Touching spans: only together do they allow a range over both.
		grantPerm("r3", authPerms[5], authpb.READWRITE),
		grantPerm("r3", authPerms[6], authpb.READ),
		&pb.AuthEnableRequest{})
}

func grantPerm(role string, p permKey, t authpb.Permission_Type) auth.Change {
	return &pb.AuthRoleGrantPermissionRequest{Name: role, Perm: &authpb.Permission{PermType: t, Key: []byte(p.key), RangeEnd: []byte(p.end)}}
}

// setUpAuth stores the auth world's first store in the engine, before
// any node starts or fault is injected (a cluster whose operator set
// auth up).
func (w *World) setUpAuth() error {
	st := auth.NewStore([]byte("sim secret"))
	for _, ch := range authSetup() {
		if _, err := st.Apply(ch); err != nil {
			return fmt.Errorf("auth setup %s: %w", describeAuthChange(ch), err)
		}
	}
	txn, err := w.eng.Begin(context.Background())
	if err != nil {
		return err
	}
	if err := driver.Buffer(txn, auth.AuthWrites(st, "sim")); err != nil {
		return err
	}
	if err := txn.Commit(context.Background()); err != nil {
		return err
	}
	w.authSeq0 = st.Seq
	return nil
}

// authUser gives client c its user: the first is the admin, as root.
func (c *client) authUser() {
	if !c.w.plan.Auth {
		return
	}
	c.user = authUsers[(c.idx+len(authUsers)-1)%len(authUsers)]
	if c.idx == 0 {
		c.user, c.admin = authRoot, true
	}
}

// authChange draws the admin's next change: a permission or a role
// granted or revoked (a revoke of what is not granted fails, as etcd's),
// or, authAdminShare of them, one that manages users, roles or auth.
func (c *client) authChange() input {
	w := c.w
	if w.chance(authAdminShare) {
		return input{kind: opAuth, auth: c.authAdminChange()}
	}
	role := authRoles[w.rng.IntN(len(authRoles))]
	p := authPerms[w.rng.IntN(len(authPerms))]
	var ch auth.Change
	switch w.rng.IntN(4) {
	case 0:
		ch = grantPerm(role, p, authpb.Permission_Type(w.rng.IntN(3)))
	case 1:
		ch = &pb.AuthRoleRevokePermissionRequest{Role: role, Key: []byte(p.key), RangeEnd: []byte(p.end)}
	case 2:
		ch = &pb.AuthUserGrantRoleRequest{User: authUsers[w.rng.IntN(len(authUsers))], Role: role}
	default:
		ch = &pb.AuthUserRevokeRoleRequest{Name: authUsers[w.rng.IntN(len(authUsers))], Role: role}
	}
	return input{kind: opAuth, auth: ch}
}

// describeAuthChange renders a change for the trace, on one line.
func describeAuthChange(ch auth.Change) string {
	switch r := ch.(type) {
	case *pb.AuthRoleGrantPermissionRequest:
		return fmt.Sprintf("RoleGrantPermission %s %s %s", r.Name, r.Perm.PermType, describePerm(string(r.Perm.Key), string(r.Perm.RangeEnd)))
	case *pb.AuthRoleRevokePermissionRequest:
		return fmt.Sprintf("RoleRevokePermission %s %s", r.Role, describePerm(string(r.Key), string(r.RangeEnd)))
	case *pb.AuthUserGrantRoleRequest:
		return fmt.Sprintf("UserGrantRole %s %s", r.User, r.Role)
	case *pb.AuthUserRevokeRoleRequest:
		return fmt.Sprintf("UserRevokeRole %s %s", r.Name, r.Role)
	case *pb.AuthUserAddRequest:
		return fmt.Sprintf("UserAdd %q", r.Name)
	case *pb.AuthRoleAddRequest:
		return fmt.Sprintf("RoleAdd %q", r.Name)
	case *pb.AuthUserDeleteRequest:
		return "UserDelete " + r.Name
	case *pb.AuthRoleDeleteRequest:
		return "RoleDelete " + r.Role
	case *pb.AuthUserChangePasswordRequest:
		return "UserChangePassword " + r.Name
	case *pb.AuthEnableRequest:
		return "AuthEnable"
	case *pb.AuthDisableRequest:
		return "AuthDisable"
	}
	return fmt.Sprintf("%T", ch)
}

func describePerm(key, end string) string {
	if end == "" {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("[%q, %q)", key, end)
}

// authErrors are the auth store's answers a client may get: definite
// refusals.
var authErrors = []error{
	auth.ErrAuthPermissionDenied, auth.ErrAuthUserEmpty, auth.ErrAuthOldRevision, auth.ErrAuthRoleNotGranted,
	auth.ErrAuthPermissionNotGranted, auth.ErrAuthRoleNotFound, auth.ErrAuthUserNotFound, auth.ErrAuthInvalidMgmt,
	auth.ErrAuthUserAlreadyExist, auth.ErrAuthRoleAlreadyExist, auth.ErrAuthRoleEmpty, auth.ErrAuthRootUserNotExist,
	auth.ErrAuthRootRoleNotExist, auth.ErrAuthPermissionNotGiven,
}

func isAuthError(err error) bool {
	for _, e := range authErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// identity is who a call runs as against st: the user it names, as a
// server takes a client certificate's.
func identity(c *call, st *auth.Store) auth.Identity {
	if c.user == "" {
		return auth.Identity{}
	}
	return auth.Identity{User: c.user, Revision: st.Revision}
}

// authCheck is the server's check of a call against st: read for a
// range, etcd's per-operation rules for a write, the root role for a
// compaction, write on every key attached to a lease to revoke it. Other
// lease calls are not checked here (see doc.go).
func (n *node) authCheck(c *call, st *auth.Store) error {
	if !st.Enabled {
		return nil
	}
	id := identity(c, st)
	switch c.in.kind {
	case opRange:
		return st.CheckRange(id, c.in.rng)
	case opWrite:
		return st.CheckWrite(id, c.in.write, n.drv.LeaseKeys)
	case opCompact:
		return st.CheckAdmin(id)
	case opRevoke:
		return st.CheckLeaseKeys(id, n.drv.LeaseKeys(c.in.lease), true)
	}
	return nil
}

// authorizeLeader checks a call on the leader through the driver, as the
// server's authorizeLeader does: against the leader's copy of the store
// if the driver trusts it, else against the store in a new snapshot,
// read with the engine's latency and the plan's stall (a change may
// finish meanwhile).
func (n *node) authorizeLeader(c *call, next func(error)) {
	if !n.w.plan.Auth {
		next(nil)
		return
	}
	n.drv.AuthorizeLeader(func(loaded func(core.Reader, func(), error)) {
		txn, err := n.w.eng.Begin(context.Background())
		if err != nil {
			n.on(n.latency(), "auth read failed", func() { loaded(nil, nil, err) })
			return
		}
		stall := n.w.plan.AuthLoadStall
		if stall > 0 {
			n.w.fault("auth-stall", "%s loads the store in %v", n.id(), stall)
		}
		n.on(txn.(*memkv.Txn).Delay()+stall, "auth read", func() { loaded(storage.NewReader(txn), txn.Rollback, nil) })
	}, func(st *auth.Store) error {
		return n.authCheck(c, st)
	}, func(err error) {
		n.w.checkWellFormed(n, "auth load", err)
		next(err)
	})
}

// authStall is how much longer a check looked at with look takes to
// load the store, when it must: the plan's AuthLoadStall on the leader.
func (n *node) authStall(look driver.AuthLook, led bool) time.Duration {
	if !led || look.Trusted() != nil || n.w.plan.AuthLoadStall == 0 {
		return 0
	}
	n.w.fault("auth-stall", "%s loads the store in %v", n.id(), n.w.plan.AuthLoadStall)
	return n.w.plan.AuthLoadStall
}

// writesAuth reports whether a commit's keys hold the auth store's.
func writesAuth(keys [][]byte) bool {
	seq := core.MetaKey(auth.MetaAuthSeq)
	return slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, seq) })
}

// authorizeRead checks a range against the store in the read's own
// snapshot rd (looked at with look before it began), through the driver
// as the server's range does.
func (n *node) authorizeRead(c *call, look driver.AuthLook, rd core.Reader) error {
	if !n.w.plan.Auth {
		return nil
	}
	return n.drv.Authorize(look, rd, func(st *auth.Store) error { return n.authCheck(c, st) })
}

// changeAuth runs the admin's change through the driver, on the leader.
func (n *node) changeAuth(c *call, done func(error)) {
	n.drv.ChangeAuth(driver.AuthChange{
		Change: c.in.auth,
		Admit:  func(st *auth.Store) error { return st.CheckAdmin(identity(c, st)) },
		Engine: simAuthEngine{n: n, c: c},
	}, func(_ *auth.Store, err error) { done(err) })
}

// authAttempt is a commit of an auth change that may have applied.
type authAttempt struct {
	call *call
	txn  *memkv.Txn
	seq  uint64        // the store's Seq it writes
	at   time.Duration // the commit call
	// known is when it had surely applied, if it did (at the commit
	// call, or as late as the engine applies a held commit), and its
	// leader had heard the commit's answer; -1: it never heard (crashed).
	known time.Duration
}

// simAuthEngine runs an auth change's transaction against the faulty
// engine in virtual time, as runWork runs a write's.
type simAuthEngine struct {
	n *node
	c *call
}

func (e simAuthEngine) Update(fn func(core.Reader) ([]core.Write, error), done func(error)) {
	n, ctx := e.n, context.Background()
	began := n.clock()
	txn, err := n.w.eng.Begin(ctx)
	if err != nil {
		n.on(n.latency(), "auth change failed", func() { done(err) })
		return
	}
	mtx := txn.(*memkv.Txn)
	ws, err := fn(storage.NewReader(txn))
	n.w.checkWellFormed(n, "auth change", err)
	if err == nil && len(ws) > 0 {
		err = driver.Buffer(n.w.writer(txn), ws)
	}
	if err != nil || len(ws) == 0 {
		txn.Rollback()
		n.on(mtx.Delay(), "auth change read-only", func() { done(err) })
		return
	}
	n.on(mtx.Delay(), "auth commit", func() {
		if n.clock()-began > engineDeadline/2 {
			txn.Rollback()
			done(fmt.Errorf("engine deadline passed"))
			return
		}
		before := mtx.Delay()
		err := txn.Commit(ctx)
		seq := writtenSeq(ws)
		landed := n.w.now
		if mtx.Outcome() != memkv.Applied {
			landed += n.w.plan.Engine.MaxApplyAfter
		}
		i := len(n.w.authAttempts)
		n.w.authAttempts = append(n.w.authAttempts, authAttempt{call: e.c, txn: mtx, seq: seq, at: n.w.now, known: -1})
		n.w.note("%s auth %s seq=%d -> %v %v", n.id(), describeAuthChange(e.c.in.auth), seq, driver.Outcome(err), errText(err))
		n.on(mtx.Delay()-before, "auth committed", func() {
			n.w.authAttempts[i].known = max(landed, n.w.now)
			done(err)
		})
	})
}

// writtenSeq is the store's Seq among an auth change's writes.
func writtenSeq(ws []core.Write) uint64 {
	for _, w := range ws {
		if string(w.Key) == string(core.MetaKey(auth.MetaAuthSeq)) {
			s, _ := binary.Uvarint(w.Value)
			return s
		}
	}
	return 0
}
