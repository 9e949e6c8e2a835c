package badger

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dirGuard holds the data directory open to notice it being removed,
// replaced by another directory or turned read-only (as the kernel does
// to a filesystem after an I/O error).
type dirGuard struct {
	path     string
	f        *os.File
	dev, ino uint64
}

func newDirGuard(path string) (*dirGuard, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("fstat %s: %w", path, err)
	}
	return &dirGuard{path: path, f: f, dev: st.Dev, ino: st.Ino}, nil
}

func (g *dirGuard) check() error {
	fd := int(g.f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat %s: %w", g.path, err)
	}
	if st.Nlink == 0 {
		return fmt.Errorf("%s was removed", g.path)
	}
	if err := unix.Stat(g.path, &st); err != nil {
		return fmt.Errorf("stat %s: %w", g.path, err)
	}
	if st.Dev != g.dev || st.Ino != g.ino {
		return fmt.Errorf("%s was replaced by another directory", g.path)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", g.path, err)
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return fmt.Errorf("%s: %w", g.path, unix.EROFS)
	}
	return nil
}

func (g *dirGuard) close() error { return g.f.Close() }
