package sim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
	"github.com/axon-kv/axon/storage"
	"github.com/axon-kv/axon/storage/memkv"
)

// authModel is the checker's own model of the auth store, written from
// etcd's documentation and etcd 3.7's behaviour for the changes the admin
// makes: whether auth is on; a user's roles are a set; a role's
// permissions are a list kept in key order, changed as grantIn and a
// revoke say; a deleted role leaves every user. It shares no code with
// core.
type authModel struct {
	enabled bool
	roles   map[string][]grant
	users   map[string]map[string]bool
}

// grant is one permission of a role: a range and its type.
type grant struct {
	permKey
	t authpb.Permission_Type
}

func newAuthModel() *authModel {
	return &authModel{roles: map[string][]grant{}, users: map[string]map[string]bool{}}
}

func (m *authModel) clone() *authModel {
	c := newAuthModel()
	c.enabled = m.enabled
	for r, ps := range m.roles {
		c.roles[r] = slices.Clone(ps)
	}
	for u, rs := range m.users {
		c.users[u] = maps.Clone(rs)
	}
	return c
}

// apply applies a change as etcd 3.7 does, with etcd's refusals (its
// errors, in the order it checks them); changed is false for a change
// etcd accepts and ignores (enabling twice, granting a role twice). m
// changes only when changed.
func (m *authModel) apply(ch auth.Change) (changed bool, err error) {
	switch r := ch.(type) {
	case *pb.AuthEnableRequest:
		switch {
		case m.enabled:
			return false, nil
		case m.users[authRoot] == nil:
			return false, auth.ErrAuthRootUserNotExist
		case !m.users[authRoot]["root"]:
			return false, auth.ErrAuthRootRoleNotExist
		}
		m.enabled = true
	case *pb.AuthDisableRequest:
		if !m.enabled {
			return false, nil
		}
		m.enabled = false
	case *pb.AuthUserAddRequest:
		switch {
		case r.Name == "":
			return false, auth.ErrAuthUserEmpty
		case m.users[r.Name] != nil:
			return false, auth.ErrAuthUserAlreadyExist
		}
		m.users[r.Name] = map[string]bool{}
	case *pb.AuthUserDeleteRequest:
		switch {
		case m.enabled && r.Name == authRoot:
			return false, auth.ErrAuthInvalidMgmt
		case m.users[r.Name] == nil:
			return false, auth.ErrAuthUserNotFound
		}
		delete(m.users, r.Name)
	case *pb.AuthUserChangePasswordRequest:
		if m.users[r.Name] == nil {
			return false, auth.ErrAuthUserNotFound
		}
	case *pb.AuthRoleAddRequest:
		switch {
		case r.Name == "":
			return false, auth.ErrAuthRoleEmpty
		case m.roles[r.Name] != nil:
			return false, auth.ErrAuthRoleAlreadyExist
		}
		m.roles[r.Name] = []grant{}
	case *pb.AuthRoleDeleteRequest:
		switch {
		case m.enabled && r.Role == "root":
			return false, auth.ErrAuthInvalidMgmt
		case m.roles[r.Role] == nil:
			return false, auth.ErrAuthRoleNotFound
		}
		delete(m.roles, r.Role)
		for _, rs := range m.users {
			delete(rs, r.Role)
		}
	case *pb.AuthUserGrantRoleRequest:
		switch {
		case m.users[r.User] == nil:
			return false, auth.ErrAuthUserNotFound
		case r.Role != "root" && m.roles[r.Role] == nil:
			return false, auth.ErrAuthRoleNotFound
		case m.users[r.User][r.Role]:
			return false, nil
		}
		m.users[r.User][r.Role] = true
	case *pb.AuthUserRevokeRoleRequest:
		switch {
		case m.enabled && r.Name == authRoot && r.Role == "root":
			return false, auth.ErrAuthInvalidMgmt
		case m.users[r.Name] == nil:
			return false, auth.ErrAuthUserNotFound
		case !m.users[r.Name][r.Role]:
			return false, auth.ErrAuthRoleNotGranted
		}
		delete(m.users[r.Name], r.Role)
	case *pb.AuthRoleGrantPermissionRequest:
		switch {
		case r.Perm == nil:
			return false, auth.ErrAuthPermissionNotGiven
		case !validRange(string(r.Perm.Key), string(r.Perm.RangeEnd)):
			return false, auth.ErrAuthInvalidMgmt
		case m.roles[r.Name] == nil:
			return false, auth.ErrAuthRoleNotFound
		}
		m.roles[r.Name] = grantIn(m.roles[r.Name], grant{permKey{string(r.Perm.Key), string(r.Perm.RangeEnd)}, r.Perm.PermType})
	case *pb.AuthRoleRevokePermissionRequest:
		p := permKey{string(r.Key), string(r.RangeEnd)}
		ps, ok := m.roles[r.Role]
		switch {
		case !ok:
			return false, auth.ErrAuthRoleNotFound
		case !slices.ContainsFunc(ps, func(g grant) bool { return g.permKey == p }):
			return false, auth.ErrAuthPermissionNotGranted
		}
		m.roles[r.Role] = slices.DeleteFunc(ps, func(g grant) bool { return g.permKey == p })
	default:
		return false, auth.ErrAuthInvalidMgmt
	}
	return true, nil
}

