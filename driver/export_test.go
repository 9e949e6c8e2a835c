package driver

// Waiting is how many calls wait for a leader change (tests only).
func Waiting(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.leaderWaiters)
}
