package badger

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
// logs.
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
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("badger: advise logs: %w", err)
	}
	defer f.Close()
	seen := make(map[uint64]string, len(a.done))
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, path, ok := parseMapping(sc.Bytes())
		if !ok || filepath.Dir(path) != a.dir || !(filepath.Ext(path) == ".mem" || filepath.Ext(path) == ".vlog") {
			continue
		}
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
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("badger: advise logs: %w", err)
	}
	return n, nil
}

// parseMapping reads one line of /proc/self/maps:
// "start-end perms offset dev inode path".
func parseMapping(line []byte) (start, end uint64, path string, ok bool) {
	fields := bytes.Fields(line)
	if len(fields) < 6 {
		return 0, 0, "", false
	}
	lo, hi, found := bytes.Cut(fields[0], []byte("-"))
	if !found {
		return 0, 0, "", false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return 0, 0, "", false
	}
	// A path may contain spaces: it is the rest of the line.
	i := bytes.Index(line, fields[5])
	return start, end, string(line[i:]), true
}