// answers reports what the store m answers ch: its error, or whether it
// changes anything.
func (m *authModel) answers(ch auth.Change) (changed bool, err error) {
	return m.clone().apply(ch)
}

// validRange is etcd's rule for a permission's range: a key, and an end
// that is empty (the key alone), "\x00" (from the key on) or above it.
func validRange(key, end string) bool {
	return key != "" && (end == "" || end == "\x00" || key < end)
}

// grantIn is etcd 3.7's RoleGrantPermission: the permission at or after
// g's key in key order takes g's type if it names g's range; otherwise g
// goes in after the permissions of its key. So with two ranges from one
// key (a point and a range from it), a grant of the second one adds a
// copy of it rather than change it, and the copy of either type counts.
func grantIn(ps []grant, g grant) []grant {
	i, _ := slices.BinarySearchFunc(ps, g.key, func(x grant, k string) int { return strings.Compare(x.key, k) })
	if i < len(ps) && ps[i].permKey == g.permKey {
		ps[i].t = g.t
		return ps
	}
	ps = append(ps, g)
	slices.SortStableFunc(ps, func(x, y grant) int { return strings.Compare(x.key, y.key) })
	return ps
}

// need is a range a request reads or writes: [key, end), end empty for
// the key alone; or, admin, the root role.
type need struct {
	key, end string
	write    bool
	admin    bool
}

// allows reports whether user may do everything needs lists: all, while
// auth is off; the root role may do all; otherwise each need lies in the
// union of the permissions of the right type of the user's roles (a
// deleted user has none).
func (m *authModel) allows(user string, needs []need) bool {
	if !m.enabled || m.users[user]["root"] {
		return true
	}
	for _, n := range needs {
		if n.admin {
			return false
		}
		var held []span
		for role := range m.users[user] {
			for _, g := range m.roles[role] {
				if g.t == authpb.READWRITE || (g.t == authpb.WRITE) == n.write {
					held = append(held, spanOf(g.key, g.end))
				}
			}
		}
		if !unionHolds(held, spanOf(n.key, n.end)) {
			return false
		}
	}
	return true
}

// span is a key interval [from, to); to is endless past every key.
type span struct{ from, to string }

// endless sorts after every key of the simulation (ASCII paths).
const endless = "\xff"

// spanOf is etcd's range (key, end): an empty end is the key alone,
// "\x00" every key from key on.
func spanOf(key, end string) span {
	switch end {
	case "":
		return span{key, key + "\x00"}
	case "\x00":
		return span{key, endless}
	}
	return span{key, end}
}

