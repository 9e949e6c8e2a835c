package fsutil

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// Written is what process pid has sent to the disk: write_bytes of
// /proc/<pid>/io, the page-cache pages it dirtied (again each time one is
// dirtied after being written back).
func Written(pid int) (int64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("read write_bytes: %w", err)
	}
	return written(fs, pid)
}

// written is Written from the proc filesystem fs.
func written(fs procfs.FS, pid int) (int64, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, fmt.Errorf("read write_bytes: %w", err)
	}
	io, err := p.IO()
	if err != nil {
		return 0, fmt.Errorf("read write_bytes of %d: %w", pid, err)
	}
	return int64(io.WriteBytes), nil
}
