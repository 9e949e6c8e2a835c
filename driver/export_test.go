package driver

// Waiting is how many calls wait for a leader change (tests only).
func Waiting(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.leaderWaiters)
}

// Learn notes a commit point as a successful call does (tests only).
func Learn(d *Driver, rev int64) { d.learn(rev) }

// Lead runs a call through the driver's own callback loop over an
// Attempt, as LeaderAddr and ReadIndex do (tests only).
func Lead(d *Driver, local func(done func(Answer)), alive func() bool, done func(error)) {
	d.lead(func(_ string, done func(Answer)) { local(done) }, alive, done)
}