// unionHolds reports whether the spans together hold all of want. It cuts
// want at every span's bounds inside it and asks, piece by piece, whether
// one span holds the piece: no merging of spans.
func unionHolds(spans []span, want span) bool {
	cuts := []string{want.from, want.to}
	for _, s := range spans {
		for _, c := range []string{s.from, s.to} {
			if c > want.from && c < want.to {
				cuts = append(cuts, c)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		if !slices.ContainsFunc(spans, func(s span) bool { return s.from <= lo && hi <= s.to }) {
			return false
		}
	}
	return true
}

// needs lists what a call must be allowed, or false when the history
// does not say (a put attaching a lease needs write on the lease's keys
// too, which other clients change; see revokeNeeds for a revoke).
func needs(in input) ([]need, bool) {
	switch in.kind {
	case opRange:
		return []need{{key: string(in.rng.Key), end: string(in.rng.RangeEnd)}}, true
	case opWrite:
		var ns []need
		return ns, opNeeds(in.write, &ns)
	case opCompact:
		return []need{{admin: true}}, true
	}
	return nil, false
}

func opNeeds(op *pb.RequestOp, ns *[]need) bool {
	switch r := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		*ns = append(*ns, need{key: string(r.RequestRange.Key), end: string(r.RequestRange.RangeEnd)})
	case *pb.RequestOp_RequestPut:
		p := r.RequestPut
		*ns = append(*ns, need{key: string(p.Key), write: true})
		if p.PrevKv {
			*ns = append(*ns, need{key: string(p.Key)})
		}
		return p.Lease == 0
	case *pb.RequestOp_RequestDeleteRange:
		d := r.RequestDeleteRange
		*ns = append(*ns, need{key: string(d.Key), end: string(d.RangeEnd), write: true})
		if d.PrevKv {
			*ns = append(*ns, need{key: string(d.Key), end: string(d.RangeEnd)})
		}
	case *pb.RequestOp_RequestTxn:
		for _, c := range r.RequestTxn.Compare {
			*ns = append(*ns, need{key: string(c.Key), end: string(c.RangeEnd)})
		}
		for _, o := range slices.Concat(r.RequestTxn.Success, r.RequestTxn.Failure) {
			if !opNeeds(o, ns) {
				return false
			}
		}
	}
	return true
}

// revokeNeeds bounds what a lease's revoke needed: write on the keys
// attached to the lease when it was checked, which the history tells
// only in part. A denial is held to the keys any put tried to attach (a
// store that let the user write them all would have allowed it). A
// revoke that was allowed and found the lease (answered without error,
// at revision r) is held to the keys surely attached when it was
// checked, before it applied: each one an acknowledged plain put attached
// before the revoke started, at revision p, and no event changed from p
// to the revoke's own (changed: each key's event revisions, in order).
func revokeNeeds(cl *call, allowed bool, attached map[int64][]leasePut, changed map[string][]int64) ([]need, bool) {
	var ns []need
	for _, lp := range attached[cl.in.lease] {
		p, key := lp.call, string(lp.key)
		if !allowed {
			ns = append(ns, need{key: key, write: true})
			continue
		}
		if cl.status != answered || cl.err != nil || p.in.write.GetRequestPut() == nil || p.status != answered || p.err != nil || p.end >= cl.start {
			continue
		}
		last := cl.rev // the events at the revoke's own revision are its own
		if cl.wrote {
			last--
		}
		revs := changed[key]
		i, found := slices.BinarySearch(revs, p.rev)
		if found && (i+1 == len(revs) || revs[i+1] > last) {
			ns = append(ns, need{key: key, write: true})
		}
	}
	return ns, true
}

// keyChanges lists each key's event revisions, in order.
func keyChanges(evs []core.Event) map[string][]int64 {
	revs := map[string][]int64{}
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		revs[k] = append(revs[k], ev.Rev)
	}
	for _, rs := range revs {
		slices.Sort(rs)
	}
	return revs
}

