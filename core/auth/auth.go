package auth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
)

// Errors of the auth store, with etcd's texts (rpctypes' ErrGRPC* of the
// same names); the server maps each to etcd's gRPC error.
var (
	ErrAuthRootUserNotExist     = errors.New("etcdserver: root user does not exist")
	ErrAuthRootRoleNotExist     = errors.New("etcdserver: root user does not have root role")
	ErrAuthUserAlreadyExist     = errors.New("etcdserver: user name already exists")
	ErrAuthUserEmpty            = errors.New("etcdserver: user name is empty")
	ErrAuthUserNotFound         = errors.New("etcdserver: user name not found")
	ErrAuthRoleAlreadyExist     = errors.New("etcdserver: role name already exists")
	ErrAuthRoleNotFound         = errors.New("etcdserver: role name not found")
	ErrAuthRoleEmpty            = errors.New("etcdserver: role name is empty")
	ErrAuthFailed               = errors.New("etcdserver: authentication failed, invalid user ID or password")
	ErrAuthPermissionNotGiven   = errors.New("etcdserver: permission not given")
	ErrAuthPermissionDenied     = errors.New("etcdserver: permission denied")
	ErrAuthRoleNotGranted       = errors.New("etcdserver: role is not granted to the user")
	ErrAuthPermissionNotGranted = errors.New("etcdserver: permission is not granted to the role")
	ErrAuthNotEnabled           = errors.New("etcdserver: authentication is not enabled")
	ErrAuthInvalidToken         = errors.New("etcdserver: invalid auth token")
	ErrAuthInvalidMgmt          = errors.New("etcdserver: invalid auth management")
	ErrAuthOldRevision          = errors.New("etcdserver: revision of auth store is old")
	// ErrAuthNoPasswordUser has no gRPC error of its own: etcd answers
	// it as Unknown, with its auth package's text.
	ErrAuthNoPasswordUser = errors.New("auth: authentication failed, password was given for no password user")
)

// Meta records of the auth store: MetaAuth holds the whole store
// (EncodeAuth), MetaAuthSeq its Seq alone, so an instance can tell in one
// small read whether its copy is current.
const (
	MetaAuth    = "auth"
	MetaAuthSeq = "authseq"
)

const (
	rootUser = "root"
	rootRole = "root"
)

// User is a user and when its credentials were last set.
type User struct {
	*authpb.User
	// CredRev is the auth revision of the change that created the user or
	// set its password: tokens name it, so they die with the password.
	CredRev uint64
}

// Store is etcd's auth store: users, roles with their key
// permissions, the enabled flag and the auth revision. A value is never
// changed once shared: Apply changes a Clone.
type Store struct {
	Enabled bool
	// Revision is etcd's auth revision, bumped by every change but
	// AuthEnable (as etcd's).
	Revision uint64
	// Seq counts every stored change, enabling included: it tells copies
	// apart where Revision does not.
	Seq uint64
	// Epoch counts enablings: tokens from before the last one are void,
	// as etcd drops its tokens when auth is disabled.
	Epoch uint64
	// Secret signs tokens; the instances share it through the engine.
	Secret []byte
	Users  map[string]*User
	Roles  map[string]*authpb.Role

	// Testing plants bugs for the simulator; production leaves it zero.
	// Clone keeps it.
	Testing TestingKnobs

	// perms is every user's merged permissions, built by index before
	// the store is shared (nil: computed at each check).
	perms map[string]*userPerms
}

// TestingKnobs are bugs of the auth store's the simulator plants to show
// its checks find them, kept apart so none is taken for a real setting.
type TestingKnobs struct {
	// TouchingSpansLeaveGap: a range request whose permission is the
	// union of spans that touch (one ends where the next begins) is
	// denied, as if a gap lay between them.
	TouchingSpansLeaveGap bool
	// RoleDeleteLeavesUsers: a role's delete leaves it on the users that
	// had it, so a role added again under its name gives them its
	// permissions back.
	RoleDeleteLeavesUsers bool
	// DisableKeepsSeq: AuthDisable bumps the auth revision but not Seq
	// (as AuthEnable bumps Seq alone), so an instance whose copy holds
	// that Seq goes on checking requests as if auth were on.
	DisableKeepsSeq bool
	// OpenEndedAsKey: a permission whose range_end is "\x00" (from its
	// key on) is taken as its key alone.
	OpenEndedAsKey bool
}

