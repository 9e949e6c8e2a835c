package fsutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
)

func TestWrittenFromProcIO(t *testing.T) {
	root := t.TempDir()
	write := func(pid, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "io"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1", "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n")
	write("2", "rchar: 10\n")
	write("3", "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: lots\ncancelled_write_bytes: 0\n")
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := written(fs, 1); err != nil || got != 8192 {
		t.Fatalf("written = %d, %v; want 8192", got, err)
	}
	for _, bad := range []int{2, 3, 4} {
		if _, err := written(fs, bad); err == nil {
			t.Errorf("written of process %d: want an error", bad)
		}
	}
}

func TestWrittenOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	if _, err := Written(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
