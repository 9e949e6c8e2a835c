package fsutil

import (
	"os"
	"testing"
)

func TestParseWritten(t *testing.T) {
	io := "rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n"
	if got, err := parseWritten(io); err != nil || got != 8192 {
		t.Fatalf("parseWritten = %d, %v; want 8192", got, err)
	}
	for _, bad := range []string{"rchar: 10\n", "write_bytes: lots\n"} {
		if _, err := parseWritten(bad); err == nil {
			t.Errorf("parseWritten(%q): want an error", bad)
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
