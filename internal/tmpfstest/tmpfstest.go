// Package tmpfstest mounts small tmpfs filesystems for tests that fill a
// disk. Mounting needs root (CI runs as root); elsewhere the tests skip.
package tmpfstest

import (
	"os"
	"os/exec"
	"testing"
)

// Mount mounts a tmpfs of size (mount's syntax, e.g. "96m") on a new
// temporary directory, unmounted when the test ends, and returns the
// directory. It skips the test when not root or when the mount fails.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}
