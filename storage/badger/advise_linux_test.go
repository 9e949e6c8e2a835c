package badger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/axon-kv/axon/internal/fsutil"
)

// writeBytes is what this process has sent to the disk.
func writeBytes(t testing.TB) int64 {
	t.Helper()
	n, err := fsutil.Written(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	return n
}

// logFlags returns the VmFlags of each mapping of a badger log in dir.
func logFlags(t testing.TB, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	abs, _ := filepath.Abs(dir)
	out := map[string]string{}
	var cur string
	for line := range strings.SplitSeq(string(b), "\n") {
		if _, _, path, ok := parseMapping([]byte(line)); ok || isAnonymousMapping(line) {
			cur = ""
			if filepath.Dir(path) == abs && (filepath.Ext(path) == ".mem" || filepath.Ext(path) == ".vlog") {
				cur = filepath.Base(path)
			}
		} else if v, ok := strings.CutPrefix(line, "VmFlags:"); ok && cur != "" {
			out[cur] = v
		}
	}
	return out
}

// isAnonymousMapping tells a mapping's first line without a path
// ("start-end perms offset dev inode") from smaps' "Name: value" lines.
func isAnonymousMapping(line string) bool {
	fields := strings.Fields(line)
	return len(fields) == 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":")
}

// TestLogsAreAdvisedRandom: badger's log mappings carry MADV_RANDOM
// ("rr"), also a memtable's log created after Open, and a commit of 1 KiB
// makes the disk write a few pages, not the large folios the kernel's
// default readahead builds (about 500 KiB per commit on ext4 with large
// folios before the advice).
func TestLogsAreAdvisedRandom(t *testing.T) {
	dir := t.TempDir()
	opts := valuesInTheTables() // values fill the memtables
	opts.MemoryBudget = 1       // the smallest memtables: several logs in one test
	e, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	value := make([]byte, 1024)
	const commits = 10000 // 10 MiB: past the first 8 MiB memtable
	before := writeBytes(t)
	for i := range commits {
		set(t, e, fmt.Appendf(nil, "key-%06d", i), value)
	}
	perCommit := (writeBytes(t) - before) / commits
	// The last log may be younger than the commit loop's last look: look
	// again, in the loop (advise is the loop's alone).
	looked := make(chan struct{})
	e.alone <- func() { e.advise(); close(looked) }
	<-looked
	flags := logFlags(t, dir)
	later := false // a memtable log created after Open
	for name, f := range flags {
		later = later || filepath.Ext(name) == ".mem" && name != "00001.mem"
		if !strings.Contains(f, " rr") {
			t.Errorf("%s is mapped without MADV_RANDOM: VmFlags:%s", name, f)
		}
	}
	if !later {
		t.Errorf("logs mapped: %v; the test wants a memtable's log created after Open", flags)
	}
	t.Logf("%d B written per commit of 1 KiB; logs %v", perCommit, flags)
	if perCommit > 32<<10 {
		t.Errorf("%d B written to disk per commit of 1 KiB", perCommit)
	}
}

// BenchmarkLogAdvice commits 1 KiB values, synced, one at a time, into
// logs advised MADV_RANDOM ("advised") and into logs left with the
// kernel's default advice as badger maps them ("badger"); disk-B/op is
// what the process sent to the disk per commit (write_bytes), which the
// default's readahead into large folios multiplies on ext4.
func BenchmarkLogAdvice(b *testing.B) {
	for _, advised := range []bool{false, true} {
		name := "badger"
		if advised {
			name = "advised"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			e := openWith(b, dir, valuesInTheTables())
			defer e.Close()
			if !advised {
				unadvise(b, e, dir)
			}
			for name, f := range logFlags(b, dir) {
				if strings.Contains(f, " rr") != advised {
					b.Fatalf("%s: VmFlags:%s", name, f)
				}
			}
			value := make([]byte, 1024)
			before := writeBytes(b)
			n := 0
			for b.Loop() {
				set(b, e, fmt.Appendf(nil, "key-%06d", n%100000), value)
				n++
			}
			b.ReportMetric(float64(writeBytes(b)-before)/float64(n), "disk-B/op")
		})
	}
}

// unadvise gives e's log mappings the kernel's default advice back and
// stops e advising new ones (its advisor then looks in a directory that
// does not exist), in the commit loop.
func unadvise(b *testing.B, e *Engine, dir string) {
	b.Helper()
	abs, _ := filepath.Abs(dir)
	errc := make(chan error, 1)
	e.alone <- func() {
		e.advisor = newLogAdvisor(filepath.Join(abs, "none"))
		maps, err := selfMaps()
		if err != nil {
			errc <- err
			return
		}
		for _, m := range maps {
			if filepath.Dir(m.Pathname) == abs && (filepath.Ext(m.Pathname) == ".mem" || filepath.Ext(m.Pathname) == ".vlog") {
				if err := madvise(uint64(m.StartAddr), m.EndAddr-m.StartAddr, unix.MADV_NORMAL); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- nil
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// parseMapping reads a mapping's line of /proc/self/smaps (as of maps):
// "start-end perms offset dev inode path". The code reads maps and status
// with procfs; the tests read smaps by hand, since procfs reads smaps
// only summed over the mappings (ProcSMapsRollup).
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
