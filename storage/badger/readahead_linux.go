package badger

import "golang.org/x/sys/unix"

// readAhead asks the kernel to read a file into the page cache now, in
// large reads, without waiting for them; failing, it only leaves the
// file to be read as it is used.
func readAhead(path string, size int64) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.Fadvise(fd, 0, size, unix.FADV_WILLNEED)
}
