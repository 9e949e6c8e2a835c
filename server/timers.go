package server

import (
	"sync"
	"time"
)

// timers are the driver's timers (driver.Clock.AfterFunc) on the
// runtime's timer heap: a pending timer costs no goroutine, where the
// driver may hold thousands (a backoff per retried work item, a wake per
// call waiting for a leader).
//
// Each timer is counted in work from the moment it is set until its f
// has returned or it was stopped, and stop refuses new ones before the
// server waits on work: so no timer is added to work once the server
// waits for it, and no f runs after Close returns.
type timers struct {
	work *sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	pending map[*time.Timer]struct{}
}

func newTimers(work *sync.WaitGroup) *timers {
	return &timers{work: work, pending: map[*time.Timer]struct{}{}}
}

// after calls f after d, unless stop is called first.
func (ts *timers) after(d time.Duration, f func()) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.stopped {
		return
	}
	ts.work.Add(1)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		defer ts.work.Done()
		// t is set: the lock is held from AfterFunc until t is stored.
		ts.mu.Lock()
		stopped := ts.stopped
		delete(ts.pending, t)
		ts.mu.Unlock()
		if !stopped {
			f()
		}
	})
	ts.pending[t] = struct{}{}
}

// stop cancels the pending timers and refuses new ones. Those whose f
// already runs are not waited for here: they are still counted in work.
func (ts *timers) stop() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.stopped = true
	for t := range ts.pending {
		// A timer that has fired counts itself out; one stopped in
		// time never will.
		if t.Stop() {
			ts.work.Done()
		}
		delete(ts.pending, t)
	}
}

// len returns how many timers are pending.
func (ts *timers) len() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.pending)
}
