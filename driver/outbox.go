package driver

import (
	"fmt"
	"sync"

	"github.com/axon-kv/axon/core"
)

// DefaultOutboxLimit is how many unsent messages a watch stream may hold
// before its next watch response cuts the watcher off.
const DefaultOutboxLimit = 4096

// Outbox is one watch stream's queue of unsent messages, in the order the
// node produced them, between the driver's Watch hook and whatever sends
// them (a gRPC stream, the simulator's network).
//
// It is bounded: a watch response that finds Limit messages still unsent
// cancels its watch in the node and is replaced by a cancellation with
// SlowReason. A client that stops reading so costs bounded memory and
// holds up no other watcher, and it loses nothing: everything queued
// before the cancellation is still sent, so it resumes from the last
// revision it saw. Cancellations and answers to RequestProgress are
// always queued.
type Outbox[M any] struct {
	limit int
	mu    sync.Mutex
	queue []M
	ready chan struct{}
}

// NewOutbox makes an outbox holding at most limit unsent messages
// (DefaultOutboxLimit if limit ≤ 0).
func NewOutbox[M any](limit int) *Outbox[M] {
	if limit <= 0 {
		limit = DefaultOutboxLimit
	}
	return &Outbox[M]{limit: limit, ready: make(chan struct{}, 1)}
}

// SlowReason is the cancel reason of a watch cut off for being slow.
func (o *Outbox[M]) SlowReason() string {
	return fmt.Sprintf("axon: watcher too slow: more than %d responses unsent", o.limit)
}

// Admit says whether the node's response wr may be queued. When the
// stream is full it may not: Admit cancels wr's watch in n, and the
// caller queues the watch's cancellation with SlowReason in its place
// and forgets the watch as it does a canceled one. Call it from the
// Watch hook, so that messages keep the node's order.
func (o *Outbox[M]) Admit(n interface{ CancelWatch(core.WatchID) bool }, wr core.WatchResponse) bool {
	if wr.Canceled || wr.Requested || o.Len() < o.limit {
		return true
	}
	n.CancelWatch(wr.ID)
	return false
}

// Push queues messages that do not come from a watch response (a watch
// created, a cancel acknowledged) in stream order.
func (o *Outbox[M]) Push(ms ...M) {
	o.mu.Lock()
	o.queue = append(o.queue, ms...)
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// Take removes and returns every queued message, oldest first.
func (o *Outbox[M]) Take() []M {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue = nil
	return q
}

// Len is how many messages are queued.
func (o *Outbox[M]) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}

// Ready receives a value after a Push; a sender waits on it between Takes.
func (o *Outbox[M]) Ready() <-chan struct{} { return o.ready }