// NewStore returns an empty store signing with secret, at etcd's
// first auth revision, 1.
func NewStore(secret []byte) *Store {
	a := &Store{Revision: 1, Secret: secret, Users: map[string]*User{}, Roles: map[string]*authpb.Role{}}
	a.index()
	return a
}

// Clone returns a deep copy, for Apply.
func (a *Store) Clone() *Store {
	c := &Store{Enabled: a.Enabled, Revision: a.Revision, Seq: a.Seq, Epoch: a.Epoch, Secret: a.Secret, Testing: a.Testing,
		Users: make(map[string]*User, len(a.Users)), Roles: make(map[string]*authpb.Role, len(a.Roles))}
	for n, u := range a.Users {
		c.Users[n] = &User{User: proto.Clone(u.User).(*authpb.User), CredRev: u.CredRev}
	}
	for n, r := range a.Roles {
		c.Roles[n] = proto.Clone(r).(*authpb.Role)
	}
	return c
}

// Change is one request of etcd's Auth service that changes the
// store. Passwords arrive hashed (HashedPassword): bcrypt runs outside
// this package.
type Change = proto.Message

// Apply applies a change to a (a Clone the caller owns). changed is false
// for a change etcd ignores (enabling twice, granting a role twice): then
// nothing is to be stored.
func (a *Store) Apply(ch Change) (changed bool, err error) {
	defer a.index()
	switch r := ch.(type) {
	case *pb.AuthEnableRequest:
		if a.Enabled {
			return false, nil
		}
		u := a.Users[rootUser]
		if u == nil {
			return false, ErrAuthRootUserNotExist
		}
		if !hasRole(u.User, rootRole) {
			return false, ErrAuthRootRoleNotExist
		}
		a.Enabled = true
		a.Epoch++
		a.Seq++
		return true, nil
	case *pb.AuthDisableRequest:
		if !a.Enabled {
			return false, nil
		}
		a.Enabled = false
		if a.Testing.DisableKeepsSeq {
			a.Revision++
			return true, nil
		}
	case *pb.AuthUserAddRequest:
		err = a.userAdd(r)
	case *pb.AuthUserDeleteRequest:
		err = a.userDelete(r)
	case *pb.AuthUserChangePasswordRequest:
		u := a.Users[r.Name]
		if u == nil {
			return false, ErrAuthUserNotFound
		}
		u.Password = nil
		if u.Options == nil || !u.Options.NoPassword {
			u.Password = []byte(r.HashedPassword)
		}
		u.CredRev = a.Revision + 1
	case *pb.AuthUserGrantRoleRequest:
		return a.userGrant(r)
	case *pb.AuthUserRevokeRoleRequest:
		err = a.userRevoke(r)
	case *pb.AuthRoleAddRequest:
		if r.Name == "" {
			return false, ErrAuthRoleEmpty
		}
		if a.Roles[r.Name] != nil {
			return false, ErrAuthRoleAlreadyExist
		}
		a.Roles[r.Name] = &authpb.Role{Name: []byte(r.Name)}
	case *pb.AuthRoleDeleteRequest:
		err = a.roleDelete(r)
	case *pb.AuthRoleGrantPermissionRequest:
		err = a.roleGrant(r)
	case *pb.AuthRoleRevokePermissionRequest:
		err = a.roleRevoke(r)
	default:
		return false, ErrAuthInvalidMgmt
	}
	if err != nil {
		return false, err
	}
	a.Revision++
	a.Seq++
	return true, nil
}