// leasePut is a put that named a lease: its call and key.
type leasePut struct {
	call *call
	key  []byte
}

// leasePuts lists, per lease, the calls that tried to attach a key to
// it (a put naming it, maybe in a txn), whatever became of them.
func (w *World) leasePuts() map[int64][]leasePut {
	puts := map[int64][]leasePut{}
	var walk func(cl *call, op *pb.RequestOp)
	walk = func(cl *call, op *pb.RequestOp) {
		if p := op.GetRequestPut(); p != nil && p.Lease != 0 {
			puts[p.Lease] = append(puts[p.Lease], leasePut{cl, p.Key})
		}
		if t := op.GetRequestTxn(); t != nil {
			for _, o := range slices.Concat(t.Success, t.Failure) {
				walk(cl, o)
			}
		}
	}
	for _, cl := range w.hist.calls {
		if cl.in.kind == opWrite {
			walk(cl, cl.in.write)
		}
	}
	return puts
}

// authDecision is what a call shows of its permission check: allowed or
// denied, and by when it was decided; ok is false if it shows nothing
// (it failed or was abandoned before it could tell).
func authDecision(cl *call) (allowed bool, by time.Duration, ok bool) {
	switch {
	case cl.patched != nil:
		return true, cl.patched.by, true // it applied
	case cl.status != answered:
		return false, 0, false
	case errors.Is(cl.err, auth.ErrAuthPermissionDenied):
		return false, cl.end, true
	case cl.in.kind == opCompact && errors.Is(cl.err, auth.ErrAuthUserNotFound):
		return false, cl.end, true // etcd's answer to a deleted user's
	case cl.err == nil, isEtcdError(cl.err):
		return true, cl.end, true
	}
	return false, 0, false
}

// authChain is the auth store's history: the model after each applied
// change, by Seq, with when each change may first have been seen and
// from when every check must see it.
type authChain struct {
	seq0   uint64
	models []*authModel    // models[i]: at Seq seq0+i
	from   []time.Duration // from[i]: the commit call of Seq seq0+i
	known  []time.Duration // known[i]: see authAttempt.known (-1: never)
	change []auth.Change   // change[i]: what made Seq seq0+i
	// applied: the admin's calls whose change the engine applied.
	applied map[*call]bool
}

// window is the range of stores a decision may have seen: from the
// newest change known before start to the newest committed by by.
func (c *authChain) window(start, by time.Duration) (lo, hi int) {
	for i := range c.models {
		if c.known[i] >= 0 && c.known[i] < start {
			lo = i
		}
		if c.from[i] <= by {
			hi = i
		}
	}
	return lo, max(hi, lo)
}

