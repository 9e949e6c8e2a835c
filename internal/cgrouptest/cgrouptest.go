// Package cgrouptest makes memory-limited control groups for tests
// (package cgroup), skipping a test where that is impossible and
// removing the group when it ends.
package cgrouptest

import (
	"testing"

	"github.com/axon-kv/axon/internal/cgroup"
)

// New makes a cgroup limited to limit bytes and removes it when the test
// ends; it skips the test where that is impossible (not root, no memory
// controller).
func New(t testing.TB, limit int64) *cgroup.Group {
	t.Helper()
	g, err := cgroup.New("axon-test", limit)
	if err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Errorf("cgrouptest: %v", err)
		}
	})
	return g
}