func (a *Store) userAdd(r *pb.AuthUserAddRequest) error {
	if r.Name == "" {
		return ErrAuthUserEmpty
	}
	if a.Users[r.Name] != nil {
		return ErrAuthUserAlreadyExist
	}
	opts := r.Options
	if opts == nil {
		opts = &authpb.UserAddOptions{}
	}
	u := &User{User: &authpb.User{Name: []byte(r.Name), Options: proto.Clone(opts).(*authpb.UserAddOptions)}, CredRev: a.Revision + 1}
	if !opts.NoPassword {
		u.Password = []byte(r.HashedPassword)
	}
	a.Users[r.Name] = u
	return nil
}

func (a *Store) userDelete(r *pb.AuthUserDeleteRequest) error {
	if a.Enabled && r.Name == rootUser {
		return ErrAuthInvalidMgmt
	}
	if a.Users[r.Name] == nil {
		return ErrAuthUserNotFound
	}
	delete(a.Users, r.Name)
	return nil
}

func (a *Store) userGrant(r *pb.AuthUserGrantRoleRequest) (bool, error) {
	u := a.Users[r.User]
	if u == nil {
		return false, ErrAuthUserNotFound
	}
	if r.Role != rootRole && a.Roles[r.Role] == nil {
		return false, ErrAuthRoleNotFound
	}
	i, found := slices.BinarySearch(u.Roles, r.Role)
	if found {
		return false, nil
	}
	u.Roles = slices.Insert(u.Roles, i, r.Role)
	a.Revision++
	a.Seq++
	return true, nil
}

func (a *Store) userRevoke(r *pb.AuthUserRevokeRoleRequest) error {
	if a.Enabled && r.Name == rootUser && r.Role == rootRole {
		return ErrAuthInvalidMgmt
	}
	u := a.Users[r.Name]
	if u == nil {
		return ErrAuthUserNotFound
	}
	n := len(u.Roles)
	u.Roles = slices.DeleteFunc(u.Roles, func(s string) bool { return s == r.Role })
	if len(u.Roles) == n {
		return ErrAuthRoleNotGranted
	}
	return nil
}

func (a *Store) roleDelete(r *pb.AuthRoleDeleteRequest) error {
	if a.Enabled && r.Role == rootRole {
		return ErrAuthInvalidMgmt
	}
	if a.Roles[r.Role] == nil {
		return ErrAuthRoleNotFound
	}
	delete(a.Roles, r.Role)
	if a.Testing.RoleDeleteLeavesUsers {
		return nil
	}
	for _, u := range a.Users {
		u.Roles = slices.DeleteFunc(u.Roles, func(s string) bool { return s == r.Role })
	}
	return nil
}

func (a *Store) roleGrant(r *pb.AuthRoleGrantPermissionRequest) error {
	if r.Perm == nil {
		return ErrAuthPermissionNotGiven
	}
	if !validPermRange(r.Perm.Key, r.Perm.RangeEnd) {
		return ErrAuthInvalidMgmt
	}
	role := a.Roles[r.Name]
	if role == nil {
		return ErrAuthRoleNotFound
	}
	i := sort.Search(len(role.KeyPermission), func(i int) bool {
		return bytes.Compare(role.KeyPermission[i].Key, r.Perm.Key) >= 0
	})
	if i < len(role.KeyPermission) && bytes.Equal(role.KeyPermission[i].Key, r.Perm.Key) && bytes.Equal(role.KeyPermission[i].RangeEnd, r.Perm.RangeEnd) {
		role.KeyPermission[i].PermType = r.Perm.PermType
		return nil
	}
	p := &authpb.Permission{Key: bytes.Clone(r.Perm.Key), RangeEnd: bytes.Clone(r.Perm.RangeEnd), PermType: r.Perm.PermType}
	role.KeyPermission = append(role.KeyPermission, p)
	sort.SliceStable(role.KeyPermission, func(i, j int) bool {
		return bytes.Compare(role.KeyPermission[i].Key, role.KeyPermission[j].Key) < 0
	})
	return nil
}

