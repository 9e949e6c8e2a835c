package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/internal/fsutil"
)

// DefaultQuotaBytes is etcd's default --quota-backend-bytes.
const DefaultQuotaBytes = 2 << 30

// Quota bounds the space Axon may take, as etcd's --quota-backend-bytes
// does, and keeps a floor of free space on the data directory's
// filesystem: past either, the leader raises the NOSPACE alarm and writes
// that add data fail with etcd's "database space exceeded" until an
// operator frees space and disarms it. The floor exists because Badger
// writes through mmapped files: a full filesystem kills it with SIGBUS
// instead of returning an error.
type Quota struct {
	// Bytes is the most the data may take on disk; 0 means etcd's 2 GiB,
	// a negative value no quota.
	Bytes int64
	// Dir is the data directory (Badger); its disk usage is what Bytes
	// bounds and its filesystem what MinFree guards. Empty: the engine's
	// own Size, and no floor.
	Dir string
	// MinFree is the floor of free bytes on Dir's filesystem; 0 means
	// DefaultMinFree of the filesystem's size, a negative value none.
	MinFree int64
}

// DefaultMinFree is the default floor for a filesystem of size bytes:
// room for two memtables and a value log file (Badger's 64 MiB each),
// or 5 % of the filesystem if that is more.
func DefaultMinFree(size int64) int64 { return max(3*64<<20, size/20) }

// spaceCheckEvery bounds how often the leader measures the space in use.
const spaceCheckEvery = 100 * time.Millisecond

// space measures usage against a Quota.
type space struct {
	q    Quota
	size func() int64 // the engine's own measure, when Dir is empty
	next atomic.Int64 // unix nanoseconds of the next measurement
}

// used is the space the data takes: Dir's disk usage, or the engine's
// own measure.
func (sp *space) used() (int64, error) {
	switch {
	case sp.q.Dir != "":
		return fsutil.DiskUsage(sp.q.Dir)
	case sp.size != nil:
		return sp.size(), nil
	}
	return 0, nil
}

// quota is the quota in bytes, etcd's default for 0; negative: none.
func (sp *space) quota() int64 {
	if sp.q.Bytes == 0 {
		return DefaultQuotaBytes
	}
	return sp.q.Bytes
}

// exceeded says why NOSPACE must be raised, or "" if it need not.
func (sp *space) exceeded() (string, error) {
	used, err := sp.used()
	if err != nil {
		return "", err
	}
	if quota := sp.quota(); quota > 0 && used > quota {
		return fmt.Sprintf("data takes %d bytes, quota %d", used, quota), nil
	}
	if sp.q.Dir == "" || sp.q.MinFree < 0 {
		return "", nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(sp.q.Dir, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", sp.q.Dir, err)
	}
	free, size := int64(st.Bavail)*int64(st.Bsize), int64(st.Blocks)*int64(st.Bsize)
	floor := sp.q.MinFree
	if floor == 0 {
		floor = DefaultMinFree(size)
	}
	if free < floor {
		return fmt.Sprintf("%d bytes free on the data directory's filesystem, floor %d", free, floor), nil
	}
	return "", nil
}

// checkSpace raises NOSPACE on the leader when the data passed its quota
// or the disk its floor; it measures at most every spaceCheckEvery. On a
// failed engine (storage.Failer) it refuses the write at once (engineFailed).
func (s *Server) checkSpace(ctx context.Context) error {
	if err := s.engineFailed(); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	if next := s.space.next.Load(); now < next || !s.space.next.CompareAndSwap(next, now+int64(spaceCheckEvery)) {
		return nil
	}
	why, err := s.space.exceeded()
	if err != nil {
		s.log.Warn("measuring space", "err", err)
		return nil
	}
	if why == "" {
		return nil
	}
	if raised, _ := s.drv.NoSpace(); raised {
		return nil
	}
	s.log.Warn("raising the NOSPACE alarm: writes that add data are refused until it is disarmed", "why", why)
	_, err = s.propose(ctx, func(answer func(core.Response)) core.RequestID { return s.drv.SetAlarm(s.cfg.MemberID, true, answer) })
	return err
}
