package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Slow-request traces: what a request waited on for a tenth of a second
// is gone by the time anyone looks (a GC assist, badger rotating its
// memtable, a commit behind a compaction's writes), and a CPU profile
// averages it away. Go's flight recorder keeps the last seconds of the
// execution trace in memory, so the seconds around a slow request can be
// written out after it ends.
const (
	// slowTraceAge is how much trace the recorder keeps.
	slowTraceAge = 5 * time.Second
	// slowTraceBytes bounds the recorder's memory.
	slowTraceBytes = 64 << 20
	// slowTraceEvery is the fewest seconds between two traces written: a
	// stall slows many requests at once, and one trace shows it.
	slowTraceEvery = time.Minute
	// slowTracesKept is how many traces a directory keeps, newest first.
	slowTracesKept = 10
	// slowTracePrefix starts the name of every trace written.
	slowTracePrefix = "slow-"
)

// slowTracer writes the recent execution trace to dir when a client's
// unary call takes longer than after.
type slowTracer struct {
	dir   string
	after time.Duration
	log   *slog.Logger
	fr    *trace.FlightRecorder

	mu      sync.Mutex
	last    time.Time // when the last trace was started
	stopped bool
	done    sync.WaitGroup
}

// newSlowTracer starts the flight recorder; nil (with the error logged)
// if another is running in this process, as only one can.
func newSlowTracer(dir string, after time.Duration, log *slog.Logger) (*slowTracer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("slow request traces: %w", err)
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: slowTraceAge, MaxBytes: slowTraceBytes})
	if err := fr.Start(); err != nil {
		log.Warn("slow request traces off", "err", err)
		return nil, nil
	}
	return &slowTracer{dir: dir, after: after, log: log, fr: fr}, nil
}

// unary times a client's call and has the trace written if it was slow.
// Calls another instance forwarded are timed where the client sent them.
func (t *slowTracer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	if took := time.Since(start); took > t.after && !forwarded(ctx) {
		t.slow(info.FullMethod, took)
	}
	return resp, err
}

// slow writes the trace in the background, unless the last was started
// less than slowTraceEvery ago (writing one takes well under that).
func (t *slowTracer) slow(method string, took time.Duration) {
	now := time.Now()
	t.mu.Lock()
	if t.stopped || now.Sub(t.last) < slowTraceEvery {
		t.mu.Unlock()
		return
	}
	t.last = now
	t.done.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.done.Done()
		path, err := t.write(now, method, took)
		if err != nil {
			t.log.Warn("request took too long; writing its execution trace failed", "method", method, "took", took, "err", err)
			return
		}
		t.log.Warn("request took too long; execution trace written", "method", method, "took", took, "expected-duration", t.after, "trace", path)
	}()
}

// write saves the recorder's trace as slow-<time>-<method>.trace and
// removes the oldest past slowTracesKept.
func (t *slowTracer) write(now time.Time, method string, took time.Duration) (string, error) {
	_, short := splitMethod(method)
	name := fmt.Sprintf("%s%s-%s-%dms.trace", slowTracePrefix, now.UTC().Format("20060102T150405.000"), short, took.Milliseconds())
	path := filepath.Join(t.dir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := t.fr.WriteTo(f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, t.prune()
}

// prune keeps the newest slowTracesKept traces (names sort by time).
func (t *slowTracer) prune() error {
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), slowTracePrefix) && strings.HasSuffix(e.Name(), ".trace") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for len(names) > slowTracesKept {
		if err := os.Remove(filepath.Join(t.dir, names[0])); err != nil {
			return err
		}
		names = names[1:]
	}
	return nil
}

// stop waits for a trace being written and stops the recorder.
func (t *slowTracer) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.done.Wait()
	t.fr.Stop()
}