func (a *Store) roleRevoke(r *pb.AuthRoleRevokePermissionRequest) error {
	role := a.Roles[r.Role]
	if role == nil {
		return ErrAuthRoleNotFound
	}
	n := len(role.KeyPermission)
	role.KeyPermission = slices.DeleteFunc(role.KeyPermission, func(p *authpb.Permission) bool {
		return bytes.Equal(p.Key, r.Key) && bytes.Equal(p.RangeEnd, r.RangeEnd)
	})
	if len(role.KeyPermission) == n {
		return ErrAuthPermissionNotGranted
	}
	return nil
}

// validPermRange is etcd's rule for a permission's range: a key, and an
// end that is empty (one key), above the key, or "\x00" (from the key on).
func validPermRange(key, end []byte) bool {
	switch {
	case len(key) == 0:
		return false
	case len(end) == 0, openEnded(end):
		return true
	}
	return bytes.Compare(key, end) < 0
}

func openEnded(end []byte) bool { return len(end) == 1 && end[0] == 0 }

func hasRole(u *authpb.User, role string) bool {
	_, found := slices.BinarySearch(u.Roles, role)
	return found
}

// Status answers AuthStatus.
func (a *Store) Status() *pb.AuthStatusResponse {
	return &pb.AuthStatusResponse{Enabled: a.Enabled, AuthRevision: a.Revision}
}

// UserGet answers UserGet.
func (a *Store) UserGet(name string) (*pb.AuthUserGetResponse, error) {
	u := a.Users[name]
	if u == nil {
		return nil, ErrAuthUserNotFound
	}
	return &pb.AuthUserGetResponse{Roles: slices.Clone(u.Roles)}, nil
}

// UserList answers UserList, names in order.
func (a *Store) UserList() *pb.AuthUserListResponse {
	return &pb.AuthUserListResponse{Users: slices.Sorted(mapKeys(a.Users))}
}

// RoleGet answers RoleGet; the root role shows etcd's all-keys permission.
func (a *Store) RoleGet(name string) (*pb.AuthRoleGetResponse, error) {
	r := a.Roles[name]
	if r == nil {
		return nil, ErrAuthRoleNotFound
	}
	if name == rootRole {
		return &pb.AuthRoleGetResponse{Perm: []*authpb.Permission{{PermType: authpb.Permission_READWRITE, Key: []byte{}, RangeEnd: []byte{0}}}}, nil
	}
	resp := &pb.AuthRoleGetResponse{}
	for _, p := range r.KeyPermission {
		resp.Perm = append(resp.Perm, proto.Clone(p).(*authpb.Permission))
	}
	return resp, nil
}

// RoleList answers RoleList, names in order.
func (a *Store) RoleList() *pb.AuthRoleListResponse {
	return &pb.AuthRoleListResponse{Roles: slices.Sorted(mapKeys(a.Roles))}
}

// HasRole reports whether user has role (RoleGet of one's own role).
func (a *Store) HasRole(user, role string) bool {
	u := a.Users[user]
	return u != nil && hasRole(u.User, role)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// EncodeAuth encodes a store for MetaAuth.
func EncodeAuth(a *Store) []byte {
	b := binary.AppendUvarint(nil, 1) // encoding version
	en := uint64(0)
	if a.Enabled {
		en = 1
	}
	for _, v := range []uint64{en, a.Revision, a.Seq, a.Epoch, uint64(len(a.Users)), uint64(len(a.Roles))} {
		b = binary.AppendUvarint(b, v)
	}
	b = appendBytes(b, a.Secret)
	for _, n := range slices.Sorted(mapKeys(a.Users)) {
		u := a.Users[n]
		m, _ := proto.MarshalOptions{Deterministic: true}.Marshal(u.User)
		b = appendBytes(binary.AppendUvarint(b, u.CredRev), m)
	}
	for _, n := range slices.Sorted(mapKeys(a.Roles)) {
		m, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a.Roles[n])
		b = appendBytes(b, m)
	}
	return b
}

func appendBytes(b, v []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(v))), v...) }

