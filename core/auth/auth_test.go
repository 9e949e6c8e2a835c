package auth_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/pkg/v3/adt"
	"pgregory.net/rapid"

	"github.com/axon-kv/axon/core/auth"
)

// apply applies changes in order to a fresh store and returns it with the
// error of the last.
func apply(t *testing.T, st *auth.Store, chs ...auth.Change) error {
	t.Helper()
	var err error
	for _, ch := range chs {
		_, err = st.Apply(ch)
	}
	return err
}

func grant(role string, typ authpb.Permission_Type, key, end string) *pb.AuthRoleGrantPermissionRequest {
	p := &authpb.Permission{PermType: typ, Key: []byte(key)}
	if end != "" {
		p.RangeEnd = []byte(end)
	}
	return &pb.AuthRoleGrantPermissionRequest{Name: role, Perm: p}
}

var (
	addRoot   = &pb.AuthUserAddRequest{Name: "root", HashedPassword: "h"}
	rootRole  = &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}
	enable    = &pb.AuthEnableRequest{}
	addAlice  = &pb.AuthUserAddRequest{Name: "alice", HashedPassword: "h"}
	addR1     = &pb.AuthRoleAddRequest{Name: "r1"}
	aliceToR1 = &pb.AuthUserGrantRoleRequest{User: "alice", Role: "r1"}
)

func TestAuthChangesFollowEtcdsRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes []auth.Change
		want    error
	}{
		{"enabling needs a root user", []auth.Change{enable}, auth.ErrAuthRootUserNotExist},
		{"enabling needs root to have the root role", []auth.Change{addRoot, enable}, auth.ErrAuthRootRoleNotExist},
		{"root with the root role enables", []auth.Change{addRoot, rootRole, enable}, nil},
		{"the root role needs no adding", []auth.Change{addRoot, rootRole}, nil},
		{"a user is added once", []auth.Change{addAlice, addAlice}, auth.ErrAuthUserAlreadyExist},
		{"a user has a name", []auth.Change{&pb.AuthUserAddRequest{}}, auth.ErrAuthUserEmpty},
		{"a role has a name", []auth.Change{&pb.AuthRoleAddRequest{}}, auth.ErrAuthRoleEmpty},
		{"a role is added once", []auth.Change{addR1, addR1}, auth.ErrAuthRoleAlreadyExist},
		{"granting a missing role", []auth.Change{addAlice, aliceToR1}, auth.ErrAuthRoleNotFound},
		{"granting to a missing user", []auth.Change{addR1, aliceToR1}, auth.ErrAuthUserNotFound},
		{"revoking a role not granted", []auth.Change{addAlice, &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "r1"}}, auth.ErrAuthRoleNotGranted},
		{"a permission needs a key", []auth.Change{addR1, grant("r1", authpb.Permission_READ, "", "")}, auth.ErrAuthInvalidMgmt},
		{"a range ends above its key", []auth.Change{addR1, grant("r1", authpb.Permission_READ, "b", "a")}, auth.ErrAuthInvalidMgmt},
		{"from a key on is a range", []auth.Change{addR1, grant("r1", authpb.Permission_READ, "b", "\x00")}, nil},
		{"a permission is given", []auth.Change{addR1, &pb.AuthRoleGrantPermissionRequest{Name: "r1"}}, auth.ErrAuthPermissionNotGiven},
		{"revoking a permission not granted", []auth.Change{addR1, &pb.AuthRoleRevokePermissionRequest{Role: "r1", Key: []byte("k")}}, auth.ErrAuthPermissionNotGranted},
		{"root stays while auth is on", []auth.Change{addRoot, rootRole, enable, &pb.AuthUserDeleteRequest{Name: "root"}}, auth.ErrAuthInvalidMgmt},
		{"root keeps its role while auth is on", []auth.Change{addRoot, rootRole, enable, &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"}}, auth.ErrAuthInvalidMgmt},
		{"root may go while auth is off", []auth.Change{addRoot, &pb.AuthUserDeleteRequest{Name: "root"}}, nil},
		{"deleting a missing user", []auth.Change{&pb.AuthUserDeleteRequest{Name: "x"}}, auth.ErrAuthUserNotFound},
		{"deleting a missing role", []auth.Change{&pb.AuthRoleDeleteRequest{Role: "x"}}, auth.ErrAuthRoleNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := apply(t, auth.NewStore(nil), tc.changes...); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestTheAuthRevisionMovesAsEtcds(t *testing.T) {
	st := auth.NewStore(nil)
	if st.Revision != 1 {
		t.Fatalf("a new store is at revision %d, etcd's starts at 1", st.Revision)
	}
	for _, tc := range []struct {
		ch      auth.Change
		changed bool
		rev     uint64
	}{
		{addRoot, true, 2},
		{rootRole, true, 3},
		{rootRole, false, 3}, // granted twice: ignored
		{addR1, true, 4},
		{grant("r1", authpb.Permission_READ, "k", ""), true, 5},
		{grant("r1", authpb.Permission_WRITE, "k", ""), true, 6}, // updates in place
		{enable, true, 6}, // enabling takes no revision
		{enable, false, 6},
		{&pb.AuthDisableRequest{}, true, 7},
		{&pb.AuthUserAddRequest{Name: "root"}, false, 7}, // refused
	} {
		changed, _ := st.Apply(tc.ch)
		if changed != tc.changed || st.Revision != tc.rev {
			t.Fatalf("after %T: changed=%v revision=%d, want %v %d", tc.ch, changed, st.Revision, tc.changed, tc.rev)
		}
	}
	r, _ := st.RoleGet("r1")
	if len(r.Perm) != 1 || r.Perm[0].PermType != authpb.Permission_WRITE {
		t.Fatalf("r1 has %v, want one write permission", r.Perm)
	}
}

func TestPermissionsCoverRangesAsEtcds(t *testing.T) {
	st := auth.NewStore(nil)
	if err := apply(t, st, addRoot, rootRole, addAlice, addR1, aliceToR1,
		grant("r1", authpb.Permission_READ, "k", ""),
		grant("r1", authpb.Permission_READWRITE, "a", "c"),
		grant("r1", authpb.Permission_READ, "c", "e"), // adjoins [a, c)
		grant("r1", authpb.Permission_WRITE, "p/", "p0"),
		grant("r1", authpb.Permission_READ, "x", "\x00"),
		grant("r1", authpb.Permission_READ, "m", "n"),
		grant("r1", authpb.Permission_READ, "o", "p"), // a gap [n, o)
		enable); err != nil {
		t.Fatal(err)
	}
	alice := auth.Identity{User: "alice", Revision: st.Revision}
	for _, tc := range []struct {
		key, end string
		write    bool
		want     error
	}{
		{"k", "", false, nil},
		{"k", "", true, auth.ErrAuthPermissionDenied},
		{"k0", "", false, auth.ErrAuthPermissionDenied}, // a key permission is one key
		{"k", "k\x00", false, nil},                      // the range of that one key
		{"a", "c", true, nil},
		{"b", "", true, nil},
		{"a", "e", false, nil}, // two adjoining permissions cover it
		{"a", "e", true, auth.ErrAuthPermissionDenied},
		{"a", "e\x00", false, auth.ErrAuthPermissionDenied},
		{"p/x", "", true, nil},
		{"p/", "p0", false, auth.ErrAuthPermissionDenied},
		{"x", "\x00", false, nil}, // from a key on
		{"y", "", false, nil},
		{"zzz", "\x00", false, nil},
		{"w", "\x00", false, auth.ErrAuthPermissionDenied},
		{"m", "p", false, auth.ErrAuthPermissionDenied}, // the gap
		{"o", "p", false, nil},
		{"\x00", "\x00", false, auth.ErrAuthPermissionDenied},
	} {
		if err := st.Check(alice, []byte(tc.key), []byte(tc.end), tc.write); !errors.Is(err, tc.want) {
			t.Errorf("alice on [%q, %q) write=%v: got %v, want %v", tc.key, tc.end, tc.write, err, tc.want)
		}
	}
	root := auth.Identity{User: "root", Revision: st.Revision}
	for _, tc := range []struct {
		name string
		id   auth.Identity
		want error
	}{
		{"root may do anything", root, nil},
		{"no user", auth.Identity{}, auth.ErrAuthUserEmpty},
		{"an old revision", auth.Identity{User: "root", Revision: st.Revision - 1}, auth.ErrAuthOldRevision},
		{"an unknown user", auth.Identity{User: "eve", Revision: st.Revision}, auth.ErrAuthPermissionDenied},
	} {
		if err := st.Check(tc.id, []byte("\x00"), []byte("\x00"), true); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := st.CheckAdmin(alice); !errors.Is(err, auth.ErrAuthPermissionDenied) {
		t.Errorf("alice as admin: %v", err)
	}
	if err := st.CheckAdmin(root); err != nil {
		t.Errorf("root as admin: %v", err)
	}
}

func TestTxnChecksEveryOpAndCompare(t *testing.T) {
	st := auth.NewStore(nil)
	if err := apply(t, st, addRoot, rootRole, addAlice, addR1, aliceToR1,
		grant("r1", authpb.Permission_READWRITE, "a", "c"), grant("r1", authpb.Permission_READ, "k", ""), enable); err != nil {
		t.Fatal(err)
	}
	alice := auth.Identity{User: "alice", Revision: st.Revision}
	put := func(k string, lease int64) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Lease: lease}}}
	}
	txn := func(cmp string, ops ...*pb.RequestOp) *pb.RequestOp {
		t := &pb.TxnRequest{Failure: ops}
		if cmp != "" {
			t.Compare = []*pb.Compare{{Key: []byte(cmp)}}
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
	}
	leases := func(id int64) [][]byte {
		if id == 7 {
			return [][]byte{[]byte("k")}
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		op   *pb.RequestOp
		want error
	}{
		{"compare on a readable key", txn("k", put("a", 0)), nil},
		{"compare on an unreadable key", txn("z", put("a", 0)), auth.ErrAuthPermissionDenied},
		{"a nested put out of reach", txn("", txn("", put("a", 0), put("k", 0))), auth.ErrAuthPermissionDenied},
		{"a put with a lease of unwritable keys", put("a", 7), auth.ErrAuthPermissionDenied},
		{"a put with a lease of no keys", put("a", 8), nil},
	} {
		if err := st.CheckOp(alice, tc.op, leases); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestAServedReadRefusesATokenOfAnotherRevision(t *testing.T) {
	st := auth.NewStore([]byte("secret"))
	if err := apply(t, st, addRoot, rootRole, enable); err != nil {
		t.Fatal(err)
	}
	rangeOp := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}
	putOp := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k")}}}
	txn := func(ops ...*pb.RequestOp) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: ops}}}
	}
	ahead := auth.Identity{User: "root", Revision: st.Revision + 1}
	for _, tc := range []struct {
		name string
		id   auth.Identity
		op   *pb.RequestOp
		want error
	}{
		{"a range at the store's revision", auth.Identity{User: "root", Revision: st.Revision}, rangeOp, nil},
		{"a range with no user", auth.Identity{}, rangeOp, nil},
		{"a range from a newer revision", ahead, rangeOp, auth.ErrAuthOldRevision},
		{"a txn of ranges from a newer revision", ahead, txn(rangeOp, rangeOp), auth.ErrAuthOldRevision},
		{"a txn that writes, from a newer revision", ahead, txn(rangeOp, putOp), nil},
		{"a put from a newer revision", ahead, putOp, nil},
	} {
		if err := st.CheckServed(tc.id, tc.op); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestTokensDieWithPasswordsUsersAndDisabling(t *testing.T) {
	st := auth.NewStore([]byte("secret"))
	if err := apply(t, st, addRoot, rootRole, addAlice, enable); err != nil {
		t.Fatal(err)
	}
	const now, later = 1000, 2000
	tok := st.IssueToken("alice", later, []byte("n"))
	if id, err := st.Resolve(tok, now); err != nil || id.User != "alice" || id.Revision != st.Revision {
		t.Fatalf("a fresh token: %v %v", id, err)
	}
	invalid := func(what, tok string, st *auth.Store, at int64) {
		t.Helper()
		if _, err := st.Resolve(tok, at); !errors.Is(err, auth.ErrAuthInvalidToken) {
			t.Errorf("%s: got %v, want an invalid token", what, err)
		}
	}
	invalid("expired", tok, st, later)
	invalid("tampered", tok[:len(tok)-2]+"AA", st, now)
	invalid("garbage", "x.y.z", st, now)
	invalid("empty", "", st, now)
	invalid("signed with another secret", auth.NewStore([]byte("other")).IssueToken("alice", later, nil), st, now)

	changed := st.Clone()
	_ = apply(t, changed, &pb.AuthUserChangePasswordRequest{Name: "alice", HashedPassword: "h2"})
	invalid("after a password change", tok, changed, now)
	deleted := st.Clone()
	_ = apply(t, deleted, &pb.AuthUserDeleteRequest{Name: "alice"}, &pb.AuthUserAddRequest{Name: "alice", HashedPassword: "h"})
	invalid("after the user was deleted and added again", tok, deleted, now)
	cycled := st.Clone()
	_ = apply(t, cycled, &pb.AuthDisableRequest{}, enable)
	invalid("after auth was disabled and enabled", tok, cycled, now)

	granted := st.Clone()
	_ = apply(t, granted, addR1, aliceToR1)
	if id, err := granted.Resolve(tok, now); err != nil || id.Revision != granted.Revision {
		t.Errorf("after a grant the token stands for the new revision: %v %v", id, err)
	}
}

func TestARenewedTokenCarriesTheNewExpiryAndNothingElse(t *testing.T) {
	st := auth.NewStore([]byte("secret"))
	if err := apply(t, st, addRoot, rootRole, addAlice, enable); err != nil {
		t.Fatal(err)
	}
	tok := st.IssueToken("alice", 1000, []byte("n"))
	renewed, ok := st.RenewToken(tok, 5000)
	if !ok {
		t.Fatal("a genuine token was not renewed")
	}
	if id, exp, err := st.ResolveToken(renewed); err != nil || id.User != "alice" || exp != 5000 {
		t.Fatalf("the renewed token: %v, expires %d, %v", id, exp, err)
	}
	if _, err := st.Resolve(renewed, 4999); err != nil {
		t.Errorf("the renewed token before its new expiry: %v", err)
	}
	changed := st.Clone()
	_ = apply(t, changed, &pb.AuthUserChangePasswordRequest{Name: "alice", HashedPassword: "h2"})
	if _, _, err := changed.ResolveToken(renewed); !errors.Is(err, auth.ErrAuthInvalidToken) {
		t.Errorf("renewing revived a token void since: %v", err)
	}
	for _, forged := range []string{"", "x.y", tok[:len(tok)-2] + "AA", auth.NewStore([]byte("other")).IssueToken("alice", 1, nil)} {
		if _, ok := st.RenewToken(forged, 5000); ok {
			t.Errorf("renewed a token not signed with the secret: %q", forged)
		}
	}
}

func TestTheAuthStoreEncodesAndRefusesGarbage(t *testing.T) {
	st := auth.NewStore([]byte("secret"))
	if err := apply(t, st, addRoot, rootRole, addAlice, addR1, aliceToR1, grant("r1", authpb.Permission_READ, "a", "b"), enable); err != nil {
		t.Fatal(err)
	}
	b := auth.EncodeAuth(st)
	got, err := auth.DecodeAuth(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(auth.EncodeAuth(got)) != string(b) {
		t.Fatal("decoding and encoding again changed the record")
	}
	tok := st.IssueToken("alice", 10, nil)
	if _, err := got.Resolve(tok, 1); err != nil {
		t.Fatalf("a token of the original on the decoded copy: %v", err)
	}
	for i := range b {
		if _, err := auth.DecodeAuth(b[:i]); err == nil {
			t.Fatalf("a record cut to %d of %d bytes decoded", i, len(b))
		}
	}
}

// TestPermissionChecksAgreeWithEtcdsIntervalTree draws permissions and
// requests over a small alphabet and asks etcd's own interval tree (its
// range permission cache's rules, written out independently of core's)
// whether the request is covered.
func TestPermissionChecksAgreeWithEtcdsIntervalTree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.StringMatching(`[abc]{1,3}`)
		end := rapid.OneOf(rapid.Just(""), rapid.Just("\x00"), rapid.StringMatching(`[abcd]{1,3}`))
		st := auth.NewStore(nil)
		changes := []auth.Change{addAlice, addR1, aliceToR1}
		tree := adt.NewIntervalTree()
		for i := range rapid.IntRange(0, 5).Draw(t, "perms") {
			k, e := key.Draw(t, fmt.Sprint("key", i)), end.Draw(t, fmt.Sprint("end", i))
			if e != "" && e != "\x00" && e <= k {
				continue // refused by RoleGrantPermission
			}
			changes = append(changes, grant("r1", authpb.Permission_READ, k, e))
			switch {
			case e == "":
				tree.Insert(adt.NewBytesAffinePoint([]byte(k)), struct{}{})
			case e == "\x00":
				tree.Insert(adt.NewBytesAffineInterval([]byte(k), nil), struct{}{})
			default:
				tree.Insert(adt.NewBytesAffineInterval([]byte(k), []byte(e)), struct{}{})
			}
		}
		changes = append(changes, &pb.AuthUserAddRequest{Name: "root"}, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}, enable)
		for _, ch := range changes {
			if _, err := st.Apply(ch); err != nil {
				t.Fatalf("%v: %v", ch, err)
			}
		}
		qk, qe := key.Draw(t, "qkey"), end.Draw(t, "qend")
		if qe != "" && qe != "\x00" && qe <= qk {
			return // an empty range: etcd's tree answers for no well-formed case
		}
		var want bool
		switch {
		case qe == "":
			want = tree.Intersects(adt.NewBytesAffinePoint([]byte(qk)))
		case qe == "\x00":
			want = tree.Contains(adt.NewBytesAffineInterval([]byte(qk), nil))
		default:
			want = tree.Contains(adt.NewBytesAffineInterval([]byte(qk), []byte(qe)))
		}
		err := st.Check(auth.Identity{User: "alice", Revision: st.Revision}, []byte(qk), []byte(qe), false)
		if got := err == nil; got != want {
			t.Fatalf("read [%q, %q): allowed=%v, etcd's tree says %v (%v)", qk, qe, got, want, err)
		}
	})
}

