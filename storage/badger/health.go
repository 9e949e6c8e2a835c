package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/axon-kv/axon/storage"
)

var _ storage.Failer = (*Engine)(nil)

// ErrFailed: the data directory failed under the engine (removed,
// replaced, read-only, or an I/O error); it takes no more writes until it
// is restarted on a sound directory. Reads of what it holds go on.
var ErrFailed = errors.New("badger: the data directory failed")

// DefaultProbeEvery is how often an idle engine checks that its data
// directory still takes writes.
const DefaultProbeEvery = time.Second

// DefaultCloseTimeout bounds Close: badger retries a memtable flush that
// fails forever, so a close on a failed directory would never return.
const DefaultCloseTimeout = 10 * time.Second

// failedCloseTimeout bounds Close once the directory failed: its flush
// cannot succeed.
const failedCloseTimeout = 2 * time.Second

// probeName is the file the probe creates, syncs and removes in the data
// directory; badger ignores files it does not know.
const probeName = ".axon-probe"

// Failed reports why the engine stopped taking writes, or nil. The error
// wraps ErrFailed.
func (e *Engine) Failed() error {
	if p := e.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// fail marks the engine failed for cause (the first cause wins) and
// reports the failure.
func (e *Engine) fail(cause error) error {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	if e.failure.CompareAndSwap(nil, &err) {
		e.log.Error("the data directory failed: writes are refused from now on; restart on a sound data directory",
			"dir", e.dir, "err", cause)
	}
	return e.Failed()
}

// checkDir fails the engine if its directory is gone, replaced or
// read-only; it costs a few system calls, and runs before and after
// every commit group.
func (e *Engine) checkDir() error {
	if err := e.Failed(); err != nil {
		return err
	}
	if err := e.guard.check(); err != nil {
		return e.fail(err)
	}
	return nil
}

// probe checks the directory and that a file can be created and synced
// in it. A full disk is not a failure: the NOSPACE alarm deals with it.
func (e *Engine) probe() error {
	if err := e.checkDir(); err != nil {
		return err
	}
	err := writeProbe(filepath.Join(e.dir, probeName))
	if err == nil || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return nil
	}
	return e.fail(err)
}

func writeProbe(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte{'x'})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Remove(path)
}

// watch probes the directory every e.probeEvery until Close, so that an
// idle engine notices a failure too (and /health reports it).
func (e *Engine) watch() {
	e.every(e.probeEvery, e.watched, func() bool {
		return e.probe() == nil // else failed for good
	})
}
