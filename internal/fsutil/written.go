package fsutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Written is what process pid has sent to the disk: write_bytes of
// /proc/<pid>/io, the page-cache pages it dirtied (again each time one is
// dirtied after being written back).
func Written(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, fmt.Errorf("read write_bytes: %w", err)
	}
	return parseWritten(string(b))
}

// parseWritten reads write_bytes from the text of /proc/<pid>/io.
func parseWritten(text string) (int64, error) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("malformed write_bytes %q: %w", line, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no write_bytes in %q", text)
}
