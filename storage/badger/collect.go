package badger

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// collectRatio is the share of a value log file that must be garbage
// before a collection rewrites it.
const collectRatio = 0.5

// collectOne collects one value log file, as RunValueLogGC does, after
// reading ahead the file it will take (nextCollected).
//
// A collection reads its whole file, 16 MiB, through badger's mapping,
// which logAdvisor marks MADV_RANDOM for the log's writes: a file long
// since written is cold in the page cache, so each 4 KiB page is its own
// fault and its own synchronous read. Under the long churn in a 1 GiB
// cgroup those faults took 6–8 % of the server's CPU.
func (e *Engine) collectOne() error {
	if path, size, ok := nextCollected(e.dir, collectRatio); ok {
		readAhead(path, size)
	}
	return e.db.RunValueLogGC(collectRatio)
}

// discardFile is badger's record of each value log file's garbage:
// 16-byte slots, a file id then its discarded bytes, both big-endian,
// sorted by id and ended by a zero id (badger v4, discard.go).
const discardFile = "DISCARD"

// nextCollected guesses the value log file badger's next collection
// takes, as badger picks it: the file with the most discarded bytes
// (the lowest id of a tie) that still exists, if at least ratio of it
// is garbage. The guess only advises the kernel: read while badger
// sorts a slot, or from a badger whose format moved on, it costs one
// file's read, and TestNextCollectedIsBadgersPick holds it to badger.
func nextCollected(dir string, ratio float64) (path string, size int64, ok bool) {
	f, err := os.Open(filepath.Join(dir, discardFile))
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	type slot struct{ fid, discard uint64 }
	var slots []slot
	r := bufio.NewReaderSize(f, 64<<10)
	var b [16]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			break
		}
		s := slot{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
		if s.fid == 0 {
			break
		}
		if s.discard > 0 {
			slots = append(slots, s)
		}
	}
	slices.SortStableFunc(slots, func(a, b slot) int { return cmp.Compare(b.discard, a.discard) })
	for _, s := range slots {
		path := logPath(dir, s.fid)
		fi, err := os.Stat(path)
		if err != nil {
			continue // collected already: badger clears its slot and looks again
		}
		if float64(s.discard) < ratio*float64(fi.Size()) {
			return "", 0, false
		}
		return path, fi.Size(), true
	}
	return "", 0, false
}

// logPath is the path of a value log file by its id, as badger names it
// (the inverse of logID).
func logPath(dir string, fid uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%06d.vlog", fid))
}