// checkAuth holds every permission check to the auth store's history: a
// request was allowed, or denied, by some store from the newest change
// known before it started to the newest change committed before it was
// decided. A change is known once it surely applied and its leader heard
// its commit's answer: an acknowledged one before its client heard, an
// uncertain one that applied whether or not its client ever did. The store
// is one: once a revoke has taken effect and its leader knows the commit
// ended, no instance may serve a request that starts later with the store
// from before it (the leader's distrust window after a failed change is
// there for that). While auth is off every request is allowed; a
// compaction needs the root role; a lease's revoke is judged as far as
// the history tells its keys (revokeNeeds). Every acknowledged change must
// have applied, each applied one must be one etcd applies to the store
// before it, the applied ones must make a chain of Seqs without gaps, the
// last store of the model must be the engine's, and a change that did
// not apply must have been answered as etcd would have (checkAnswer).
func (w *World) checkAuth(res *Result, evs []core.Event) error {
	if !w.plan.Auth {
		return nil
	}
	chain, err := w.authChain()
	if err != nil {
		return err
	}
	res.authChanges = len(chain.models) - 1
	attached, changed := w.leasePuts(), keyChanges(evs)
	for _, cl := range w.hist.calls {
		if cl.in.kind == opAuth {
			if err := chain.checkAnswer(cl); err != nil {
				return err
			}
			continue
		}
		if cl.user == "" || cl.user == authRoot {
			continue
		}
		ns, ok := needs(cl.in)
		allowed, by, decided := authDecision(cl)
		if cl.in.kind == opRevoke {
			ns, ok = revokeNeeds(cl, allowed, attached, changed)
		}
		if !ok || !decided {
			continue
		}
		lo, hi := chain.window(cl.start, by)
		fits := false
		for i := lo; i <= hi && !fits; i++ {
			fits = chain.models[i].allows(cl.user, ns) == allowed
		}
		if allowed {
			res.authJudged[0]++
		} else {
			res.authJudged[1]++
		}
		if !fits {
			verdict := "allowed"
			if !allowed {
				verdict = "denied"
			}
			return fmt.Errorf("auth: c%d op%d as %s (%s) was %s, but no auth store from seq %d (known before it started at %v) to seq %d (committed before %v) would have: %s",
				cl.client.idx, cl.id, cl.user, describeNeeds(ns), verdict, chain.seq0+uint64(lo), cl.start, chain.seq0+uint64(hi), by, chain.describe(lo, hi))
		}
	}
	return nil
}

// checkAnswer holds the admin's answer to a change that did not apply
// to etcd's: a refusal (with etcd's error) or an accepted change that
// changes nothing, by some store of the call's window.
func (c *authChain) checkAnswer(cl *call) error {
	if cl.status != answered || c.applied[cl] {
		return nil
	}
	lo, hi := c.window(cl.start, cl.end)
	for i := lo; i <= hi; i++ {
		changed, err := c.models[i].answers(cl.in.auth)
		if errors.Is(cl.err, err) && (err != nil || !changed) {
			return nil
		}
	}
	return fmt.Errorf("auth: c%d op%d %s was answered %v (not applied), but no auth store from seq %d to seq %d would have: %s",
		cl.client.idx, cl.id, describeAuthChange(cl.in.auth), cl.err, c.seq0+uint64(lo), c.seq0+uint64(hi), c.describe(lo, hi))
}

// authChain resolves the admin's changes against the engine: an attempt
// applied if the engine applied its transaction.
func (w *World) authChain() (*authChain, error) {
	applied := map[uint64]authAttempt{}
	appliedBy := map[*call]bool{}
	for _, a := range w.authAttempts {
		if a.txn.Outcome() != memkv.Applied {
			continue
		}
		if prev, dup := applied[a.seq]; dup {
			return nil, fmt.Errorf("auth: seq %d written twice, by op%d and op%d", a.seq, prev.call.id, a.call.id)
		}
		applied[a.seq] = a
		appliedBy[a.call] = true
	}
	for _, a := range w.authAttempts {
		cl := a.call
		if cl.status == answered && cl.err == nil && !appliedBy[cl] {
			return nil, fmt.Errorf("auth: lost change: op%d (%s) acknowledged, not applied", cl.id, describeAuthChange(cl.in.auth))
		}
	}
	var final *auth.Store
	err := w.final(func(rd storage.Reader, _ core.State) (err error) {
		final, err = auth.ReadAuth(rd)
		return err
	})
	if err != nil || final == nil {
		return nil, fmt.Errorf("auth: reading the final store: %v %w", final, err)
	}
	m := newAuthModel()
	for _, ch := range authSetup() {
		if _, err := m.apply(ch); err != nil {
			return nil, fmt.Errorf("auth: the model refuses the setup's %s: %w", describeAuthChange(ch), err)
		}
	}
	chain := &authChain{seq0: w.authSeq0, models: []*authModel{m}, from: []time.Duration{0}, known: []time.Duration{0}, change: []auth.Change{nil}, applied: appliedBy}
	for s := w.authSeq0 + 1; s <= final.Seq; s++ {
		a, ok := applied[s]
		if !ok {
			return nil, fmt.Errorf("auth: the engine's store is at seq %d, but no change applied seq %d", final.Seq, s)
		}
		m = m.clone()
		if changed, err := m.apply(a.call.in.auth); err != nil || !changed {
			return nil, fmt.Errorf("auth: op%d %s applied seq %d, but etcd answers it %v (changed %v) at seq %d: %s",
				a.call.id, describeAuthChange(a.call.in.auth), s, err, changed, s-1, chain.describe(len(chain.models)-1, len(chain.models)-1))
		}
		chain.models = append(chain.models, m)
		chain.from = append(chain.from, a.at)
		chain.known = append(chain.known, a.known)
		chain.change = append(chain.change, a.call.in.auth)
	}
	if uint64(len(applied)) != final.Seq-w.authSeq0 {
		return nil, fmt.Errorf("auth: %d changes applied, but the engine's store is at seq %d of %d", len(applied), final.Seq, w.authSeq0)
	}
	if got, want := describeStore(final), m.describe(); got != want {
		return nil, fmt.Errorf("auth: the engine's final store is %s, its changes make %s", got, want)
	}
	return chain, nil
}

