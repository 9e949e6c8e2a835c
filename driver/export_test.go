package driver

// Waiting is how many calls wait for a leader change (tests only).
func Waiting(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.leaderWaiters)
}

// Learn notes a commit point as a successful call does (tests only).
func Learn(d *Driver, rev int64) { d.learn(rev) }
