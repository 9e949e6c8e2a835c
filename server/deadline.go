package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lazyDeadline is context.WithDeadline(parent, deadline) whose timer is
// made only when someone asks for Done. Badger's transactions only ask
// Err, and a timer per work item (armed, stopped, and the context
// registered with its parent under the parent's lock) cost 2-3 % of the
// server's CPU on creates. An engine that waits on Done (TiKV's RPCs)
// gets the real context, made on its first call, with the same deadline.
type lazyDeadline struct {
	context.Context // the parent, for Value
	deadline        time.Time

	once   sync.Once
	made   atomic.Bool // ctx is set
	ctx    context.Context
	cancel context.CancelFunc
}

func newLazyDeadline(parent context.Context, deadline time.Time) *lazyDeadline {
	return &lazyDeadline{Context: parent, deadline: deadline}
}

// canceled is what a lazyDeadline stopped before anyone waited on it
// becomes.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (c *lazyDeadline) real() context.Context {
	c.once.Do(func() {
		c.ctx, c.cancel = context.WithDeadline(c.Context, c.deadline)
		c.made.Store(true)
	})
	return c.ctx
}

func (c *lazyDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *lazyDeadline) Done() <-chan struct{} { return c.real().Done() }

func (c *lazyDeadline) Err() error {
	if c.made.Load() {
		return c.ctx.Err()
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// stop is the CancelFunc: the context ends (Canceled) and its timer, if
// it was made, is released.
func (c *lazyDeadline) stop() {
	c.once.Do(func() {
		c.ctx = canceled
		c.made.Store(true)
	})
	if c.cancel != nil {
		c.cancel()
	}
}