// describe lists the changes of Seqs lo+1..hi, and the store at lo.
func (c *authChain) describe(lo, hi int) string {
	parts := []string{fmt.Sprintf("at seq %d %s", c.seq0+uint64(lo), c.models[lo].describe())}
	for i := lo + 1; i <= hi; i++ {
		parts = append(parts, fmt.Sprintf("seq %d %s", c.seq0+uint64(i), describeAuthChange(c.change[i])))
	}
	for i := hi + 1; i < len(c.models) && i <= hi+2; i++ {
		parts = append(parts, fmt.Sprintf("then seq %d %s (committed at %v)", c.seq0+uint64(i), describeAuthChange(c.change[i]), c.from[i]))
	}
	return strings.Join(parts, "; ")
}

// describe renders the model's users and roles, sorted.
func (m *authModel) describe() string {
	var b strings.Builder
	if !m.enabled {
		b.WriteString("(auth disabled) ")
	}
	for _, u := range slices.Sorted(maps.Keys(m.users)) {
		fmt.Fprintf(&b, "%s%v ", u, slices.Sorted(maps.Keys(m.users[u])))
	}
	for _, r := range slices.Sorted(maps.Keys(m.roles)) {
		fmt.Fprintf(&b, "%s{", r)
		for _, g := range m.roles[r] {
			fmt.Fprintf(&b, "%s:%s ", describePerm(g.key, g.end), g.t)
		}
		b.WriteString("} ")
	}
	return strings.TrimSpace(b.String())
}

// describeStore renders an engine's store as the model's describe does.
func describeStore(st *auth.Store) string {
	m := newAuthModel()
	m.enabled = st.Enabled
	users, roles := st.ExportAuth()
	for _, u := range users {
		m.users[string(u.Name)] = map[string]bool{}
		for _, r := range u.Roles {
			m.users[string(u.Name)][r] = true
		}
	}
	for _, r := range roles {
		m.roles[string(r.Name)] = []grant{}
		for _, p := range r.KeyPermission {
			m.roles[string(r.Name)] = append(m.roles[string(r.Name)], grant{permKey{string(p.Key), string(p.RangeEnd)}, p.PermType})
		}
	}
	return m.describe()
}

func describeNeeds(ns []need) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		op := "read"
		switch {
		case n.admin:
			parts[i] = "the root role"
			continue
		case n.write:
			op = "write"
		}
		parts[i] = op + " " + describePerm(n.key, n.end)
	}
	return strings.Join(parts, ", ")
}
