package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// measureFsync times n synchronous 4 KiB writes in dir, each an
// overwrite followed by fdatasync, as a write-ahead log's commit is: what
// the disk under both systems costs per commit, printed with the table
// because the ratios move with it.
func measureFsync(dir string, n int) (FsyncLatency, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return FsyncLatency{}, fmt.Errorf("fsync probe: %w", err)
	}
	path := filepath.Join(dir, "fsync-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return FsyncLatency{}, fmt.Errorf("fsync probe: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	block := make([]byte, 4096)
	samples := make([]time.Duration, 0, n)
	for i := range n + 1 {
		block[0] = byte(i)
		start := time.Now()
		if _, err := f.WriteAt(block, 0); err != nil {
			return FsyncLatency{}, fmt.Errorf("fsync probe: %w", err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return FsyncLatency{}, fmt.Errorf("fsync probe: %w", err)
		}
		if i > 0 { // the first allocates the block
			samples = append(samples, time.Since(start))
		}
	}
	p50, p99 := p50p99(samples)
	return FsyncLatency{Samples: n, P50Ms: p50, P99Ms: p99}, nil
}