// DecodeAuth decodes a MetaAuth record.
func DecodeAuth(b []byte) (*Store, error) {
	d := authDecoder{b: b}
	if d.uvarint() != 1 {
		return nil, core.ErrBadRecord
	}
	a := &Store{Users: map[string]*User{}, Roles: map[string]*authpb.Role{}}
	a.Enabled = d.uvarint() == 1
	a.Revision, a.Seq, a.Epoch = d.uvarint(), d.uvarint(), d.uvarint()
	nu, nr := d.uvarint(), d.uvarint()
	a.Secret = d.bytes()
	for i := uint64(0); i < nu && d.err == nil; i++ {
		u := &User{CredRev: d.uvarint(), User: &authpb.User{}}
		if err := proto.Unmarshal(d.bytes(), u.User); err != nil {
			return nil, core.ErrBadRecord
		}
		a.Users[string(u.Name)] = u
	}
	for i := uint64(0); i < nr && d.err == nil; i++ {
		r := &authpb.Role{}
		if err := proto.Unmarshal(d.bytes(), r); err != nil {
			return nil, core.ErrBadRecord
		}
		a.Roles[string(r.Name)] = r
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, core.ErrBadRecord
	}
	a.index()
	return a, nil
}

type authDecoder struct {
	b   []byte
	err error
}

func (d *authDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = core.ErrBadRecord, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *authDecoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err, d.b = core.ErrBadRecord, nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// AuthWrites are the writes that store a: its record, its Seq, and the
// format that knows auth records (a binary of format 3 refuses them
// instead of serving the store without auth).
func AuthWrites(a *Store, by string) []core.Write {
	return append(AuthRecords(a), core.FormatWrite(by))
}

// AuthRecords are the two records of a, without the format (a restore
// records it last).
func AuthRecords(a *Store) []core.Write {
	return []core.Write{
		{Key: core.MetaKey(MetaAuth), Value: EncodeAuth(a)},
		{Key: core.MetaKey(MetaAuthSeq), Value: binary.AppendUvarint(nil, a.Seq)},
	}
}

// ImportAuth makes a store of what an etcd snapshot holds: its users,
// roles, enabled flag and auth revision, signing with secret. Tokens
// etcd gave out mean nothing here; a user logs in again.
func ImportAuth(enabled bool, revision uint64, users []*authpb.User, roles []*authpb.Role, secret []byte) *Store {
	a := NewStore(secret)
	a.Enabled, a.Revision, a.Seq = enabled, max(revision, 1), 1
	if enabled {
		a.Epoch = 1
	}
	for _, u := range users {
		u := proto.Clone(u).(*authpb.User)
		slices.Sort(u.Roles)
		a.Users[string(u.Name)] = &User{User: u, CredRev: a.Revision}
	}
	for _, r := range roles {
		a.Roles[string(r.Name)] = proto.Clone(r).(*authpb.Role)
	}
	a.index()
	return a
}

// ExportAuth lists a store's users and roles in name order, as etcd's
// buckets hold them.
func (a *Store) ExportAuth() (users []*authpb.User, roles []*authpb.Role) {
	for _, n := range slices.Sorted(mapKeys(a.Users)) {
		users = append(users, a.Users[n].User)
	}
	for _, n := range slices.Sorted(mapKeys(a.Roles)) {
		roles = append(roles, a.Roles[n])
	}
	return users, roles
}

// ReadAuthSeq reads the stored store's Seq (0: none stored).
func ReadAuthSeq(rd core.Reader) (uint64, error) {
	v, ok, err := rd.Get(core.MetaKey(MetaAuthSeq))
	if err != nil || !ok {
		return 0, err
	}
	s, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, core.ErrBadRecord
	}
	return s, nil
}

// ReadAuth reads the stored store; nil if there is none.
func ReadAuth(rd core.Reader) (*Store, error) {
	v, ok, err := rd.Get(core.MetaKey(MetaAuth))
	if err != nil || !ok {
		return nil, err
	}
	return DecodeAuth(v)
}
