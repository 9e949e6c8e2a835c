package badger

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/axon-kv/axon/internal/fsutil"
)

// writeBytes is what this process has sent to the disk.
func writeBytes(t *testing.T) int64 {
	t.Helper()
	n, err := fsutil.Written(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	return n
}

// logFlags returns the VmFlags of each mapping of a badger log in dir.
func logFlags(t *testing.T, dir string) map[string]string {
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
