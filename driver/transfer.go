package driver

import (
	"fmt"

	"github.com/axon-kv/axon/core"
)

// Transfer hands the lead to member to, listening at addr
// (core.Member.Transfer: drain, then write the successor's record), and
// calls done once this member follows it, or with an error if it does
// not within the failover wait. It wakes on leader changes, not a poll.
func (d *Driver) Transfer(to, addr string, done func(error)) {
	var err error
	d.Step(func(m *core.Member) { err = m.Transfer(to, addr) }, nil)
	if err != nil {
		done(err)
		return
	}
	deadline := d.cfg.Clock.Now() + d.failoverWait()
	var check func()
	check = func() {
		var handed bool
		d.Step(func(m *core.Member) {
			rec, ok := m.Leader()
			handed = m.Role() == core.Follower && ok && rec.Holder == to
		}, nil)
		switch {
		case handed:
			done(nil)
		case d.cfg.Clock.Now() >= deadline:
			done(fmt.Errorf("axon: transfer to %s did not finish in %v", to, d.failoverWait()))
		default:
			d.AwaitLeader(check)
		}
	}
	check()
}
