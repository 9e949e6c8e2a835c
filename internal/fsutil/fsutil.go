// Package fsutil measures what Axon's data takes on disk and what a
// process writes to it.
package fsutil

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// DiskUsage is the space the files under dir take on disk: allocated
// blocks, since Badger's mmapped files are sparse.
func DiskUsage(dir string) (int64, error) {
	var used int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile (a compaction)
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used += st.Blocks * 512
		} else {
			used += info.Size()
		}
		return nil
	})
	return used, err
}
