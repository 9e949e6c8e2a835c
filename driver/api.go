package driver

import (
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/axon-kv/axon/core"
)

// The driver's typed API: what a host asks of the member, so that no
// host reaches into core.Node. A request runs on the leader's node and
// calls answer once its response is final (or with ErrLeaderChanged if
// the lead is lost first); it returns the request's ID, 0 if this member
// does not lead, and then answer is never called. A query reports what
// the leader's node knows, and ok false on a follower.

// Write runs a put, delete or txn.
func (d *Driver) Write(op *pb.RequestOp, answer func(core.Response)) core.RequestID {
	return d.propose(func(n *core.Node, id core.RequestID) { n.Propose(id, op) }, answer)
}

// Grant grants a lease (id 0: the node picks one).
func (d *Driver) Grant(lease, ttl int64, answer func(core.Response)) core.RequestID {
	return d.propose(func(n *core.Node, id core.RequestID) { n.Grant(id, lease, ttl) }, answer)
}

// Revoke revokes a lease.
func (d *Driver) Revoke(lease int64, answer func(core.Response)) core.RequestID {
	return d.propose(func(n *core.Node, id core.RequestID) { n.Revoke(id, lease) }, answer)
}

// Compact compacts the history below rev.
func (d *Driver) Compact(rev int64, answer func(core.Response)) core.RequestID {
	return d.propose(func(n *core.Node, id core.RequestID) { n.Compact(id, rev) }, answer)
}

// AwaitSweep answers once the sweep of the compaction at rev is done
// (etcd's physical compaction).
func (d *Driver) AwaitSweep(rev int64, answer func(core.Response)) core.RequestID {
	return d.propose(func(n *core.Node, id core.RequestID) { n.AwaitSweep(id, rev) }, answer)
}

// SetAlarm raises or clears an alarm of a member (core.AnyMember: the
// NOSPACE alarm of the cluster).
func (d *Driver) SetAlarm(member uint64, on bool, answer func(core.Response)) core.RequestID {
	return d.propose(func(n *core.Node, id core.RequestID) { n.SetAlarm(id, member, on) }, answer)
}

// KeepAlive renews a lease: its answer is the lease's new TTL, or an
// error once the node knows it (a lease whose expiry is in flight is
// answered when the expiry commits).
func (d *Driver) KeepAlive(lease int64, answer func(core.Response)) core.RequestID {
	var (
		gone *core.Response
		id   core.RequestID
	)
	d.Step(nil, func(n *core.Node) {
		now := d.cfg.Clock.Now()
		d.nextID++
		id = d.nextID
		if d.cfg.Testing.EarlyLeaseGone {
			if _, err := n.TimeToLive(lease, now); err != nil {
				gone = &core.Response{ID: id, Lease: lease, Rev: n.Committed(), Err: err}
				return
			}
		}
		d.waiters[id] = answer
		n.KeepAlive(id, lease, now)
	})
	if gone != nil {
		answer(*gone)
	}
	return id
}

// Leading reports whether this member leads now (it ticks the member
// first).
func (d *Driver) Leading() bool { return d.Step(nil, nil) }

// Refresh makes the member read the election record now (a handover
// reached it).
func (d *Driver) Refresh() { d.Step(func(m *core.Member) { m.Refresh() }, nil) }

// SetAddr sets where other instances reach this member.
func (d *Driver) SetAddr(addr string) { d.Step(func(m *core.Member) { m.SetAddr(addr) }, nil) }

// Committed is the commit point: the node's, or on a follower the last
// one learned from the leader.
func (d *Driver) Committed() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.committed()
}

// TimeToLive answers etcd's LeaseTimeToLive on the leader, with the
// commit point (the host sets the header): a missing lease is TTL -1, the
// remaining time whole seconds, the keys only if asked for.
func (d *Driver) TimeToLive(lease int64, keys bool) (resp *pb.LeaseTimeToLiveResponse, rev int64, ok bool, err error) {
	var info core.LeaseInfo
	ok = d.Step(nil, func(n *core.Node) {
		info, err = n.TimeToLive(lease, d.cfg.Clock.Now())
		rev = n.Committed()
	})
	switch {
	case !ok:
		return nil, 0, false, nil
	case errors.Is(err, core.ErrLeaseNotFound):
		return &pb.LeaseTimeToLiveResponse{ID: lease, TTL: -1}, rev, true, nil
	case err != nil:
		return nil, rev, true, err
	}
	resp = &pb.LeaseTimeToLiveResponse{ID: lease, TTL: int64(info.Remaining.Seconds()), GrantedTTL: info.GrantedTTL}
	if keys {
		resp.Keys = info.Keys
	}
	return resp, rev, true, nil
}

// Leases lists the leases, with the commit point.
func (d *Driver) Leases() (ids []int64, rev int64, ok bool) {
	ok = d.Step(nil, func(n *core.Node) { ids, rev = n.Leases(), n.Committed() })
	return ids, rev, ok
}

// LeasedKeys lists the keys attached to any lease.
func (d *Driver) LeasedKeys() (keys [][]byte) {
	d.Step(nil, func(n *core.Node) {
		now := d.cfg.Clock.Now()
		for _, l := range n.Leases() {
			if info, err := n.TimeToLive(l, now); err == nil {
				keys = append(keys, info.Keys...)
			}
		}
	})
	return keys
}

// Alarmed lists the members with an alarm raised.
func (d *Driver) Alarmed() (members []uint64, ok bool) {
	ok = d.Step(nil, func(n *core.Node) { members = n.Alarmed() })
	return members, ok
}

// NoSpace reports whether the NOSPACE alarm is raised.
func (d *Driver) NoSpace() (on, ok bool) {
	ok = d.Step(nil, func(n *core.Node) { on = n.NoSpace() })
	return on, ok
}

// Status is what the member knows of itself, for metrics and logs.
type Status struct {
	Leading              bool
	Committed, Compacted int64 // Committed: the learned one on a follower
	InFlight             int
	Leases               int
	Stats                core.Stats
	Term                 int64
	Leader               core.ElectionRecord
	HasLeader            bool
	Describe             string // core.DescribeMember
}

// Status reports the member's status, ticked to now.
func (d *Driver) Status() Status {
	var st Status
	d.Step(func(m *core.Member) {
		st = Status{Term: m.Term(), Committed: d.committed(), Describe: core.DescribeMember(m)}
		st.Leader, st.HasLeader = m.Leader()
		if n := m.Node(); n != nil {
			st.Leading, st.Compacted, st.InFlight, st.Stats = true, n.Compacted(), n.InFlight(), n.Stats()
			st.Leases = len(n.Leases())
		}
	}, nil)
	return st
}

// committed is the commit point: the node's, or on a follower the last
// one learned from the leader. Called with the lock held.
func (d *Driver) committed() int64 {
	if n := d.m.Node(); n != nil {
		return n.Committed()
	}
	return d.Known()
}
