package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ChurnWatch is what the kube-apiserver-like watcher of the churn
// (ChurnWatch) received, and what it found wrong in it.
type ChurnWatch struct {
	// FromRevision is the first revision watched; ToRevision the server's
	// once the writes stopped, which the watcher is waited for.
	FromRevision int64 `json:"from_revision"`
	ToRevision   int64 `json:"to_revision"`
	Events       int64 `json:"events"`
	Deletes      int64 `json:"deletes"`
	// Every acknowledged write made exactly one event, a write that
	// failed with an unknown outcome one or none (a lost compare wrote
	// nothing and is in neither): AckedWrites <= Events <= AckedWrites +
	// UnsureWrites.
	AckedWrites  int64 `json:"acked_writes"`
	UnsureWrites int64 `json:"unsure_writes"`
	// One write in 16 (those at a revision divisible by 16) is sampled:
	// the events' values (ValuesChecked) and prev_kv values (PrevChecked)
	// of sampled writes are compared with what was written.
	ValuesChecked int64 `json:"values_checked"`
	ValuesWrong   int64 `json:"values_wrong"`
	PrevChecked   int64 `json:"prev_checked"`
	// PrevWrong counts prev_kv that differ from the sample, name another
	// key, are not older than the event or not its previous version, or
	// come with a create.
	PrevWrong  int64  `json:"prev_wrong"`
	FirstWrong string `json:"first_wrong,omitempty"`
	// PrevMissing counts updates and deletes without a prev_kv. etcd
	// drops prev_kv when the revision before the event is compacted (the
	// churn compacts every window), so a watcher that lags can see a few
	// legitimately.
	PrevMissing int64 `json:"prev_missing"`
	// OutOfOrder counts events not after the one before.
	OutOfOrder int64 `json:"out_of_order"`
	// LagRevisions is how far behind the server the watcher was when the
	// writes stopped; CatchUpSeconds how long it then took to reach
	// ToRevision.
	LagRevisions   int64   `json:"lag_revisions"`
	CatchUpSeconds float64 `json:"catch_up_seconds"`
	// Error is the first watch error (a compacted or canceled watch, or
	// one that closed or did not catch up): each is a failure.
	Error string `json:"error,omitempty"`
}

// sampleEvery is the revision modulus of the writes sampled: a sample
// per 16 writes keeps the map small and still checks thousands.
const sampleEvery = 16

type sampleKey struct {
	key string
	rev int64
}

// churnWatcher is kube-apiserver's watch of a resource: one watch with
// prev_kv over the whole churned prefix, reading every event. The writers
// sample what they wrote; it checks the events' values and prev_kv
// against the samples.
type churnWatcher struct {
	cli     *clientv3.Client
	cancel  context.CancelFunc
	done    chan struct{}
	stopped atomic.Bool // our cancel, not a failure
	samples sync.Map    // sampleKey -> fnv64a of the value
	events  atomic.Int64
	last    atomic.Int64 // revision of the last event

	// Only run writes these; read them once done is closed.
	res     ChurnWatch
	errOnce sync.Once
}

// startChurnWatch dials a client of its own, as kube-apiserver's watch
// cache has its own stream, and watches prefix from revision from+1.
func (r *runner) startChurnWatch(ctx context.Context, s *server, prefix string, from int64) (*churnWatcher, error) {
	cli, err := s.dial()
	if err != nil {
		return nil, fmt.Errorf("churn watcher: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	cw := &churnWatcher{cli: cli, cancel: cancel, done: make(chan struct{}), res: ChurnWatch{FromRevision: from + 1}}
	cw.last.Store(from)
	ch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from+1))
	go cw.run(ch)
	return cw, nil
}

// sample records the value a writer put at rev, if rev is sampled. The
// writer of a key is one goroutine, so the sample is there before the
// next write to the key, whose event carries it as prev_kv, is sent.
func (cw *churnWatcher) sample(key string, rev int64, value string) {
	if cw != nil && rev%sampleEvery == 0 {
		cw.samples.Store(sampleKey{key, rev}, sum64([]byte(value)))
	}
}

