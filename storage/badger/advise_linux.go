package badger

import (
	"fmt"
	"path/filepath"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// logAdvisor marks badger's memory-mapped logs (the memtables' .mem
// write-ahead logs and the .vlog value logs) MADV_RANDOM.
//
// Badger appends to its write-ahead log through a shared mapping and
// msyncs the whole mapping per commit. With the kernel's default advice a
// write fault reads ahead, and ext4 on recent kernels caches the file in
// large folios; msync then writes back every dirty folio whole. Measured
// here: an msync after a 1.2 KB append wrote 560 KB to the disk, 85 times
// what MADV_RANDOM (one 4 KiB page per fault) writes. Badger offers no
// hook for the advice, so the engine finds the mappings in
// /proc/self/maps and advises them itself, again as badger creates new
// logs. Kept for BenchmarkLogAdvice, which counts the bytes a commit
// sends to the disk with and without the advice: how many the advice
// saves depends on the kernel and the filesystem (large folios).
type logAdvisor struct {
	dir  string
	done map[uint64]string // mapping start → file advised
}

func newLogAdvisor(dir string) *logAdvisor {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return &logAdvisor{dir: filepath.Clean(abs), done: map[uint64]string{}}
}

// advise advises the logs mapped since the last call; it reports how many.
func (a *logAdvisor) advise() (int, error) {
	maps, err := selfMaps()
	if err != nil {
		return 0, fmt.Errorf("badger: advise logs: %w", err)
	}
	seen := make(map[uint64]string, len(a.done))
	n := 0
	for _, m := range maps {
		path := m.Pathname
		if filepath.Dir(path) != a.dir || !(filepath.Ext(path) == ".mem" || filepath.Ext(path) == ".vlog") {
			continue
		}
		start, end := uint64(m.StartAddr), uint64(m.EndAddr)
		seen[start] = path
		if a.done[start] == path {
			continue
		}
		if err := madvise(start, uintptr(end-start), unix.MADV_RANDOM); err != nil {
			return n, fmt.Errorf("badger: advise %s: %w", path, err)
		}
		n++
	}
	a.done = seen // forget unmapped logs, whose addresses may be reused
	return n, nil
}

// selfMaps reads this process's mappings from /proc/self/maps. procfs
// joins a path's words with single spaces: a data directory whose name
// holds a run of spaces is not recognized, and its files go unadvised.
func selfMaps() ([]*procfs.ProcMap, error) {
	p, err := procfs.Self()
	if err != nil {
		return nil, err
	}
	return p.ProcMaps()
}
