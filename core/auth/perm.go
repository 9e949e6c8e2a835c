package auth

import (
	"bytes"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Identity is who a request runs as: a user and the auth revision its
// token was resolved at. The zero value is no user (no token given).
type Identity struct {
	User     string
	Revision uint64
}

// permRange is a key interval [begin, end); a nil end is +∞.
type permRange struct{ begin, end []byte }

// userPerms is a user's permitted spans, merged over its roles and sorted
// by begin, so that a check is a scan of the few spans that meet a key.
type userPerms struct {
	root        bool
	read, write []permRange
}

// permSpan turns etcd's (key, range_end) into a permRange: an empty end is the
// key alone, "\x00" is from the key on.
func permSpan(key, end []byte) permRange {
	switch {
	case len(end) == 0:
		return permRange{key, append(bytes.Clone(key), 0)}
	case openEnded(end):
		return permRange{key, nil}
	}
	return permRange{key, end}
}

func (a *Store) userPerms(name string) *userPerms {
	if a.perms != nil {
		return a.perms[name]
	}
	if u := a.Users[name]; u != nil {
		return a.mergePerms(u)
	}
	return nil
}

// index builds every user's merged permissions once, before the store is
// shared: checks then only read it.
func (a *Store) index() {
	perms := make(map[string]*userPerms, len(a.Users))
	for n, u := range a.Users {
		perms[n] = a.mergePerms(u)
	}
	a.perms = perms
}

func (a *Store) mergePerms(u *User) *userPerms {
	up := &userPerms{root: hasRole(u.User, rootRole)}
	for _, rn := range u.Roles {
		r := a.Roles[rn]
		if r == nil {
			continue
		}
		for _, p := range r.KeyPermission {
			s := permSpan(p.Key, p.RangeEnd)
			if p.PermType == authpb.Permission_READ || p.PermType == authpb.Permission_READWRITE {
				up.read = append(up.read, s)
			}
			if p.PermType == authpb.Permission_WRITE || p.PermType == authpb.Permission_READWRITE {
				up.write = append(up.write, s)
			}
		}
	}
	byBegin := func(x, y permRange) int { return bytes.Compare(x.begin, y.begin) }
	slices.SortFunc(up.read, byBegin)
	slices.SortFunc(up.write, byBegin)
	return up
}

// endCmp compares ends where nil is +∞.
func endCmp(x, y []byte) int {
	switch {
	case x == nil && y == nil:
		return 0
	case x == nil:
		return 1
	case y == nil:
		return -1
	}
	return bytes.Compare(x, y)
}

// covers reports whether the union of spans covers q, as etcd's
// interval tree Contains does: the spans meeting q, in order, leave no gap
// and reach from q's begin to its end.
func covers(spans []permRange, q permRange, knobs TestingKnobs) bool {
	var begin, reach []byte
	found := false
	for _, s := range spans {
		if knobs.OpenEndedAsKey && s.end == nil {
			s.end = append(bytes.Clone(s.begin), 0)
		}
		if (q.end != nil && bytes.Compare(s.begin, q.end) >= 0) || (s.end != nil && bytes.Compare(s.end, q.begin) <= 0) {
			continue // does not meet q
		}
		if !found {
			begin, reach, found = s.begin, s.end, true
			continue
		}
		if reach != nil && (bytes.Compare(reach, s.begin) < 0 || knobs.TouchingSpansLeaveGap && bytes.Equal(reach, s.begin)) {
			return false // a gap
		}
		if endCmp(s.end, reach) > 0 {
			reach = s.end
		}
	}
	return found && endCmp(reach, q.end) >= 0 && bytes.Compare(begin, q.begin) <= 0
}

// Check is etcd's permission check of one key or range for a request run
// as id: nil when auth is off or the user may.
func (a *Store) Check(id Identity, key, end []byte, write bool) error {
	if a == nil || !a.Enabled {
		return nil
	}
	if id.Revision == 0 {
		return ErrAuthUserEmpty
	}
	if id.Revision < a.Revision {
		return ErrAuthOldRevision
	}
	up := a.userPerms(id.User)
	if up == nil {
		return ErrAuthPermissionDenied
	}
	if up.root {
		return nil
	}
	spans := up.read
	if write {
		spans = up.write
	}
	var q permRange
	if len(end) == 0 {
		q = permRange{key, append(bytes.Clone(key), 0)}
	} else {
		q = permSpan(key, end)
	}
	if covers(spans, q, a.Testing) {
		return nil
	}
	return ErrAuthPermissionDenied
}

// CheckServed is etcd's last check of a read it serves outside raft (a
// range, a txn of ranges only), after the read: a token of another auth
// revision than the store's, newer as well as older, is
// ErrAuthOldRevision. Only a JWT can be newer (signed for another
// store with the same key).
func (a *Store) CheckServed(id Identity, op *pb.RequestOp) error {
	if a == nil || !a.Enabled || id.Revision == 0 || id.Revision == a.Revision {
		return nil
	}
	if op.GetRequestRange() != nil || op.GetRequestTxn() != nil && rangesOnly(op.GetRequestTxn()) {
		return ErrAuthOldRevision
	}
	return nil
}

// CheckRange is the whole check of a Range request run as id: read on
// its keys, then CheckServed.
func (a *Store) CheckRange(id Identity, r *pb.RangeRequest) error {
	if err := a.Check(id, r.Key, r.RangeEnd, false); err != nil {
		return err
	}
	return a.CheckServed(id, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}})
}