func sum64(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

func (cw *churnWatcher) run(ch clientv3.WatchChan) {
	defer close(cw.done)
	for wr := range ch {
		if err := wr.Err(); err != nil {
			if !cw.stopped.Load() {
				cw.fail(err)
			}
			continue // a canceled watch's channel closes next
		}
		for _, ev := range wr.Events {
			cw.check(ev)
		}
	}
	if !cw.stopped.Load() {
		cw.fail(errors.New("the watch closed before the churn ended"))
	}
}

func (cw *churnWatcher) fail(err error) {
	cw.errOnce.Do(func() { cw.res.Error = fmt.Sprintf("at revision %d: %v", cw.last.Load(), err) })
}

func (cw *churnWatcher) wrong(format string, args ...any) {
	if cw.res.FirstWrong == "" {
		cw.res.FirstWrong = fmt.Sprintf(format, args...)
	}
}

// check counts ev and compares its value and prev_kv with the samples.
func (cw *churnWatcher) check(ev *clientv3.Event) {
	res := &cw.res
	kv, prev, rev := ev.Kv, ev.PrevKv, ev.Kv.ModRevision
	cw.events.Add(1)
	if last := cw.last.Load(); rev <= last {
		res.OutOfOrder++
		cw.wrong("%s of %q at revision %d after an event at %d", ev.Type, kv.Key, rev, last)
	} else {
		cw.last.Store(rev)
	}
	put := ev.Type == clientv3.EventTypePut
	if !put {
		res.Deletes++
	}
	// The event may come before its writer has the ack and samples it:
	// such a value goes unchecked.
	if h, ok := cw.samples.Load(sampleKey{string(kv.Key), rev}); ok && put {
		res.ValuesChecked++
		if sum64(kv.Value) != h.(uint64) {
			res.ValuesWrong++
			cw.wrong("value of %q at revision %d is not what was written", kv.Key, rev)
		}
	}
	switch {
	case prev == nil && !ev.IsCreate():
		res.PrevMissing++ // compacted, or lost
	case prev == nil:
	case ev.IsCreate():
		res.PrevWrong++
		cw.wrong("create of %q at revision %d has a prev_kv of revision %d", kv.Key, rev, prev.ModRevision)
	case !bytes.Equal(prev.Key, kv.Key) || prev.ModRevision >= rev || put && prev.Version != kv.Version-1:
		res.PrevWrong++
		cw.wrong("%s of %q at revision %d (version %d) has a prev_kv of %q at revision %d (version %d)",
			ev.Type, kv.Key, rev, kv.Version, prev.Key, prev.ModRevision, prev.Version)
	default:
		// Only the key's next event has this prev_kv: the sample is done
		// with, which keeps the map to about a sample per key.
		if h, ok := cw.samples.LoadAndDelete(sampleKey{string(kv.Key), prev.ModRevision}); ok {
			res.PrevChecked++
			if sum64(prev.Value) != h.(uint64) {
				res.PrevWrong++
				cw.wrong("prev_kv of %s of %q at revision %d: the value of revision %d is not what was written", ev.Type, kv.Key, rev, prev.ModRevision)
			}
		}
	}
}

// finish waits, up to deliveryGrace, for the watcher to reach to, the
// server's revision once the writes stopped (0: unknown, the server is
// gone), then stops it and returns its outcome with the writes' counts.
func (cw *churnWatcher) finish(to, acked, unsure int64) *ChurnWatch {
	t0 := time.Now()
	lag := max(to-cw.last.Load(), 0)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	grace := time.After(deliveryGrace)
wait:
	for to > 0 && cw.last.Load() < to {
		select {
		case <-cw.done: // ended: nothing more comes
			break wait
		case <-grace:
			break wait
		case <-tick.C:
		}
	}
	took := time.Since(t0)
	if to > 0 && cw.last.Load() < to {
		cw.fail(fmt.Errorf("not at revision %d %v after the writes stopped", to, took.Round(time.Millisecond)))
	}
	res := &ChurnWatch{FromRevision: cw.res.FromRevision, Error: "the watch did not stop"}
	if cw.stop() {
		res = &cw.res
	}
	res.Events = cw.events.Load()
	res.ToRevision, res.AckedWrites, res.UnsureWrites = to, acked, unsure
	res.LagRevisions, res.CatchUpSeconds = lag, took.Seconds()
	return res
}

// stop ends the watch and closes its client; again is a no-op. It says
// whether the watcher ended, so that its figures can be read.
func (cw *churnWatcher) stop() bool {
	if cw == nil || cw.stopped.Swap(true) {
		return true
	}
	cw.cancel() // the watch's channel closes
	defer cw.cli.Close()
	select {
	case <-cw.done:
		return true
	case <-time.After(deliveryGrace):
		return false
	}
}
