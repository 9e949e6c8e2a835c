package badger

import "golang.org/x/sys/unix"

// readAhead asks the kernel to read a file into the page cache now, in
// large reads, without waiting for them; failing, it only leaves the
// file to be read as it is used.
func readAhead(path string, size int64) {
	_, _ = adviseFile(path, size, unix.FADV_WILLNEED)
}

// adviseFile gives the kernel advice about the first size bytes of the
// file at path (0: all of it); gone reports a file that could not be
// opened (removed already), which takes no advice.
func adviseFile(path string, size int64, advice int) (gone bool, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, nil
	}
	defer unix.Close(fd)
	return false, unix.Fadvise(fd, 0, size, advice)
}