// CheckWrite is the whole check of a Put, DeleteRange or Txn run as id:
// CheckOp, then CheckServed (a txn of ranges only is served as a read).
func (a *Store) CheckWrite(id Identity, op *pb.RequestOp, leaseKeys func(int64) [][]byte) error {
	if err := a.CheckOp(id, op, leaseKeys); err != nil {
		return err
	}
	return a.CheckServed(id, op)
}

// rangesOnly is etcd's IsTxnReadonly.
func rangesOnly(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, o := range ops {
			if o.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// CheckAdmin is etcd's check that id may manage the cluster (the root
// role).
func (a *Store) CheckAdmin(id Identity) error {
	if a == nil || !a.Enabled {
		return nil
	}
	if id.User == "" {
		return ErrAuthUserEmpty
	}
	up := a.userPerms(id.User)
	switch {
	case up == nil:
		return ErrAuthUserNotFound
	case !up.root:
		return ErrAuthPermissionDenied
	}
	return nil
}

// CheckOp checks a request of the KV service as etcd does: a range
// needs read, a put or delete write (and read for prev_kv), a put with a
// lease write on every key already attached to it (leaseKeys), a compare
// read, each op of a txn and of its nested txns its own permission.
func (a *Store) CheckOp(id Identity, op *pb.RequestOp, leaseKeys func(int64) [][]byte) error {
	if a == nil || !a.Enabled {
		return nil
	}
	switch r := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		if r.RequestRange != nil {
			return a.Check(id, r.RequestRange.Key, r.RequestRange.RangeEnd, false)
		}
	case *pb.RequestOp_RequestPut:
		if r.RequestPut != nil {
			return a.checkPut(id, r.RequestPut, leaseKeys)
		}
	case *pb.RequestOp_RequestDeleteRange:
		if d := r.RequestDeleteRange; d != nil {
			if d.PrevKv {
				if err := a.Check(id, d.Key, d.RangeEnd, false); err != nil {
					return err
				}
			}
			return a.Check(id, d.Key, d.RangeEnd, true)
		}
	case *pb.RequestOp_RequestTxn:
		if t := r.RequestTxn; t != nil {
			for _, c := range t.Compare {
				if err := a.Check(id, c.Key, c.RangeEnd, false); err != nil {
					return err
				}
			}
			for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
				for _, o := range ops {
					if err := a.CheckOp(id, o, leaseKeys); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func (a *Store) checkPut(id Identity, r *pb.PutRequest, leaseKeys func(int64) [][]byte) error {
	if err := a.Check(id, r.Key, nil, true); err != nil {
		return err
	}
	if r.Lease != 0 {
		if err := a.CheckLeaseKeys(id, leaseKeys(r.Lease), true); err != nil {
			return err
		}
	}
	if r.PrevKv {
		return a.Check(id, r.Key, nil, false)
	}
	return nil
}

// CheckLeaseKeys checks the keys attached to a lease: write to revoke it
// or attach to it, read to list them (LeaseTimeToLive with keys); root
// may do both without a look.
func (a *Store) CheckLeaseKeys(id Identity, keys [][]byte, write bool) error {
	if a == nil || !a.Enabled || a.CheckAdmin(id) == nil {
		return nil
	}
	for _, k := range keys {
		if err := a.Check(id, k, nil, write); err != nil {
			return err
		}
	}
	return nil
}
