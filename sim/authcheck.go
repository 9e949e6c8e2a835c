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
// makes: a user's roles are a set; a role's permissions are a list kept
// in key order, changed as grantIn and a revoke say. It shares no code
// with core.
type authModel struct {
	roles map[string][]grant
	users map[string]map[string]bool
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
	for r, ps := range m.roles {
		c.roles[r] = slices.Clone(ps)
	}
	for u, rs := range m.users {
		c.users[u] = maps.Clone(rs)
	}
	return c
}

func (m *authModel) apply(ch auth.Change) {
	switch r := ch.(type) {
	case *pb.AuthUserAddRequest:
		m.users[r.Name] = map[string]bool{}
	case *pb.AuthRoleAddRequest:
		m.roles[r.Name] = []grant{}
	case *pb.AuthUserGrantRoleRequest:
		if m.users[r.User] != nil {
			m.users[r.User][r.Role] = true
		}
	case *pb.AuthUserRevokeRoleRequest:
		delete(m.users[r.Name], r.Role)
	case *pb.AuthRoleGrantPermissionRequest:
		if ps, ok := m.roles[r.Name]; ok {
			m.roles[r.Name] = grantIn(ps, grant{permKey{string(r.Perm.Key), string(r.Perm.RangeEnd)}, r.Perm.PermType})
		}
	case *pb.AuthRoleRevokePermissionRequest:
		p := permKey{string(r.Key), string(r.RangeEnd)}
		m.roles[r.Role] = slices.DeleteFunc(m.roles[r.Role], func(g grant) bool { return g.permKey == p })
	}
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
// the key alone.
type need struct {
	key, end string
	write    bool
}

// allows reports whether user may do everything needs lists: the root
// role may do all; otherwise each need lies in the union of the
// permissions of the right type of the user's roles.
func (m *authModel) allows(user string, needs []need) bool {
	if m.users[user]["root"] {
		return true
	}
	for _, n := range needs {
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
// too, which other clients change).
func needs(in input) ([]need, bool) {
	switch in.kind {
	case opRange:
		return []need{{key: string(in.rng.Key), end: string(in.rng.RangeEnd)}}, true
	case opWrite:
		var ns []need
		return ns, opNeeds(in.write, &ns)
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
// there for that). Every acknowledged change must have applied, the
// applied ones must make a chain of Seqs without gaps, and the last store
// of the model must be the engine's.
func (w *World) checkAuth(res *Result) error {
	if !w.plan.Auth {
		return nil
	}
	chain, err := w.authChain()
	if err != nil {
		return err
	}
	res.authChanges = len(chain.models) - 1
	for _, cl := range w.hist.calls {
		if cl.user == "" || cl.user == authRoot {
			continue
		}
		ns, ok := needs(cl.in)
		if !ok {
			continue
		}
		allowed, by, ok := authDecision(cl)
		if !ok {
			continue
		}
		lo, hi := 0, 0
		for i := range chain.models {
			if chain.known[i] >= 0 && chain.known[i] < cl.start {
				lo = i
			}
			if chain.from[i] <= by {
				hi = i
			}
		}
		hi = max(hi, lo)
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
		m.apply(ch)
	}
	chain := &authChain{seq0: w.authSeq0, models: []*authModel{m}, from: []time.Duration{0}, known: []time.Duration{0}, change: []auth.Change{nil}}
	for s := w.authSeq0 + 1; s <= final.Seq; s++ {
		a, ok := applied[s]
		if !ok {
			return nil, fmt.Errorf("auth: the engine's store is at seq %d, but no change applied seq %d", final.Seq, s)
		}
		m = m.clone()
		m.apply(a.call.in.auth)
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
		if n.write {
			op = "write"
		}
		parts[i] = op + " " + describePerm(n.key, n.end)
	}
	return strings.Join(parts, ", ")
}