func TestAPeerProofIsTheInstancesAlone(t *testing.T) {
	secret := []byte("secret")
	const now, maxLife = 1000, 30
	alice := auth.PeerProof{Instance: "a", User: "alice", Expires: now + 1}
	for _, tc := range []struct {
		name string
		v    string
		want auth.PeerProof
	}{
		{"genuine", auth.SealPeerProof(secret, alice), alice},
		{"no user", auth.SealPeerProof(secret, auth.PeerProof{Instance: "b", Expires: now + 1}), auth.PeerProof{Instance: "b", Expires: now + 1}},
		{"expired", auth.SealPeerProof(secret, auth.PeerProof{Instance: "a", User: "alice", Expires: now}), auth.PeerProof{}},
		{"never expiring is expired", auth.SealPeerProof(secret, auth.PeerProof{Instance: "a", User: "root"}), auth.PeerProof{}},
		{"another secret's", auth.SealPeerProof([]byte("other"), alice), auth.PeerProof{}},
		{"a bare name", "root", auth.PeerProof{}},
		{"tampered", auth.SealPeerProof(secret, alice)[1:], auth.PeerProof{}},
		{"lives as long as sealed", auth.SealPeerProof(secret, auth.PeerProof{Instance: "a", Expires: now + maxLife}), auth.PeerProof{Instance: "a", Expires: now + maxLife}},
		{"lives longer than sealed", auth.SealPeerProof(secret, auth.PeerProof{Instance: "a", User: "root", Expires: now + maxLife + 1}), auth.PeerProof{}},
		{"the user moved to another proof", swapPayload(auth.SealPeerProof(secret, alice), auth.SealPeerProof(secret, auth.PeerProof{Instance: "a", User: "root", Expires: now + 1})), auth.PeerProof{}},
	} {
		got, ok := auth.OpenPeerProof(secret, tc.v, now, maxLife)
		if got != tc.want || ok != (tc.want != auth.PeerProof{}) {
			t.Errorf("%s: got %+v %v, want %+v", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := auth.OpenPeerProof(nil, auth.SealPeerProof(nil, alice), now, maxLife); ok {
		t.Error("no secret took a proof")
	}
}

// swapPayload returns a's MAC on b's payload.
func swapPayload(a, b string) string {
	_, mac, _ := strings.Cut(a, ".")
	payload, _, _ := strings.Cut(b, ".")
	return payload + "." + mac
}
