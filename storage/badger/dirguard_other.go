//go:build !linux

package badger

import (
	"fmt"
	"os"
)

// dirGuard notices the data directory being removed or replaced; off
// Linux a read-only filesystem is noticed by the probe's write.
type dirGuard struct {
	path string
	fi   os.FileInfo
}

func newDirGuard(path string) (*dirGuard, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return &dirGuard{path: path, fi: fi}, nil
}

func (g *dirGuard) check() error {
	fi, err := os.Stat(g.path)
	if err != nil {
		return err
	}
	if !os.SameFile(fi, g.fi) {
		return fmt.Errorf("%s was replaced by another directory", g.path)
	}
	return nil
}

func (g *dirGuard) close() error { return nil }
