package kube

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// watchFunc opens one watch request.
type watchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

// watcher is a client watch that resumes the way a reflector does: when a
// watch request ends (its timeout, a broken connection, an apiserver
// restart) it asks again from the last resourceVersion it saw, an event's
// or a bookmark's. A 410 Gone is kept, and ends it unless it may relist.
type watcher struct {
	open    watchFunc
	timeout int64 // seconds per watch request; a bookmark comes 2 s before
	// relist, if set, is called after a 410 for the resourceVersion to
	// watch on from (a reflector lists).
	relist func(ctx context.Context) (string, error)

	mu       sync.Mutex
	rv       string
	events   []event // bookmarks too
	requests int
	relists  int
	gone     []string // 410 answers
	errs     []string // other failed requests and ERROR events
	done     bool
	changed  chan struct{} // closed and replaced on every change
}

type event struct {
	typ  watch.EventType
	name string
	rv   int64
}

func (e event) String() string { return fmt.Sprintf("%s %s@%d", e.typ, e.name, e.rv) }

// startWatch watches from rv until ctx ends.
func startWatch(ctx context.Context, open watchFunc, rv string, timeoutSeconds int64) *watcher {
	return startRelistingWatch(ctx, open, nil, rv, timeoutSeconds)
}

// startRelistingWatch watches from rv until ctx ends, and relists after
// a 410.
func startRelistingWatch(ctx context.Context, open watchFunc, relist func(context.Context) (string, error), rv string, timeoutSeconds int64) *watcher {
	w := &watcher{open: open, relist: relist, timeout: timeoutSeconds, rv: rv, changed: make(chan struct{})}
	go w.run(ctx)
	return w
}

func (w *watcher) run(ctx context.Context) {
	defer func() {
		w.mu.Lock()
		w.done = true
		w.pulseLocked()
		w.mu.Unlock()
	}()
	for ctx.Err() == nil {
		w.mu.Lock()
		opts := metav1.ListOptions{ResourceVersion: w.rv, AllowWatchBookmarks: true, TimeoutSeconds: &w.timeout}
		w.requests++
		w.mu.Unlock()
		wi, err := w.open(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				w.fail(true, fmt.Sprintf("watch from %s: %v", opts.ResourceVersion, err))
				if !w.relistAfterGone(ctx) {
					return
				}
				continue
			}
			w.fail(false, fmt.Sprintf("%s watch from %s: %v", time.Now().Format("15:04:05.000"), opts.ResourceVersion, err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if !w.consume(ctx, wi) {
			return
		}
	}
}

// relistAfterGone does what a reflector does after a 410, if the
// watcher may: list, and watch on from the list's resourceVersion. False
// means stop watching.
func (w *watcher) relistAfterGone(ctx context.Context) bool {
	if w.relist == nil {
		return false
	}
	for ctx.Err() == nil {
		rv, err := w.relist(ctx)
		if err == nil {
			w.mu.Lock()
			w.rv = rv
			w.relists++
			w.mu.Unlock()
			return true
		}
		w.fail(false, fmt.Sprintf("%s relist: %v", time.Now().Format("15:04:05.000"), err))
		sleep(ctx, 200*time.Millisecond)
	}
	return false
}

// consume reads one watch request's events; false means stop watching.
func (w *watcher) consume(ctx context.Context, wi watch.Interface) bool {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return true
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					w.fail(true, fmt.Sprintf("watch from %s: ERROR event: %v", w.lastRV(), err))
					return w.relistAfterGone(ctx)
				}
				w.fail(false, fmt.Sprintf("%s watch from %s: ERROR event: %v", time.Now().Format("15:04:05.000"), w.lastRV(), err))
				return true
			case watch.Bookmark, watch.Added, watch.Modified, watch.Deleted:
				m, err := meta.Accessor(ev.Object)
				if err != nil {
					w.fail(false, fmt.Sprintf("%s event without metadata: %v", ev.Type, err))
					continue
				}
				w.mu.Lock()
				w.rv = m.GetResourceVersion()
				rv, _ := strconv.ParseInt(w.rv, 10, 64)
				w.events = append(w.events, event{typ: ev.Type, name: m.GetName(), rv: rv})
				w.pulseLocked()
				w.mu.Unlock()
			}
		}
	}
}

func (w *watcher) fail(gone bool, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gone {
		w.gone = append(w.gone, msg)
	} else {
		w.errs = append(w.errs, msg)
	}
	w.pulseLocked()
}

func (w *watcher) pulseLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *watcher) lastRV() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rv
}

// snapshot returns what the watcher has seen so far.
func (w *watcher) snapshot() watchState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return watchState{
		events: append([]event(nil), w.events...), requests: w.requests, relists: w.relists, gone: append([]string(nil), w.gone...), errs: append([]string(nil), w.errs...),
		done: w.done,
	}
}

type watchState struct {
	events   []event
	requests int
	relists  int
	gone     []string
	errs     []string
	done     bool
}

// await waits until cond holds for what the watcher has seen, the
// watcher stops, or limit passes; it returns the last state and whether
// cond held.
func (w *watcher) await(limit time.Duration, cond func(watchState) bool) (watchState, bool) {
	deadline := time.After(limit)
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		s := w.snapshot()
		if cond(s) {
			return s, true
		}
		if s.done {
			return s, false
		}
		select {
		case <-ch:
		case <-deadline:
			return w.snapshot(), false
		}
	}
}

// seenAll says whether every name in want has an event of type typ.
func seenAll(typ watch.EventType, want []string) func(watchState) bool {
	return func(s watchState) bool {
		seen := map[string]bool{}
		for _, e := range s.events {
			if e.typ == typ {
				seen[e.name] = true
			}
		}
		for _, n := range want {
			if !seen[n] {
				return false
			}
		}
		return true
	}
}

// orderProblems lists events whose resourceVersion does not grow (so
// also repeated events), and bookmarks that go back.
func orderProblems(events []event) []string {
	var out []string
	for i := 1; i < len(events); i++ {
		cur, prev := events[i], events[i-1]
		if cur.rv < prev.rv || (cur.rv == prev.rv && cur.typ != watch.Bookmark) {
			out = append(out, fmt.Sprintf("event %d %v after %v", i, cur, prev))
		}
	}
	return out
}

func describeEvents(events []event) string {
	var b strings.Builder
	for i, e := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.String())
	}
	return b.String()
}
